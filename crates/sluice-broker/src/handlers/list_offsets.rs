//! ListOffsets: the earliest (-2) and latest (-1) offsets, the record with the largest
//! timestamp (-3, KIP-734), or the first record at or after a timestamp (KIP-79).

use kafka_protocol::error::ResponseError;
use kafka_protocol::messages::list_offsets_response::{
    ListOffsetsPartitionResponse, ListOffsetsTopicResponse,
};
use kafka_protocol::messages::{ListOffsetsRequest, ListOffsetsResponse, ResponseKind};

use crate::broker::Broker;
use crate::error::log_error;
use crate::handlers::{Call, Versions};
use sluice_auth::acl::Operation;

const LATEST: i64 = -1;
const EARLIEST: i64 = -2;
const MAX_TIMESTAMP: i64 = -3;

pub const VERSIONS: Versions = Versions::new(1, 7);

pub fn handle(broker: &Broker, mut request: ListOffsetsRequest, call: &Call) -> ResponseKind {
    let authz = call.authz(broker);
    let denied: Vec<ListOffsetsTopicResponse> = super::take_denied(&mut request.topics, |t| {
        authz.topic(Operation::Describe, &t.name)
    })
    .into_iter()
    .map(|t| {
        ListOffsetsTopicResponse::default()
            .with_name(t.name)
            .with_partitions(
                t.partitions
                    .iter()
                    .map(|p| {
                        ListOffsetsPartitionResponse::default()
                            .with_partition_index(p.partition_index)
                            .with_error_code(ResponseError::TopicAuthorizationFailed.code())
                            .with_timestamp(-1)
                            .with_offset(-1)
                            .with_leader_epoch(-1)
                    })
                    .collect(),
            )
    })
    .collect();
    let mut response = handle_authorized(broker, request, call);
    if let ResponseKind::ListOffsets(r) = &mut response {
        r.topics.extend(denied);
    }
    response
}

fn handle_authorized(broker: &Broker, request: ListOffsetsRequest, call: &Call) -> ResponseKind {
    let version = call.version;
    // read_committed consumers start from the last stable offset, not the high watermark.
    let committed = request.isolation_level == 1;
    let topics = request
        .topics
        .into_iter()
        .map(|topic| {
            let found = broker.topics().get(&topic.name);
            let partitions = topic
                .partitions
                .into_iter()
                .map(|p| {
                    let response = ListOffsetsPartitionResponse::default()
                        .with_partition_index(p.partition_index)
                        .with_timestamp(-1)
                        .with_offset(-1);
                    let Some(partition) =
                        found.as_ref().and_then(|t| t.partition(p.partition_index))
                    else {
                        let error = found
                            .as_ref()
                            .map_or(ResponseError::UnknownTopicOrPartition, |t| {
                                t.missing_partition_error(p.partition_index)
                            });
                        return response.with_error_code(error.code());
                    };
                    // Only a leader answers (a follower's ends may be behind).
                    if !partition.progress().leading {
                        return response.with_error_code(ResponseError::NotLeaderOrFollower.code());
                    }
                    if let Err(e) = partition.check_current_epoch(p.current_leader_epoch) {
                        return response.with_error_code(e.code());
                    }
                    let epoch = partition.leader_epoch().0;
                    let progress = partition.progress();
                    // A new leader whose high watermark is still below where its epoch began
                    // may not know its predecessor's end yet: the latest offset, or a lookup
                    // that found nothing below it, waits (KIP-207; versions before 5 know
                    // only LEADER_NOT_AVAILABLE). Both are retriable.
                    let not_yet = || {
                        let error = if version >= 5 {
                            ResponseError::OffsetNotAvailable
                        } else {
                            ResponseError::LeaderNotAvailable
                        };
                        response.clone().with_error_code(error.code())
                    };
                    let lagging = partition.high_watermark_behind_epoch_start();
                    let found = match p.timestamp {
                        LATEST if lagging => return not_yet(),
                        LATEST if committed => Ok(Some((progress.stable, -1))),
                        LATEST => Ok(Some((progress.visible, -1))),
                        EARLIEST => Ok(Some((progress.log_start, -1))),
                        MAX_TIMESTAMP => partition.offset_of_max_timestamp(committed),
                        ts if ts >= 0 => partition.offset_for_timestamp(ts, committed),
                        _ => return response.with_error_code(ResponseError::InvalidRequest.code()),
                    };
                    if lagging && matches!(found, Ok(None)) && p.timestamp != EARLIEST {
                        return not_yet();
                    }
                    match found {
                        // The leader epoch is in the response from v4 on (KIP-320): as in
                        // Kafka, the current one beside the latest offset, otherwise the one
                        // that wrote the offset found (which a consumer validates its position
                        // against after seeking there).
                        Ok(Some((offset, timestamp))) => {
                            let epoch = if version < 4 {
                                -1
                            } else if p.timestamp == LATEST {
                                epoch
                            } else {
                                partition.epoch_at(offset).map_or(-1, |e| e.0)
                            };
                            response
                                .with_offset(offset.0)
                                .with_timestamp(timestamp)
                                .with_leader_epoch(epoch)
                        }
                        Ok(None) => response,
                        Err(e) => response.with_error_code(log_error(&e).code()),
                    }
                })
                .collect();
            ListOffsetsTopicResponse::default()
                .with_name(topic.name)
                .with_partitions(partitions)
        })
        .collect();
    ResponseKind::ListOffsets(ListOffsetsResponse::default().with_topics(topics))
}
