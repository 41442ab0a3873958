//! Builders for tests.

use uuid::Uuid;

use crate::ids::NodeId;
use crate::metadata::{ClusterState, MetadataRecord, NodeRegistration};

pub fn node(id: i32) -> NodeId {
    NodeId(id)
}

pub fn registration(id: i32, rack: Option<&str>) -> NodeRegistration {
    NodeRegistration {
        node: NodeId(id),
        incarnation: Uuid::from_u128(id as u128),
        kafka_host: "127.0.0.1".into(),
        kafka_port: 9092 + id,
        listeners: Vec::new(),
        internal_addr: format!("127.0.0.1:{}", 9192 + id),
        rack: rack.map(str::to_string),
        directory: Some(Uuid::from_u128(1000 + id as u128)),
    }
}

/// A state with these nodes registered and live: (id, rack).
pub fn state_with_nodes(nodes: &[(i32, Option<&str>)]) -> ClusterState {
    let mut state = ClusterState::default();
    for (id, rack) in nodes {
        state
            .apply(&MetadataRecord::RegisterNode(registration(*id, *rack)))
            .expect("registering a node always applies");
    }
    state
}
