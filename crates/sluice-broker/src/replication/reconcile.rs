//! Making this node match the applied metadata: the topics and replicas it holds, the role of
//! each replica, and a fetcher for every leader it follows.

use std::collections::HashSet;
use std::sync::Arc;

use sluice_cluster::metadata::ClusterState;
use sluice_cluster::NodeId;

use super::{fetcher, min_insync, LAG_TIME_MAX_MS};
use crate::broker::Broker;
use crate::partition::Partition;

impl Broker {
    /// Applies the whole metadata state. Idempotent: only differences change anything.
    pub(super) fn reconcile(self: &Arc<Self>, state: &ClusterState) {
        let Some(replication) = self.replication.get() else {
            return;
        };
        let me = replication.me;
        let now = replication.node.now_ms();
        self.throttles
            .apply_all(&super::admin::effective_broker_configs(state, me));
        let mut leaders: HashSet<NodeId> = HashSet::new();
        let fenced = state.fenced_nodes();
        for topic in state.topics.values() {
            let hosted: Vec<i32> = topic
                .partitions
                .iter()
                .enumerate()
                .filter(|(_, p)| p.replicas.contains(&me))
                .map(|(i, _)| i as i32)
                .collect();
            let local = match self.topics.sync_from_cluster(
                &topic.name,
                topic.id,
                topic.partitions.len() as i32,
                &hosted,
                &topic.configs,
            ) {
                Ok(t) => t,
                Err(e) => {
                    tracing::error!(topic = %topic.name, error = %e, "cannot hold this node's replicas");
                    continue;
                }
            };
            for index in hosted {
                let (Some(p), Some(info)) =
                    (local.partition(index), topic.partitions.get(index as usize))
                else {
                    continue;
                };
                let inherited = info.leader == Some(me)
                    && replication.led_before_start(state, topic.id, index, info.leader_epoch);
                if inherited {
                    // Led before this process started: a new epoch comes once it registers.
                    p.follow(None, info.leader_epoch);
                } else if info.leader == Some(me) {
                    // During a reassignment the default counts the replicas the partition had
                    // before it (as Kafka's replication factor does), not the replicas being
                    // added beside them: ISR members they are not yet.
                    let before_move = info
                        .replicas
                        .iter()
                        .filter(|r| !info.adding.contains(r))
                        .count();
                    let min = min_insync(&topic.configs, before_move);
                    p.lead(me, info, min, LAG_TIME_MAX_MS, now, &fenced);
                } else {
                    p.follow(info.leader, info.leader_epoch);
                    leaders.extend(info.leader);
                }
            }
        }
        self.follow_coordinators(state, me);
        self.topics.remove_deleted(&state.deleted);
        let mut fetchers = replication.fetchers.lock();
        fetchers.retain(|_, task| !task.is_finished());
        for leader in leaders {
            if fetchers.contains_key(&leader) {
                continue;
            }
            let Some(addr) = replication.inter_broker.address(state, leader) else {
                continue;
            };
            let task = tokio::spawn(fetcher::run(
                Arc::clone(self),
                leader,
                addr,
                Arc::clone(&replication.inter_broker),
                replication.shutdown.clone(),
            ));
            fetchers.insert(leader, task);
        }
    }

    /// The partitions this node follows from `leader`, with their topics' names.
    pub(super) fn followed_from(&self, leader: NodeId) -> Vec<(Arc<str>, Arc<Partition>)> {
        self.topics
            .list()
            .iter()
            .flat_map(|t| {
                t.partitions()
                    .into_iter()
                    .filter(|p| p.leader() == Some(leader))
                    .map(|p| (Arc::clone(&t.name), p))
                    .collect::<Vec<_>>()
            })
            .collect()
    }
}
