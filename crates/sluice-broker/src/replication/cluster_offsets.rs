//! A partition's log start, end and the offset of a time, read on its leader, for a consumer
//! group's offset reset on whichever node coordinates the group (peer call `OffsetBounds`).
//! The coordinator may hold no replica of the partition (a topic with fewer replicas than the
//! cluster has nodes), and a follower's end can trail the leader's: the leader answers, as it
//! answers a client's ListOffsets.

use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::cluster_messages::{offline, refused, Leader};
use super::peer::PeerCall;
use crate::broker::Broker;
use crate::error::BrokerError;

/// How long a reset waits for a leader's answer.
const BOUNDS_TIMEOUT: Duration = Duration::from_secs(10);

/// Where a partition's log starts and ends (the end a consumer can read to), and, when asked
/// for a time, the first offset whose timestamp is at or after it (`None`: no such record).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct OffsetBounds {
    pub log_start: i64,
    pub end: i64,
    pub at_time: Option<i64>,
}

impl Broker {
    /// The bounds of a partition this node leads (or, alone, holds).
    pub(crate) fn offset_bounds_here(
        &self,
        topic: &str,
        partition: i32,
        timestamp_ms: Option<i64>,
    ) -> Result<OffsetBounds, BrokerError> {
        let p = self
            .topics
            .get(topic)
            .and_then(|t| t.partition(partition))
            .ok_or_else(|| {
                BrokerError::NotLeader(format!("this node holds no replica of {topic}-{partition}"))
            })?;
        let progress = p.progress();
        let at_time = match timestamp_ms {
            Some(ts) => p.offset_for_timestamp(ts, false)?.map(|(o, _)| o.0),
            None => None,
        };
        Ok(OffsetBounds {
            log_start: progress.log_start.0,
            end: progress.visible.0,
            at_time,
        })
    }

    /// The bounds of any partition of the cluster, read on its leader.
    pub async fn offset_bounds(
        &self,
        topic: &str,
        partition: i32,
        timestamp_ms: Option<i64>,
    ) -> Result<OffsetBounds, BrokerError> {
        let leader = match self.placement(topic, partition)?.0 {
            Leader::Me => return self.offset_bounds_here(topic, partition, timestamp_ms),
            Leader::Other(leader) => leader,
            Leader::Nobody => return Err(offline(topic, partition)),
        };
        let call = PeerCall::OffsetBounds {
            topic: topic.to_string(),
            partition,
            timestamp_ms,
        };
        let answer = self
            .ask_peer(leader, &call, BOUNDS_TIMEOUT)
            .await
            .map_err(|e| refused(leader, e))?;
        serde_json::from_value(answer).map_err(|e| {
            BrokerError::ControllerUnavailable(format!(
                "node {leader} answered unreadable offsets: {e}"
            ))
        })
    }
}
