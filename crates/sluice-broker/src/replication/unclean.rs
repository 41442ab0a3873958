//! An unclean leader election (ElectLeaders with election type 1, as
//! `kafka-leader-election.sh --election-type unclean` sends), made only when an operator asks
//! for it. A partition whose in-sync replicas are all gone for good (a wiped disk: see
//! `storage_replaced` in the controller) has no leader and no way back on its own; this brings
//! it back from the live replica that holds the most of its log. Before electing, the broker
//! that took the request asks every live replica's node how far its copy goes (the newest
//! leader epoch in it, then its log end, as Kafka's KIP-966 recovery ranks replicas), and the
//! controller elects the first candidate still live. Records only the lost replicas had are
//! gone; the others truncate to the new leader's log when they follow it.

use std::collections::BTreeMap;
use std::time::Duration;

use sluice_cluster::controller::Election;
use sluice_cluster::NodeId;

use super::PeerCall;
use crate::broker::Broker;
use crate::error::BrokerError;

/// How long a node may take to say how far its replicas go.
const ASK_TIMEOUT: Duration = Duration::from_secs(5);

/// How far one replica's log goes: (topic, partition, newest leader epoch or -1, log end).
pub(crate) type LogEnd = (String, i32, i32, i64);

/// A candidate leader: how far its copy goes (epoch, log end), its place in the replica list,
/// its node.
type Candidate = ((i32, i64), usize, NodeId);

impl Broker {
    /// ElectLeaders (unclean) of `partitions` (`None`: every partition without a leader).
    pub async fn elect_unclean(
        &self,
        partitions: Option<Vec<(String, i32)>>,
    ) -> Result<Vec<(String, i32, Election)>, BrokerError> {
        let replication = self
            .replication()
            .cloned()
            .ok_or_else(|| BrokerError::ControllerUnavailable("not in a cluster".into()))?;
        let applied = replication.state();
        let state = &applied.state;
        let named: Vec<(String, i32)> = partitions.unwrap_or_else(|| {
            state
                .partitions()
                .filter(|(.., p)| p.leader.is_none())
                .map(|(t, i, _)| (t.name.clone(), i))
                .collect()
        });
        // Which node to ask about which leaderless partitions.
        let mut asks: BTreeMap<NodeId, Vec<(String, i32)>> = BTreeMap::new();
        for (name, index) in &named {
            if let Some((_, p)) = state.partition_by_name(name, *index) {
                if p.leader.is_none() {
                    for r in p.replicas.iter().filter(|r| state.is_live(**r)) {
                        asks.entry(*r).or_default().push((name.clone(), *index));
                    }
                }
            }
        }
        let me = replication.me();
        let answers =
            futures::future::join_all(asks.into_iter().map(|(node, partitions)| async move {
                let ends = if node == me {
                    Ok(self.log_ends_here(&partitions))
                } else {
                    let call = PeerCall::LogEnds { partitions };
                    match self.ask_peer(node, &call, ASK_TIMEOUT).await {
                        Ok(v) => {
                            serde_json::from_value::<Vec<LogEnd>>(v).map_err(|e| e.to_string())
                        }
                        Err(e) => Err(e.to_string()),
                    }
                };
                (node, ends)
            }))
            .await;
        // Each partition's candidates, the longest copy first (replica order breaks ties).
        let mut ranked: BTreeMap<(String, i32), Vec<Candidate>> = BTreeMap::new();
        for (node, ends) in answers {
            match ends {
                Ok(ends) => {
                    for (topic, index, epoch, end) in ends {
                        let order = state
                            .partition_by_name(&topic, index)
                            .and_then(|(_, p)| p.replicas.iter().position(|r| *r == node))
                            .unwrap_or(usize::MAX);
                        ranked
                            .entry((topic, index))
                            .or_default()
                            .push(((epoch, end), order, node));
                    }
                }
                Err(e) => {
                    tracing::warn!(%node, error = %e, "unclean election: a replica's node did not say how far its log goes; it is not a candidate");
                }
            }
        }
        let request = named
            .into_iter()
            .map(|(name, index)| {
                let mut candidates = ranked.remove(&(name.clone(), index)).unwrap_or_default();
                candidates.sort_by(|a, b| b.0.cmp(&a.0).then(a.1.cmp(&b.1)));
                let candidates = candidates.into_iter().map(|(.., n)| n).collect();
                (name, index, candidates)
            })
            .collect();
        replication.elect_unclean(request).await
    }

    /// How far this node's replicas of `partitions` go (those it holds).
    pub(crate) fn log_ends_here(&self, partitions: &[(String, i32)]) -> Vec<LogEnd> {
        partitions
            .iter()
            .filter_map(|(name, index)| {
                let partition = self.topics().get(name)?.partition(*index)?;
                let (end, epoch) = partition.fetch_position();
                Some((name.clone(), *index, epoch.map_or(-1, |e| e.0), end.0))
            })
            .collect()
    }
}
