//! The group coordinators of a cluster follow the leadership of `__consumer_offsets`: the
//! leader of the partition a group hashes to coordinates that group. The topic is a cluster
//! topic like any other (replicated, its writes committed by a quorum), created by the
//! controller the first time a client looks for a group's coordinator.

use std::sync::atomic::Ordering;

use kafka_protocol::error::ResponseError;
use sluice_cluster::metadata::{ClusterState, TopicInfo};
use sluice_cluster::NodeId;

use crate::broker::Broker;
use crate::error::BrokerError;
use crate::group::{partition_for, OFFSETS_TOPIC};

/// The offsets topic in `state`, if the cluster created it.
fn offsets_topic(state: &ClusterState) -> Option<&TopicInfo> {
    state
        .names
        .get(OFFSETS_TOPIC)
        .and_then(|id| state.topics.get(id))
}

impl Broker {
    /// Loads the coordinator of every offsets partition this node now leads (again, when the
    /// leader epoch changed: another node may have led in between) and unloads the others.
    pub(super) fn follow_group_coordinators(&self, state: &ClusterState, me: NodeId) {
        let Some(info) = offsets_topic(state) else {
            return;
        };
        let Some(local) = self.topics.get(OFFSETS_TOPIC).filter(|t| t.id == info.id) else {
            return;
        };
        let loaded = self.groups.shards.loaded();
        for (index, p) in info.partitions.iter().enumerate() {
            let index = index as i32;
            let leads = p.leader == Some(me)
                && local
                    .partition(index)
                    .is_some_and(|l| l.leader_epoch().0 == p.leader_epoch.0);
            match (leads, loaded.get(&index)) {
                (true, Some(&epoch)) if epoch == p.leader_epoch.0 => {}
                (true, _) => {
                    if let Err(e) = self.groups.load(&local, index, p.leader_epoch.0) {
                        tracing::error!(partition = index, error = %e, "cannot load the groups of an offsets partition");
                        self.groups.unload(index);
                    }
                }
                (false, Some(_)) => self.groups.unload(index),
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
        let Some(replication) = self.replication.get() else {
            return Ok(self.coordinator_endpoint());
        };
        let applied = replication.state();
        let state = &applied.state;
        let Some(info) = offsets_topic(state) else {
            self.create_offsets_topic(state);
            return Err(ResponseError::CoordinatorNotAvailable);
        };
        let index = partition_for(group, info.partitions.len() as i32);
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

    /// Asks the controller, in the background, for the offsets topic unless it exists.
    pub(crate) fn ensure_offsets_topic(&self) {
        if let Some(replication) = self.replication.get() {
            let applied = replication.state();
            if offsets_topic(&applied.state).is_none() {
                self.create_offsets_topic(&applied.state);
            }
        }
    }

    /// Asks the controller, in the background, for the offsets topic: compacted, fsynced on
    /// every write, kept forever, on three replicas (or every node of a smaller cluster).
    fn create_offsets_topic(&self, state: &ClusterState) {
        let Some(replication) = self.replication.get().cloned() else {
            return;
        };
        if replication.creating_offsets.swap(true, Ordering::AcqRel) {
            return;
        }
        let rf = state.nodes.len().clamp(1, 3) as i32;
        let partitions = self.config.offsets_topic_partitions;
        let configs = crate::internal_log::topic_configs();
        tokio::spawn(async move {
            let created = replication
                .create_topic(OFFSETS_TOPIC, partitions, rf, configs, false)
                .await;
            match created {
                Ok(_) | Err(BrokerError::TopicExists(_)) => {
                    tracing::info!(
                        partitions,
                        replication_factor = rf,
                        "created {OFFSETS_TOPIC}"
                    )
                }
                Err(e) => tracing::warn!(error = %e, "cannot create {OFFSETS_TOPIC} yet"),
            }
            replication.creating_offsets.store(false, Ordering::Release);
        });
    }
}
