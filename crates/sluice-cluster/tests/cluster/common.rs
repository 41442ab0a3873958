//! What the cluster tests share: loopback listeners for a set of voters, waiting on a
//! condition with a deadline, and a metadata command to propose and look for.

use std::collections::BTreeMap;
use std::time::Duration;

use sluice_cluster::metadata::{MetadataRecord, NodeRegistration};
use sluice_cluster::raft::node::MetadataNode;
use sluice_cluster::NodeId;
use tokio::net::TcpListener;

/// Binds a loopback listener for each of nodes `1..=count`: (their listeners, id → address).
pub async fn bind_voters(count: u64) -> (BTreeMap<u64, TcpListener>, BTreeMap<u64, String>) {
    let mut listeners = BTreeMap::new();
    let mut voters = BTreeMap::new();
    for id in 1..=count {
        let l = TcpListener::bind("127.0.0.1:0").await.expect("a free port");
        voters.insert(id, l.local_addr().expect("bound").to_string());
        listeners.insert(id, l);
    }
    (listeners, voters)
}

/// Waits until `predicate` holds, failing the test after 20 s.
pub async fn wait_for(what: &str, mut predicate: impl FnMut() -> bool) {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    while !predicate() {
        assert!(
            tokio::time::Instant::now() < deadline,
            "timed out waiting for {what}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// The records registering node `id` (a proposal whose effect [`knows`] sees).
pub fn register(id: i32) -> Vec<MetadataRecord> {
    vec![MetadataRecord::RegisterNode(NodeRegistration {
        node: NodeId(id),
        incarnation: uuid::Uuid::new_v4(),
        kafka_host: "127.0.0.1".into(),
        kafka_port: 9000 + id,
        listeners: Vec::new(),
        internal_addr: String::new(),
        rack: None,
        directory: None,
    })]
}

/// Whether `node` has applied the registration of node `id`.
pub fn knows(node: &MetadataNode, id: i32) -> bool {
    node.applied()
        .borrow()
        .state
        .nodes
        .contains_key(&NodeId(id))
}
