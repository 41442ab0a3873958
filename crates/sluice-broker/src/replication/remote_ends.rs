//! The ends of partitions this node holds no replica of, for the lag of the consumer groups it
//! coordinates. A group's coordinator is the leader of its `__consumer_offsets` partition,
//! which need not hold a replica of the topics the group reads (a topic with fewer replicas
//! than the cluster has nodes): the group's page, the console's list of groups and the
//! `sluice_consumer_group_lag` metric then had no end, and so no lag, for those partitions.
//! Every [`REFRESH`] this node asks each leader of such partitions for their ends (peer call
//! `VisibleEnds`, one per leader node) and keeps the answers. An end a leader did not give
//! again (no answer in time) is kept for [`KEPT_ROUNDS`] rounds, then dropped: the partition
//! then shows no end and no lag, rather than a lag that stopped moving. An end is thus at
//! most about 4 s old while its leader answers.

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
/// Rounds an end is kept without a new answer from its leader.
const KEPT_ROUNDS: u64 = 2;

/// One partition's end: topic, partition, offset.
pub(crate) type End = (String, i32, i64);

/// The last ends asked of other nodes.
#[derive(Debug, Default)]
pub(crate) struct RemoteEnds(Mutex<Rounds>);

#[derive(Debug, Default)]
struct Rounds {
    round: u64,
    /// Topic → partition → (end, the round it was answered in).
    ends: HashMap<String, HashMap<i32, (i64, u64)>>,
}

impl RemoteEnds {
    pub(crate) fn get(&self, topic: &str, partition: i32) -> Option<i64> {
        let rounds = self.0.lock();
        rounds
            .ends
            .get(topic)
            .and_then(|t| t.get(&partition))
            .map(|(end, _)| *end)
    }

    /// Takes a round's answers: keeps, of the ends still `wanted`, those answered now or in
    /// the last [`KEPT_ROUNDS`] rounds.
    fn update(&self, wanted: &BTreeSet<(String, i32)>, answers: Vec<End>) {
        let mut rounds = self.0.lock();
        rounds.round += 1;
        let round = rounds.round;
        for (topic, index, end) in answers {
            rounds
                .ends
                .entry(topic)
                .or_default()
                .insert(index, (end, round));
        }
        rounds.ends.retain(|topic, partitions| {
            partitions.retain(|index, (_, answered)| {
                *answered + KEPT_ROUNDS >= round && wanted.contains(&(topic.clone(), *index))
            });
            !partitions.is_empty()
        });
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
                let progress = self
                    .topics
                    .get(topic)?
                    .partition(*index)?
                    .leader_progress()?;
                Some((topic.clone(), *index, progress.visible.0))
            })
            .collect()
    }

    /// The partitions the groups coordinated here have committed offsets for, that this node
    /// holds no replica of.
    fn partitions_held_elsewhere(&self) -> BTreeSet<(String, i32)> {
        // The lock only for the copy: heartbeats and commits wait on it.
        let mut partitions = self.groups.coordinator.lock().partitions_with_offsets();
        partitions.retain(|(topic, index)| {
            self.topics
                .get(topic)
                .and_then(|t| t.partition(*index))
                .is_none()
        });
        partitions
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
            for (topic, index) in wanted.iter().cloned() {
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
        let answers = join_all(asks).await.into_iter().flatten().collect();
        replication.remote_ends.update(&wanted, answers);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_end_outlives_two_missed_answers_and_no_longer_than_it_is_wanted() {
        let ends = RemoteEnds::default();
        let a = ("t".to_string(), 0);
        let b = ("t".to_string(), 1);
        let wanted: BTreeSet<_> = [a.clone(), b.clone()].into();
        ends.update(&wanted, vec![("t".into(), 0, 10), ("t".into(), 1, 20)]);
        assert_eq!((ends.get("t", 0), ends.get("t", 1)), (Some(10), Some(20)));
        // Partition 1's leader does not answer for two rounds: its last end stays.
        ends.update(&wanted, vec![("t".into(), 0, 11)]);
        ends.update(&wanted, vec![("t".into(), 0, 12)]);
        assert_eq!((ends.get("t", 0), ends.get("t", 1)), (Some(12), Some(20)));
        // A third: it goes.
        ends.update(&wanted, vec![("t".into(), 0, 13)]);
        assert_eq!((ends.get("t", 0), ends.get("t", 1)), (Some(13), None));
        // No group has an offset for partition 0 any more (or this node holds it now).
        ends.update(&BTreeSet::new(), Vec::new());
        assert_eq!(ends.get("t", 0), None);
        assert_eq!(ends.get("other", 0), None);
    }
}
