//! The metadata group as DescribeQuorum (KIP-595) reports it, for `kafka-metadata-quorum.sh`
//! and `sluice cluster status`: the leader and its term, the commit point, and how far each
//! voter's log is known to match the leader's. Only the leader knows the followers' progress,
//! so other nodes ask it.
//!
//! Offsets are Kafka's convention over Raft's indexes: a log end or high watermark is the index
//! after the last entry (openraft's first entry has index 0).

use serde::{Deserialize, Serialize};

use super::network::ProposeError;
use super::node::MetadataNode;

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct QuorumInfo {
    pub leader: u64,
    /// The leader's Raft term (DescribeQuorum's leader epoch).
    pub term: u64,
    /// One past the last entry the leader has applied, so committed.
    pub high_watermark: i64,
    pub voters: Vec<ReplicaProgress>,
    /// Members that apply the log without voting (none yet: every `--cluster` node votes).
    pub observers: Vec<ReplicaProgress>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ReplicaProgress {
    pub id: u64,
    /// Its internal listener.
    pub address: String,
    /// One past the last entry known to match the leader's log; -1 when not known yet.
    pub log_end: i64,
}

impl ReplicaProgress {
    /// Whether this replica holds everything committed.
    pub fn caught_up(&self, high_watermark: i64) -> bool {
        self.log_end >= high_watermark
    }
}

impl MetadataNode {
    /// The quorum as this node, which must lead it, sees it.
    pub fn quorum_here(&self) -> Result<QuorumInfo, ProposeError> {
        let metrics = self.raft().metrics().borrow().clone();
        let me = self.id();
        if metrics.current_leader != Some(me) {
            return Err(match metrics.current_leader {
                Some(leader) => ProposeError::NotLeader(leader),
                None => ProposeError::NoLeader,
            });
        }
        let membership = metrics.membership_config.membership();
        let replication = metrics.replication.unwrap_or_default();
        let progress = |id: u64| ReplicaProgress {
            id,
            address: membership
                .get_node(&id)
                .map(|n| n.addr.clone())
                .unwrap_or_default(),
            log_end: if id == me {
                metrics.last_log_index.map_or(0, |i| i as i64 + 1)
            } else {
                match replication.get(&id) {
                    Some(Some(matched)) => matched.index as i64 + 1,
                    // A leader that has not yet matched this voter's log (it is new, or the
                    // voter is down) does not know how far it reaches.
                    _ => -1,
                }
            },
        };
        Ok(QuorumInfo {
            leader: me,
            term: metrics.current_term,
            high_watermark: metrics.last_applied.map_or(0, |l| l.index as i64 + 1),
            voters: membership.voter_ids().map(progress).collect(),
            observers: membership.learner_ids().map(progress).collect(),
        })
    }
}
