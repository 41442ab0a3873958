//! Calls between brokers that are not about metadata — a transaction coordinator writing its
//! markers on partitions led elsewhere, handing a group's committed offsets to the group's
//! coordinator. The broker defines the calls (JSON text); this crate carries them over the
//! internal listener to the node that must answer, and hands the ones that arrive here to the
//! handler the broker installed.

use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use crate::ids::NodeId;
use crate::raft::network::{InternalRequest, InternalResponse};
use crate::raft::pool::ConnectionPool;

/// The answer to a peer call: the broker's JSON reply, or why it could not be answered.
pub type PeerFuture = Pin<Box<dyn Future<Output = Result<String, String>> + Send>>;

/// What answers the peer calls that arrive at this node.
pub type PeerHandler = Arc<dyn Fn(String) -> PeerFuture + Send + Sync>;

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PeerError {
    #[error("node {0} is not registered in the cluster")]
    UnknownNode(NodeId),
    #[error("node {node} unreachable: {reason}")]
    Unreachable { node: NodeId, reason: String },
    #[error("node {node} could not answer: {reason}")]
    Refused { node: NodeId, reason: String },
}

/// Idle connections to the other nodes' internal listeners (several per node, so that calls
/// to one node do not wait on each other), and this node's handler.
pub struct Peers {
    pool: ConnectionPool,
    handler: OnceLock<PeerHandler>,
}

impl std::fmt::Debug for Peers {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Peers")
    }
}

impl Peers {
    /// Calls go over `transport` (the internal listener's: plain or mutual TLS).
    pub fn new(transport: Arc<crate::raft::transport::Transport>) -> Peers {
        Peers {
            pool: ConnectionPool::new(transport),
            handler: OnceLock::new(),
        }
    }

    /// Installs the handler of calls arriving here (once; later calls are ignored).
    pub fn set_handler(&self, handler: PeerHandler) {
        let _ = self.handler.set(handler);
    }

    /// Answers a call that arrived here.
    pub(crate) async fn answer(&self, body: String) -> Result<String, String> {
        match self.handler.get() {
            Some(handler) => handler(body).await,
            None => Err("this node is not serving peer calls yet".into()),
        }
    }

    /// Sends `body` to `node` at `addr`, waiting at most `timeout`.
    pub(crate) async fn call(
        &self,
        node: NodeId,
        addr: &str,
        body: String,
        timeout: Duration,
    ) -> Result<String, PeerError> {
        let answer = self
            .pool
            .call(addr, &InternalRequest::Peer(body), timeout)
            .await;
        match answer {
            Ok(InternalResponse::Peer(Ok(reply))) => Ok(reply),
            Ok(InternalResponse::Peer(Err(reason))) => Err(PeerError::Refused { node, reason }),
            Ok(_) => Err(PeerError::Refused {
                node,
                reason: "unexpected response".into(),
            }),
            Err(e) => Err(PeerError::Unreachable {
                node,
                reason: e.to_string(),
            }),
        }
    }
}
