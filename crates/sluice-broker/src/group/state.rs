//! One consumer group under the classic rebalance protocol (KIP-62 timeouts, KIP-345 static
//! membership, KIP-394 member ids handed out on the first join): its members, generation,
//! chosen protocol, and the joins and syncs waiting for the rebalance to finish.

use std::collections::{BTreeMap, HashMap};

use bytes::Bytes;
use serde::{Deserialize, Serialize};
use tokio::sync::oneshot;

/// Group states as Kafka names them (DescribeGroups, ListGroups).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum GroupState {
    Empty,
    PreparingRebalance,
    CompletingRebalance,
    Stable,
    Dead,
}

impl GroupState {
    pub fn name(self) -> &'static str {
        match self {
            GroupState::Empty => "Empty",
            GroupState::PreparingRebalance => "PreparingRebalance",
            GroupState::CompletingRebalance => "CompletingRebalance",
            GroupState::Stable => "Stable",
            GroupState::Dead => "Dead",
        }
    }
}

/// What a waiting JoinGroup is answered with.
#[derive(Debug, Clone, PartialEq)]
pub struct JoinResult {
    pub error: i16,
    pub generation: i32,
    pub protocol_type: String,
    pub protocol_name: Option<String>,
    pub leader: String,
    pub member_id: String,
    /// Filled for the leader only: every member's id, instance id and metadata.
    pub members: Vec<(String, Option<String>, Bytes)>,
}

/// What a waiting SyncGroup is answered with.
#[derive(Debug, Clone, PartialEq)]
pub struct SyncResult {
    pub error: i16,
    pub protocol_type: String,
    pub protocol_name: Option<String>,
    pub assignment: Bytes,
}

#[derive(Debug)]
pub struct Member {
    pub id: String,
    pub instance_id: Option<String>,
    pub client_id: String,
    pub client_host: String,
    pub session_timeout_ms: i64,
    pub rebalance_timeout_ms: i64,
    /// (protocol name, metadata) in the member's order of preference.
    pub protocols: Vec<(String, Bytes)>,
    pub assignment: Bytes,
    pub last_heartbeat_ms: i64,
    pub awaiting_join: Option<oneshot::Sender<JoinResult>>,
    pub awaiting_sync: Option<oneshot::Sender<SyncResult>>,
}

impl Member {
    pub fn metadata_for(&self, protocol: &str) -> Bytes {
        self.protocols
            .iter()
            .find(|(name, _)| name == protocol)
            .map(|(_, m)| m.clone())
            .unwrap_or_default()
    }
}

#[derive(Debug)]
pub struct Group {
    pub id: String,
    pub state: GroupState,
    pub generation: i32,
    pub protocol_type: String,
    pub protocol_name: Option<String>,
    pub leader: Option<String>,
    pub members: BTreeMap<String, Member>,
    /// Member ids handed out by MEMBER_ID_REQUIRED, not yet joined with (KIP-394).
    pub pending_member_ids: HashMap<String, i64>,
    /// When the current join or sync phase gives up on members that have not answered.
    pub phase_deadline_ms: Option<i64>,
    /// The leader's assignment is being stored: its record is appended, whether it is
    /// committed is not known yet (`Coordinator::stored`).
    pub storing: bool,
    /// A new group's first join does not complete before this, so that members starting
    /// together land in one generation (`group.initial.rebalance.delay.ms`).
    pub join_not_before_ms: i64,
    /// When the group last became empty: its offsets' retention counts from then.
    pub empty_since_ms: Option<i64>,
}

impl Group {
    pub fn new(id: &str) -> Group {
        Group {
            id: id.to_string(),
            state: GroupState::Empty,
            generation: 0,
            protocol_type: String::new(),
            protocol_name: None,
            leader: None,
            members: BTreeMap::new(),
            pending_member_ids: HashMap::new(),
            phase_deadline_ms: None,
            storing: false,
            join_not_before_ms: 0,
            empty_since_ms: None,
        }
    }

    pub fn member_by_instance(&self, instance_id: &str) -> Option<&Member> {
        self.members
            .values()
            .find(|m| m.instance_id.as_deref() == Some(instance_id))
    }

    pub fn rebalance_timeout_ms(&self) -> i64 {
        self.members
            .values()
            .map(|m| m.rebalance_timeout_ms)
            .max()
            .unwrap_or(0)
    }

    /// The protocol every member supports that they, together, prefer most.
    pub fn select_protocol(&self) -> Option<String> {
        let first = self.members.values().next()?;
        let candidates: Vec<&String> = first
            .protocols
            .iter()
            .map(|(name, _)| name)
            .filter(|name| {
                self.members
                    .values()
                    .all(|m| m.protocols.iter().any(|(n, _)| n == *name))
            })
            .collect();
        // Each member votes for its most preferred candidate; ties go to the first member's order.
        let mut votes: Vec<(usize, &String)> = candidates.iter().map(|c| (0, *c)).collect();
        for m in self.members.values() {
            if let Some((name, _)) = m.protocols.iter().find(|(n, _)| candidates.contains(&n)) {
                if let Some(v) = votes.iter_mut().find(|(_, c)| *c == name) {
                    v.0 += 1;
                }
            }
        }
        votes
            .iter()
            .rev()
            .max_by_key(|(n, _)| *n)
            .map(|(_, c)| (*c).clone())
    }

    /// Whether a member's protocols can join this group.
    pub fn supports(&self, protocol_type: &str, protocols: &[(String, Bytes)]) -> bool {
        if self.members.is_empty() {
            return !protocol_type.is_empty() && !protocols.is_empty();
        }
        self.protocol_type == protocol_type
            && protocols.iter().any(|(name, _)| {
                self.members
                    .values()
                    .all(|m| m.protocols.iter().any(|(n, _)| n == name))
            })
    }
}
