//! DeleteRecords (KIP-107): move a partition's log start offset up, so that the records below
//! it can no longer be read (`kafka-delete-records.sh`, `AdminClient.delete_records`, Kafka
//! Streams purging its repartition topics). Whole segments below the new start are deleted.
//!
//! As in Kafka: offset -1 means the high watermark; an offset past it, or negative, is
//! OFFSET_OUT_OF_RANGE; internal topics are INVALID_TOPIC_EXCEPTION; a topic whose
//! `cleanup.policy` lacks `delete` is POLICY_VIOLATION. The answer's low watermark is the new
//! log start offset. In a cluster the answer waits, up to the request's timeout, until every
//! in-sync follower has moved its log start there too (Kafka's low watermark), so a failover
//! right after it cannot bring the deleted records back; REQUEST_TIMED_OUT otherwise (the
//! leader has deleted them; the followers follow when they next fetch).

use std::sync::Arc;
use std::time::Duration;

use kafka_protocol::messages::delete_records_response::{
    DeleteRecordsPartitionResult, DeleteRecordsTopicResult,
};
use kafka_protocol::messages::{DeleteRecordsRequest, DeleteRecordsResponse, ResponseKind};

use sluice_log::Offset;
use sluice_wire::Reply;

use crate::broker::Broker;
use crate::handlers::{Call, Versions};
use crate::partition::Partition;
use sluice_auth::acl::Operation;

pub const VERSIONS: Versions = Versions::new(0, 2);

pub fn handle(broker: &Broker, mut request: DeleteRecordsRequest, call: &Call) -> Reply {
    let authz = call.authz(broker);
    let denied: Vec<DeleteRecordsTopicResult> = super::take_denied(&mut request.topics, |t| {
        authz.topic(Operation::Delete, &t.name)
    })
    .into_iter()
    .map(|t| {
        DeleteRecordsTopicResult::default()
            .with_name(t.name)
            .with_partitions(
                t.partitions
                    .iter()
                    .map(|p| {
                        DeleteRecordsPartitionResult::default()
                            .with_partition_index(p.partition_index)
                            .with_low_watermark(-1)
                            .with_error_code(
                                kafka_protocol::ResponseError::TopicAuthorizationFailed.code(),
                            )
                    })
                    .collect(),
            )
    })
    .collect();
    let reply = handle_authorized(broker, request);
    if denied.is_empty() {
        return reply;
    }
    super::map_response(reply, move |r| {
        if let ResponseKind::DeleteRecords(r) = r {
            r.topics.extend(denied);
        }
    })
}

fn handle_authorized(broker: &Broker, request: DeleteRecordsRequest) -> Reply {
    let mut waits: Vec<(usize, usize, Arc<Partition>, Offset)> = Vec::new();
    let topics: Vec<DeleteRecordsTopicResult> = request
        .topics
        .iter()
        .enumerate()
        .map(|(ti, t)| {
            let partitions = t
                .partitions
                .iter()
                .enumerate()
                .map(|(pi, p)| {
                    let result =
                        DeleteRecordsPartitionResult::default().with_partition_index(p.partition_index);
                    match broker.delete_records(&t.name, p.partition_index, p.offset) {
                        Ok(start) => {
                            if let Ok(partition) = broker.partition_of(&t.name, p.partition_index) {
                                if partition.low_watermark().is_none_or(|low| low < start) {
                                    waits.push((ti, pi, partition, start));
                                }
                            }
                            result.with_low_watermark(start.0)
                        }
                        Err(e) => {
                            tracing::debug!(topic = %t.name.as_str(), partition = p.partition_index, offset = p.offset, error = %e, "delete records refused");
                            result.with_low_watermark(-1).with_error_code(e.code())
                        }
                    }
                })
                .collect();
            DeleteRecordsTopicResult::default()
                .with_name(t.name.clone())
                .with_partitions(partitions)
        })
        .collect();
    let response = DeleteRecordsResponse::default().with_topics(topics);
    if waits.is_empty() {
        return Reply::Ready(Box::new(ResponseKind::DeleteRecords(response)));
    }
    let timeout = Duration::from_millis(u64::try_from(request.timeout_ms).unwrap_or(0))
        .min(crate::low_watermark::MAX_WAIT);
    Reply::Later(Box::pin(async move {
        Some(ResponseKind::DeleteRecords(
            wait_for_followers(response, waits, timeout).await,
        ))
    }))
}

/// Waits until each partition's low watermark reaches its new start (see
/// [`Partition::low_watermark_reaches`]); a partition that does not in time answers
/// REQUEST_TIMED_OUT, one whose leadership moved meanwhile NOT_LEADER_OR_FOLLOWER at once.
async fn wait_for_followers(
    mut response: DeleteRecordsResponse,
    waits: Vec<(usize, usize, Arc<Partition>, Offset)>,
    timeout: Duration,
) -> DeleteRecordsResponse {
    let outcomes =
        futures::future::join_all(waits.iter().map(|(ti, pi, partition, start)| async move {
            (
                *ti,
                *pi,
                partition.low_watermark_reaches(*start, timeout).await,
            )
        }))
        .await;
    for (ti, pi, outcome) in outcomes {
        let Err(e) = outcome else { continue };
        if let Some(result) = response
            .topics
            .get_mut(ti)
            .and_then(|t| t.partitions.get_mut(pi))
        {
            result.error_code = e.code();
            result.low_watermark = -1;
        }
    }
    response
}
