//! The leader's side of a follower's Fetch (`replica_id` ≥ 0): the follower's fetch offset is
//! what it has, which moves the high watermark and the ISR; it gets everything up to the log
//! end, the high watermark, and — if its log diverged (its last fetched epoch ended earlier
//! here) — the epoch and offset to truncate to instead of records (KIP-320, KIP-595).

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use futures::future::select_all;
use kafka_protocol::error::ResponseError;
use kafka_protocol::messages::fetch_response::{
    EpochEndOffset, FetchableTopicResponse, PartitionData,
};
use kafka_protocol::messages::{BrokerId, FetchRequest, FetchResponse, ResponseKind};
use sluice_cluster::NodeId;
use sluice_log::{LeaderEpoch, Offset};
use sluice_wire::Reply;
use tokio::sync::watch;

use super::throttle::Side;
use crate::broker::Broker;
use crate::partition::{Partition, Progress};

struct Wanted {
    index: i32,
    fetch_offset: Offset,
    /// The follower's log start (-1: not said).
    log_start: Offset,
    last_fetched_epoch: i32,
    current_leader_epoch: i32,
    max_bytes: usize,
    target: Result<(uuid::Uuid, Arc<Partition>), ResponseError>,
}

/// Serves a follower's fetch.
pub fn serve(broker: &Broker, request: FetchRequest, follower: NodeId, version: i16) -> Reply {
    let mut topics = Vec::with_capacity(request.topics.len());
    for t in request.topics {
        let topic = if version >= 13 {
            broker.topics().get_by_id(t.topic_id)
        } else {
            broker.topics().get(t.topic.as_str())
        };
        let wanted: Vec<Wanted> = t
            .partitions
            .iter()
            .map(|p| Wanted {
                index: p.partition,
                fetch_offset: Offset(p.fetch_offset),
                log_start: Offset(p.log_start_offset),
                last_fetched_epoch: p.last_fetched_epoch,
                current_leader_epoch: p.current_leader_epoch,
                max_bytes: usize::try_from(p.partition_max_bytes).unwrap_or(0),
                target: topic
                    .as_ref()
                    .and_then(|topic| topic.partition(p.partition).map(|x| (topic.id, x)))
                    .ok_or(ResponseError::UnknownTopicOrPartition),
            })
            .collect();
        topics.push((t.topic, t.topic_id, wanted));
    }
    let max_bytes = usize::try_from(request.max_bytes).unwrap_or(0);
    let max_wait = Duration::from_millis(u64::try_from(request.max_wait_ms).unwrap_or(0));
    let Some(broker) = broker.arc() else {
        return Reply::Ready(Box::new(ResponseKind::Fetch(
            FetchResponse::default().with_error_code(ResponseError::UnknownServerError.code()),
        )));
    };
    Reply::Later(Box::pin(async move {
        let deadline = tokio::time::Instant::now() + max_wait;
        let mut watchers: Vec<watch::Receiver<Progress>> = topics
            .iter()
            .flat_map(|(_, _, ws)| ws.iter())
            .filter_map(|w| w.target.as_ref().ok().map(|(_, p)| p.subscribe()))
            .collect();
        loop {
            for w in &mut watchers {
                w.mark_unchanged();
            }
            let (response, bytes, errors) = gather(&broker, &topics, follower, max_bytes, version);
            if bytes > 0 || errors || watchers.is_empty() || tokio::time::Instant::now() >= deadline
            {
                return Some(ResponseKind::Fetch(response));
            }
            let changed = select_all(watchers.iter_mut().map(|w| Box::pin(w.changed())));
            if tokio::time::timeout_at(deadline, changed).await.is_err() {
                let (response, _, _) = gather(&broker, &topics, follower, max_bytes, version);
                return Some(ResponseKind::Fetch(response));
            }
        }
    }))
}

fn gather(
    broker: &Arc<Broker>,
    topics: &[(kafka_protocol::messages::TopicName, uuid::Uuid, Vec<Wanted>)],
    follower: NodeId,
    max_bytes: usize,
    version: i16,
) -> (FetchResponse, usize, bool) {
    let mut remaining = max_bytes;
    let mut total = 0;
    let mut errors = false;
    let responses = topics
        .iter()
        .map(|(name, id, wanted)| {
            let partitions = wanted
                .iter()
                .map(|w| {
                    let data = read_one(broker, w, follower, &mut remaining);
                    total += data.records.as_ref().map_or(0, Bytes::len);
                    errors |= data.error_code != 0 || data.diverging_epoch.epoch >= 0;
                    data
                })
                .collect();
            FetchableTopicResponse::default()
                .with_topic(if version >= 13 {
                    Default::default()
                } else {
                    name.clone()
                })
                .with_topic_id(if version >= 13 {
                    *id
                } else {
                    uuid::Uuid::nil()
                })
                .with_partitions(partitions)
        })
        .collect();
    (
        FetchResponse::default().with_responses(responses),
        total,
        errors,
    )
}

fn read_one(
    broker: &Arc<Broker>,
    w: &Wanted,
    follower: NodeId,
    remaining: &mut usize,
) -> PartitionData {
    let base = PartitionData::default()
        .with_partition_index(w.index)
        .with_high_watermark(-1)
        .with_last_stable_offset(-1)
        .with_log_start_offset(-1)
        .with_preferred_read_replica(BrokerId(-1));
    let (topic_id, p) = match &w.target {
        Ok(t) => t,
        Err(e) => return base.with_error_code(e.code()),
    };
    if let Err(e) = p.check_current_epoch(w.current_leader_epoch) {
        return base.with_error_code(e.code());
    }
    if !p.progress().leading {
        return base.with_error_code(ResponseError::NotLeaderOrFollower.code());
    }
    let epoch_end = (w.last_fetched_epoch >= 0)
        .then(|| p.end_offset_for_epoch(LeaderEpoch(w.last_fetched_epoch)))
        .flatten();
    let diverged = sluice_cluster::divergence::diverging(
        w.last_fetched_epoch,
        w.fetch_offset,
        epoch_end,
        || p.fetch_position(),
    );
    if let Some((epoch, end)) = diverged {
        let progress = p.progress();
        return base
            .with_high_watermark(progress.visible.0)
            .with_log_start_offset(progress.log_start.0)
            .with_diverging_epoch(
                EpochEndOffset::default()
                    .with_epoch(epoch.0)
                    .with_end_offset(end.0),
            );
    }
    let fetched = p.on_follower_fetch(follower, w.fetch_offset, w.log_start, broker.liveness_ms());
    if let Some(change) = fetched {
        broker.send_isr_change(*topic_id, p, change);
    }
    let mut limit = w.max_bytes.min(*remaining);
    let throttled = broker.throttled(Side::Leader, &p.topic, p.index, follower);
    if throttled {
        match broker.throttles.leader.allowance(broker.liveness_ms()) {
            // Nothing may go now: an empty answer, as Kafka's throttled leader gives.
            Some(0) => {
                let progress = p.progress();
                return base
                    .with_high_watermark(progress.visible.0)
                    .with_last_stable_offset(progress.stable.0)
                    .with_log_start_offset(progress.log_start.0)
                    .with_records(Some(Bytes::new()));
            }
            Some(allowed) => limit = limit.min(allowed),
            None => {}
        }
    }
    let read = p
        .read_for_follower(w.fetch_offset, limit)
        .and_then(|(plan, progress)| Ok((p.load(&plan)?, progress)));
    match read {
        Ok((bytes, progress)) => {
            if throttled {
                broker.throttles.leader.spend(bytes.len());
            }
            *remaining = remaining.saturating_sub(bytes.len());
            base.with_high_watermark(progress.visible.0)
                .with_last_stable_offset(progress.stable.0)
                .with_log_start_offset(progress.log_start.0)
                .with_records(Some(bytes))
        }
        // OFFSET_OUT_OF_RANGE carries the log start: a follower below it restarts there.
        Err(e) => {
            let progress = p.progress();
            base.with_error_code(e.code())
                .with_log_start_offset(progress.log_start.0)
                .with_high_watermark(progress.visible.0)
                .with_records(Some(Bytes::new()))
        }
    }
}
