//! Idle connections to other nodes' internal listeners, by address. A call takes one (or opens
//! one), and puts it back once answered; a connection that failed is dropped. Several are kept
//! per node so that calls to one node never queue behind each other: a call stuck on an
//! unreachable old leader must not hold up calls to the new one, and openraft, which asks for a
//! new client for every leadership confirmation, must not pay a TCP connect each time (under
//! load that connect, plus the accept on the other side, could exceed its 100 ms budget).

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use parking_lot::Mutex;

use super::network::{InternalRequest, InternalResponse, PeerClient};
use super::transport::Transport;

/// At most this many idle connections are kept per address.
const IDLE_PER_ADDRESS: usize = 8;

/// No `Default`: a pool is made with the node's transport, never a plain one by accident.
#[derive(Debug)]
pub struct ConnectionPool {
    transport: Arc<Transport>,
    idle: Mutex<HashMap<String, Vec<PeerClient>>>,
}

impl ConnectionPool {
    /// A pool whose connections go over `transport`.
    pub fn new(transport: Arc<Transport>) -> ConnectionPool {
        ConnectionPool {
            transport,
            idle: Mutex::default(),
        }
    }

    /// Sends `request` to `addr` and waits at most `timeout` for the answer.
    pub async fn call(
        &self,
        addr: &str,
        request: &InternalRequest,
        timeout: Duration,
    ) -> std::io::Result<InternalResponse> {
        let idle = self.idle.lock().get_mut(addr).and_then(Vec::pop);
        let mut client =
            idle.unwrap_or_else(|| PeerClient::new(addr.to_string(), Arc::clone(&self.transport)));
        let answer = client.call(request, timeout).await;
        if answer.is_ok() {
            let mut idle = self.idle.lock();
            let list = idle.entry(addr.to_string()).or_default();
            if list.len() < IDLE_PER_ADDRESS {
                list.push(client);
            }
        }
        answer
    }
}
