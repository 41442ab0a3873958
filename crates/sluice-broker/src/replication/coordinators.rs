//! The coordinators of a cluster follow the leadership of the internal topics: the leader of
//! the `__consumer_offsets` partition a group hashes to coordinates that group, and the leader
//! of the `__transaction_state` partition a transactional id hashes to coordinates that id's
//! transactions. Both are cluster topics like any other (replicated, their writes committed by
//! a quorum), created by the controller the first time a client looks for a coordinator.

use std::sync::Arc;

use kafka_protocol::error::ResponseError;
use sluice_cluster::metadata::{ClusterState, TopicInfo};
use sluice_cluster::NodeId;

use crate::broker::Broker;
use crate::error::BrokerError;
use crate::group::{partition_for, OFFSETS_TOPIC};
use crate::shards::Shards;
use crate::topics::Topic;
use crate::txn::TXN_TOPIC;

/// The internal topic `name` in `state`, if the cluster created it.
fn internal_topic<'a>(state: &'a ClusterState, name: &str) -> Option<&'a TopicInfo> {
    state.names.get(name).and_then(|id| state.topics.get(id))
}

impl Broker {
    /// Loads the group and transaction coordinators of every internal partition this node now
    /// leads (again, when the leader epoch changed: another node may have led in between) and
    /// unloads the others. A load reads the partition on a blocking thread; its keys answer
    /// COORDINATOR_LOAD_IN_PROGRESS meanwhile, and the rest of the metadata is followed
    /// without waiting for it.
    pub(super) fn follow_coordinators(&self, state: &ClusterState, me: NodeId) {
        let Some(broker) = self.arc() else {
            return;
        };
        let groups = Arc::clone(&broker);
        self.follow_topic_coordinators(
            state,
            me,
            OFFSETS_TOPIC,
            &self.groups.shards,
            move |t, i, e| groups.groups.load(t, i, e),
            |i| self.groups.unload(i),
        );
        self.follow_topic_coordinators(
            state,
            me,
            TXN_TOPIC,
            &self.txns.shards,
            move |t, i, e| broker.txns.load(t, i, e),
            |i| self.txns.unload(i),
        );
    }

    /// [`Broker::follow_coordinators`] without a change of the metadata, once a second: a
    /// take-over given up (its replica stopped leading for a moment, or a read failed) begins
    /// again even when nothing else changes. Not while the controller session has lapsed
    /// (the replicas stepped down then, and the coordinators are kept for the session's
    /// return) or before this node follows the metadata.
    pub(super) fn recheck_coordinators(&self) {
        let Some(replication) = self.replication.get() else {
            return;
        };
        if !*replication.following.borrow() || !replication.node.holds_session() {
            return;
        }
        self.follow_coordinators(&replication.state().state, replication.me);
    }

    fn follow_topic_coordinators(
        &self,
        state: &ClusterState,
        me: NodeId,
        name: &'static str,
        shards: &Shards,
        load: impl Fn(&Arc<Topic>, i32, i32) -> Result<(), BrokerError> + Clone + Send + 'static,
        unload: impl Fn(i32),
    ) {
        let Some(info) = internal_topic(state, name) else {
            return;
        };
        let Some(local) = self.topics.get(name).filter(|t| t.id == info.id) else {
            return;
        };
        let loaded = shards.loaded();
        for (index, p) in info.partitions.iter().enumerate() {
            let index = index as i32;
            // The replica itself must lead, not only the metadata name this node: a node that
            // led before it restarted is named until the controller moves the partition to a
            // new epoch, and its log may end past what a quorum holds.
            let leads = p.leader == Some(me)
                && local
                    .partition(index)
                    .is_some_and(|l| l.leader_epoch().0 == p.leader_epoch.0 && l.leads());
            match (leads, loaded.get(&index)) {
                // Loaded, or being loaded, in this epoch.
                (true, Some(slot)) if slot.epoch() == p.leader_epoch.0 => {}
                (true, _) => {
                    let epoch = p.leader_epoch.0;
                    shards.begin_load(&local, index, epoch);
                    let (load, topic) = (load.clone(), Arc::clone(&local));
                    tokio::task::spawn_blocking(move || {
                        if let Err(e) = load(&topic, index, epoch) {
                            tracing::error!(topic = name, partition = index, error = %e, "cannot load a coordinator partition");
                        }
                    });
                }
                (false, Some(_)) => unload(index),
                (false, None) => {}
            }
        }
    }

    /// Where `group`'s coordinator runs: (id, host, port) of the leader of its offsets
    /// partition. `COORDINATOR_NOT_AVAILABLE` while the offsets topic is being created or the
    /// partition has no leader (the client asks again).
    pub(crate) fn group_coordinator(
        &self,
        group: &str,
    ) -> Result<(i32, String, i32), ResponseError> {
        self.coordinator_of(OFFSETS_TOPIC, group)
    }

    /// Where `transactional_id`'s coordinator runs, as [`Broker::group_coordinator`].
    pub(crate) fn txn_coordinator(
        &self,
        transactional_id: &str,
    ) -> Result<(i32, String, i32), ResponseError> {
        self.coordinator_of(TXN_TOPIC, transactional_id)
    }

    /// The node coordinating `group` when it is not this one (none on a single node, or while
    /// the offsets topic or its partition's leader is missing). Creates nothing.
    pub fn group_coordinator_elsewhere(&self, group: &str) -> Option<i32> {
        let replication = self.replication.get()?;
        let applied = replication.state();
        let info = internal_topic(&applied.state, OFFSETS_TOPIC)?;
        let index = partition_for(group, info.partitions.len() as i32);
        let leader = info.partitions.get(index as usize)?.leader?;
        (leader != replication.me()).then_some(leader.0)
    }

    fn coordinator_of(&self, topic: &str, key: &str) -> Result<(i32, String, i32), ResponseError> {
        let Some(replication) = self.replication.get() else {
            return Ok(self.coordinator_endpoint());
        };
        let applied = replication.state();
        let state = &applied.state;
        let Some(info) = internal_topic(state, topic) else {
            self.create_coordinator_topic(state, topic);
            return Err(ResponseError::CoordinatorNotAvailable);
        };
        let index = partition_for(key, info.partitions.len() as i32);
        info.partitions
            .get(index as usize)
            .and_then(|p| p.leader)
            .filter(|leader| state.is_live(*leader))
            .and_then(|leader| state.nodes.get(&leader))
            .map(|n| {
                let r = &n.registration;
                (r.node.0, r.kafka_host.clone(), r.kafka_port)
            })
            .ok_or(ResponseError::CoordinatorNotAvailable)
    }

    /// Asks the controller, in the background, for the internal topic `name` unless it
    /// exists.
    pub(crate) fn ensure_coordinator_topic(&self, name: &str) {
        if let Some(replication) = self.replication.get() {
            let applied = replication.state();
            if internal_topic(&applied.state, name).is_none() {
                self.create_coordinator_topic(&applied.state, name);
            }
        }
    }

    /// Asks the controller, in the background, for the internal topic `name`: compacted,
    /// fsynced on every write, kept forever, on three replicas (or every node of a smaller
    /// cluster), with its configured partition count.
    fn create_coordinator_topic(&self, state: &ClusterState, name: &str) {
        let Some(replication) = self.replication.get().cloned() else {
            return;
        };
        let partitions = if name == TXN_TOPIC {
            self.config.transaction_state_partitions
        } else {
            self.config.offsets_topic_partitions
        };
        if !replication.creating.lock().insert(name.to_string()) {
            return;
        }
        let rf = state.nodes.len().clamp(1, 3) as i32;
        let configs = crate::internal_log::topic_configs();
        let name = name.to_string();
        tokio::spawn(async move {
            let created = replication
                .create_topic(&name, partitions, rf, configs, false)
                .await;
            match created {
                Ok(_) | Err(BrokerError::TopicExists(_)) => {
                    tracing::info!(
                        topic = %name,
                        partitions,
                        replication_factor = rf,
                        "created an internal topic"
                    )
                }
                Err(e) => {
                    tracing::warn!(topic = %name, error = %e, "cannot create an internal topic yet")
                }
            }
            replication.creating.lock().remove(&name);
        });
    }
}
