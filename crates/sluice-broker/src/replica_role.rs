//! What this node is for one partition, and the high watermark that follows from it.
//!
//! ```text
//!   Standalone   no cluster: the only replica; high watermark = local end
//!   Leader       takes writes; high watermark = what every ISR member has (LeaderReplicas)
//!   Follower     copies its leader; high watermark = the leader's, capped at the local end
//!   Leaderless   in the metadata but with no leader alive: no reads, no writes
//! ```
//! "Local end" is the log end, or under `flush.mode=sync` the fsynced end: a write counts as
//! had by a replica only once that replica could survive a power loss with it.

use sluice_cluster::replica::LeaderReplicas;
use sluice_cluster::NodeId;
use sluice_log::Offset;

#[derive(Debug)]
pub enum Role {
    Standalone {
        /// The topic's `min.insync.replicas`: above 1, acks=all writes are refused, since the
        /// only replica is this node's.
        min_insync: usize,
    },
    Leader {
        replicas: LeaderReplicas,
        /// Writes with acks=all need this many in-sync replicas (`min.insync.replicas`).
        min_insync: usize,
    },
    Follower {
        leader: NodeId,
        /// The leader's high watermark as of the last fetch.
        leader_high_watermark: Offset,
    },
    Leaderless,
}

impl Role {
    /// Whether this replica takes produce requests and serves consumers.
    pub fn leads(&self) -> bool {
        matches!(self, Role::Standalone { .. } | Role::Leader { .. })
    }

    /// The high watermark for a local end of `local_end` (the leader also learns its own end).
    pub fn high_watermark(&mut self, local_end: Offset, current: Offset) -> Offset {
        match self {
            Role::Standalone { .. } => local_end,
            Role::Leader { replicas, .. } => {
                replicas.on_local_end(local_end);
                replicas.high_watermark()
            }
            Role::Follower {
                leader_high_watermark,
                ..
            } => (*leader_high_watermark).min(local_end),
            Role::Leaderless => current,
        }
    }

    pub fn leader(&self) -> Option<NodeId> {
        match self {
            Role::Follower { leader, .. } => Some(*leader),
            _ => None,
        }
    }
}
