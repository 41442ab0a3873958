//! The metadata Raft group, on openraft 0.9 (`docs/decisions/replication.md`).
//!
//! ```text
//!   propose(records) ──▶ openraft leader ──append──▶ log_store (file, fsynced)
//!                              │ replicate over network (internal listener, JSON frames)
//!                              ▼ committed
//!                        state_machine: ClusterState.apply(records), published on a watch
//! ```
//! One command is one decision of the controller: its records apply together or not at all.

pub mod log_store;
pub mod network;
pub mod node;
pub mod pool;
pub mod quorum;
pub mod state_machine;
pub mod transport;
pub mod voters;
pub mod wiped_voter;

use std::io::Cursor;

use serde::{Deserialize, Serialize};

use crate::metadata::MetadataRecord;

/// One entry's worth of metadata: the records of one decision, applied together.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct MetadataCommand {
    pub records: Vec<MetadataRecord>,
}

/// What applying a command did: `None`, or why it was refused (the state is then unchanged).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct CommandOutcome {
    pub refused: Option<String>,
}

openraft::declare_raft_types!(
    /// openraft's types for the metadata group. Node ids are the cluster's node ids; a node's
    /// address is its internal listener.
    pub MetaTypes:
        D = MetadataCommand,
        R = CommandOutcome,
        NodeId = u64,
        Node = openraft::BasicNode,
        SnapshotData = Cursor<Vec<u8>>,
);

pub type MetaRaft = openraft::Raft<MetaTypes>;
pub type StorageError = openraft::StorageError<u64>;
