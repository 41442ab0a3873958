//! A partition's log start, end and the offset of a time, read on its leader, for a consumer
//! group's offset reset on whichever node coordinates the group (peer call `OffsetBounds`, one
//! per leader node). The coordinator may hold no replica of the partition (a topic with fewer
//! replicas than the cluster has nodes), and a follower's end can trail the leader's: the
//! leader answers, as it answers a client's ListOffsets.

use std::collections::BTreeMap;
use std::time::Duration;

use futures::future::try_join_all;
use serde::{Deserialize, Serialize};
use sluice_cluster::NodeId;

use super::cluster_messages::{offline, refused, unknown_to_the_leader, Leader};
use super::peer::PeerCall;
use crate::broker::Broker;
use crate::error::BrokerError;

/// How long a reset waits for a leader's answer.
const BOUNDS_TIMEOUT: Duration = Duration::from_secs(10);

/// Where a partition's log starts and ends (the end a consumer can read to), and, when asked
/// for a time, the first offset whose timestamp is at or after it (`None`: no such record).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct OffsetBounds {
    pub partition: i32,
    pub log_start: i64,
    pub end: i64,
    pub at_time: Option<i64>,
}

impl Broker {
    /// The bounds of partitions of `topic` this node leads (or, alone, holds). Refused, as
    /// ListOffsets is, for a partition it does not lead, or leads since so little time that its
    /// high watermark is still below where its epoch began (an end that would move backwards).
    pub(crate) fn offset_bounds_here(
        &self,
        topic: &str,
        partitions: &[i32],
        timestamp_ms: Option<i64>,
    ) -> Result<Vec<OffsetBounds>, BrokerError> {
        let t = self.topics.get(topic);
        partitions
            .iter()
            .map(|&index| {
                let p = t.as_ref().and_then(|t| t.partition(index)).ok_or_else(|| {
                    BrokerError::NotLeader(format!("this node holds no replica of {topic}-{index}"))
                })?;
                let progress = p.leader_progress().ok_or_else(|| {
                    BrokerError::NotLeader(format!(
                        "this node does not lead {topic}-{index} now, or not long enough to know \
                         its end; try again"
                    ))
                })?;
                let at_time = match timestamp_ms {
                    Some(ts) => p.offset_for_timestamp(ts, false)?.map(|(o, _)| o.0),
                    None => None,
                };
                Ok(OffsetBounds {
                    partition: index,
                    log_start: progress.log_start.0,
                    end: progress.visible.0,
                    at_time,
                })
            })
            .collect()
    }

    /// The bounds of partitions of `topic` anywhere in the cluster, read on their leaders (one
    /// call per leader node), in the order asked.
    pub async fn offset_bounds(
        &self,
        topic: &str,
        partitions: &[i32],
        timestamp_ms: Option<i64>,
    ) -> Result<Vec<OffsetBounds>, BrokerError> {
        let mut here = Vec::new();
        let mut by_leader: BTreeMap<NodeId, Vec<i32>> = BTreeMap::new();
        for &index in partitions {
            match self.placement(topic, index)?.0 {
                Leader::Me => here.push(index),
                Leader::Other(leader) => by_leader.entry(leader).or_default().push(index),
                Leader::Nobody => return Err(offline(topic, index)),
            }
        }
        let mut found = self.offset_bounds_here(topic, &here, timestamp_ms)?;
        let asks = by_leader
            .into_iter()
            .map(|(leader, partitions)| async move {
                let call = PeerCall::OffsetBounds {
                    topic: topic.to_string(),
                    partitions,
                    timestamp_ms,
                };
                let answer = self
                    .ask_peer(leader, &call, BOUNDS_TIMEOUT)
                    .await
                    .map_err(|e| refused(leader, e))
                    .map_err(|e| {
                        if unknown_to_the_leader(&e) {
                            BrokerError::ControllerUnavailable(format!(
                            "node {leader} runs an earlier version that cannot read offsets for \
                             another node: upgrade it first"
                        ))
                        } else {
                            e
                        }
                    })?;
                serde_json::from_value::<Vec<OffsetBounds>>(answer).map_err(|e| {
                    BrokerError::ControllerUnavailable(format!(
                        "node {leader} answered unreadable offsets: {e}"
                    ))
                })
            });
        found.extend(try_join_all(asks).await?.into_iter().flatten());
        partitions
            .iter()
            .map(|&index| {
                found
                    .iter()
                    .find(|b| b.partition == index)
                    .copied()
                    .ok_or_else(|| {
                        BrokerError::ControllerUnavailable(format!(
                            "no leader answered for {topic}-{index}"
                        ))
                    })
            })
            .collect()
    }
}
