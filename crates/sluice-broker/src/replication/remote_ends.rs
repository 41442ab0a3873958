//! The ends of partitions this node holds no replica of, for the lag of the consumer groups it
//! coordinates. A group's coordinator is the leader of its `__consumer_offsets` partition,
//! which need not hold a replica of the topics the group reads (a topic with fewer replicas
//! than the cluster has nodes): the group's page, the console's list of groups and the
//! `sluice_consumer_group_lag` metric then had no end, and so no lag, for those partitions.
//! Every [`REFRESH`] this node asks each leader of such partitions for their ends (peer call
//! `VisibleEnds`, one per leader node) and keeps the answers until the next round; a leader
//! that does not answer leaves its partitions without an end (no lag shown, rather than a lag
//! that stopped moving).

use std::collections::{BTreeSet, HashMap};
use std::time::Duration;

use futures::future::join_all;
use parking_lot::Mutex;
use sluice_cluster::NodeId;

use super::peer::PeerCall;
use crate::broker::Broker;

/// How often the ends are asked for again.
pub(super) const REFRESH: Duration = Duration::from_secs(2);
/// How long one leader's answer is waited for.
const TIMEOUT: Duration = Duration::from_millis(1500);

/// One partition's end: topic, partition, offset.
pub(crate) type End = (String, i32, i64);

/// The last ends asked of other nodes.
#[derive(Debug, Default)]
pub(crate) struct RemoteEnds(Mutex<HashMap<(String, i32), i64>>);

impl RemoteEnds {
    pub(crate) fn get(&self, topic: &str, partition: i32) -> Option<i64> {
        self.0.lock().get(&(topic.to_string(), partition)).copied()
    }

    fn replace(&self, ends: HashMap<(String, i32), i64>) {
        *self.0.lock() = ends;
    }
}

impl Broker {
    /// The end a consumer can read to of each of `partitions` this node leads (not of one it
    /// follows, whose end may trail, nor of one it leads since so little time that its high
    /// watermark is still below where its epoch began).
    pub(crate) fn visible_ends_here(&self, partitions: &[(String, i32)]) -> Vec<End> {
        partitions
            .iter()
            .filter_map(|(topic, index)| {
                let p = self.topics.get(topic)?.partition(*index)?;
                let progress = p.progress();
                (progress.leading && !p.high_watermark_behind_epoch_start())
                    .then(|| (topic.clone(), *index, progress.visible.0))
            })
            .collect()
    }

    /// The partitions the groups coordinated here have committed offsets for, that this node
    /// holds no replica of.
    fn partitions_held_elsewhere(&self) -> BTreeSet<(String, i32)> {
        let coordinator = self.groups.coordinator.lock();
        coordinator
            .group_ids()
            .iter()
            .filter_map(|id| coordinator.committed(id))
            .flat_map(|offsets| offsets.keys())
            .filter(|(topic, index)| {
                self.topics
                    .get(topic)
                    .and_then(|t| t.partition(*index))
                    .is_none()
            })
            .cloned()
            .collect()
    }

    /// One round: asks each leader of the partitions held elsewhere for their ends.
    pub(super) async fn refresh_remote_ends(&self) {
        let Some(replication) = self.replication.get() else {
            return;
        };
        let wanted = self.partitions_held_elsewhere();
        let mut by_leader: HashMap<NodeId, Vec<(String, i32)>> = HashMap::new();
        {
            let state = replication.state();
            for (topic, index) in wanted {
                let leader = state
                    .state
                    .partition_by_name(&topic, index)
                    .and_then(|(_, p)| p.leader);
                if let Some(leader) = leader.filter(|l| *l != replication.me) {
                    by_leader.entry(leader).or_default().push((topic, index));
                }
            }
        }
        let asks = by_leader
            .into_iter()
            .map(|(leader, partitions)| async move {
                let call = PeerCall::VisibleEnds { partitions };
                match self.ask_peer(leader, &call, TIMEOUT).await {
                    Ok(answer) => serde_json::from_value::<Vec<End>>(answer).unwrap_or_else(|e| {
                        tracing::debug!(%leader, error = %e, "unreadable partition ends");
                        Vec::new()
                    }),
                    Err(e) => {
                        tracing::debug!(%leader, error = %e, "no partition ends");
                        Vec::new()
                    }
                }
            });
        let ends = join_all(asks)
            .await
            .into_iter()
            .flatten()
            .map(|(topic, index, end)| ((topic, index), end))
            .collect();
        replication.remote_ends.replace(ends);
    }
}
