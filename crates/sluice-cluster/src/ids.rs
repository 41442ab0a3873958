//! The cluster's identifiers and counters, as distinct types.

use serde::{Deserialize, Serialize};

/// A node of the cluster (`--node-id`); also its broker id in Kafka's protocol.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct NodeId(pub i32);

impl NodeId {
    /// Where the cluster-wide default dynamic broker configs are kept (Kafka's
    /// `--entity-default`: the broker resource named ""); no node has this id.
    pub const CLUSTER_DEFAULT: NodeId = NodeId(-1);
}

/// A partition's leader epoch: bumped each time the controller names a new leader. Every batch
/// carries the epoch it was written in (KIP-101); clients send it to detect truncation (KIP-320).
#[derive(
    Debug, Clone, Copy, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize,
)]
pub struct LeaderEpoch(pub i32);

/// A partition's version: bumped on every change of its leader, ISR or replicas, so that a
/// leader's ISR change based on an older view is refused (KIP-497's partition epoch).
#[derive(
    Debug, Clone, Copy, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize,
)]
pub struct PartitionEpoch(pub i32);

impl LeaderEpoch {
    pub fn next(self) -> Self {
        LeaderEpoch(self.0 + 1)
    }
}

impl PartitionEpoch {
    pub fn next(self) -> Self {
        PartitionEpoch(self.0 + 1)
    }
}

impl std::fmt::Display for NodeId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}", self.0)
    }
}
