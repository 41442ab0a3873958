//! Where followers fetch from and how they connect: Kafka's `inter.broker.listener.name`. A
//! follower copies a partition with Kafka Fetch requests to a listener of the leader's: the
//! one of that name (every node has one), secured as that listener requires (TLS with this
//! node's certificate, a SASL login, both or neither).

use std::sync::Arc;

use parking_lot::RwLock;
use sluice_client::security::ConnectionSecurity;
use sluice_cluster::{ClusterState, NodeId};

#[derive(Debug, Default)]
pub struct InterBroker {
    /// The listener followers fetch from; `None`: each leader's first listener.
    listener: Option<String>,
    security: RwLock<Arc<ConnectionSecurity>>,
    /// The leaders logged as having no listener of that name (once each, until they have one).
    warned: parking_lot::Mutex<std::collections::HashSet<NodeId>>,
}

impl InterBroker {
    pub fn new(listener: Option<String>, security: ConnectionSecurity) -> InterBroker {
        InterBroker {
            listener,
            security: RwLock::new(Arc::new(security)),
            warned: Default::default(),
        }
    }

    /// How a new connection to a leader is secured.
    pub fn security(&self) -> Arc<ConnectionSecurity> {
        Arc::clone(&self.security.read())
    }

    /// A renewed certificate (or login): used from the next connection on.
    pub fn replace_security(&self, security: ConnectionSecurity) {
        *self.security.write() = Arc::new(security);
    }

    /// The address of `node`'s listener that followers fetch from, as it registered it;
    /// `None` when the node is unknown or has no listener of that name (logged).
    pub(super) fn address(&self, state: &ClusterState, node: NodeId) -> Option<String> {
        let registration = &state.nodes.get(&node)?.registration;
        let Some(name) = &self.listener else {
            return Some(format!(
                "{}:{}",
                registration.kafka_host, registration.kafka_port
            ));
        };
        match registration.listeners.iter().find(|l| &l.name == name) {
            Some(l) => {
                self.warned.lock().remove(&node);
                Some(format!("{}:{}", l.host, l.port))
            }
            None => {
                if !self.warned.lock().insert(node) {
                    return None;
                }
                tracing::warn!(
                    %node,
                    listener = %name,
                    "the leader has no listener of the inter-broker listener's name: nothing is \
                     copied from it (give every node the same inter_broker_listener_name)"
                );
                None
            }
        }
    }
}
