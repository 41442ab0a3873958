//! The controller: the metadata leader's decisions, as records to append.
//!
//! It takes events — a node registering or heartbeating, time passing, a leader asking to
//! change its ISR (AlterPartition, KIP-497), a topic to create — and returns the records that
//! carry the decision out, computed against the *applied* metadata state. The runtime appends
//! them to the metadata log and waits for them to be committed and applied before it asks the
//! controller anything else, so two decisions never race on one partition; if one did, the
//! partition epoch in each change would make the second fail to apply on every node alike.
//!
//! Liveness is the controller's own memory (last heartbeat per node), not the log: a new
//! controller gives every node a full session timeout before fencing it.

use std::collections::BTreeMap;

use uuid::Uuid;

use crate::assignment::{assigned_partitions, AssignmentError};
use crate::ids::LeaderEpoch;
use crate::ids::{NodeId, PartitionEpoch};
use crate::metadata::{ClusterState, MetadataRecord, NodeRegistration, PartitionChange, TopicInfo};
use crate::placement::{self, PlacementError};

#[derive(Debug, Clone)]
pub struct ControllerConfig {
    /// A node silent this long is fenced.
    pub session_timeout_ms: i64,
    /// Producer ids handed to a node at a time.
    pub producer_id_block: i64,
    /// Leadership goes back to preferred replicas this often (0: never by itself).
    pub leader_balance_interval_ms: i64,
}

impl Default for ControllerConfig {
    fn default() -> Self {
        ControllerConfig {
            session_timeout_ms: 1_000,
            producer_id_block: 1_000,
            leader_balance_interval_ms: 30_000,
        }
    }
}

/// Why an AlterPartition is refused; each maps to a Kafka error code in the broker.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AlterPartitionError {
    #[error("unknown topic or partition")]
    UnknownTopicOrPartition,
    #[error("node {0} does not lead this partition")]
    NotLeader(NodeId),
    #[error("leader epoch {got:?} is not the current {current:?}")]
    FencedLeaderEpoch {
        got: LeaderEpoch,
        current: LeaderEpoch,
    },
    #[error("partition epoch {got:?} is not the current {current:?}")]
    InvalidUpdateVersion {
        got: PartitionEpoch,
        current: PartitionEpoch,
    },
    #[error("ISR {0:?} must be distinct replicas including the leader")]
    InvalidIsr(Vec<NodeId>),
    #[error("node {0} is fenced and cannot join the ISR")]
    IneligibleReplica(NodeId),
}

/// What a preferred-leader election did to one partition.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum Election {
    /// Its preferred replica leads it now.
    Elected,
    /// Its preferred replica led it already.
    NotNeeded,
    /// Its preferred replica is down or not in sync: the leader stays.
    PreferredNotAvailable,
    /// An unclean election found no live replica to lead.
    NoLiveReplica,
    UnknownPartition,
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CreateTopicError {
    #[error("topic {0} already exists")]
    Exists(String),
    #[error("a topic needs at least one partition, not {0}")]
    InvalidPartitions(i32),
    #[error(transparent)]
    Placement(#[from] PlacementError),
    #[error(transparent)]
    Assignment(#[from] AssignmentError),
}

#[derive(Debug)]
pub struct Controller {
    config: ControllerConfig,
    last_heartbeat_ms: BTreeMap<NodeId, i64>,
    last_balance_ms: i64,
}

impl Controller {
    /// A controller that has just taken over at `now_ms`: every registered node starts a
    /// fresh session.
    pub fn new(config: ControllerConfig, state: &ClusterState, now_ms: i64) -> Controller {
        let last_heartbeat_ms = state.nodes.keys().map(|n| (*n, now_ms)).collect();
        Controller {
            config,
            last_heartbeat_ms,
            last_balance_ms: now_ms,
        }
    }

    /// A node (re)starts: it is registered and unfenced, and partitions left without a leader
    /// whose ISR it is in get it as leader.
    pub fn register(
        &mut self,
        state: &ClusterState,
        registration: NodeRegistration,
        now_ms: i64,
    ) -> Vec<MetadataRecord> {
        let node = registration.node;
        self.last_heartbeat_ms.insert(node, now_ms);
        let known = state.nodes.get(&node);
        let unchanged = known.is_some_and(|n| !n.fenced && n.registration == registration);
        let replaced = known
            .and_then(|n| n.registration.directory)
            .is_some_and(|old| registration.directory.is_some_and(|new| new != old));
        let restarted =
            known.is_some_and(|n| n.registration.incarnation != registration.incarnation);
        let mut records = Vec::new();
        if !unchanged {
            records.push(MetadataRecord::RegisterNode(registration));
        }
        if replaced {
            records.extend(storage_replaced(state, node));
            return records;
        }
        // A restarted process (a new incarnation) that still leads — its fencing had not come
        // yet — leads on in a new epoch: it may have lost what no fsync covered, and may write
        // other records at those offsets; a new epoch makes every follower find where its log
        // diverges instead of taking them as the same records (found by the simulation).
        for (topic, index, p) in state.partitions() {
            if restarted && p.leader == Some(node) {
                records.push(MetadataRecord::ChangePartition {
                    topic: topic.id,
                    partition: index,
                    change: PartitionChange {
                        leader_epoch: p.leader_epoch.next(),
                        partition_epoch: p.partition_epoch.next(),
                        ..p.clone()
                    },
                });
            } else if p.leader.is_none() && p.isr.contains(&node) {
                // The other members that are still fenced leave the ISR now that it has a
                // leader again; they rejoin once they catch up.
                let isr = p
                    .isr
                    .iter()
                    .copied()
                    .filter(|r| *r == node || state.is_live(*r))
                    .collect();
                records.push(change(topic.id, index, p, Some(node), isr));
            }
        }
        records
    }

    /// A node is alive. Returns whether it is registered and unfenced in this `incarnation`;
    /// a fenced node must register again (it may have missed its own fencing), and so must a
    /// restarted process that its fencing has not reached yet.
    pub fn heartbeat(
        &mut self,
        state: &ClusterState,
        node: NodeId,
        incarnation: Option<Uuid>,
        now_ms: i64,
    ) -> bool {
        let registered = state
            .nodes
            .get(&node)
            .is_some_and(|n| incarnation.is_none_or(|i| i == n.registration.incarnation));
        if !registered || !state.is_live(node) {
            return false;
        }
        self.last_heartbeat_ms.insert(node, now_ms);
        true
    }

    /// Ends `node`'s session now (its process is gone: nothing listens on its internal
    /// listener), so that the next tick fences it without waiting for the session timeout.
    pub fn expire(&mut self, node: NodeId) {
        self.last_heartbeat_ms.insert(node, i64::MIN);
    }

    /// Fences the nodes whose session expired, with the partition changes that follow.
    pub fn tick(&mut self, state: &ClusterState, now_ms: i64) -> Vec<MetadataRecord> {
        let expired: Vec<NodeId> = state
            .live_nodes()
            .map(|n| n.registration.node)
            .filter(|n| {
                let last = self.last_heartbeat_ms.get(n).copied().unwrap_or(i64::MIN);
                now_ms.saturating_sub(last) > self.config.session_timeout_ms
            })
            .collect();
        let mut records = Vec::new();
        for node in &expired {
            records.push(MetadataRecord::FenceNode { node: *node });
        }
        if expired.is_empty() {
            let interval = self.config.leader_balance_interval_ms;
            if interval > 0 && now_ms.saturating_sub(self.last_balance_ms) >= interval {
                self.last_balance_ms = now_ms;
                return self.balance_leaders(state);
            }
            return records;
        }
        let live = |n: NodeId| state.is_live(n) && !expired.contains(&n);
        for (topic, index, p) in state.partitions() {
            if !p.isr.iter().any(|r| expired.contains(r)) {
                continue;
            }
            let remaining: Vec<NodeId> = p
                .isr
                .iter()
                .copied()
                .filter(|r| !expired.contains(r))
                .collect();
            // When the last in-sync replicas go, they stay in the ISR: they hold every
            // committed record, so only they may lead again (the first to come back leads).
            let isr = if remaining.is_empty() {
                p.isr.clone()
            } else {
                remaining
            };
            let probe = PartitionChange {
                isr: isr.clone(),
                ..p.clone()
            };
            let leader = match p.leader {
                Some(l) if live(l) => Some(l),
                _ => placement::choose_leader(&probe, live),
            };
            records.push(change(topic.id, index, p, leader, isr));
        }
        records
    }

    /// A leader's request to change its ISR (shrink a lagging follower out, take a caught-up
    /// one in).
    #[allow(clippy::too_many_arguments)]
    pub fn alter_partition(
        &self,
        state: &ClusterState,
        requester: NodeId,
        topic: Uuid,
        partition: i32,
        leader_epoch: LeaderEpoch,
        partition_epoch: PartitionEpoch,
        isr: Vec<NodeId>,
    ) -> Result<Vec<MetadataRecord>, AlterPartitionError> {
        let p = state
            .partition(topic, partition)
            .map_err(|_| AlterPartitionError::UnknownTopicOrPartition)?;
        if p.leader != Some(requester) {
            return Err(AlterPartitionError::NotLeader(requester));
        }
        if leader_epoch != p.leader_epoch {
            return Err(AlterPartitionError::FencedLeaderEpoch {
                got: leader_epoch,
                current: p.leader_epoch,
            });
        }
        if partition_epoch != p.partition_epoch {
            return Err(AlterPartitionError::InvalidUpdateVersion {
                got: partition_epoch,
                current: p.partition_epoch,
            });
        }
        let distinct = isr.iter().enumerate().all(|(i, r)| !isr[..i].contains(r));
        if !distinct || !isr.contains(&requester) || isr.iter().any(|r| !p.replicas.contains(r)) {
            return Err(AlterPartitionError::InvalidIsr(isr));
        }
        if let Some(fenced) = isr
            .iter()
            .find(|r| !p.isr.contains(r) && !state.is_live(**r))
        {
            return Err(AlterPartitionError::IneligibleReplica(*fenced));
        }
        if isr == p.isr {
            return Ok(Vec::new());
        }
        // The last target replica of a reassignment joins the ISR: the move completes.
        let probe = PartitionChange {
            isr: isr.clone(),
            ..p.clone()
        };
        if let Some(done) = crate::reassignment::completed(state, &probe) {
            return Ok(vec![MetadataRecord::ChangePartition {
                topic,
                partition,
                change: done,
            }]);
        }
        Ok(vec![change(topic, partition, p, p.leader, isr)])
    }

    /// A new topic: its replicas placed over the live nodes; each partition led by its
    /// preferred replica, with every replica in sync (they are all empty).
    pub fn create_topic(
        &self,
        state: &ClusterState,
        name: &str,
        id: Uuid,
        partitions: i32,
        replication_factor: i32,
        configs: BTreeMap<String, String>,
    ) -> Result<Vec<MetadataRecord>, CreateTopicError> {
        if state.names.contains_key(name) {
            return Err(CreateTopicError::Exists(name.to_string()));
        }
        let count = usize::try_from(partitions)
            .ok()
            .filter(|c| *c >= 1)
            .ok_or(CreateTopicError::InvalidPartitions(partitions))?;
        let partitions = new_partitions(state, count, replication_factor)?;
        Ok(vec![MetadataRecord::CreateTopic {
            name: name.to_string(),
            id,
            configs,
            partitions,
        }])
    }

    /// A new topic whose replicas the request names (see [`crate::assignment`]).
    pub fn create_topic_assigned(
        &self,
        state: &ClusterState,
        name: &str,
        id: Uuid,
        assignment: &[Vec<NodeId>],
        configs: BTreeMap<String, String>,
    ) -> Result<Vec<MetadataRecord>, CreateTopicError> {
        if state.names.contains_key(name) {
            return Err(CreateTopicError::Exists(name.to_string()));
        }
        let partitions = assigned_partitions(state, 0, assignment, None)?;
        Ok(vec![MetadataRecord::CreateTopic {
            name: name.to_string(),
            id,
            configs,
            partitions,
        }])
    }

    /// Moves leadership back to each partition's preferred replica where it is in sync and
    /// live (never to a replica still catching up: it would not be in the ISR).
    pub fn balance_leaders(&self, state: &ClusterState) -> Vec<MetadataRecord> {
        self.elect_preferred(state, None).0
    }

    /// ElectLeaders (preferred): leadership of each named partition (every partition when
    /// `partitions` is `None`) moves to its preferred replica where that is live and in sync.
    /// Returns the records and the outcome per partition; asked for every partition, those
    /// already led by their preferred replica are left out, as Kafka does.
    pub fn elect_preferred(
        &self,
        state: &ClusterState,
        partitions: Option<&[(String, i32)]>,
    ) -> (Vec<MetadataRecord>, Vec<(String, i32, Election)>) {
        let mut records = Vec::new();
        let mut outcomes = Vec::new();
        let mut decide = |topic: &TopicInfo, index: i32, p: &PartitionChange| {
            let outcome = match p.replicas.first().copied() {
                Some(n) if p.leader == Some(n) => Election::NotNeeded,
                Some(n) if p.isr.contains(&n) && state.is_live(n) => {
                    records.push(change(topic.id, index, p, Some(n), p.isr.clone()));
                    Election::Elected
                }
                _ => Election::PreferredNotAvailable,
            };
            (topic.name.clone(), index, outcome)
        };
        match partitions {
            None => {
                for (topic, index, p) in state.partitions() {
                    let outcome = decide(topic, index, p);
                    if outcome.2 != Election::NotNeeded {
                        outcomes.push(outcome);
                    }
                }
            }
            Some(named) => {
                for (name, index) in named {
                    outcomes.push(match state.partition_by_name(name, *index) {
                        Some((topic, p)) => decide(topic, *index, p),
                        None => (name.clone(), *index, Election::UnknownPartition),
                    });
                }
            }
        }
        (records, outcomes)
    }

    /// ElectLeaders (unclean), asked by an operator: each named partition without a leader
    /// is led by the first of its `candidates` that is a live replica, in sync or not, alone
    /// in its ISR (the asking broker orders them by how much of the log they hold). Records
    /// the lost in-sync replicas had and it lacks are gone: this is the way back for a
    /// partition whose in-sync replicas are lost for good (a wiped disk), never made on the
    /// controller's own initiative.
    pub fn elect_unclean(
        &self,
        state: &ClusterState,
        partitions: &[(String, i32, Vec<NodeId>)],
    ) -> (Vec<MetadataRecord>, Vec<(String, i32, Election)>) {
        let mut records = Vec::new();
        let mut outcomes = Vec::new();
        for (name, index, candidates) in partitions {
            let outcome = match state.partition_by_name(name, *index) {
                None => Election::UnknownPartition,
                Some((_, p)) if p.leader.is_some() => Election::NotNeeded,
                Some((topic, p)) => match candidates
                    .iter()
                    .copied()
                    .find(|r| p.replicas.contains(r) && state.is_live(*r))
                {
                    Some(leader) => {
                        tracing::warn!(
                            topic = %name,
                            partition = index,
                            leader = leader.0,
                            isr = ?p.isr,
                            "unclean election: records only the lost in-sync replicas had are gone"
                        );
                        records.push(change(topic.id, *index, p, Some(leader), vec![leader]));
                        Election::Elected
                    }
                    None => Election::NoLiveReplica,
                },
            };
            outcomes.push((name.clone(), *index, outcome));
        }
        (records, outcomes)
    }

    /// The next block of producer ids for `node`.
    pub fn producer_ids(&self, state: &ClusterState, node: NodeId) -> MetadataRecord {
        MetadataRecord::ProducerIds {
            node,
            first: state.next_producer_id,
            count: self.config.producer_id_block,
        }
    }
}

/// `count` new partitions placed over the live nodes, each led by its preferred replica with
/// every replica in sync (they are all empty).
pub fn new_partitions(
    state: &ClusterState,
    count: usize,
    replication_factor: i32,
) -> Result<Vec<PartitionChange>, PlacementError> {
    Ok(placement::place(state, count, replication_factor)?
        .into_iter()
        .map(|replicas| PartitionChange {
            leader: replicas.first().copied(),
            leader_epoch: LeaderEpoch(0),
            isr: replicas.clone(),
            replicas,
            partition_epoch: PartitionEpoch(0),
            adding: Vec::new(),
            removing: Vec::new(),
        })
        .collect())
}

/// `p`'s leader epoch once `leader` leads it: it moves only with the leader.
pub(crate) fn leader_epoch_after(p: &PartitionChange, leader: Option<NodeId>) -> LeaderEpoch {
    if leader == p.leader {
        p.leader_epoch
    } else {
        p.leader_epoch.next()
    }
}

/// `node` came back with a data directory that is not the one it registered before (a wiped or
/// replaced disk): its replicas are empty, whatever the ISR says. It leaves every ISR at once
/// and leads nothing; it rejoins each ISR the ordinary way, once it has caught up with the
/// leader. A partition whose only in-sync replica it was is left without a leader rather than
/// led from an empty log: only an unclean election (ElectLeaders, type 1) brings it back.
fn storage_replaced(state: &ClusterState, node: NodeId) -> Vec<MetadataRecord> {
    let mut records = Vec::new();
    for (topic, index, p) in state.partitions() {
        if !p.isr.contains(&node) {
            continue;
        }
        let isr: Vec<NodeId> = p.isr.iter().copied().filter(|r| *r != node).collect();
        let probe = PartitionChange {
            isr: isr.clone(),
            ..p.clone()
        };
        let leader = match p.leader {
            Some(l) if l != node && state.is_live(l) => Some(l),
            _ => placement::choose_leader(&probe, |r| state.is_live(r)),
        };
        tracing::warn!(
            node = node.0,
            topic = %topic.name,
            partition = index,
            ?leader,
            "the node's data directory was replaced: it leaves the ISR"
        );
        records.push(change(topic.id, index, p, leader, isr));
    }
    records
}

/// The record that sets `p`'s leader and ISR; the leader epoch moves only with the leader.
fn change(
    topic: Uuid,
    partition: i32,
    p: &PartitionChange,
    leader: Option<NodeId>,
    isr: Vec<NodeId>,
) -> MetadataRecord {
    MetadataRecord::ChangePartition {
        topic,
        partition,
        change: PartitionChange {
            replicas: p.replicas.clone(),
            leader,
            leader_epoch: leader_epoch_after(p, leader),
            isr,
            partition_epoch: p.partition_epoch.next(),
            adding: p.adding.clone(),
            removing: p.removing.clone(),
        },
    }
}
