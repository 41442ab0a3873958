//! Consumer groups of the new rebalance protocol (KIP-848, `group.protocol=consumer`): members
//! send ConsumerGroupHeartbeat and the broker computes the assignment; no JoinGroup/SyncGroup
//! round, no stop-the-world rebalance.
//!
//! The group has an epoch, bumped whenever its members, their subscriptions or the partition
//! counts of the subscribed topics change. When the group epoch passes the assignment epoch, a
//! new target assignment is computed (the `uniform` assignor: sticky, balanced; or `range`).
//! Each member then moves towards its target in steps, one heartbeat at a time:
//! 1. partitions it owns but is no longer assigned are revoked first: the heartbeat answers
//!    its assignment without them and keeps its epoch until the member reports them released;
//! 2. then its epoch becomes the assignment epoch and it gets the new partitions, except those
//!    another member has not released yet, which follow on a later heartbeat.
//!
//! Each partition a member holds remembers the epoch it was given at (KIP-1251), so that a
//! commit carrying an older member epoch is still taken for partitions the member has held
//! since then: a client's commit may race with the heartbeat that bumped its epoch.
//!
//! A member that stops heartbeating for the session timeout, or does not release partitions
//! within its rebalance timeout, is removed. A static member (with an instance id) that leaves
//! with epoch -2, as a client closing for a restart does, stays with its assignment until its
//! session times out; a member joining under that instance id takes its place, epoch and
//! partitions, and the group does not rebalance (KIP-848, as on Kafka).
//!
//! The group is written to `__consumer_offsets` whenever it changes
//! ([`ConsumerGroup::to_record`], one record for the whole group), so a coordinator that
//! restarts or takes the group over knows its members, their epochs and assignments, and they
//! go on without rejoining.

use std::collections::{BTreeMap, BTreeSet};

use kafka_protocol::error::ResponseError;

use super::records::{ConsumerGroupRecord, ConsumerMemberRecord};

/// topic → partitions.
pub type Assignment = BTreeMap<String, BTreeSet<i32>>;

pub const LEAVE_EPOCH: i32 = -1;
pub const STATIC_LEAVE_EPOCH: i32 = -2;

/// What a ConsumerGroupHeartbeat asks, with topic ids already turned into names.
#[derive(Debug, Clone, Default)]
pub struct Heartbeat {
    pub group_id: String,
    pub member_id: String,
    pub member_epoch: i32,
    pub instance_id: Option<String>,
    pub rebalance_timeout_ms: i32,
    /// `None`: unchanged since the last heartbeat.
    pub subscribed_topic_names: Option<Vec<String>>,
    pub subscribed_topic_regex: Option<String>,
    pub server_assignor: Option<String>,
    /// What the member owns now; `None`: unchanged.
    pub owned: Option<Assignment>,
    pub client_id: String,
    pub client_host: String,
}

/// The answer to a heartbeat.
#[derive(Debug, Clone, PartialEq)]
pub struct HeartbeatReply {
    pub error: Option<(ResponseError, String)>,
    pub member_id: String,
    pub member_epoch: i32,
    /// `None`: unchanged since the last answer.
    pub assignment: Option<Assignment>,
}

impl HeartbeatReply {
    fn error(error: ResponseError, message: impl Into<String>, member_id: &str) -> Self {
        HeartbeatReply {
            error: Some((error, message.into())),
            member_id: member_id.to_string(),
            member_epoch: -1,
            assignment: None,
        }
    }
}

#[derive(Debug, Clone)]
pub struct Member {
    pub id: String,
    pub instance_id: Option<String>,
    pub client_id: String,
    pub client_host: String,
    pub epoch: i32,
    pub previous_epoch: i32,
    pub subscribed_topic_names: Vec<String>,
    pub subscribed_topic_regex: Option<regex::Regex>,
    pub server_assignor: Option<String>,
    pub rebalance_timeout_ms: i64,
    /// What the member may consume now.
    pub assigned: Assignment,
    /// Partitions taken from it that it has not yet reported released.
    pub revoking: Assignment,
    /// When it must have released `revoking`.
    pub revoke_deadline_ms: Option<i64>,
    /// The epoch at which each held (assigned or revoking) partition was given.
    pub assignment_epochs: BTreeMap<(String, i32), i32>,
    pub last_heartbeat_ms: i64,
    /// The assignment last sent, to answer `None` when it did not change.
    sent: Option<(i32, Assignment)>,
}

impl Member {
    /// Its partitions as (topic, partitions), in order.
    pub fn assigned_list(&self) -> Vec<(String, Vec<i32>)> {
        self.assigned
            .iter()
            .map(|(t, ps)| (t.clone(), ps.iter().copied().collect()))
            .collect()
    }

    fn subscribes_to(&self, topic: &str) -> bool {
        self.subscribed_topic_names.iter().any(|t| t == topic)
            || self
                .subscribed_topic_regex
                .as_ref()
                .is_some_and(|r| r.is_match(topic))
    }
}

#[derive(Debug, Clone, Default)]
pub struct ConsumerGroup {
    pub id: String,
    pub epoch: i32,
    pub assignment_epoch: i32,
    pub members: BTreeMap<String, Member>,
    /// The target assignment of each member at `assignment_epoch`.
    pub target: BTreeMap<String, Assignment>,
    /// Partition counts of the topics the members subscribe to, as last seen.
    subscribed_metadata: BTreeMap<String, i32>,
    /// The group's record as last written to the log (`None`: never written).
    written: Option<ConsumerGroupRecord>,
}

impl ConsumerGroup {
    /// Whether a member subscribes to `topic` (its committed offsets then do not expire).
    pub fn subscribes_to(&self, topic: &str) -> bool {
        self.members.values().any(|m| m.subscribes_to(topic))
    }

    /// The group's state as ListGroups and DescribeGroups name it.
    pub fn state(&self) -> &'static str {
        if self.members.is_empty() {
            "Empty"
        } else if self.assignment_epoch < self.epoch {
            "Assigning"
        } else if self
            .members
            .values()
            .filter(|m| m.epoch != STATIC_LEAVE_EPOCH)
            .any(|m| m.epoch != self.assignment_epoch || !m.revoking.is_empty())
        {
            "Reconciling"
        } else {
            "Stable"
        }
    }

    /// Every partition some member owns or has not yet released, except `but`'s.
    fn held_by_others(&self, but: &str) -> BTreeSet<(String, i32)> {
        self.members
            .values()
            .filter(|m| m.id != but)
            .flat_map(|m| pairs(&m.assigned).chain(pairs(&m.revoking)))
            .collect()
    }
}

fn pairs(a: &Assignment) -> impl Iterator<Item = (String, i32)> + '_ {
    a.iter()
        .flat_map(|(t, ps)| ps.iter().map(move |p| (t.clone(), *p)))
}

fn from_pairs(pairs: impl IntoIterator<Item = (String, i32)>) -> Assignment {
    let mut a = Assignment::new();
    for (t, p) in pairs {
        a.entry(t).or_default().insert(p);
    }
    a
}

fn minus(a: &Assignment, b: &Assignment) -> Assignment {
    from_pairs(pairs(a).filter(|(t, p)| !b.get(t).is_some_and(|s| s.contains(p))))
}

fn intersect(a: &Assignment, b: &Assignment) -> Assignment {
    from_pairs(pairs(a).filter(|(t, p)| b.get(t).is_some_and(|s| s.contains(p))))
}

/// The assignors the broker runs (KIP-848's server-side assignors).
pub const ASSIGNORS: [&str; 2] = ["uniform", "range"];

/// Settings of the new protocol (Kafka's `group.consumer.*`).
#[derive(Debug, Clone)]
pub struct ConsumerGroupConfig {
    pub session_timeout_ms: i64,
    pub heartbeat_interval_ms: i32,
}

impl Default for ConsumerGroupConfig {
    fn default() -> Self {
        ConsumerGroupConfig {
            session_timeout_ms: 45_000,
            heartbeat_interval_ms: 5_000,
        }
    }
}

impl ConsumerGroup {
    pub fn new(id: &str) -> ConsumerGroup {
        ConsumerGroup {
            id: id.to_string(),
            ..ConsumerGroup::default()
        }
    }

    /// One heartbeat. `partitions_of` gives a topic's partition count (None: no such topic);
    /// `topics` lists every topic (for regex subscriptions).
    pub fn heartbeat(
        &mut self,
        req: Heartbeat,
        partitions_of: &dyn Fn(&str) -> Option<i32>,
        topics: &dyn Fn() -> Vec<String>,
        now_ms: i64,
    ) -> HeartbeatReply {
        let id = req.member_id.clone();
        // A full heartbeat (every field set, as a client sends after a lost answer or an
        // error) always gets the assignment back, as on Kafka: the answer it missed may have
        // been a revocation, which it would otherwise never hear.
        let full = req.rebalance_timeout_ms != -1
            && (req.subscribed_topic_names.is_some() || req.subscribed_topic_regex.is_some())
            && req.owned.is_some();
        let static_leave = req.member_epoch == STATIC_LEAVE_EPOCH
            && self
                .members
                .get(&id)
                .is_some_and(|m| m.instance_id.is_some());
        if static_leave {
            if let Some(m) = self.members.get_mut(&id) {
                // It keeps its partitions for its session; those it was giving up count as
                // released (it consumes nothing now).
                for released in pairs(&m.revoking) {
                    m.assignment_epochs.remove(&released);
                }
                m.revoking.clear();
                m.revoke_deadline_ms = None;
                m.epoch = STATIC_LEAVE_EPOCH;
                m.previous_epoch = STATIC_LEAVE_EPOCH;
                m.last_heartbeat_ms = now_ms;
                m.sent = None;
            }
            return HeartbeatReply {
                error: None,
                member_id: id,
                member_epoch: STATIC_LEAVE_EPOCH,
                assignment: None,
            };
        }
        if req.member_epoch == LEAVE_EPOCH || req.member_epoch == STATIC_LEAVE_EPOCH {
            if self.members.remove(&id).is_some() {
                self.target.remove(&id);
                self.epoch += 1;
            }
            return HeartbeatReply {
                error: None,
                member_id: id,
                member_epoch: req.member_epoch,
                assignment: None,
            };
        }
        let regex = match req.subscribed_topic_regex.as_deref() {
            Some(r) if !r.is_empty() => match regex::Regex::new(&format!("^(?:{r})$")) {
                Ok(re) => Some(Some(re)),
                Err(e) => {
                    return HeartbeatReply::error(
                        ResponseError::InvalidRegularExpression,
                        format!("subscribed topic regex '{r}': {e}"),
                        &id,
                    )
                }
            },
            Some(_) => Some(None),
            None => None,
        };
        // A static member's instance id belongs to one member at a time, as on Kafka: another
        // member holding it that has not left makes a join UNRELEASED_INSTANCE_ID, and a
        // replaced member's heartbeats FENCED_INSTANCE_ID. Taking the place over would give
        // its partitions to the newcomer while the member holding them still consumes them,
        // and the two would evict each other in turn. One that left (epoch -2) is replaced.
        let mut replaced = None;
        if let Some(instance) = &req.instance_id {
            let holder = self.members.values().find(|m| {
                m.instance_id.as_ref() == Some(instance) && (m.id != id || req.member_epoch == 0)
            });
            let left = holder.is_some_and(|h| h.epoch == STATIC_LEAVE_EPOCH);
            if let (true, 0, Some(h)) = (left, req.member_epoch, holder) {
                replaced = Some(h.id.clone());
            } else if let Some(holder) = holder.filter(|h| h.id != id) {
                let error = if req.member_epoch == 0 {
                    ResponseError::UnreleasedInstanceId
                } else {
                    ResponseError::FencedInstanceId
                };
                let message = format!(
                    "instance id {instance} is held by member {} of group {}",
                    holder.id, self.id
                );
                return HeartbeatReply::error(error, message, &id);
            }
        }
        if let Some(old) = replaced.and_then(|old| self.members.remove(&old)) {
            // A static member back after its leave: the newcomer takes its place and those of
            // its partitions still in its target (the rest it never owned, so has nothing to
            // revoke: they are free at once), and reconciles to its target at the current
            // assignment epoch; its subscription as before changes nothing, so nobody else is
            // moved.
            let target = self.target.remove(&old.id).unwrap_or_default();
            let assigned = intersect(&old.assigned, &target);
            let mut assignment_epochs = old.assignment_epochs.clone();
            assignment_epochs.retain(|(t, p), _| assigned.get(t).is_some_and(|ps| ps.contains(p)));
            self.target.insert(id.clone(), target);
            self.members.insert(
                id.clone(),
                Member {
                    id: id.clone(),
                    client_id: req.client_id.clone(),
                    client_host: req.client_host.clone(),
                    epoch: 0,
                    previous_epoch: -1,
                    rebalance_timeout_ms: i64::from(req.rebalance_timeout_ms),
                    last_heartbeat_ms: now_ms,
                    sent: None,
                    assigned,
                    assignment_epochs,
                    revoking: Assignment::new(),
                    revoke_deadline_ms: None,
                    ..old
                },
            );
        } else if req.member_epoch == 0 {
            // A member (re)joins: it starts from nothing.
            self.members.insert(
                id.clone(),
                Member {
                    id: id.clone(),
                    instance_id: req.instance_id.clone(),
                    client_id: req.client_id.clone(),
                    client_host: req.client_host.clone(),
                    epoch: 0,
                    previous_epoch: -1,
                    subscribed_topic_names: Vec::new(),
                    subscribed_topic_regex: None,
                    server_assignor: None,
                    rebalance_timeout_ms: i64::from(req.rebalance_timeout_ms),
                    assigned: Assignment::new(),
                    revoking: Assignment::new(),
                    revoke_deadline_ms: None,
                    assignment_epochs: BTreeMap::new(),
                    last_heartbeat_ms: now_ms,
                    sent: None,
                },
            );
            self.epoch += 1;
        }
        let Some(member) = self.members.get_mut(&id) else {
            return HeartbeatReply::error(
                ResponseError::UnknownMemberId,
                format!("member {id} is not in group {}", self.id),
                &id,
            );
        };
        if req.member_epoch > 0 && req.member_epoch != member.epoch {
            let owned_within = req
                .owned
                .as_ref()
                .is_none_or(|o| minus(&minus(o, &member.assigned), &member.revoking).is_empty());
            if req.member_epoch != member.previous_epoch || !owned_within {
                return HeartbeatReply::error(
                    ResponseError::FencedMemberEpoch,
                    format!(
                        "member epoch {} is not the member's epoch {}",
                        req.member_epoch, member.epoch
                    ),
                    &id,
                );
            }
        }
        member.last_heartbeat_ms = now_ms;
        member.client_id = req.client_id.clone();
        member.client_host = req.client_host.clone();
        let mut changed = false;
        if let Some(names) = req.subscribed_topic_names {
            let mut names = names;
            names.sort();
            names.dedup();
            if names != member.subscribed_topic_names {
                member.subscribed_topic_names = names;
                changed = true;
            }
        }
        if let Some(regex) = regex {
            let before = member
                .subscribed_topic_regex
                .as_ref()
                .map(|r| r.as_str().to_string());
            let after = regex.as_ref().map(|r| r.as_str().to_string());
            if before != after {
                member.subscribed_topic_regex = regex;
                changed = true;
            }
        }
        if req.server_assignor.is_some() && req.server_assignor != member.server_assignor {
            member.server_assignor = req.server_assignor.clone();
            changed = true;
        }
        if req.rebalance_timeout_ms > 0 {
            member.rebalance_timeout_ms = i64::from(req.rebalance_timeout_ms);
        }
        // What the member reports owning tells which revocations it has completed.
        if let Some(owned) = &req.owned {
            if !member.revoking.is_empty() && intersect(owned, &member.revoking).is_empty() {
                for released in pairs(&member.revoking) {
                    member.assignment_epochs.remove(&released);
                }
                member.revoking.clear();
                member.revoke_deadline_ms = None;
            }
        }
        if changed {
            self.epoch += 1;
        }
        let metadata = self.subscription_metadata(partitions_of, topics);
        if metadata != self.subscribed_metadata {
            self.subscribed_metadata = metadata;
            self.epoch += 1;
        }
        if self.assignment_epoch < self.epoch {
            self.target = assign(self);
            self.assignment_epoch = self.epoch;
        }
        self.reconcile(&id, now_ms);
        let Some(member) = self.members.get_mut(&id) else {
            return HeartbeatReply::error(ResponseError::UnknownMemberId, "member left", &id);
        };
        let now = (member.epoch, member.assigned.clone());
        // Sent again when the member shows it missed an answer: it still names an older
        // epoch, or reports owning something else than it was given.
        let missed = full
            || req.member_epoch != member.epoch
            || req
                .owned
                .as_ref()
                .is_some_and(|o| o != &member.assigned && member.revoking.is_empty());
        let assignment = if member.sent.as_ref() == Some(&now) && !missed {
            None
        } else {
            member.sent = Some(now);
            Some(member.assigned.clone())
        };
        HeartbeatReply {
            error: None,
            member_id: id,
            member_epoch: member.epoch,
            assignment,
        }
    }

    /// Moves a member one step towards its target assignment (see the module doc).
    fn reconcile(&mut self, id: &str, now_ms: i64) {
        let target = self.target.get(id).cloned().unwrap_or_default();
        let held = self.held_by_others(id);
        let assignment_epoch = self.assignment_epoch;
        let Some(member) = self.members.get_mut(id) else {
            return;
        };
        if !member.revoking.is_empty() {
            return; // waiting for the member to release them
        }
        let revoke = minus(&member.assigned, &target);
        if !revoke.is_empty() {
            member.assigned = intersect(&member.assigned, &target);
            member.revoking = revoke;
            member.revoke_deadline_ms = Some(now_ms + member.rebalance_timeout_ms.max(1));
            return;
        }
        if member.epoch != assignment_epoch {
            member.previous_epoch = member.epoch;
            member.epoch = assignment_epoch;
        }
        let free: Vec<(String, i32)> = pairs(&minus(&target, &member.assigned))
            .filter(|p| !held.contains(p))
            .collect();
        for (t, p) in free {
            member
                .assignment_epochs
                .insert((t.clone(), p), member.epoch);
            member.assigned.entry(t).or_default().insert(p);
        }
    }

    fn subscription_metadata(
        &self,
        partitions_of: &dyn Fn(&str) -> Option<i32>,
        topics: &dyn Fn() -> Vec<String>,
    ) -> BTreeMap<String, i32> {
        let mut names: BTreeSet<String> = self
            .members
            .values()
            .flat_map(|m| m.subscribed_topic_names.iter().cloned())
            .collect();
        if self
            .members
            .values()
            .any(|m| m.subscribed_topic_regex.is_some())
        {
            for t in topics() {
                if self.members.values().any(|m| m.subscribes_to(&t)) {
                    names.insert(t);
                }
            }
        }
        names
            .into_iter()
            .filter_map(|t| partitions_of(&t).map(|n| (t, n)))
            .collect()
    }

    /// Removes members past their session timeout or their revocation deadline; returns
    /// their ids.
    pub fn expire(&mut self, config: &ConsumerGroupConfig, now_ms: i64) -> Vec<String> {
        let gone: Vec<String> = self
            .members
            .values()
            .filter(|m| {
                now_ms - m.last_heartbeat_ms > config.session_timeout_ms
                    || m.revoke_deadline_ms.is_some_and(|d| now_ms > d)
            })
            .map(|m| m.id.clone())
            .collect();
        for id in &gone {
            self.members.remove(id);
            self.target.remove(id);
        }
        if !gone.is_empty() {
            self.epoch += 1;
        }
        gone
    }

    /// Checks an offset commit's member and epoch (OffsetCommit v9+, TxnOffsetCommit) for
    /// `partitions`: an empty group takes commits from anyone, as Kafka's does; an older epoch
    /// is taken for partitions the member has held since that epoch (KIP-1251).
    pub fn check_commit(
        &self,
        member_id: &str,
        epoch: i32,
        partitions: &[(&str, i32)],
    ) -> Result<(), ResponseError> {
        if self.members.is_empty() && (member_id.is_empty() || epoch < 0) {
            return Ok(());
        }
        let Some(member) = self.members.get(member_id) else {
            return Err(ResponseError::UnknownMemberId);
        };
        if epoch == member.epoch {
            return Ok(());
        }
        let held_since_then = epoch < member.epoch
            && partitions.iter().all(|(t, p)| {
                member
                    .assignment_epochs
                    .get(&(t.to_string(), *p))
                    .is_some_and(|given| *given <= epoch)
            });
        if held_since_then {
            Ok(())
        } else {
            Err(ResponseError::StaleMemberEpoch)
        }
    }
}

impl ConsumerGroup {
    /// The group as it is written: everything but the members' times and the answers last
    /// sent to them.
    pub fn to_record(&self) -> ConsumerGroupRecord {
        ConsumerGroupRecord {
            group: self.id.clone(),
            epoch: self.epoch,
            assignment_epoch: self.assignment_epoch,
            members: self
                .members
                .values()
                .map(|m| ConsumerMemberRecord {
                    id: m.id.clone(),
                    instance_id: m.instance_id.clone(),
                    client_id: m.client_id.clone(),
                    client_host: m.client_host.clone(),
                    epoch: m.epoch,
                    previous_epoch: m.previous_epoch,
                    subscribed_topic_names: m.subscribed_topic_names.clone(),
                    subscribed_topic_regex: m
                        .subscribed_topic_regex
                        .as_ref()
                        .map(|r| r.as_str().to_string()),
                    server_assignor: m.server_assignor.clone(),
                    rebalance_timeout_ms: m.rebalance_timeout_ms,
                    assigned: m.assigned.clone(),
                    revoking: m.revoking.clone(),
                    assignment_epochs: m
                        .assignment_epochs
                        .iter()
                        .map(|((t, p), e)| (t.clone(), *p, *e))
                        .collect(),
                })
                .collect(),
            target: self.target.clone(),
            subscribed_metadata: self.subscribed_metadata.clone(),
        }
    }

    /// The group a record read back from the log describes. Its members' sessions, and the
    /// time they have to release what they are revoking, start at `now_ms`: they may have
    /// heartbeated to the previous coordinator until just before.
    pub fn restore(record: &ConsumerGroupRecord, now_ms: i64) -> ConsumerGroup {
        let members = record
            .members
            .iter()
            .map(|m| {
                let revoking = m.revoking.clone();
                let member = Member {
                    id: m.id.clone(),
                    instance_id: m.instance_id.clone(),
                    client_id: m.client_id.clone(),
                    client_host: m.client_host.clone(),
                    epoch: m.epoch,
                    previous_epoch: m.previous_epoch,
                    subscribed_topic_names: m.subscribed_topic_names.clone(),
                    // Written as compiled (anchored) from a regex that compiled; one that no
                    // longer does (another version of the crate) subscribes to nothing.
                    subscribed_topic_regex: m
                        .subscribed_topic_regex
                        .as_deref()
                        .and_then(|r| regex::Regex::new(r).ok()),
                    server_assignor: m.server_assignor.clone(),
                    rebalance_timeout_ms: m.rebalance_timeout_ms,
                    assigned: m.assigned.clone(),
                    revoke_deadline_ms: (!revoking.is_empty())
                        .then(|| now_ms + m.rebalance_timeout_ms.max(1)),
                    revoking,
                    assignment_epochs: m
                        .assignment_epochs
                        .iter()
                        .map(|(t, p, e)| ((t.clone(), *p), *e))
                        .collect(),
                    last_heartbeat_ms: now_ms,
                    sent: None,
                };
                (m.id.clone(), member)
            })
            .collect();
        ConsumerGroup {
            id: record.group.clone(),
            epoch: record.epoch,
            assignment_epoch: record.assignment_epoch,
            members,
            target: record.target.clone(),
            subscribed_metadata: record.subscribed_metadata.clone(),
            written: Some(record.clone()),
        }
    }

    /// The record to write if the group changed since its last one was written: the group,
    /// or a tombstone once it has no members (the caller then forgets it).
    pub fn unwritten(&self) -> Option<super::records::Record> {
        use super::records::Record;
        if self.members.is_empty() {
            return self
                .written
                .as_ref()
                .map(|_| Record::ConsumerGroupTombstone(self.id.clone()));
        }
        let record = self.to_record();
        (self.written.as_ref() != Some(&record)).then_some(Record::ConsumerGroup(record))
    }

    /// `record` was written to the log.
    pub fn wrote(&mut self, record: &ConsumerGroupRecord) {
        self.written = Some(record.clone());
    }

    /// The answer last computed for `member` did not reach it (its record was not written or
    /// not committed): its next heartbeat gets its assignment again, a revocation included.
    pub fn resend(&mut self, member: &str) {
        if let Some(m) = self.members.get_mut(member) {
            m.sent = None;
        }
    }

    /// The server-side assignor the group runs: the first member's choice, else `uniform`.
    pub fn assignor(&self) -> &str {
        self.members
            .values()
            .find_map(|m| m.server_assignor.as_deref())
            .unwrap_or(ASSIGNORS[0])
    }
}

/// The target assignment of every member at the group's current epoch.
fn assign(group: &ConsumerGroup) -> BTreeMap<String, Assignment> {
    let range = group.assignor() == "range";
    let mut target: BTreeMap<String, Assignment> = group
        .members
        .keys()
        .map(|id| (id.clone(), Assignment::new()))
        .collect();
    let mut count: BTreeMap<String, usize> = target.keys().map(|id| (id.clone(), 0)).collect();
    for (topic, &partitions) in &group.subscribed_metadata {
        let eligible: Vec<&Member> = group
            .members
            .values()
            .filter(|m| m.subscribes_to(topic))
            .collect();
        if eligible.is_empty() {
            continue;
        }
        if range {
            // Contiguous ranges in member-id order, the first members one more each.
            let n = eligible.len() as i32;
            let (per, extra) = (partitions / n, partitions % n);
            let mut next = 0;
            for (i, m) in eligible.iter().enumerate() {
                let take = per + i32::from((i as i32) < extra);
                if let Some(a) = target.get_mut(&m.id) {
                    a.entry(topic.clone())
                        .or_default()
                        .extend(next..next + take);
                }
                next += take;
            }
            continue;
        }
        // Uniform: sticky first (a partition stays with its owner while the owner is under
        // its fair share), then the rest to whoever has the fewest.
        let fair = (partitions as usize).div_ceil(eligible.len());
        let mut unassigned = Vec::new();
        for p in 0..partitions {
            let owner = eligible.iter().find(|m| {
                m.assigned.get(topic).is_some_and(|s| s.contains(&p))
                    || m.revoking.get(topic).is_some_and(|s| s.contains(&p))
            });
            let per_topic = |id: &str, target: &BTreeMap<String, Assignment>| {
                target
                    .get(id)
                    .and_then(|a| a.get(topic))
                    .map_or(0, BTreeSet::len)
            };
            match owner {
                Some(m) if per_topic(&m.id, &target) < fair => {
                    if let Some(a) = target.get_mut(&m.id) {
                        a.entry(topic.clone()).or_default().insert(p);
                    }
                    if let Some(c) = count.get_mut(&m.id) {
                        *c += 1;
                    }
                }
                _ => unassigned.push(p),
            }
        }
        for p in unassigned {
            let Some(m) = eligible.iter().min_by_key(|m| {
                let per_topic = target
                    .get(&m.id)
                    .and_then(|a| a.get(topic))
                    .map_or(0, BTreeSet::len);
                (
                    per_topic,
                    count.get(&m.id).copied().unwrap_or(0),
                    m.id.clone(),
                )
            }) else {
                continue;
            };
            if let Some(a) = target.get_mut(&m.id) {
                a.entry(topic.clone()).or_default().insert(p);
            }
            if let Some(c) = count.get_mut(&m.id) {
                *c += 1;
            }
        }
    }
    target
}

#[cfg(test)]
mod tests {
    use super::*;

    fn partitions_of(t: &str) -> Option<i32> {
        match t {
            "orders" => Some(6),
            "audit" => Some(2),
            _ => None,
        }
    }

    fn topics() -> Vec<String> {
        vec!["orders".into(), "audit".into()]
    }

    /// A heartbeat of dynamic member `member` at 1,000 ms.
    fn hb(
        g: &mut ConsumerGroup,
        member: &str,
        epoch: i32,
        owned: Option<Assignment>,
    ) -> HeartbeatReply {
        beat_at(g, member, None, epoch, owned, 1_000)
    }

    fn count(a: &Assignment) -> usize {
        a.values().map(BTreeSet::len).sum()
    }

    #[test]
    fn members_share_partitions_and_revoke_before_others_take_them() {
        let mut g = ConsumerGroup::new("g");
        let a = hb(&mut g, "a", 0, None);
        assert_eq!(a.error, None);
        let a_assigned = a.assignment.expect("an assignment");
        assert_eq!(count(&a_assigned), 6, "alone, it gets all six");
        assert_eq!(g.state(), "Stable");

        // b joins: a must give up three before b gets them.
        let b = hb(&mut g, "b", 0, None);
        assert_eq!(
            count(&b.assignment.clone().unwrap_or_default()),
            0,
            "nothing free yet"
        );
        assert_eq!(g.state(), "Reconciling");
        let a2 = hb(&mut g, "a", a.member_epoch, Some(a_assigned.clone()));
        let kept = a2.assignment.expect("a's reduced assignment");
        assert_eq!(count(&kept), 3);
        assert_eq!(
            a2.member_epoch, a.member_epoch,
            "epoch held until it releases"
        );
        // a releases; it moves to the new epoch; b then gets the three.
        let a3 = hb(&mut g, "a", a.member_epoch, Some(kept.clone()));
        assert!(a3.member_epoch > a.member_epoch);
        let b2 = hb(&mut g, "b", b.member_epoch, Some(Assignment::new()));
        let b_assigned = b2.assignment.expect("b's partitions");
        assert_eq!(count(&b_assigned), 3);
        assert!(
            intersect(&kept, &b_assigned).is_empty(),
            "no partition twice"
        );
        assert_eq!(g.state(), "Stable");

        // A stale epoch is fenced; an unknown member is unknown; leaving rebalances.
        let stale = hb(&mut g, "b", b2.member_epoch + 5, None);
        assert_eq!(
            stale.error.map(|e| e.0),
            Some(ResponseError::FencedMemberEpoch)
        );
        let unknown = hb(&mut g, "zed", 3, None);
        assert_eq!(
            unknown.error.map(|e| e.0),
            Some(ResponseError::UnknownMemberId)
        );
        assert_eq!(hb(&mut g, "b", LEAVE_EPOCH, None).member_epoch, LEAVE_EPOCH);
        let a4 = hb(&mut g, "a", a3.member_epoch, Some(kept));
        assert_eq!(count(&a4.assignment.expect("all again")), 6);
    }

    #[test]
    fn commits_check_member_and_epoch() {
        let mut g = ConsumerGroup::new("g");
        let a = hb(&mut g, "a", 0, None);
        let first = a.member_epoch;
        let p0 = [("orders", 0)];
        assert_eq!(g.check_commit("a", first, &p0), Ok(()));
        assert_eq!(
            g.check_commit("a", first + 1, &p0),
            Err(ResponseError::StaleMemberEpoch)
        );
        assert_eq!(
            g.check_commit("x", 1, &p0),
            Err(ResponseError::UnknownMemberId)
        );
        assert_eq!(
            g.check_commit("", -1, &p0),
            Err(ResponseError::UnknownMemberId)
        );
        // b joins and a gives up half: a's epoch moves on, yet a commit with its first epoch
        // is taken for a partition it has kept since then, and refused for one it gave up.
        hb(&mut g, "b", 0, None);
        let owned = g.members["a"].assigned.clone();
        hb(&mut g, "a", first, Some(owned));
        let kept = g.members["a"].assigned.clone();
        let a2 = hb(&mut g, "a", first, Some(kept.clone()));
        assert!(a2.member_epoch > first);
        let kept_orders = kept["orders"].clone();
        let kept_p = *kept_orders.iter().next().expect("a keeps some");
        assert_eq!(g.check_commit("a", first, &[("orders", kept_p)]), Ok(()));
        let given_up = (0..6)
            .find(|p| !kept_orders.contains(p))
            .expect("one given up");
        assert_eq!(
            g.check_commit("a", first, &[("orders", given_up)]),
            Err(ResponseError::StaleMemberEpoch)
        );
        hb(&mut g, "a", LEAVE_EPOCH, None);
        hb(&mut g, "b", LEAVE_EPOCH, None);
        assert_eq!(
            g.check_commit("", -1, &p0),
            Ok(()),
            "an empty group takes anyone's commits"
        );
    }

    #[test]
    fn a_member_that_missed_an_answer_gets_its_assignment_again() {
        let mut g = ConsumerGroup::new("g");
        let a = hb(&mut g, "a", 0, None);
        let given = a.assignment.expect("first assignment");
        let same = hb(&mut g, "a", a.member_epoch, Some(given.clone()));
        assert_eq!(same.assignment, None, "unchanged: not repeated");
        // The member reports owning nothing (it lost the answer and rejoined its state).
        let again = hb(&mut g, "a", a.member_epoch, Some(Assignment::new()));
        assert_eq!(again.assignment, Some(given));
    }

    #[test]
    fn a_static_members_instance_id_is_held_by_one_member_at_a_time() {
        let mut g = ConsumerGroup::new("g");
        let static_hb = |g: &mut ConsumerGroup, member: &str, epoch: i32| {
            beat_at(g, member, Some("i1"), epoch, None, 1_000)
        };
        let a = static_hb(&mut g, "a", 0);
        assert_eq!(a.error, None);
        // A second process with the same instance id, while `a` is live: refused, and `a`
        // keeps its partitions.
        let b = static_hb(&mut g, "b", 0);
        assert_eq!(
            b.error.map(|e| e.0),
            Some(ResponseError::UnreleasedInstanceId)
        );
        assert!(g.members.contains_key("a") && !g.members.contains_key("b"));
        assert_eq!(static_hb(&mut g, "a", a.member_epoch).error, None);
        // Once `a` has left (a static leave), the instance id is free.
        static_hb(&mut g, "a", STATIC_LEAVE_EPOCH);
        assert_eq!(static_hb(&mut g, "b", 0).error, None);
        // The replaced member's heartbeat is fenced.
        let stale = static_hb(&mut g, "a", a.member_epoch);
        assert_eq!(
            stale.error.map(|e| e.0),
            Some(ResponseError::FencedInstanceId)
        );
    }

    /// A heartbeat of `member` (static under `instance`) at `now_ms`.
    fn beat_at(
        g: &mut ConsumerGroup,
        member: &str,
        instance: Option<&str>,
        epoch: i32,
        owned: Option<Assignment>,
        now_ms: i64,
    ) -> HeartbeatReply {
        let req = Heartbeat {
            group_id: g.id.clone(),
            member_id: member.into(),
            member_epoch: epoch,
            instance_id: instance.map(String::from),
            rebalance_timeout_ms: 30_000,
            subscribed_topic_names: (epoch == 0).then(|| vec!["orders".to_string()]),
            owned,
            ..Heartbeat::default()
        };
        g.heartbeat(req, &partitions_of, &topics, now_ms)
    }

    /// Heartbeats `members` (id, instance id) in turn, each reporting what it was last given,
    /// until the group is stable; returns each member's epoch and partitions.
    fn settle(
        g: &mut ConsumerGroup,
        members: &[(&str, Option<&str>)],
        now_ms: i64,
    ) -> BTreeMap<String, (i32, Assignment)> {
        let mut held: BTreeMap<String, (i32, Assignment)> = BTreeMap::new();
        for (m, _) in members {
            let m = &g.members[*m];
            held.insert(m.id.clone(), (m.epoch, m.assigned.clone()));
        }
        for _ in 0..10 {
            for (m, instance) in members {
                let (epoch, owned) = held[*m].clone();
                let r = beat_at(g, m, *instance, epoch, Some(owned.clone()), now_ms);
                assert_eq!(r.error, None);
                held.insert(
                    m.to_string(),
                    (r.member_epoch, r.assignment.unwrap_or(owned)),
                );
            }
        }
        assert_eq!(g.state(), "Stable");
        held
    }

    /// Static member `a` (instance `i1`) and dynamic member `c`, settled at time 0: the
    /// group, and each member's epoch and partitions.
    fn static_a_and_dynamic_c() -> (ConsumerGroup, BTreeMap<String, (i32, Assignment)>) {
        let mut g = ConsumerGroup::new("g");
        beat_at(&mut g, "a", Some("i1"), 0, None, 0);
        beat_at(&mut g, "c", None, 0, None, 0);
        let held = settle(&mut g, &[("a", Some("i1")), ("c", None)], 0);
        (g, held)
    }

    #[test]
    fn a_static_member_that_leaves_keeps_its_partitions_for_its_return() {
        let (mut g, held) = static_a_and_dynamic_c();
        let (a_parts, c_parts) = (held["a"].1.clone(), held["c"].1.clone());
        assert_eq!((count(&a_parts), count(&c_parts)), (3, 3));
        let epoch = g.epoch;
        // `a` closes for a restart (a static leave): the group does not rebalance.
        let left = beat_at(&mut g, "a", Some("i1"), STATIC_LEAVE_EPOCH, None, 1_000);
        assert_eq!((left.error, left.member_epoch), (None, STATIC_LEAVE_EPOCH));
        assert_eq!((g.epoch, g.state()), (epoch, "Stable"));
        let c = beat_at(&mut g, "c", None, held["c"].0, Some(c_parts.clone()), 1_000);
        assert!(
            c.assignment.is_none_or(|a| a == c_parts),
            "c is given nothing of a's"
        );
        // Its next process joins under the same instance id: it gets a's partitions at once.
        let b = beat_at(&mut g, "b", Some("i1"), 0, Some(Assignment::new()), 2_000);
        assert_eq!(b.error, None);
        assert_eq!(b.assignment, Some(a_parts));
        assert_eq!((b.member_epoch, g.epoch), (g.assignment_epoch, epoch));
        assert!(!g.members.contains_key("a"), "replaced");
        // The old process's heartbeat is fenced.
        let stale = beat_at(&mut g, "a", Some("i1"), held["a"].0, None, 2_000);
        assert_eq!(
            stale.error.map(|e| e.0),
            Some(ResponseError::FencedInstanceId)
        );
    }

    #[test]
    fn a_static_member_back_after_the_group_changed_takes_its_new_share_at_once() {
        let (mut g, held) = static_a_and_dynamic_c();
        beat_at(&mut g, "a", Some("i1"), STATIC_LEAVE_EPOCH, None, 1_000);
        // While `a` is away a third member joins: a's target shrinks to two partitions.
        beat_at(&mut g, "d", None, 0, None, 1_500);
        beat_at(
            &mut g,
            "c",
            None,
            held["c"].0,
            Some(held["c"].1.clone()),
            1_500,
        );
        let b = beat_at(&mut g, "b", Some("i1"), 0, Some(Assignment::new()), 2_000);
        assert_eq!(b.error, None);
        assert_eq!(
            b.member_epoch, g.assignment_epoch,
            "nothing to revoke: it never owned what it no longer gets"
        );
        let given = b.assignment.expect("b's partitions");
        assert_eq!(count(&given), 2);
        assert_eq!(
            intersect(&given, &held["a"].1),
            given,
            "a subset of a's: none moved"
        );
        assert!(g.members["b"].revoking.is_empty());
    }

    #[test]
    fn a_static_member_that_left_and_does_not_return_goes_at_its_session_timeout() {
        let (mut g, held) = static_a_and_dynamic_c();
        beat_at(&mut g, "a", Some("i1"), STATIC_LEAVE_EPOCH, None, 1_000);
        let config = ConsumerGroupConfig::default();
        beat_at(
            &mut g,
            "c",
            None,
            held["c"].0,
            Some(held["c"].1.clone()),
            40_000,
        );
        assert!(g
            .expire(&config, 1_000 + config.session_timeout_ms)
            .is_empty());
        assert_eq!(
            g.expire(&config, 1_001 + config.session_timeout_ms),
            vec!["a".to_string()]
        );
        let held = settle(&mut g, &[("c", None)], 46_002);
        assert_eq!(count(&held["c"].1), 6, "c takes a's partitions");
    }

    /// Member `a` alone, then `b` joins: `a` is told to give partitions up. Returns the group,
    /// `a`'s epoch, what `a` was first given and the reduced assignment it was just sent.
    fn revoking_a_partition_of_a() -> (ConsumerGroup, i32, Assignment, Assignment) {
        let mut g = ConsumerGroup::new("g");
        let a = hb(&mut g, "a", 0, None);
        let given = a.assignment.expect("first assignment");
        hb(&mut g, "b", 0, None);
        let revoked = hb(&mut g, "a", a.member_epoch, Some(given.clone()));
        let kept = revoked.assignment.expect("a's reduced assignment");
        (g, a.member_epoch, given, kept)
    }

    #[test]
    fn a_full_heartbeat_after_a_lost_revocation_gets_it_again() {
        let (mut g, epoch, given, kept) = revoking_a_partition_of_a();
        // The answer is lost; the client sends a full heartbeat (every field), as the Java
        // client and librdkafka do after a timeout, still owning everything.
        let full = Heartbeat {
            group_id: "g".into(),
            member_id: "a".into(),
            member_epoch: epoch,
            rebalance_timeout_ms: 30_000,
            subscribed_topic_names: Some(vec!["orders".to_string()]),
            owned: Some(given),
            ..Heartbeat::default()
        };
        let again = g.heartbeat(full, &partitions_of, &topics, 1_000);
        assert_eq!(again.assignment, Some(kept));
    }

    #[test]
    fn a_revocation_whose_answer_was_replaced_by_an_error_is_sent_again() {
        let (mut g, epoch, given, kept) = revoking_a_partition_of_a();
        // Same epoch, still revoking, still owning everything: nothing tells the group that
        // a never heard the answer, so it is not repeated...
        let silent = hb(&mut g, "a", epoch, Some(given.clone()));
        assert_eq!(silent.assignment, None);
        // ...unless the handler says the answer was lost (its record was not committed).
        g.resend("a");
        let again = hb(&mut g, "a", epoch, Some(given));
        assert_eq!(again.assignment, Some(kept));
    }

    #[test]
    fn silent_members_and_slow_revokers_are_removed() {
        let mut g = ConsumerGroup::new("g");
        let config = ConsumerGroupConfig::default();
        hb(&mut g, "a", 0, None);
        hb(&mut g, "b", 0, None);
        assert!(g
            .expire(&config, 1_000 + config.session_timeout_ms)
            .is_empty());
        let gone = g.expire(&config, 1_001 + config.session_timeout_ms);
        assert_eq!(gone.len(), 2);
        assert_eq!(g.state(), "Empty");
    }

    #[test]
    fn range_and_regex_subscriptions() {
        let mut g = ConsumerGroup::new("g");
        let join = |g: &mut ConsumerGroup, id: &str| {
            g.heartbeat(
                Heartbeat {
                    member_id: id.into(),
                    rebalance_timeout_ms: 1_000,
                    subscribed_topic_regex: Some("ord.*|aud.t".into()),
                    server_assignor: Some("range".into()),
                    ..Heartbeat::default()
                },
                &partitions_of,
                &topics,
                1_000,
            )
        };
        let a = join(&mut g, "a");
        let a_all = a.assignment.expect("assignment");
        assert_eq!(a_all.keys().collect::<Vec<_>>(), ["audit", "orders"]);
        join(&mut g, "b");
        assert_eq!(
            g.target["a"]["orders"].iter().copied().collect::<Vec<_>>(),
            vec![0, 1, 2],
            "range: a contiguous half"
        );
        let bad = g.heartbeat(
            Heartbeat {
                member_id: "c".into(),
                subscribed_topic_regex: Some("(".into()),
                ..Heartbeat::default()
            },
            &partitions_of,
            &topics,
            1_000,
        );
        assert_eq!(
            bad.error.map(|e| e.0),
            Some(ResponseError::InvalidRegularExpression)
        );
    }
}
