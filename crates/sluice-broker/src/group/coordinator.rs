//! The group coordinator's state machine (STYLE §3): it takes requests and clock ticks and
//! returns replies (now, or a channel answered when the rebalance moves on) and the records to
//! write to the offsets topic. It does no I/O; the handlers write the records and the ticker
//! calls [`Coordinator::tick`].
//!
//! The classic protocol, as in Kafka's GroupCoordinator: JoinGroup collects members
//! (PreparingRebalance) until all known members rejoined or the rebalance timeout passed, then
//! answers everyone with the new generation, the leader with the member list
//! (CompletingRebalance); SyncGroup waits for the leader's assignment (Stable). Heartbeats keep
//! members alive; a member silent for its session timeout is removed and the group rebalances.

use std::collections::{BTreeMap, BTreeSet, HashMap};

use bytes::Bytes;
use kafka_protocol::error::ResponseError;
use tokio::sync::oneshot;

use super::consumer::{ConsumerGroup, Heartbeat, HeartbeatReply};
use super::records::{GroupRecord, MemberRecord, OffsetKey, OffsetValue, Record};
use super::state::{Group, GroupState, JoinResult, Member, SyncResult};

/// An answer now, or one that arrives when the group's rebalance moves on.
#[derive(Debug)]
pub enum Reply<T> {
    Now(T),
    Later(oneshot::Receiver<T>),
}

#[derive(Debug, Clone)]
pub struct GroupConfig {
    pub min_session_timeout_ms: i64,
    pub max_session_timeout_ms: i64,
    /// A new group waits this long for more members before its first rebalance completes.
    pub initial_rebalance_delay_ms: i64,
    pub max_metadata_bytes: usize,
    /// Offsets of an empty group older than this are deleted (`offsets.retention.minutes`).
    pub offsets_retention_ms: i64,
    /// Groups of the new protocol (KIP-848).
    pub consumer: crate::group::consumer::ConsumerGroupConfig,
}

impl Default for GroupConfig {
    fn default() -> Self {
        GroupConfig {
            min_session_timeout_ms: 6_000,
            max_session_timeout_ms: 1_800_000,
            initial_rebalance_delay_ms: 3_000,
            max_metadata_bytes: 4096,
            offsets_retention_ms: 7 * 24 * 3600 * 1000,
            consumer: Default::default(),
        }
    }
}

/// A join as the handler hands it over.
#[derive(Debug, Clone)]
pub struct JoinRequest {
    pub group_id: String,
    pub member_id: String,
    pub instance_id: Option<String>,
    pub client_id: String,
    pub client_host: String,
    pub session_timeout_ms: i64,
    pub rebalance_timeout_ms: i64,
    pub protocol_type: String,
    pub protocols: Vec<(String, Bytes)>,
    /// JoinGroup v4+: an unknown member gets a member id to rejoin with (KIP-394).
    pub require_known_member_id: bool,
}

/// A committed offset.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Committed {
    pub offset: i64,
    pub leader_epoch: i32,
    pub metadata: String,
    pub commit_timestamp_ms: i64,
}

fn join_error(error: ResponseError, member_id: &str) -> JoinResult {
    JoinResult {
        error: error.code(),
        generation: -1,
        protocol_type: String::new(),
        protocol_name: None,
        leader: String::new(),
        member_id: member_id.to_string(),
        members: Vec::new(),
    }
}

fn sync_error(error: ResponseError) -> SyncResult {
    SyncResult {
        error: error.code(),
        protocol_type: String::new(),
        protocol_name: None,
        assignment: Bytes::new(),
    }
}

#[derive(Debug, Default)]
pub struct Coordinator {
    pub config: GroupConfig,
    groups: HashMap<String, Group>,
    offsets: HashMap<String, BTreeMap<(String, i32), Committed>>,
    /// Groups of the new protocol (KIP-848); one with no members is forgotten once its
    /// tombstone is written.
    consumer_groups: HashMap<String, ConsumerGroup>,
    next_member: u64,
    /// Offsets an open transaction coordinated on another node is to commit, by (group,
    /// topic, partition): its producer id and when they were handed to it. OffsetFetch with
    /// `require_stable` answers UNSTABLE_OFFSET_COMMIT for them (KIP-447), as it does for the
    /// transactions this node coordinates. Released when the transaction's offsets are
    /// committed here, or its abort is told; forgotten after the longest transaction timeout.
    remote_txn_offsets: HashMap<HeldKey, Vec<Holder>>,
    /// The last hold's token.
    next_hold: u64,
}

/// A (group, topic, partition) whose offset a transaction on another node holds.
type HeldKey = (String, String, i32);

/// One hand-over's hold of an offset: which hand-over, for which producer, since when.
#[derive(Debug, Clone)]
struct Holder {
    token: u64,
    producer_id: i64,
    since_ms: i64,
}

/// What one [`Coordinator::hold_remote_txn_offsets`] holds.
#[derive(Debug, Default)]
pub struct RemoteHold {
    token: u64,
    keys: Vec<HeldKey>,
}

/// How long offsets handed to another node's transaction are held at most (Kafka's default
/// `transaction.max.timeout.ms`: no transaction stays open longer).
pub(crate) const REMOTE_TXN_OFFSETS_MAX_MS: i64 = 900_000;

impl Coordinator {
    pub fn new(config: GroupConfig) -> Coordinator {
        Coordinator {
            config,
            ..Coordinator::default()
        }
    }

    pub fn group(&self, id: &str) -> Option<&Group> {
        self.groups.get(id)
    }

    pub fn groups(&self) -> impl Iterator<Item = &Group> {
        self.groups.values()
    }

    /// A group of the new protocol (KIP-848): with members, or empty while its tombstone is
    /// not yet written.
    pub fn consumer_group(&self, id: &str) -> Option<&ConsumerGroup> {
        self.consumer_groups.get(id)
    }

    /// A heartbeat's answer to `member` of new-protocol group `group` was replaced by an
    /// error: its next heartbeat gets its assignment again.
    pub fn consumer_answer_lost(&mut self, group: &str, member: &str) {
        if let Some(g) = self.consumer_groups.get_mut(group) {
            g.resend(member);
        }
    }

    /// ConsumerGroupHeartbeat, and the group's record to write if the heartbeat changed it. A
    /// classic group with members keeps its id; an empty one is taken over.
    pub fn consumer_heartbeat(
        &mut self,
        req: Heartbeat,
        partitions_of: &dyn Fn(&str) -> Option<i32>,
        topics: &dyn Fn() -> Vec<String>,
        now_ms: i64,
    ) -> (HeartbeatReply, Vec<Record>) {
        if self
            .groups
            .get(&req.group_id)
            .is_some_and(|g| !g.members.is_empty())
        {
            let refused = HeartbeatReply {
                error: Some((
                    ResponseError::GroupIdNotFound,
                    format!("group {} is a classic group with members", req.group_id),
                )),
                member_id: req.member_id,
                member_epoch: -1,
                assignment: None,
            };
            return (refused, Vec::new());
        }
        let id = req.group_id.clone();
        // An empty classic group of that id is taken over, and its record deleted.
        let mut records = Vec::new();
        if self.groups.remove(&id).is_some() {
            records.push(Record::GroupTombstone(id.clone()));
        }
        let group = self
            .consumer_groups
            .entry(id.clone())
            .or_insert_with(|| ConsumerGroup::new(&id));
        let reply = group.heartbeat(req, partitions_of, topics, now_ms);
        records.extend(self.consumer_group_changes(&id));
        (reply, records)
    }

    /// The record of new-protocol group `id` if it changed since it was last written: the
    /// group, or a tombstone once it has no members. An empty group is forgotten once its
    /// tombstone is written (`apply`), or at once if it was never written; until then the
    /// tick tries again.
    fn consumer_group_changes(&mut self, id: &str) -> Vec<Record> {
        let Some(group) = self.consumer_groups.get(id) else {
            return Vec::new();
        };
        let record = group.unwritten();
        if group.members.is_empty() && record.is_none() {
            self.consumer_groups.remove(id);
        }
        record.into_iter().collect()
    }

    /// Every partition some group has a committed offset for.
    pub fn partitions_with_offsets(&self) -> BTreeSet<(String, i32)> {
        self.offsets
            .values()
            .flat_map(|offsets| offsets.keys().cloned())
            .collect()
    }

    /// Every group id known, with members or only offsets.
    pub fn group_ids(&self) -> Vec<String> {
        let mut ids: Vec<String> = self
            .groups
            .keys()
            .chain(self.offsets.keys())
            .chain(self.consumer_groups.keys())
            .cloned()
            .collect();
        ids.sort();
        ids.dedup();
        ids
    }

    pub fn state_of(&self, id: &str) -> GroupState {
        // A group of the new protocol with members counts as Stable here (its own states,
        // Assigning and Reconciling, are in `ConsumerGroup::state`).
        if self
            .consumer_groups
            .get(id)
            .is_some_and(|g| !g.members.is_empty())
        {
            return GroupState::Stable;
        }
        match self.groups.get(id) {
            Some(g) => g.state,
            None if self.offsets.get(id).is_some_and(|o| !o.is_empty()) => GroupState::Empty,
            None => GroupState::Dead,
        }
    }

    pub fn committed(&self, group: &str) -> Option<&BTreeMap<(String, i32), Committed>> {
        self.offsets.get(group)
    }

    fn new_member_id(&mut self, client_id: &str) -> String {
        self.next_member += 1;
        format!("{client_id}-{}", uuid::Uuid::new_v4())
    }

    pub fn join(&mut self, req: JoinRequest, now_ms: i64) -> (Reply<JoinResult>, Vec<Record>) {
        if req.group_id.is_empty() {
            return (
                Reply::Now(join_error(ResponseError::InvalidGroupId, &req.member_id)),
                vec![],
            );
        }
        if self
            .consumer_groups
            .get(&req.group_id)
            .is_some_and(|g| !g.members.is_empty())
        {
            return (
                Reply::Now(join_error(
                    ResponseError::InconsistentGroupProtocol,
                    &req.member_id,
                )),
                vec![],
            );
        }
        if req.session_timeout_ms < self.config.min_session_timeout_ms
            || req.session_timeout_ms > self.config.max_session_timeout_ms
        {
            return (
                Reply::Now(join_error(
                    ResponseError::InvalidSessionTimeout,
                    &req.member_id,
                )),
                vec![],
            );
        }
        let config_delay = self.config.initial_rebalance_delay_ms;
        let new_id = if req.member_id.is_empty() {
            Some(self.new_member_id(&req.client_id))
        } else {
            None
        };
        let group = self
            .groups
            .entry(req.group_id.clone())
            .or_insert_with(|| Group::new(&req.group_id));
        if !group.supports(&req.protocol_type, &req.protocols) {
            return (
                Reply::Now(join_error(
                    ResponseError::InconsistentGroupProtocol,
                    &req.member_id,
                )),
                vec![],
            );
        }
        let mut records = Vec::new();
        let member_id = match (&new_id, &req.instance_id) {
            (Some(id), Some(instance)) => {
                // A static member (re)joining: it takes over its old identity.
                if let Some(old) = group.member_by_instance(instance).map(|m| m.id.clone()) {
                    let mut member = group.members.remove(&old).expect("found just above");
                    if let Some(tx) = member.awaiting_join.take() {
                        let _ = tx.send(join_error(ResponseError::FencedInstanceId, &old));
                    }
                    if let Some(tx) = member.awaiting_sync.take() {
                        let _ = tx.send(sync_error(ResponseError::FencedInstanceId));
                    }
                    let unchanged = member.protocols == req.protocols;
                    member.id = id.clone();
                    member.last_heartbeat_ms = now_ms;
                    member.session_timeout_ms = req.session_timeout_ms;
                    member.rebalance_timeout_ms = req.rebalance_timeout_ms;
                    member.client_id = req.client_id.clone();
                    member.client_host = req.client_host.clone();
                    if group.leader.as_deref() == Some(old.as_str()) {
                        group.leader = Some(id.clone());
                    }
                    group.members.insert(id.clone(), member);
                    if group.state == GroupState::Stable && unchanged {
                        // KIP-345: no rebalance; the member gets the current generation back.
                        let leader = group.leader.clone().unwrap_or_default();
                        let result = JoinResult {
                            error: 0,
                            generation: group.generation,
                            protocol_type: group.protocol_type.clone(),
                            protocol_name: group.protocol_name.clone(),
                            leader: leader.clone(),
                            member_id: id.clone(),
                            members: if leader == *id {
                                leader_members(group)
                            } else {
                                Vec::new()
                            },
                        };
                        records.push(Record::Group(group_record(group)));
                        return (Reply::Now(result), records);
                    }
                    id.clone()
                } else {
                    id.clone()
                }
            }
            (Some(id), None) if req.require_known_member_id => {
                group
                    .pending_member_ids
                    .insert(id.clone(), now_ms + req.session_timeout_ms);
                return (
                    Reply::Now(join_error(ResponseError::MemberIdRequired, id)),
                    vec![],
                );
            }
            (Some(id), None) => id.clone(),
            (None, _) => {
                // A static member's replaced process (same instance id, its old member id)
                // is fenced, as on Kafka, rather than told to rejoin as a new member, which
                // would evict the live one in turn.
                if fenced(group, &req.member_id, req.instance_id.as_deref()) {
                    return (
                        Reply::Now(join_error(ResponseError::FencedInstanceId, &req.member_id)),
                        vec![],
                    );
                }
                let known = group.members.contains_key(&req.member_id)
                    || group.pending_member_ids.remove(&req.member_id).is_some();
                if !known {
                    return (
                        Reply::Now(join_error(ResponseError::UnknownMemberId, &req.member_id)),
                        vec![],
                    );
                }
                if let (Some(m), Some(instance)) =
                    (group.members.get(&req.member_id), &req.instance_id)
                {
                    if m.instance_id.as_deref() != Some(instance.as_str()) {
                        return (
                            Reply::Now(join_error(ResponseError::FencedInstanceId, &req.member_id)),
                            vec![],
                        );
                    }
                }
                // A member rejoining with what it joined with (its JoinGroup or SyncGroup
                // answer was lost, or it reconnected) is given the current generation back, as
                // on Kafka, while the group waits for the leader's assignment, and, in a stable
                // group, if it is a follower (a leader's rejoin may mean the topics changed): a
                // rebalance would make every member revoke and rejoin for nothing.
                let leader = group.leader.as_deref() == Some(req.member_id.as_str());
                let current = match group.state {
                    GroupState::CompletingRebalance => true,
                    GroupState::Stable => !leader,
                    _ => false,
                } && group
                    .members
                    .get(&req.member_id)
                    .is_some_and(|m| m.protocols == req.protocols);
                if current {
                    if let Some(m) = group.members.get_mut(&req.member_id) {
                        m.last_heartbeat_ms = now_ms;
                    }
                    return (
                        Reply::Now(JoinResult {
                            error: 0,
                            generation: group.generation,
                            protocol_type: group.protocol_type.clone(),
                            protocol_name: group.protocol_name.clone(),
                            leader: group.leader.clone().unwrap_or_default(),
                            member_id: req.member_id.clone(),
                            members: if leader {
                                leader_members(group)
                            } else {
                                Vec::new()
                            },
                        }),
                        vec![],
                    );
                }
                req.member_id.clone()
            }
        };
        let (tx, rx) = oneshot::channel();
        let member = group
            .members
            .entry(member_id.clone())
            .or_insert_with(|| Member {
                id: member_id.clone(),
                instance_id: req.instance_id.clone(),
                client_id: req.client_id.clone(),
                client_host: req.client_host.clone(),
                session_timeout_ms: req.session_timeout_ms,
                rebalance_timeout_ms: req.rebalance_timeout_ms,
                protocols: req.protocols.clone(),
                assignment: Bytes::new(),
                last_heartbeat_ms: now_ms,
                awaiting_join: None,
                awaiting_sync: None,
            });
        member.protocols = req.protocols.clone();
        member.session_timeout_ms = req.session_timeout_ms;
        member.rebalance_timeout_ms = req.rebalance_timeout_ms;
        member.last_heartbeat_ms = now_ms;
        if let Some(old) = member.awaiting_join.replace(tx) {
            let _ = old.send(join_error(ResponseError::UnknownMemberId, &member_id));
        }
        if group.members.len() == 1 {
            // The group's first member (again) sets its protocol type.
            group.protocol_type = req.protocol_type.clone();
        }
        if group.state != GroupState::PreparingRebalance {
            let delay = if group.state == GroupState::Empty {
                config_delay
            } else {
                0
            };
            prepare_rebalance(group, now_ms, delay);
        }
        records.extend(maybe_complete_join(group, now_ms));
        (Reply::Later(rx), records)
    }

    pub fn sync(
        &mut self,
        group_id: &str,
        generation: i32,
        member_id: &str,
        instance_id: Option<&str>,
        assignments: Vec<(String, Bytes)>,
    ) -> (Reply<SyncResult>, Vec<Record>) {
        let Some(group) = self.groups.get_mut(group_id) else {
            return (
                Reply::Now(sync_error(ResponseError::UnknownMemberId)),
                vec![],
            );
        };
        if fenced(group, member_id, instance_id) {
            return (
                Reply::Now(sync_error(ResponseError::FencedInstanceId)),
                vec![],
            );
        }
        let Some(member) = group.members.get(member_id) else {
            return (
                Reply::Now(sync_error(ResponseError::UnknownMemberId)),
                vec![],
            );
        };
        if instance_id.is_some() && member.instance_id.as_deref() != instance_id {
            return (
                Reply::Now(sync_error(ResponseError::FencedInstanceId)),
                vec![],
            );
        }
        if generation != group.generation {
            return (
                Reply::Now(sync_error(ResponseError::IllegalGeneration)),
                vec![],
            );
        }
        match group.state {
            GroupState::PreparingRebalance => (
                Reply::Now(sync_error(ResponseError::RebalanceInProgress)),
                vec![],
            ),
            GroupState::Stable => (
                Reply::Now(SyncResult {
                    error: 0,
                    protocol_type: group.protocol_type.clone(),
                    protocol_name: group.protocol_name.clone(),
                    assignment: member.assignment.clone(),
                }),
                vec![],
            ),
            GroupState::CompletingRebalance => {
                let (tx, rx) = oneshot::channel();
                if let Some(m) = group.members.get_mut(member_id) {
                    m.awaiting_sync = Some(tx);
                }
                let mut records = Vec::new();
                // The leader's SyncGroup sent again while its assignment is being stored waits
                // for that outcome, as the other members do: the assignment is the first one.
                if group.leader.as_deref() == Some(member_id) && !group.storing {
                    let assigned: HashMap<String, Bytes> = assignments.into_iter().collect();
                    for m in group.members.values_mut() {
                        m.assignment = assigned.get(&m.id).cloned().unwrap_or_default();
                    }
                    // The group stays in CompletingRebalance until the caller knows whether
                    // the record holding the assignment was committed (`stored`), as on Kafka:
                    // a member asking meanwhile waits with the others. No deadline: the
                    // outcome comes within the commit timeout.
                    group.phase_deadline_ms = None;
                    group.storing = true;
                    records.push(Record::Group(GroupRecord {
                        members: member_records(group),
                        ..group_record(group)
                    }));
                }
                (Reply::Later(rx), records)
            }
            GroupState::Empty | GroupState::Dead => (
                Reply::Now(sync_error(ResponseError::UnknownMemberId)),
                vec![],
            ),
        }
    }

    /// Once the leader's SyncGroup's record (`sync`'s records) is committed: the group is
    /// Stable and every waiting member gets its assignment. If the record could not be
    /// appended or was not committed (in a cluster: with at least `min.insync.replicas` in
    /// sync), as Kafka does when the assignment cannot be stored: every waiting member gets
    /// the error, the assignment is dropped and a new rebalance starts, so that no member
    /// works on an assignment the group's log does not hold. An outcome for a generation or
    /// a phase the group has left changes nothing.
    pub fn stored(
        &mut self,
        group_id: &str,
        generation: i32,
        outcome: Result<(), ResponseError>,
        now_ms: i64,
    ) {
        let Some(group) = self.groups.get_mut(group_id) else {
            return;
        };
        if group.generation != generation || group.state != GroupState::CompletingRebalance {
            return;
        }
        group.storing = false;
        match outcome {
            Ok(()) => {
                group.state = GroupState::Stable;
                tracing::info!(group = %group.id, generation, "group stable");
                let (protocol_type, protocol_name) =
                    (group.protocol_type.clone(), group.protocol_name.clone());
                for m in group.members.values_mut() {
                    if let Some(tx) = m.awaiting_sync.take() {
                        // Its session starts again from its answer (it sent no heartbeat
                        // while it waited), as Kafka's does.
                        m.last_heartbeat_ms = now_ms;
                        let _ = tx.send(SyncResult {
                            error: 0,
                            protocol_type: protocol_type.clone(),
                            protocol_name: protocol_name.clone(),
                            assignment: m.assignment.clone(),
                        });
                    }
                }
            }
            Err(error) => {
                tracing::warn!(group = %group.id, generation, ?error, "cannot store the group's assignment");
                for m in group.members.values_mut() {
                    m.assignment = Bytes::new();
                    if let Some(tx) = m.awaiting_sync.take() {
                        m.last_heartbeat_ms = now_ms;
                        let _ = tx.send(sync_error(error));
                    }
                }
                prepare_rebalance(group, now_ms, 0);
            }
        }
    }

    pub fn heartbeat(
        &mut self,
        group_id: &str,
        generation: i32,
        member_id: &str,
        instance_id: Option<&str>,
        now_ms: i64,
    ) -> Result<(), ResponseError> {
        let Some(group) = self.groups.get_mut(group_id) else {
            return Err(ResponseError::UnknownMemberId);
        };
        if fenced(group, member_id, instance_id) {
            return Err(ResponseError::FencedInstanceId);
        }
        let Some(member) = group.members.get_mut(member_id) else {
            return Err(ResponseError::UnknownMemberId);
        };
        if instance_id.is_some() && member.instance_id.as_deref() != instance_id {
            return Err(ResponseError::FencedInstanceId);
        }
        member.last_heartbeat_ms = now_ms;
        if generation != group.generation {
            return Err(ResponseError::IllegalGeneration);
        }
        match group.state {
            GroupState::PreparingRebalance => Err(ResponseError::RebalanceInProgress),
            _ => Ok(()),
        }
    }

    /// Removes members (LeaveGroup); one result per member asked about.
    pub fn leave(
        &mut self,
        group_id: &str,
        members: &[(String, Option<String>)],
        now_ms: i64,
    ) -> (Vec<Result<(), ResponseError>>, Vec<Record>) {
        let Some(group) = self.groups.get_mut(group_id) else {
            return (
                vec![Err(ResponseError::UnknownMemberId); members.len()],
                vec![],
            );
        };
        let mut results = Vec::new();
        let mut removed = false;
        for (member_id, instance_id) in members {
            if !member_id.is_empty() && fenced(group, member_id, instance_id.as_deref()) {
                results.push(Err(ResponseError::FencedInstanceId));
                continue;
            }
            let id = match (member_id.is_empty(), instance_id) {
                (true, Some(instance)) => group.member_by_instance(instance).map(|m| m.id.clone()),
                _ => Some(member_id.clone()),
            };
            let Some(id) = id.filter(|id| group.members.contains_key(id)) else {
                results.push(Err(ResponseError::UnknownMemberId));
                continue;
            };
            if let (Some(instance), Some(m)) = (instance_id, group.members.get(&id)) {
                if m.instance_id.as_deref() != Some(instance.as_str()) {
                    results.push(Err(ResponseError::FencedInstanceId));
                    continue;
                }
            }
            remove_member(group, &id);
            removed = true;
            results.push(Ok(()));
        }
        let records = if removed {
            after_removal(group, now_ms)
        } else {
            vec![]
        };
        (results, records)
    }

    /// Advances time: expires silent members, completes joins whose time is up, gives up on
    /// syncs the leader never sent, and forgets stale offsets of empty groups.
    pub fn tick(&mut self, now_ms: i64) -> Vec<Record> {
        let consumer_config = self.config.consumer.clone();
        let mut changed = Vec::new();
        for group in self.consumer_groups.values_mut() {
            let expired = group.expire(&consumer_config, now_ms);
            for id in &expired {
                tracing::info!(group = %group.id, member = %id, "consumer group member expired");
            }
            if !expired.is_empty() || group.members.is_empty() {
                changed.push(group.id.clone());
            }
        }
        let mut records = Vec::new();
        for id in changed {
            records.extend(self.consumer_group_changes(&id));
        }
        for group in self.groups.values_mut() {
            group
                .pending_member_ids
                .retain(|_, deadline| *deadline > now_ms);
            let expired: Vec<String> = group
                .members
                .values()
                // As on Kafka, a member waiting for its join or sync answer is not expired
                // (librdkafka does not heartbeat while it waits for the leader's assignment);
                // the rebalance's own deadline bounds that wait.
                .filter(|m| {
                    m.awaiting_join.is_none()
                        && m.awaiting_sync.is_none()
                        && now_ms - m.last_heartbeat_ms > m.session_timeout_ms
                })
                .map(|m| m.id.clone())
                .collect();
            for id in &expired {
                tracing::info!(group = %group.id, member = %id, "member session expired");
                remove_member(group, id);
            }
            if !expired.is_empty() {
                records.extend(after_removal(group, now_ms));
            }
            match (group.state, group.phase_deadline_ms) {
                (GroupState::PreparingRebalance, Some(deadline)) if now_ms >= deadline => {
                    // Dynamic members that did not rejoin in time are out. Static ones stay
                    // (KIP-345): their assignment waits for them until their session expires,
                    // so that a member restarting meanwhile moves no partitions. (Kafka keeps
                    // them here too, but then removes them if they have not sent SyncGroup
                    // within the next rebalance timeout, and rebalances again.)
                    let late: Vec<String> = group
                        .members
                        .values()
                        .filter(|m| m.awaiting_join.is_none() && m.instance_id.is_none())
                        .map(|m| m.id.clone())
                        .collect();
                    for id in &late {
                        remove_member(group, id);
                    }
                    if group.members.values().any(|m| m.awaiting_join.is_some())
                        || group.members.is_empty()
                    {
                        records.extend(complete_join(group, now_ms));
                    } else {
                        // Only static members that did not rejoin are left: nobody could
                        // lead the assignment. Wait another round; their sessions expiring
                        // empties the group.
                        group.phase_deadline_ms = Some(now_ms + group.rebalance_timeout_ms());
                    }
                }
                (GroupState::PreparingRebalance, _) => {
                    records.extend(maybe_complete_join(group, now_ms))
                }
                (GroupState::CompletingRebalance, Some(deadline)) if now_ms >= deadline => {
                    // The leader never sent the assignment: start over (`prepare_rebalance`
                    // answers the members waiting for it).
                    prepare_rebalance(group, now_ms, 0);
                }
                _ => {}
            }
        }
        // A group that never had a generation goes once nothing is left in it — including the
        // member ids handed out with MEMBER_ID_REQUIRED (KIP-394), which must stay until their
        // session timeout so that the member's rejoin finds them.
        self.groups.retain(|_, g| {
            !(g.state == GroupState::Empty
                && g.members.is_empty()
                && g.pending_member_ids.is_empty()
                && g.generation == 0)
        });
        // Offsets expire as on Kafka: a classic group's once it has been empty for the
        // retention time (counted from its last commit if that came later, or if the group's
        // record predates the time being kept); a standalone consumer's (no group) from their
        // commit; a group of the new protocol's from their commit, except on topics a member
        // still subscribes to. A classic group with members keeps them all.
        self.remote_txn_offsets.retain(|_, holders| {
            holders.retain(|h| now_ms - h.since_ms < REMOTE_TXN_OFFSETS_MAX_MS);
            !holders.is_empty()
        });
        let cutoff = now_ms - self.config.offsets_retention_ms;
        for (group_id, offsets) in self.offsets.iter_mut() {
            let classic = self.groups.get(group_id);
            if classic.is_some_and(|g| !g.members.is_empty()) {
                continue;
            }
            let empty_since = classic.and_then(|g| g.empty_since_ms);
            let consumer = self.consumer_groups.get(group_id);
            offsets.retain(|(topic, partition), c| {
                let since =
                    empty_since.map_or(c.commit_timestamp_ms, |t| t.max(c.commit_timestamp_ms));
                let keep = since >= cutoff || consumer.is_some_and(|g| g.subscribes_to(topic));
                if !keep {
                    records.push(Record::OffsetTombstone(OffsetKey {
                        group: group_id.clone(),
                        topic: topic.clone(),
                        partition: *partition,
                    }));
                }
                keep
            });
        }
        self.offsets.retain(|_, o| !o.is_empty());
        records
    }

    /// Checks an OffsetCommit (or, `transactional`, a TxnOffsetCommit) of `partitions`
    /// against the group: a group with members takes commits only from a member of the current
    /// generation (for a group of the new protocol, see `ConsumerGroup::check_commit`); an
    /// empty or unknown group takes them from anyone (generation -1, a standalone consumer).
    ///
    /// As in Kafka, a member of the current generation may commit while the group prepares a
    /// rebalance: that is when clients commit what they processed before giving their
    /// partitions up (the revoke callback), and refusing it makes the next owner process those
    /// records again. Only between the join and the assignment (CompletingRebalance) is a
    /// plain commit refused with REBALANCE_IN_PROGRESS, since the member has not yet learned
    /// what it owns in the new generation.
    pub fn check_commit(
        &self,
        group_id: &str,
        generation: i32,
        member_id: &str,
        instance_id: Option<&str>,
        partitions: &[(&str, i32)],
        transactional: bool,
    ) -> Result<(), ResponseError> {
        if group_id.is_empty() {
            return Err(ResponseError::InvalidGroupId);
        }
        // A TxnOffsetCommit need not name a member: a producer given only the group's id
        // (Java's `sendOffsetsToTransaction(offsets, groupId)`) sends generation -1 and no
        // member, and Kafka takes it whatever the group's state.
        if transactional && generation < 0 && member_id.is_empty() && instance_id.is_none() {
            return Ok(());
        }
        if let Some(group) = self.consumer_groups.get(group_id) {
            // OffsetCommit v9+ and TxnOffsetCommit carry the member epoch here. A stale epoch
            // in a TxnOffsetCommit is ILLEGAL_GENERATION, as on Kafka: producers abort the
            // transaction on it, while STALE_MEMBER_EPOCH is fatal to the Java producer.
            return group
                .check_commit(member_id, generation, partitions)
                .map_err(|e| match e {
                    ResponseError::StaleMemberEpoch if transactional => {
                        ResponseError::IllegalGeneration
                    }
                    e => e,
                });
        }
        let Some(group) = self.groups.get(group_id).filter(|g| !g.members.is_empty()) else {
            return if generation < 0 || member_id.is_empty() {
                Ok(())
            } else {
                Err(ResponseError::IllegalGeneration)
            };
        };
        if fenced(group, member_id, instance_id) {
            return Err(ResponseError::FencedInstanceId);
        }
        let Some(member) = group.members.get(member_id) else {
            return Err(ResponseError::UnknownMemberId);
        };
        if instance_id.is_some() && member.instance_id.as_deref() != instance_id {
            return Err(ResponseError::FencedInstanceId);
        }
        if generation != group.generation {
            return Err(ResponseError::IllegalGeneration);
        }
        if !transactional && group.state == GroupState::CompletingRebalance {
            return Err(ResponseError::RebalanceInProgress);
        }
        Ok(())
    }

    /// An accepted OffsetCommit from a member of a classic group: its session starts again
    /// while the group is stable or preparing a rebalance (Kafka's
    /// `rescheduleClassicGroupMemberHeartbeat`).
    pub fn commit_heartbeat(&mut self, group_id: &str, member_id: &str, now_ms: i64) {
        let Some(group) = self.groups.get_mut(group_id) else {
            return;
        };
        if !matches!(
            group.state,
            GroupState::Stable | GroupState::PreparingRebalance
        ) {
            return;
        }
        if let Some(m) = group.members.get_mut(member_id) {
            m.last_heartbeat_ms = m.last_heartbeat_ms.max(now_ms);
        }
    }

    /// Offsets of `group` handed to the transaction of `producer_id` on another node; returns
    /// the hold, for [`Coordinator::unhold_remote_txn_offsets`] if the hand-over fails.
    pub fn hold_remote_txn_offsets<'a>(
        &mut self,
        group: &str,
        partitions: impl Iterator<Item = (&'a str, i32)>,
        producer_id: i64,
        now_ms: i64,
    ) -> RemoteHold {
        self.next_hold += 1;
        let token = self.next_hold;
        let mut keys = Vec::new();
        for (topic, partition) in partitions {
            let key = (group.to_string(), topic.to_string(), partition);
            self.remote_txn_offsets
                .entry(key.clone())
                .or_default()
                .push(Holder {
                    token,
                    producer_id,
                    since_ms: now_ms,
                });
            keys.push(key);
        }
        RemoteHold { token, keys }
    }

    /// The hand-over `hold` was made for failed: what it held goes, and only that (another
    /// hand-over's holds of the same offsets stay).
    pub fn unhold_remote_txn_offsets(&mut self, hold: RemoteHold) {
        for key in hold.keys {
            self.retain_holders(key, |h| h.token != hold.token);
        }
    }

    /// Keeps the holders of `key` that `keep` says; the key goes with its last holder.
    fn retain_holders(&mut self, key: HeldKey, keep: impl Fn(&Holder) -> bool) {
        if let Some(holders) = self.remote_txn_offsets.get_mut(&key) {
            holders.retain(|h| keep(h));
            if holders.is_empty() {
                self.remote_txn_offsets.remove(&key);
            }
        }
    }

    /// The transaction's offsets of `group` were committed or aborted (`producer_id`: only
    /// those held for that producer; `None`: whoever holds them).
    pub fn release_remote_txn_offsets<'a>(
        &mut self,
        group: &str,
        partitions: impl Iterator<Item = (&'a str, i32)>,
        producer_id: Option<i64>,
    ) {
        for (topic, partition) in partitions {
            let key = (group.to_string(), topic.to_string(), partition);
            self.retain_holders(key, |h| producer_id.is_some_and(|p| p != h.producer_id));
        }
    }

    /// Whether an open transaction on another node is to commit this offset.
    pub fn remote_txn_pending(
        &self,
        group: &str,
        topic: &str,
        partition: i32,
        now_ms: i64,
    ) -> bool {
        self.remote_txn_offsets
            .get(&(group.to_string(), topic.to_string(), partition))
            .is_some_and(|holders| {
                holders
                    .iter()
                    .any(|h| now_ms - h.since_ms < REMOTE_TXN_OFFSETS_MAX_MS)
            })
    }

    /// Applies a record to the in-memory state (on commit, and when replaying the log).
    pub fn apply(&mut self, record: &Record, now_ms: i64) {
        match record {
            Record::Offset(key, value) => {
                self.offsets.entry(key.group.clone()).or_default().insert(
                    (key.topic.clone(), key.partition),
                    Committed {
                        offset: value.offset,
                        leader_epoch: value.leader_epoch,
                        metadata: value.metadata.clone(),
                        commit_timestamp_ms: value.commit_timestamp_ms,
                    },
                );
            }
            Record::OffsetTombstone(key) => {
                if let Some(o) = self.offsets.get_mut(&key.group) {
                    o.remove(&(key.topic.clone(), key.partition));
                    if o.is_empty() {
                        self.offsets.remove(&key.group);
                    }
                }
            }
            Record::Group(g) => {
                // Live, the coordinator wrote this record from the group it holds, which may
                // have moved on since; only an empty group takes it. (Reading the log back is
                // `replay`, where every group record replaces the one before it.)
                if self.groups.get(&g.group).is_none_or(|existing| {
                    existing.members.is_empty() && existing.generation <= g.generation
                }) {
                    self.groups
                        .insert(g.group.clone(), restore_group(g, now_ms));
                }
            }
            Record::GroupTombstone(group) => {
                self.groups.remove(group);
            }
            // Live, a new-protocol group's record was made from the group as it is now
            // (`consumer_group_changes`, under the same lock): it is only marked written.
            Record::ConsumerGroup(g) => {
                if let Some(group) = self.consumer_groups.get_mut(&g.group) {
                    group.wrote(g);
                }
            }
            Record::ConsumerGroupTombstone(group) => {
                if self
                    .consumer_groups
                    .get(group)
                    .is_some_and(|g| g.members.is_empty())
                {
                    self.consumer_groups.remove(group);
                }
            }
        }
    }

    /// Applies a record read back from the offsets topic (at start-up, or when this node takes
    /// a partition of it over). The log's order is the order the coordinator wrote them in, so
    /// a group record replaces whatever an earlier one restored: a group that went through
    /// several generations comes back at its last one, not its first one that had members.
    pub fn replay(&mut self, record: &Record, now_ms: i64) {
        match record {
            // A group id is one kind of group or the other: the newer record's kind wins.
            Record::Group(g) => {
                self.consumer_groups.remove(&g.group);
                self.groups
                    .insert(g.group.clone(), restore_group(g, now_ms));
            }
            Record::ConsumerGroup(g) => {
                self.groups.remove(&g.group);
                self.consumer_groups
                    .insert(g.group.clone(), ConsumerGroup::restore(g, now_ms));
            }
            Record::ConsumerGroupTombstone(group) => {
                self.consumer_groups.remove(group);
            }
            _ => self.apply(record, now_ms),
        }
    }

    /// Forgets, in memory only, every group for which `gone` holds (its partition of the
    /// offsets topic moved to another coordinator). Members waiting on a join or sync are let
    /// go; their next request finds the new coordinator.
    pub fn unload(&mut self, gone: impl Fn(&str) -> bool) {
        self.remote_txn_offsets
            .retain(|(group, _, _), _| !gone(group));
        self.groups.retain(|id, _| !gone(id));
        self.offsets.retain(|id, _| !gone(id));
        self.consumer_groups.retain(|id, _| !gone(id));
    }

    /// DeleteGroups: only an empty group can go; its offsets go with it.
    pub fn delete_group(&mut self, group_id: &str) -> Result<Vec<Record>, ResponseError> {
        match self.state_of(group_id) {
            GroupState::Dead => return Err(ResponseError::GroupIdNotFound),
            GroupState::Empty => {}
            _ => return Err(ResponseError::NonEmptyGroup),
        }
        let mut records: Vec<Record> = self
            .offsets
            .get(group_id)
            .map(|o| {
                o.keys()
                    .map(|(topic, partition)| {
                        Record::OffsetTombstone(OffsetKey {
                            group: group_id.to_string(),
                            topic: topic.clone(),
                            partition: *partition,
                        })
                    })
                    .collect()
            })
            .unwrap_or_default();
        records.push(Record::GroupTombstone(group_id.to_string()));
        Ok(records)
    }

    /// Tombstones for every committed offset of `topic` (the topic was deleted).
    pub fn forget_topic(&self, topic: &str) -> Vec<Record> {
        self.offsets
            .iter()
            .flat_map(|(group, offsets)| {
                offsets
                    .keys()
                    .filter(|(t, _)| t == topic)
                    .map(move |(t, p)| {
                        Record::OffsetTombstone(OffsetKey {
                            group: group.clone(),
                            topic: t.clone(),
                            partition: *p,
                        })
                    })
            })
            .collect()
    }

    /// The topics a group's members subscribe to (decoded from consumer-protocol metadata).
    pub fn subscribed_topics(&self, group_id: &str) -> Vec<String> {
        use kafka_protocol::messages::ConsumerProtocolSubscription;
        use kafka_protocol::protocol::Decodable;
        if let Some(group) = self.consumer_groups.get(group_id) {
            let mut topics: Vec<String> = group
                .members
                .values()
                .flat_map(|m| m.subscribed_topic_names.iter().cloned())
                .chain(group.target.values().flat_map(|a| a.keys().cloned()))
                .collect();
            topics.sort();
            topics.dedup();
            return topics;
        }
        let Some(group) = self.groups.get(group_id) else {
            return vec![];
        };
        if group.protocol_type != "consumer" {
            return vec![];
        }
        let Some(protocol) = &group.protocol_name else {
            return vec![];
        };
        let mut topics = Vec::new();
        for m in group.members.values() {
            let mut metadata = m.metadata_for(protocol);
            if metadata.len() < 2 {
                continue;
            }
            let version = i16::from_be_bytes([metadata[0], metadata[1]]);
            let mut body = metadata.split_off(2);
            if let Ok(sub) = ConsumerProtocolSubscription::decode(&mut body, version.clamp(0, 3)) {
                topics.extend(sub.topics.iter().map(|t| t.to_string()));
            }
        }
        topics.sort();
        topics.dedup();
        topics
    }
}

/// KIP-345: a request naming a static member's instance id with some other member id comes
/// from a zombie that was replaced; it is fenced, not merely unknown.
fn fenced(group: &Group, member_id: &str, instance_id: Option<&str>) -> bool {
    instance_id.is_some_and(|i| {
        group
            .member_by_instance(i)
            .is_some_and(|m| m.id != member_id)
    })
}

fn leader_members(group: &Group) -> Vec<(String, Option<String>, Bytes)> {
    let protocol = group.protocol_name.clone().unwrap_or_default();
    group
        .members
        .values()
        .map(|m| {
            (
                m.id.clone(),
                m.instance_id.clone(),
                m.metadata_for(&protocol),
            )
        })
        .collect()
}

fn prepare_rebalance(group: &mut Group, now_ms: i64, initial_delay_ms: i64) {
    for m in group.members.values_mut() {
        if let Some(tx) = m.awaiting_sync.take() {
            m.last_heartbeat_ms = now_ms;
            let _ = tx.send(sync_error(ResponseError::RebalanceInProgress));
        }
    }
    group.state = GroupState::PreparingRebalance;
    group.storing = false;
    tracing::info!(group = %group.id, members = group.members.len(), "preparing rebalance");
    // Wait for everyone at most the longest rebalance timeout; a new group waits at least the
    // initial delay so that members starting together land in one generation.
    let wait = group.rebalance_timeout_ms().max(initial_delay_ms);
    group.phase_deadline_ms = Some(now_ms + wait);
    group.join_not_before_ms = now_ms + initial_delay_ms;
}

fn maybe_complete_join(group: &mut Group, now_ms: i64) -> Vec<Record> {
    let all_joined =
        !group.members.is_empty() && group.members.values().all(|m| m.awaiting_join.is_some());
    if group.state == GroupState::PreparingRebalance
        && all_joined
        && now_ms >= group.join_not_before_ms
    {
        complete_join(group, now_ms)
    } else {
        vec![]
    }
}

fn complete_join(group: &mut Group, now_ms: i64) -> Vec<Record> {
    group.generation += 1;
    if group.members.is_empty() {
        group.state = GroupState::Empty;
        group.empty_since_ms = Some(now_ms);
        group.protocol_name = None;
        group.leader = None;
        group.phase_deadline_ms = None;
        return vec![Record::Group(group_record(group))];
    }
    group.protocol_name = group.select_protocol();
    // The leader is a member that rejoined (a static one kept without rejoining hears
    // nothing now, so could not send the assignment); a join completes only with one.
    let rejoined = |id: &String| {
        group
            .members
            .get(id)
            .is_some_and(|m| m.awaiting_join.is_some())
    };
    if !group.leader.as_ref().is_some_and(rejoined) {
        group.leader = group
            .members
            .values()
            .find(|m| m.awaiting_join.is_some())
            .map(|m| m.id.clone());
    }
    group.state = GroupState::CompletingRebalance;
    group.phase_deadline_ms = Some(now_ms + group.rebalance_timeout_ms());
    tracing::info!(group = %group.id, generation = group.generation, members = group.members.len(), "rebalance: all members joined");
    let leader = group.leader.clone().unwrap_or_default();
    let members = leader_members(group);
    let (generation, protocol_type, protocol_name) = (
        group.generation,
        group.protocol_type.clone(),
        group.protocol_name.clone(),
    );
    for m in group.members.values_mut() {
        // A static member kept without rejoining gets no new session: its last heartbeat
        // bounds how long it keeps its place, however many rebalances come meanwhile.
        if m.awaiting_join.is_some() {
            m.last_heartbeat_ms = now_ms;
        }
        if let Some(tx) = m.awaiting_join.take() {
            let _ = tx.send(JoinResult {
                error: 0,
                generation,
                protocol_type: protocol_type.clone(),
                protocol_name: protocol_name.clone(),
                leader: leader.clone(),
                member_id: m.id.clone(),
                members: if m.id == leader {
                    members.clone()
                } else {
                    Vec::new()
                },
            });
        }
    }
    vec![]
}

fn remove_member(group: &mut Group, id: &str) {
    if let Some(mut m) = group.members.remove(id) {
        if let Some(tx) = m.awaiting_join.take() {
            let _ = tx.send(join_error(ResponseError::UnknownMemberId, id));
        }
        if let Some(tx) = m.awaiting_sync.take() {
            let _ = tx.send(sync_error(ResponseError::UnknownMemberId));
        }
    }
    if group.leader.as_deref() == Some(id) {
        group.leader = None;
    }
}

fn after_removal(group: &mut Group, now_ms: i64) -> Vec<Record> {
    if group.members.is_empty() {
        group.state = GroupState::Empty;
        group.empty_since_ms = Some(now_ms);
        group.generation += 1;
        group.protocol_name = None;
        group.phase_deadline_ms = None;
        return vec![Record::Group(group_record(group))];
    }
    match group.state {
        GroupState::Stable | GroupState::CompletingRebalance => {
            prepare_rebalance(group, now_ms, 0);
            vec![]
        }
        GroupState::PreparingRebalance => maybe_complete_join(group, now_ms),
        _ => vec![],
    }
}

pub(crate) fn group_record(group: &Group) -> GroupRecord {
    GroupRecord {
        group: group.id.clone(),
        generation: group.generation,
        protocol_type: group.protocol_type.clone(),
        protocol_name: group.protocol_name.clone(),
        leader: group.leader.clone(),
        empty_since_ms: group.empty_since_ms.filter(|_| group.members.is_empty()),
        members: if group.state == GroupState::Stable {
            member_records(group)
        } else {
            Vec::new()
        },
    }
}

/// The members of `group` with their assignments, as its record holds them once it is stable.
fn member_records(group: &Group) -> Vec<MemberRecord> {
    group
        .members
        .values()
        .map(|m| MemberRecord {
            id: m.id.clone(),
            instance_id: m.instance_id.clone(),
            client_id: m.client_id.clone(),
            client_host: m.client_host.clone(),
            session_timeout_ms: m.session_timeout_ms,
            rebalance_timeout_ms: m.rebalance_timeout_ms,
            protocols: m
                .protocols
                .iter()
                .map(|(n, b)| (n.clone(), b.to_vec()))
                .collect(),
            assignment: m.assignment.to_vec(),
        })
        .collect()
}

fn restore_group(g: &GroupRecord, now_ms: i64) -> Group {
    let mut group = Group::new(&g.group);
    group.generation = g.generation;
    group.protocol_type = g.protocol_type.clone();
    group.protocol_name = g.protocol_name.clone();
    group.leader = g.leader.clone();
    group.empty_since_ms = g.empty_since_ms;
    for m in &g.members {
        group.members.insert(
            m.id.clone(),
            Member {
                id: m.id.clone(),
                instance_id: m.instance_id.clone(),
                client_id: m.client_id.clone(),
                client_host: m.client_host.clone(),
                session_timeout_ms: m.session_timeout_ms,
                rebalance_timeout_ms: m.rebalance_timeout_ms,
                protocols: m
                    .protocols
                    .iter()
                    .map(|(n, b)| (n.clone(), Bytes::from(b.clone())))
                    .collect(),
                assignment: Bytes::from(m.assignment.clone()),
                // Restarted: members get a full session to reach us again.
                last_heartbeat_ms: now_ms,
                awaiting_join: None,
                awaiting_sync: None,
            },
        );
    }
    group.state = if group.members.is_empty() {
        GroupState::Empty
    } else {
        GroupState::Stable
    };
    group
}

/// An offset commit as a record to write.
pub fn offset_record(group: &str, topic: &str, partition: i32, committed: Committed) -> Record {
    Record::Offset(
        OffsetKey {
            group: group.to_string(),
            topic: topic.to_string(),
            partition,
        },
        OffsetValue {
            offset: committed.offset,
            leader_epoch: committed.leader_epoch,
            metadata: committed.metadata,
            commit_timestamp_ms: committed.commit_timestamp_ms,
        },
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config() -> GroupConfig {
        GroupConfig {
            initial_rebalance_delay_ms: 0,
            ..GroupConfig::default()
        }
    }

    fn join_req(member: &str, instance: Option<&str>) -> JoinRequest {
        JoinRequest {
            group_id: "g".into(),
            member_id: member.into(),
            instance_id: instance.map(String::from),
            client_id: "c".into(),
            client_host: "/127.0.0.1".into(),
            session_timeout_ms: 10_000,
            rebalance_timeout_ms: 30_000,
            protocol_type: "consumer".into(),
            protocols: vec![("range".into(), Bytes::from_static(b"meta"))],
            require_known_member_id: true,
        }
    }

    fn now<T: std::fmt::Debug>(reply: Reply<T>) -> T {
        match reply {
            Reply::Now(t) => t,
            Reply::Later(_) => panic!("expected an immediate answer"),
        }
    }

    fn later<T>(reply: Reply<T>) -> oneshot::Receiver<T> {
        match reply {
            Reply::Later(rx) => rx,
            Reply::Now(_) => panic!("expected a pending answer"),
        }
    }

    /// SyncGroup as the handler runs it: the leader's record is stored, then the members hear.
    fn sync_stored(
        c: &mut Coordinator,
        group: &str,
        generation: i32,
        member: &str,
        instance: Option<&str>,
        assignments: Vec<(String, Bytes)>,
    ) -> (Reply<SyncResult>, Vec<Record>) {
        let (reply, records) = c.sync(group, generation, member, instance, assignments);
        if !records.is_empty() {
            c.stored(group, generation, Ok(()), 0);
        }
        (reply, records)
    }

    /// The one member of a group that just became Stable (joined and synced generation 1).
    fn stable_member(c: &mut Coordinator) -> String {
        let (a, mut a_join) = new_member(c, 0);
        a_join.try_recv().unwrap();
        later(sync_stored(c, "g", 1, &a, None, vec![]).0)
            .try_recv()
            .unwrap();
        a
    }

    /// Joins a new member the KIP-394 way; returns its id and pending join.
    fn new_member(c: &mut Coordinator, t: i64) -> (String, oneshot::Receiver<JoinResult>) {
        let first = now(c.join(join_req("", None), t).0);
        assert_eq!(first.error, ResponseError::MemberIdRequired.code());
        let id = first.member_id;
        (id.clone(), later(c.join(join_req(&id, None), t).0))
    }

    #[test]
    fn the_two_protocols_do_not_share_a_live_group() {
        let mut c = Coordinator::new(config());
        let partitions = |_: &str| Some(3);
        let topics = Vec::new;
        let heartbeat = |member: &str| Heartbeat {
            group_id: "g".into(),
            member_id: member.into(),
            rebalance_timeout_ms: 1_000,
            subscribed_topic_names: Some(vec!["t".into()]),
            ..Heartbeat::default()
        };
        // A classic group with a member keeps its id.
        let (_classic, _rx) = new_member(&mut c, 0);
        let (refused, _) = c.consumer_heartbeat(heartbeat("new"), &partitions, &topics, 0);
        assert_eq!(
            refused.error.map(|e| e.0),
            Some(ResponseError::GroupIdNotFound)
        );
        // A new-protocol group with members refuses classic joins.
        let mut c = Coordinator::new(config());
        let (joined, _) = c.consumer_heartbeat(heartbeat("new"), &partitions, &topics, 0);
        assert_eq!(joined.error, None);
        assert_eq!(
            now(c.join(join_req("", None), 0).0).error,
            ResponseError::InconsistentGroupProtocol.code()
        );
        assert_eq!(
            c.state_of("g"),
            GroupState::Stable,
            "not deletable while it has members"
        );
    }

    /// Applies `records` as `GroupService::record` does once they are written, and keeps them
    /// as the log would.
    fn written(c: &mut Coordinator, log: &mut Vec<Record>, records: Vec<Record>) {
        for r in &records {
            c.apply(r, 0);
        }
        log.extend(records);
    }

    #[test]
    fn a_new_protocol_group_is_written_when_it_changes_and_comes_back_from_its_log() {
        let mut c = Coordinator::new(config());
        let mut log = Vec::new();
        let partitions = |_: &str| Some(4);
        let topics = Vec::new;
        let beat = |member: &str, epoch: i32, owned: Option<Vec<i32>>| Heartbeat {
            group_id: "g".into(),
            member_id: member.into(),
            member_epoch: epoch,
            rebalance_timeout_ms: 1_000,
            subscribed_topic_names: (epoch == 0).then(|| vec!["t".into()]),
            owned: owned.map(|ps| [("t".to_string(), ps.into_iter().collect())].into()),
            ..Heartbeat::default()
        };
        let (a, records) =
            c.consumer_heartbeat(beat("a", 0, Some(vec![])), &partitions, &topics, 0);
        assert!(matches!(&records[..], [Record::ConsumerGroup(g)] if g.members.len() == 1));
        written(&mut c, &mut log, records);
        let owned_by_a: Vec<i32> = a.assignment.clone().unwrap()["t"].iter().copied().collect();
        assert_eq!(owned_by_a, vec![0, 1, 2, 3]);
        // A heartbeat that changes nothing writes nothing.
        let (same, records) = c.consumer_heartbeat(
            beat("a", a.member_epoch, Some(owned_by_a.clone())),
            &partitions,
            &topics,
            10,
        );
        assert_eq!(same.error, None);
        assert!(records.is_empty(), "{records:?}");
        // A second member: a is asked to release half, which is written.
        let (b, records) =
            c.consumer_heartbeat(beat("b", 0, Some(vec![])), &partitions, &topics, 20);
        written(&mut c, &mut log, records);
        let (a2, records) = c.consumer_heartbeat(
            beat("a", a.member_epoch, Some(owned_by_a.clone())),
            &partitions,
            &topics,
            30,
        );
        assert_eq!(a2.assignment.as_ref().map(|a| a["t"].len()), Some(2));
        assert_eq!(records.len(), 1, "the revocation is written");
        written(&mut c, &mut log, records);

        // A coordinator that reads the log back knows both members, their epochs and what a
        // is releasing: a's next heartbeat goes on from there, no rejoin.
        let before = c.consumer_group("g").map(|g| g.to_record());
        let mut restored = Coordinator::new(config());
        for r in &log {
            restored.replay(r, 100_000);
        }
        assert_eq!(restored.consumer_group("g").map(|g| g.to_record()), before);
        // Sessions (45 s) and a's time to release (its rebalance timeout, 1 s) start at the
        // replay, not at the last heartbeats the previous coordinator saw (30 ms).
        assert!(
            restored.tick(100_500).is_empty(),
            "sessions restart at the replay"
        );
        let mut late = Coordinator::new(config());
        for r in &log {
            late.replay(r, 100_000);
        }
        let records = late.tick(101_500);
        assert!(
            matches!(&records[..], [Record::ConsumerGroup(g)] if g.members.len() == 1 && g.members[0].id == "b"),
            "a, still releasing, is removed once its rebalance timeout has passed: {records:?}"
        );
        let kept: Vec<i32> = a2.assignment.unwrap()["t"].iter().copied().collect();
        let (a3, records) = restored.consumer_heartbeat(
            beat("a", a2.member_epoch, Some(kept)),
            &partitions,
            &topics,
            100_100,
        );
        assert_eq!(a3.error, None);
        assert!(
            a3.member_epoch > a.member_epoch,
            "released, a moves to the new epoch"
        );
        assert_eq!(records.len(), 1);
        written(&mut restored, &mut log, records);
        let (b2, _) = restored.consumer_heartbeat(
            beat("b", b.member_epoch, Some(vec![])),
            &partitions,
            &topics,
            100_200,
        );
        assert_eq!(b2.error, None, "b is known to the new coordinator");

        // Every member leaving writes a tombstone; the group is gone after a replay.
        for m in ["a", "b"] {
            let (_, records) = restored.consumer_heartbeat(
                beat(m, super::super::consumer::LEAVE_EPOCH, None),
                &partitions,
                &topics,
                100_300,
            );
            written(&mut restored, &mut log, records);
        }
        assert!(matches!(log.last(), Some(Record::ConsumerGroupTombstone(g)) if g == "g"));
        let mut again = Coordinator::new(config());
        for r in &log {
            again.replay(r, 2_000);
        }
        assert!(again.consumer_group("g").is_none());
    }

    #[test]
    fn a_new_protocol_member_that_expires_is_written_out() {
        let mut c = Coordinator::new(config());
        let partitions = |_: &str| Some(2);
        let topics = Vec::new;
        for m in ["a", "b"] {
            let (_, records) = c.consumer_heartbeat(
                Heartbeat {
                    group_id: "g".into(),
                    member_id: m.into(),
                    rebalance_timeout_ms: 1_000,
                    subscribed_topic_names: Some(vec!["t".into()]),
                    ..Heartbeat::default()
                },
                &partitions,
                &topics,
                if m == "a" { 0 } else { 40_000 },
            );
            for r in &records {
                c.apply(r, 0);
            }
        }
        let records = c.tick(46_000);
        assert!(
            matches!(&records[..], [Record::ConsumerGroup(g)] if g.members.len() == 1 && g.members[0].id == "b"),
            "{records:?}"
        );
        for r in &records {
            c.apply(r, 0);
        }
        let records = c.tick(90_000);
        assert!(
            matches!(&records[..], [Record::ConsumerGroupTombstone(g)] if g == "g"),
            "{records:?}"
        );
        // Kept until its tombstone is written: a tombstone whose write failed is made again.
        assert_eq!(c.tick(90_100), records);
        for r in &records {
            c.apply(r, 0);
        }
        assert!(c.consumer_group("g").is_none());
        assert!(c.tick(90_200).is_empty());
    }

    #[test]
    fn one_member_joins_syncs_and_heartbeats() {
        let mut c = Coordinator::new(config());
        let (id, mut rx) = new_member(&mut c, 0);
        let joined = rx.try_recv().unwrap();
        assert_eq!(
            (joined.error, joined.generation, joined.leader.as_str()),
            (0, 1, id.as_str())
        );
        assert_eq!(joined.members.len(), 1, "the leader gets the member list");
        let (reply, records) = sync_stored(
            &mut c,
            "g",
            1,
            &id,
            None,
            vec![(id.clone(), Bytes::from_static(b"assign"))],
        );
        assert_eq!(
            later(reply).try_recv().unwrap().assignment,
            Bytes::from_static(b"assign")
        );
        assert!(matches!(&records[..], [Record::Group(g)] if g.members.len() == 1));
        assert_eq!(c.state_of("g"), GroupState::Stable);
        assert_eq!(c.heartbeat("g", 1, &id, None, 100), Ok(()));
        assert_eq!(
            c.heartbeat("g", 0, &id, None, 100),
            Err(ResponseError::IllegalGeneration)
        );
        assert_eq!(
            c.heartbeat("g", 1, "stranger", None, 100),
            Err(ResponseError::UnknownMemberId)
        );
        assert_eq!(c.check_commit("g", 1, &id, None, &[], false), Ok(()));
        assert_eq!(
            c.check_commit("g", 0, &id, None, &[], false),
            Err(ResponseError::IllegalGeneration)
        );
        assert_eq!(
            c.check_commit("g", 1, "stranger", None, &[], false),
            Err(ResponseError::UnknownMemberId)
        );
        assert_eq!(
            c.check_commit("other", -1, "", None, &[], false),
            Ok(()),
            "standalone commits to an empty group"
        );
    }

    #[test]
    fn a_second_member_triggers_a_rebalance_that_waits_for_the_first() {
        let mut c = Coordinator::new(config());
        let (a, mut a_join) = new_member(&mut c, 0);
        a_join.try_recv().unwrap();
        let (reply, _) = sync_stored(&mut c, "g", 1, &a, None, vec![]);
        later(reply).try_recv().unwrap();
        let (b, mut b_join) = new_member(&mut c, 10);
        assert!(
            b_join.try_recv().is_err(),
            "waits for the existing member to rejoin"
        );
        assert_eq!(
            c.heartbeat("g", 1, &a, None, 20),
            Err(ResponseError::RebalanceInProgress)
        );
        let mut a_join = later(c.join(join_req(&a, None), 30).0);
        let (ra, rb) = (a_join.try_recv().unwrap(), b_join.try_recv().unwrap());
        assert_eq!((ra.generation, rb.generation), (2, 2));
        assert_eq!(ra.leader, a, "the leader stays");
        assert!(
            rb.members.is_empty(),
            "followers do not see the member list"
        );
        let mut b_sync = later(sync_stored(&mut c, "g", 2, &b, None, vec![]).0);
        assert!(
            b_sync.try_recv().is_err(),
            "a follower waits for the leader's assignment"
        );
        let (reply, _) = sync_stored(
            &mut c,
            "g",
            2,
            &a,
            None,
            vec![
                (a.clone(), Bytes::from_static(b"A")),
                (b.clone(), Bytes::from_static(b"B")),
            ],
        );
        assert_eq!(
            later(reply).try_recv().unwrap().assignment,
            Bytes::from_static(b"A")
        );
        assert_eq!(
            b_sync.try_recv().unwrap().assignment,
            Bytes::from_static(b"B")
        );
    }

    #[test]
    fn members_hear_the_assignment_only_once_it_is_stored() {
        let unassigned = |c: &Coordinator| {
            c.group("g")
                .unwrap()
                .members
                .values()
                .all(|m| m.assignment.is_empty())
        };
        let mut c = Coordinator::new(config());
        let leader = stable_member(&mut c);
        let (follower, mut f_join) = new_member(&mut c, 10);
        let mut l_join = later(c.join(join_req(&leader, None), 20).0);
        assert_eq!(l_join.try_recv().unwrap().leader, leader);
        assert_eq!(f_join.try_recv().unwrap().generation, 2);
        let assign = |label: &'static [u8]| {
            vec![
                (leader.clone(), Bytes::from_static(label)),
                (follower.clone(), Bytes::from_static(label)),
            ]
        };
        // The append fails: both hear the error, nobody keeps an assignment, and the group
        // rebalances.
        let mut f_sync = later(c.sync("g", 2, &follower, None, vec![]).0);
        let (reply, records) = c.sync("g", 2, &leader, None, assign(b"two"));
        let mut l_sync = later(reply);
        assert_eq!(records.len(), 1, "the group's record to append");
        assert!(
            f_sync.try_recv().is_err(),
            "not before the record is stored"
        );
        assert!(l_sync.try_recv().is_err());
        c.stored("g", 2, Err(ResponseError::CoordinatorNotAvailable), 30);
        for rx in [&mut f_sync, &mut l_sync] {
            let r = rx.try_recv().unwrap();
            assert_eq!(r.error, ResponseError::CoordinatorNotAvailable.code());
            assert!(r.assignment.is_empty());
        }
        assert_eq!(c.state_of("g"), GroupState::PreparingRebalance);
        assert!(unassigned(&c));
        assert_eq!(
            c.heartbeat("g", 2, &follower, None, 40),
            Err(ResponseError::RebalanceInProgress)
        );
        // Both rejoin; this time the record is stored and both hear their share.
        let mut l_join = later(c.join(join_req(&leader, None), 50).0);
        let mut f_join = later(c.join(join_req(&follower, None), 50).0);
        assert_eq!(l_join.try_recv().unwrap().generation, 3);
        assert_eq!(f_join.try_recv().unwrap().generation, 3);
        let (reply, records) = c.sync("g", 3, &leader, None, assign(b"three"));
        let mut l_sync = later(reply);
        // The record holds the assignment; until its outcome is known the group is still
        // completing the rebalance, and a member that syncs only now waits with the others.
        match &records[..] {
            [Record::Group(g)] => assert_eq!(g.members.len(), 2),
            other => panic!("expected the group's record, got {other:?}"),
        }
        assert_eq!(c.state_of("g"), GroupState::CompletingRebalance);
        let mut f_sync = later(c.sync("g", 3, &follower, None, vec![]).0);
        assert!(f_sync.try_recv().is_err());
        // A late outcome of an older generation changes nothing.
        c.stored("g", 2, Err(ResponseError::CoordinatorNotAvailable), 60);
        assert!(f_sync.try_recv().is_err());
        c.stored("g", 3, Ok(()), 60);
        assert_eq!(
            f_sync.try_recv().unwrap().assignment,
            Bytes::from_static(b"three")
        );
        assert_eq!(l_sync.try_recv().unwrap().error, 0);
        assert_eq!(c.state_of("g"), GroupState::Stable);
        // An outcome once the group is stable changes nothing (each record has one).
        c.stored("g", 3, Err(ResponseError::NotCoordinator), 70);
        assert_eq!(c.state_of("g"), GroupState::Stable);
        assert!(!unassigned(&c));
    }

    #[test]
    fn a_leaders_sync_sent_again_while_its_assignment_is_stored_waits_for_that_one() {
        let (mut c, leader, follower) = two_joined_generation_2();
        let assign = |value: &'static [u8]| vec![(follower.clone(), Bytes::from_static(value))];
        let (first, records) = c.sync("g", 2, &leader, None, assign(b"first"));
        assert_eq!(records.len(), 1);
        let mut f_sync = later(c.sync("g", 2, &follower, None, vec![]).0);
        // The leader asks again (its answer was slow): nothing more to store, and it waits.
        let (again, records) = c.sync("g", 2, &leader, None, assign(b"second"));
        assert!(
            records.is_empty(),
            "a second record while the first is stored"
        );
        let mut again = later(again);
        drop(first);
        c.stored("g", 2, Ok(()), 20);
        assert_eq!(again.try_recv().unwrap().error, 0);
        assert_eq!(
            f_sync.try_recv().unwrap().assignment,
            Bytes::from_static(b"first"),
            "the assignment the record holds"
        );
        // A member leaving while an assignment is stored: the rebalance answers the waiting
        // members, and the outcome that comes later changes nothing.
        let (mut c, leader, follower) = two_joined_generation_2();
        let (reply, _) = c.sync("g", 2, &leader, None, assign(b"first"));
        let mut l_sync = later(reply);
        c.leave("g", &[(follower.clone(), None)], 30);
        assert_eq!(
            l_sync.try_recv().unwrap().error,
            ResponseError::RebalanceInProgress.code()
        );
        c.stored("g", 2, Ok(()), 40);
        assert_eq!(c.state_of("g"), GroupState::PreparingRebalance);
    }

    #[test]
    fn members_commit_while_a_rebalance_is_prepared_as_in_kafka() {
        let mut c = Coordinator::new(config());
        let a = stable_member(&mut c);
        let (b, mut b_join) = new_member(&mut c, 10);
        assert_eq!(c.state_of("g"), GroupState::PreparingRebalance);
        // The revoke callback's commit, before `a` rejoins: accepted.
        assert_eq!(c.check_commit("g", 1, &a, None, &[], false), Ok(()));
        assert_eq!(
            c.check_commit("g", 0, &a, None, &[], false),
            Err(ResponseError::IllegalGeneration)
        );
        assert_eq!(
            c.check_commit("g", 1, "stranger", None, &[], false),
            Err(ResponseError::UnknownMemberId)
        );
        let mut a_join = later(c.join(join_req(&a, None), 30).0);
        a_join.try_recv().unwrap();
        b_join.try_recv().unwrap();
        assert_eq!(c.state_of("g"), GroupState::CompletingRebalance);
        // Joined generation 2 but not yet assigned: a plain commit waits for the assignment,
        // a transactional one is taken; generation 1 is over.
        assert_eq!(
            c.check_commit("g", 2, &a, None, &[], false),
            Err(ResponseError::RebalanceInProgress)
        );
        assert_eq!(c.check_commit("g", 2, &b, None, &[], true), Ok(()));
        assert_eq!(
            c.check_commit("g", 1, &a, None, &[], false),
            Err(ResponseError::IllegalGeneration)
        );
    }

    #[test]
    fn a_member_id_handed_out_survives_ticks_until_its_session_times_out() {
        let mut c = Coordinator::new(config());
        let first = now(c.join(join_req("", None), 0).0);
        assert_eq!(first.error, ResponseError::MemberIdRequired.code());
        // The client's rejoin comes after a tick or two (a slow network, a busy client).
        assert!(c.tick(300).is_empty());
        assert!(c.tick(600).is_empty());
        let mut joined = later(c.join(join_req(&first.member_id, None), 700).0);
        assert_eq!(joined.try_recv().unwrap().error, 0);
        // An id never used expires with its session, and its empty group goes with it.
        let in_h = |member: &str| JoinRequest {
            group_id: "h".into(),
            ..join_req(member, None)
        };
        let unused = now(c.join(in_h(""), 0).0);
        c.tick(10_001);
        assert!(c.group("h").is_none());
        let late = now(c.join(in_h(&unused.member_id), 10_002).0);
        assert_eq!(late.error, ResponseError::UnknownMemberId.code());
    }

    #[test]
    fn silent_members_expire_and_late_joiners_are_dropped() {
        let mut c = Coordinator::new(config());
        let a = stable_member(&mut c);
        let (b, mut b_join) = new_member(&mut c, 0);
        // `a` keeps heartbeating but never rejoins: after the rebalance timeout the join
        // completes without it.
        for t in [9_000, 18_000, 27_000] {
            assert_eq!(
                c.heartbeat("g", 1, &a, None, t),
                Err(ResponseError::RebalanceInProgress)
            );
            assert!(c.tick(t).is_empty());
        }
        assert!(c.tick(29_999).is_empty());
        assert!(b_join.try_recv().is_err());
        c.tick(30_001);
        let rb = b_join.try_recv().unwrap();
        assert_eq!((rb.generation, rb.leader.as_str()), (2, b.as_str()));
        assert!(!c.group("g").unwrap().members.contains_key(&a));
        later(sync_stored(&mut c, "g", 2, &b, None, vec![]).0)
            .try_recv()
            .unwrap();
        // `b` stops heartbeating: its session expires and the group empties.
        let records = c.tick(30_001 + 10_001);
        assert_eq!(c.state_of("g"), GroupState::Empty);
        assert!(matches!(&records[..], [Record::Group(g)] if g.members.is_empty()));
    }

    #[test]
    fn static_members_rejoin_without_a_rebalance_and_fence_their_old_self() {
        let mut c = Coordinator::new(config());
        let mut join = later(c.join(join_req("", Some("i1")), 0).0);
        let first = join.try_recv().unwrap();
        later(
            sync_stored(
                &mut c,
                "g",
                1,
                &first.member_id,
                Some("i1"),
                vec![(first.member_id.clone(), Bytes::from_static(b"X"))],
            )
            .0,
        )
        .try_recv()
        .unwrap();
        let again = now(c.join(join_req("", Some("i1")), 100).0);
        assert_eq!(
            (again.error, again.generation),
            (0, 1),
            "same generation: no rebalance"
        );
        assert_ne!(again.member_id, first.member_id);
        assert_eq!(c.state_of("g"), GroupState::Stable);
        assert_eq!(
            c.heartbeat("g", 1, &first.member_id, Some("i1"), 200),
            Err(ResponseError::FencedInstanceId),
            "the replaced member is fenced"
        );
        assert_eq!(
            c.check_commit("g", 1, &first.member_id, Some("i1"), &[], false),
            Err(ResponseError::FencedInstanceId)
        );
        assert_eq!(
            c.heartbeat("g", 1, &first.member_id, None, 200),
            Err(ResponseError::UnknownMemberId)
        );
        assert_eq!(
            c.heartbeat("g", 1, &again.member_id, Some("i2"), 200),
            Err(ResponseError::FencedInstanceId)
        );
        assert_eq!(
            c.check_commit("g", 1, &again.member_id, Some("i2"), &[], false),
            Err(ResponseError::FencedInstanceId)
        );
        let r = now(sync_stored(&mut c, "g", 1, &again.member_id, Some("i1"), vec![]).0);
        assert_eq!(
            r.assignment,
            Bytes::from_static(b"X"),
            "the assignment is kept"
        );
    }

    /// A static member `i1` (100 s session) alone in generation 1, then a dynamic member that
    /// joins at 100 ms while `i1` is down: the rebalance times out at 30,100 ms and completes
    /// without `i1` rejoining. Returns `i1`'s member id, the dynamic member's id, and the
    /// dynamic member's (the leader's) join answer.
    fn static_member_down_through_a_rebalance(c: &mut Coordinator) -> (String, String, JoinResult) {
        let static_join = |member: &str| JoinRequest {
            session_timeout_ms: 100_000,
            ..join_req(member, Some("i1"))
        };
        let s = later(c.join(static_join(""), 0).0)
            .try_recv()
            .unwrap()
            .member_id;
        later(sync_stored(c, "g", 1, &s, Some("i1"), vec![]).0)
            .try_recv()
            .unwrap();
        let (d, mut d_join) = new_member(c, 100);
        assert!(c.tick(30_099).is_empty());
        assert!(d_join.try_recv().is_err(), "waits for the static member");
        c.tick(30_101);
        (s, d, d_join.try_recv().unwrap())
    }

    #[test]
    fn a_static_member_that_misses_a_rebalance_keeps_its_place_until_its_session_expires() {
        let mut c = Coordinator::new(config());
        let (s, d, joined) = static_member_down_through_a_rebalance(&mut c);
        assert_eq!((joined.generation, joined.leader.as_str()), (2, d.as_str()));
        let mut listed: Vec<_> = joined
            .members
            .iter()
            .map(|(id, instance, _)| (id.clone(), instance.clone()))
            .collect();
        listed.sort();
        let mut expected = vec![(s.clone(), Some("i1".to_string())), (d.clone(), None)];
        expected.sort();
        assert_eq!(listed, expected, "the leader assigns the static member too");
        let assignments = vec![
            (s.clone(), Bytes::from_static(b"S")),
            (d.clone(), Bytes::from_static(b"D")),
        ];
        later(sync_stored(&mut c, "g", 2, &d, None, assignments).0)
            .try_recv()
            .unwrap();
        // Restarted, it comes back under its instance id: no rebalance, and its share waited.
        let back = now(c
            .join(
                JoinRequest {
                    session_timeout_ms: 60_000,
                    ..join_req("", Some("i1"))
                },
                31_000,
            )
            .0);
        assert_eq!((back.error, back.generation), (0, 2));
        assert_eq!(c.state_of("g"), GroupState::Stable);
        let synced = now(sync_stored(&mut c, "g", 2, &back.member_id, Some("i1"), vec![]).0);
        assert_eq!(synced.assignment, Bytes::from_static(b"S"));
    }

    #[test]
    fn a_rebalance_with_only_absent_static_members_waits_for_their_sessions() {
        let mut c = Coordinator::new(config());
        let (s, d, _) = static_member_down_through_a_rebalance(&mut c);
        later(sync_stored(&mut c, "g", 2, &d, None, vec![]).0)
            .try_recv()
            .unwrap();
        // The dynamic member leaves; the static one is still down.
        let (results, _) = c.leave("g", &[(d.clone(), None)], 30_200);
        assert_eq!(results, vec![Ok(())]);
        assert_eq!(c.state_of("g"), GroupState::PreparingRebalance);
        // The rebalance times out with nobody rejoined: nobody could lead, so it waits on.
        assert!(c.tick(60_201).is_empty());
        assert_eq!(c.state_of("g"), GroupState::PreparingRebalance);
        assert!(c.group("g").unwrap().members.contains_key(&s));
        assert!(c.tick(90_201).is_empty(), "and on");
        // Its session (100 s from its last heartbeat, at 0: the rebalances gave it no new
        // one) runs out: the group empties.
        assert!(c.tick(100_000).is_empty());
        let records = c.tick(100_001);
        assert_eq!(c.state_of("g"), GroupState::Empty);
        assert!(matches!(&records[..], [Record::Group(g)] if g.members.is_empty()));
    }

    #[test]
    fn bad_joins_and_deletes_are_refused() {
        let mut c = Coordinator::new(config());
        let mut bad = join_req("", None);
        bad.session_timeout_ms = 10;
        assert_eq!(
            now(c.join(bad, 0).0).error,
            ResponseError::InvalidSessionTimeout.code()
        );
        let mut empty = join_req("", None);
        empty.group_id = String::new();
        assert_eq!(
            now(c.join(empty, 0).0).error,
            ResponseError::InvalidGroupId.code()
        );
        assert_eq!(
            now(c.join(join_req("ghost", None), 0).0).error,
            ResponseError::UnknownMemberId.code()
        );
        let (a, mut rx) = new_member(&mut c, 0);
        rx.try_recv().unwrap();
        let mut other = join_req(&a, None);
        other.protocol_type = "connect".into();
        assert_eq!(
            now(c.join(other, 0).0).error,
            ResponseError::InconsistentGroupProtocol.code()
        );
        assert_eq!(
            c.delete_group("g").unwrap_err(),
            ResponseError::NonEmptyGroup
        );
        assert_eq!(
            c.delete_group("nope").unwrap_err(),
            ResponseError::GroupIdNotFound
        );
        assert_eq!(
            c.leave("g", &[("stranger".into(), None)], 0).0,
            vec![Err(ResponseError::UnknownMemberId)]
        );
        let (results, records) = c.leave("g", &[(a, None)], 0);
        assert_eq!(results, vec![Ok(())]);
        assert!(!records.is_empty());
        assert_eq!(c.state_of("g"), GroupState::Empty);
    }

    #[test]
    fn a_replay_restores_the_last_generation_not_the_first_one_with_members() {
        let mut c = Coordinator::new(config());
        let mut log = Vec::new();
        let first = now(c.join(join_req("", None), 0).0);
        let (reply, records) = c.join(join_req(&first.member_id, None), 0);
        log.extend(records);
        later(reply).try_recv().unwrap();
        let (reply, records) = sync_stored(&mut c, "g", 1, &first.member_id, None, vec![]);
        log.extend(records);
        later(reply).try_recv().unwrap();
        let (results, records) = c.leave("g", &[(first.member_id.clone(), None)], 10);
        assert_eq!(results, vec![Ok(())]);
        log.extend(records);
        assert!(
            log.len() >= 2,
            "generation 1 with its member, then the empty group: {log:?}"
        );
        let mut replayed = Coordinator::new(config());
        for r in &log {
            replayed.replay(r, 100);
        }
        assert_eq!(replayed.state_of("g"), GroupState::Empty);
        let group = replayed.group("g").unwrap();
        assert!(group.members.is_empty(), "the member that left came back");
        assert_eq!(group.generation, c.group("g").unwrap().generation);
    }

    #[test]
    fn offsets_are_applied_replayed_and_expired() {
        let mut c = Coordinator::new(config());
        let commit = |c: &mut Coordinator, offset, ts| {
            let r = offset_record(
                "g",
                "t",
                0,
                Committed {
                    offset,
                    leader_epoch: 0,
                    metadata: String::new(),
                    commit_timestamp_ms: ts,
                },
            );
            c.apply(&r, ts);
            r
        };
        let r1 = commit(&mut c, 5, 0);
        let r2 = commit(&mut c, 9, 10);
        assert_eq!(c.committed("g").unwrap()[&("t".into(), 0)].offset, 9);
        // A restart replays the records in order.
        let mut replayed = Coordinator::new(config());
        for r in [&r1, &r2] {
            replayed.replay(r, 100);
        }
        assert_eq!(replayed.committed("g"), c.committed("g"));
        assert_eq!(
            c.state_of("g"),
            GroupState::Empty,
            "a group with only offsets is empty"
        );
        assert_eq!(c.forget_topic("t").len(), 1);
        let expired = c.tick(10 + c.config.offsets_retention_ms + 1);
        assert_eq!(expired.len(), 1, "offsets of an empty group expire");
        assert!(c.committed("g").is_none());
    }

    fn commit_at(c: &mut Coordinator, group: &str, topic: &str, ts: i64) {
        let r = offset_record(
            group,
            topic,
            0,
            Committed {
                offset: 1,
                leader_epoch: 0,
                metadata: String::new(),
                commit_timestamp_ms: ts,
            },
        );
        c.apply(&r, ts);
    }

    #[test]
    fn a_group_keeps_its_offsets_for_the_retention_time_after_it_empties() {
        let mut c = Coordinator::new(config());
        let retention = c.config.offsets_retention_ms;
        let a = stable_member(&mut c);
        // Committed long ago (an idle partition), then the member stays for more than the
        // retention time.
        commit_at(&mut c, "g", "t", 0);
        let left_at = retention + 1_000;
        c.heartbeat("g", 1, &a, None, left_at).unwrap();
        let (results, records) = c.leave("g", &[(a.clone(), None)], left_at);
        assert_eq!(results, vec![Ok(())]);
        let [Record::Group(written)] = &records[..] else {
            panic!("the emptied group is written: {records:?}");
        };
        assert_eq!(written.empty_since_ms, Some(left_at));
        assert!(
            c.tick(left_at + 100).is_empty(),
            "an offset older than the retention survives its group's emptying"
        );
        // A restart restores when the group emptied.
        let mut replayed = Coordinator::new(config());
        replayed.replay(&records[0], left_at + 200);
        commit_at(&mut replayed, "g", "t", 0);
        assert!(replayed.tick(left_at + 200).is_empty());
        // The retention time after the group emptied, the offset goes.
        for c in [&mut c, &mut replayed] {
            assert!(c.tick(left_at + retention - 1).is_empty());
            assert_eq!(c.tick(left_at + retention + 1).len(), 1);
            assert!(c.committed("g").is_none());
        }
    }

    #[test]
    fn a_new_protocol_group_keeps_the_offsets_of_topics_it_subscribes_to() {
        let mut c = Coordinator::new(config());
        let partitions = |_: &str| Some(1);
        let req = Heartbeat {
            group_id: "g".into(),
            member_id: "m".into(),
            member_epoch: 0,
            instance_id: None,
            rebalance_timeout_ms: 30_000,
            subscribed_topic_names: Some(vec!["t".into()]),
            subscribed_topic_regex: None,
            server_assignor: None,
            owned: None,
            client_id: "c".into(),
            client_host: "/127.0.0.1".into(),
        };
        let (joined, _) = c.consumer_heartbeat(req, &partitions, &Vec::new, 0);
        assert_eq!(joined.error, None);
        // Committed more than the retention time ago; the member is live.
        let long_ago = -c.config.offsets_retention_ms - 10;
        commit_at(&mut c, "g", "t", long_ago);
        commit_at(&mut c, "g", "other", long_ago);
        let records = c.tick(1);
        let gone: Vec<&str> = records
            .iter()
            .filter_map(|r| match r {
                Record::OffsetTombstone(k) => Some(k.topic.as_str()),
                _ => None,
            })
            .collect();
        assert_eq!(
            gone,
            vec!["other"],
            "only the unsubscribed topic's offset expires"
        );
        assert!(c.committed("g").unwrap().contains_key(&("t".into(), 0)));
    }

    #[test]
    fn a_txn_offset_commit_without_a_member_is_taken_while_the_group_has_members() {
        let mut c = Coordinator::new(config());
        let a = stable_member(&mut c);
        // `sendOffsetsToTransaction(offsets, groupId)`: generation -1, no member.
        assert_eq!(c.check_commit("g", -1, "", None, &[], true), Ok(()));
        // A plain commit like it is refused while the group has members.
        assert_eq!(
            c.check_commit("g", -1, "", None, &[], false),
            Err(ResponseError::UnknownMemberId)
        );
        assert_eq!(c.check_commit("g", 1, &a, None, &[], true), Ok(()));
    }

    #[test]
    fn a_replaced_static_member_is_fenced_on_join_sync_and_leave() {
        let mut c = Coordinator::new(config());
        let first = later(c.join(join_req("", Some("i1")), 0).0)
            .try_recv()
            .unwrap();
        later(sync_stored(&mut c, "g", 1, &first.member_id, Some("i1"), vec![]).0)
            .try_recv()
            .unwrap();
        let again = now(c.join(join_req("", Some("i1")), 100).0);
        assert_ne!(again.member_id, first.member_id);
        let old = first.member_id.as_str();
        let rejoin = now(c.join(join_req(old, Some("i1")), 200).0);
        assert_eq!(rejoin.error, ResponseError::FencedInstanceId.code());
        let sync = now(c.sync("g", 1, old, Some("i1"), vec![]).0);
        assert_eq!(sync.error, ResponseError::FencedInstanceId.code());
        let (left, records) = c.leave("g", &[(old.to_string(), Some("i1".into()))], 300);
        assert_eq!(left, vec![Err(ResponseError::FencedInstanceId)]);
        assert!(records.is_empty());
        assert_eq!(c.state_of("g"), GroupState::Stable, "the live member stays");
        assert_eq!(
            c.heartbeat("g", 1, &again.member_id, Some("i1"), 300),
            Ok(())
        );
    }

    /// A group whose two members have joined generation 2 and wait for its assignment:
    /// (coordinator, leader, follower).
    fn two_joined_generation_2() -> (Coordinator, String, String) {
        let mut c = Coordinator::new(config());
        let a = stable_member(&mut c);
        let (b, mut b_join) = new_member(&mut c, 0);
        let mut a_join = later(c.join(join_req(&a, None), 10).0);
        a_join.try_recv().unwrap();
        b_join.try_recv().unwrap();
        let leader = c.group("g").unwrap().leader.clone().unwrap();
        let follower = if leader == a { b } else { a };
        (c, leader, follower)
    }

    #[test]
    fn a_member_waiting_for_the_leaders_assignment_does_not_expire() {
        let (mut c, leader, follower) = two_joined_generation_2();
        // The follower waits in SyncGroup without heartbeating, longer than its session; the
        // leader is slow to assign.
        let mut waiting = later(c.sync("g", 2, &follower, None, vec![]).0);
        c.heartbeat("g", 2, &leader, None, 9_000).unwrap();
        c.tick(15_000);
        assert!(c.group("g").unwrap().members.contains_key(&follower));
        let (reply, records) = c.sync("g", 2, &leader, None, vec![]);
        assert!(!records.is_empty());
        c.stored("g", 2, Ok(()), 15_001);
        later(reply).try_recv().unwrap();
        assert_eq!(waiting.try_recv().unwrap().error, 0);
        // Its session runs from its answer: it has a full session to send its first
        // heartbeat.
        c.heartbeat("g", 2, &leader, None, 15_050).unwrap();
        c.tick(15_100);
        assert!(c.group("g").unwrap().members.contains_key(&follower));
        assert_eq!(c.state_of("g"), GroupState::Stable);
    }

    #[test]
    fn offsets_handed_to_another_nodes_transaction_are_pending_until_it_ends() {
        let mut c = Coordinator::new(config());
        let parts = || [("t", 0), ("t", 1)].into_iter();
        c.hold_remote_txn_offsets("g", parts(), 7, 100);
        assert!(c.remote_txn_pending("g", "t", 0, 200));
        assert!(!c.remote_txn_pending("g", "t", 2, 200));
        assert!(!c.remote_txn_pending("h", "t", 0, 200));
        // Another producer's abort releases nothing of this one's.
        c.release_remote_txn_offsets("g", parts(), Some(8));
        assert!(c.remote_txn_pending("g", "t", 1, 200));
        // Its abort releases them; a commit (whoever's) too.
        c.release_remote_txn_offsets("g", [("t", 0)].into_iter(), Some(7));
        assert!(!c.remote_txn_pending("g", "t", 0, 200));
        c.release_remote_txn_offsets("g", [("t", 1)].into_iter(), None);
        assert!(!c.remote_txn_pending("g", "t", 1, 200));
        // A hand-over that failed takes back only what it held: the previous transaction's
        // offsets stay pending...
        c.hold_remote_txn_offsets("g", [("t", 0)].into_iter(), 7, 100);
        let failed = c.hold_remote_txn_offsets("g", parts(), 9, 150);
        c.unhold_remote_txn_offsets(failed);
        assert!(
            c.remote_txn_pending("g", "t", 0, 200),
            "7's offset is still pending"
        );
        assert!(!c.remote_txn_pending("g", "t", 1, 200));
        // ...and one released meanwhile does not come back with it.
        let failed = c.hold_remote_txn_offsets("g", parts(), 9, 150);
        c.release_remote_txn_offsets("g", [("t", 0)].into_iter(), Some(7));
        assert!(c.remote_txn_pending("g", "t", 0, 200), "9 holds it");
        c.unhold_remote_txn_offsets(failed);
        assert!(!c.remote_txn_pending("g", "t", 0, 200));
        // Never told: forgotten after the longest transaction timeout, or when the group
        // moves to another coordinator.
        c.hold_remote_txn_offsets("g", parts(), 7, 100);
        assert!(!c.remote_txn_pending("g", "t", 0, 100 + REMOTE_TXN_OFFSETS_MAX_MS));
        c.unload(|g| g == "g");
        assert!(!c.remote_txn_pending("g", "t", 0, 200));
    }

    #[test]
    fn a_members_commit_keeps_its_session_alive() {
        let mut c = Coordinator::new(config());
        let a = stable_member(&mut c);
        // No heartbeat, but commits while it processes (a client without a heartbeat thread).
        assert_eq!(c.check_commit("g", 1, &a, None, &[], false), Ok(()));
        c.commit_heartbeat("g", &a, 9_000);
        c.tick(15_000);
        assert!(c.group("g").unwrap().members.contains_key(&a));
        c.tick(19_001);
        assert!(
            c.group("g").unwrap().members.is_empty(),
            "silent since: expired"
        );
    }

    #[test]
    fn a_follower_rejoining_a_stable_group_unchanged_gets_the_current_generation() {
        let (mut c, leader, follower) = two_joined_generation_2();
        let mut waiting = later(c.sync("g", 2, &follower, None, vec![]).0);
        let (reply, _) = c.sync("g", 2, &leader, None, vec![]);
        c.stored("g", 2, Ok(()), 20);
        later(reply).try_recv().unwrap();
        waiting.try_recv().unwrap();
        assert_eq!(c.state_of("g"), GroupState::Stable);
        let again = now(c.join(join_req(&follower, None), 30).0);
        assert_eq!((again.error, again.generation), (0, 2));
        assert_eq!(c.state_of("g"), GroupState::Stable, "no rebalance");
        // The leader rejoining does start one (it may have seen the topics change).
        let _pending = later(c.join(join_req(&leader, None), 40).0);
        assert_eq!(c.state_of("g"), GroupState::PreparingRebalance);
    }

    #[test]
    fn a_member_rejoining_unchanged_while_the_group_awaits_its_assignment_gets_the_generation() {
        let (mut c, leader, follower) = two_joined_generation_2();
        assert_eq!(c.state_of("g"), GroupState::CompletingRebalance);
        // The follower lost its JoinGroup answer and asks again: the same generation, no new
        // rebalance, and the leader's assignment still completes it.
        let again = now(c.join(join_req(&follower, None), 30).0);
        assert_eq!((again.error, again.generation), (0, 2));
        assert!(
            again.members.is_empty(),
            "a follower is not sent the members"
        );
        assert_eq!(c.state_of("g"), GroupState::CompletingRebalance);
        // So did the leader: it gets the members again, to assign.
        let again = now(c.join(join_req(&leader, None), 31).0);
        assert_eq!((again.error, again.generation), (0, 2));
        assert_eq!(again.leader, leader);
        assert_eq!(again.members.len(), 2);
        assert_eq!(c.state_of("g"), GroupState::CompletingRebalance);
        let mut waiting = later(c.sync("g", 2, &follower, None, vec![]).0);
        let assignments = vec![(follower.clone(), Bytes::from_static(b"f"))];
        let (reply, _) = sync_stored(&mut c, "g", 2, &leader, None, assignments);
        later(reply).try_recv().unwrap();
        assert_eq!(
            waiting.try_recv().unwrap().assignment,
            Bytes::from_static(b"f")
        );
        assert_eq!(c.state_of("g"), GroupState::Stable);
        // Changed metadata does start a rebalance, whatever the phase.
        let (mut c, _leader, follower) = two_joined_generation_2();
        let mut changed = join_req(&follower, None);
        changed.protocols = vec![("range".into(), Bytes::from_static(b"other topics"))];
        let _pending = later(c.join(changed, 30).0);
        assert_eq!(c.state_of("g"), GroupState::PreparingRebalance);
    }
}
