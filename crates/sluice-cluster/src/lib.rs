//! `sluice-cluster`: replication and cluster metadata (design: `docs/replication.md`).
//!
//! ```text
//!   events (heartbeat, tick, AlterPartition, CreateTopics)
//!        │
//!        ▼
//!   controller::Controller ──records──▶ metadata Raft log ──committed──▶ metadata::ClusterState
//!   (metadata leader only)                                   (every node applies the same log)
//! ```
//!
//! Everything here is a pure state machine: time comes in as `now_ms`, decisions come out as
//! records to append, so tests and the simulation drive it without sockets or sleeps.

pub mod assignment;
pub mod controller;
pub mod divergence;
pub mod ids;
pub mod metadata;
pub mod peer;
pub mod placement;
pub mod probe;
pub mod raft;
pub mod reassignment;
pub mod replica;
pub mod requests;
pub mod runtime;
#[cfg(test)]
mod testing;

pub use ids::{LeaderEpoch, NodeId, PartitionEpoch};
pub use metadata::{ClusterState, MetadataRecord};
