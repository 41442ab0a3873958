//! OffsetCommit: validated against the group (members must be of the current generation; an
//! empty group takes commits from standalone consumers), written to `__consumer_offsets`, and
//! answered once durable.

use kafka_protocol::error::ResponseError;
use kafka_protocol::messages::offset_commit_response::{
    OffsetCommitResponsePartition, OffsetCommitResponseTopic,
};
use kafka_protocol::messages::{OffsetCommitRequest, OffsetCommitResponse, ResponseKind};
use sluice_wire::Reply;

use crate::broker::Broker;
use crate::commit;
use crate::group::coordinator::{offset_record, Committed};
use crate::group::offset_commit_error;
use crate::handlers::{Call, Versions};
use sluice_auth::acl::Operation;

pub const VERSIONS: Versions = Versions::new(2, 9);

pub fn handle(broker: &Broker, mut request: OffsetCommitRequest, call: &Call) -> Reply {
    // Read on the group for the whole request, then Read on each topic (Kafka's order).
    let authz = call.authz(broker);
    let group_denied = !authz.group(Operation::Read, &request.group_id);
    let denied = super::take_denied(&mut request.topics, |t| {
        !group_denied && authz.topic(Operation::Read, &t.name)
    });
    let error = if group_denied {
        ResponseError::GroupAuthorizationFailed
    } else {
        ResponseError::TopicAuthorizationFailed
    };
    let denied: Vec<OffsetCommitResponseTopic> = denied
        .iter()
        .map(|t| {
            OffsetCommitResponseTopic::default()
                .with_name(t.name.clone())
                .with_topic_id(t.topic_id)
                .with_partitions(
                    t.partitions
                        .iter()
                        .map(|p| {
                            OffsetCommitResponsePartition::default()
                                .with_partition_index(p.partition_index)
                                .with_error_code(error.code())
                        })
                        .collect(),
                )
        })
        .collect();
    if group_denied {
        return Reply::Ready(Box::new(ResponseKind::OffsetCommit(
            OffsetCommitResponse::default().with_topics(denied),
        )));
    }
    let reply = handle_authorized(broker, request);
    if denied.is_empty() {
        return reply;
    }
    super::map_response(reply, move |r| {
        if let ResponseKind::OffsetCommit(r) = r {
            r.topics.extend(denied);
        }
    })
}

fn handle_authorized(broker: &Broker, request: OffsetCommitRequest) -> Reply {
    let groups = &broker.groups;
    let now = groups.now_ms();
    let mut coordinator = match groups.lock_for(&request.group_id) {
        Ok(c) => c,
        Err(e) => {
            let topics = fail_all(every_partition(&request), e);
            return Reply::Ready(Box::new(ResponseKind::OffsetCommit(
                OffsetCommitResponse::default().with_topics(topics),
            )));
        }
    };
    let max_metadata = coordinator.config.max_metadata_bytes;
    let committed: Vec<(&str, i32)> = request
        .topics
        .iter()
        .flat_map(|t| {
            t.partitions
                .iter()
                .map(move |p| (t.name.as_str(), p.partition_index))
        })
        .collect();
    let group_error = coordinator.check_commit(
        &request.group_id,
        request.generation_id_or_member_epoch,
        &request.member_id,
        request.group_instance_id.as_deref(),
        &committed,
        false,
    );
    if group_error.is_ok() {
        // A member's commit counts as its heartbeat, as on Kafka (clients without a heartbeat
        // thread commit while they process).
        coordinator.commit_heartbeat(&request.group_id, &request.member_id, now);
    }
    let mut records = Vec::new();
    let topics: Vec<OffsetCommitResponseTopic> = request
        .topics
        .iter()
        .map(|t| {
            let partitions = t
                .partitions
                .iter()
                .map(|p| {
                    let error = if let Err(e) = group_error {
                        Some(e)
                    } else if let Some(e) = offset_commit_error(
                        broker,
                        &t.name,
                        p.partition_index,
                        p.committed_metadata.as_deref(),
                        max_metadata,
                    ) {
                        Some(e)
                    } else {
                        records.push(offset_record(
                            &request.group_id,
                            &t.name,
                            p.partition_index,
                            Committed {
                                offset: p.committed_offset,
                                leader_epoch: p.committed_leader_epoch,
                                metadata: p
                                    .committed_metadata
                                    .as_ref()
                                    .map(|m| m.to_string())
                                    .unwrap_or_default(),
                                commit_timestamp_ms: now,
                            },
                        ));
                        None
                    };
                    OffsetCommitResponsePartition::default()
                        .with_partition_index(p.partition_index)
                        .with_error_code(error.map_or(0, |e| e.code()))
                })
                .collect();
            OffsetCommitResponseTopic::default()
                .with_name(t.name.clone())
                .with_partitions(partitions)
        })
        .collect();
    let written = groups.record(&mut coordinator, &records);
    drop(coordinator);
    match written {
        Ok(waits) if waits.is_empty() => Reply::Ready(Box::new(ResponseKind::OffsetCommit(
            OffsetCommitResponse::default().with_topics(topics),
        ))),
        Ok(waits) => Reply::Later(Box::pin(async move {
            let topics = match commit::committed(waits).await {
                Ok(()) => topics,
                Err(e) => fail_all(topics, e),
            };
            Some(ResponseKind::OffsetCommit(
                OffsetCommitResponse::default().with_topics(topics),
            ))
        })),
        Err(e) => Reply::Ready(Box::new(ResponseKind::OffsetCommit(
            OffsetCommitResponse::default().with_topics(fail_all(topics, e)),
        ))),
    }
}

/// Every partition of the request, without an error yet.
fn every_partition(request: &OffsetCommitRequest) -> Vec<OffsetCommitResponseTopic> {
    request
        .topics
        .iter()
        .map(|t| {
            OffsetCommitResponseTopic::default()
                .with_name(t.name.clone())
                .with_partitions(
                    t.partitions
                        .iter()
                        .map(|p| {
                            OffsetCommitResponsePartition::default()
                                .with_partition_index(p.partition_index)
                        })
                        .collect(),
                )
        })
        .collect()
}

/// The response with `error` on every partition that had none.
fn fail_all(
    topics: Vec<OffsetCommitResponseTopic>,
    error: ResponseError,
) -> Vec<OffsetCommitResponseTopic> {
    topics
        .into_iter()
        .map(|mut t| {
            t.partitions = std::mem::take(&mut t.partitions)
                .into_iter()
                .map(|p| {
                    if p.error_code == 0 {
                        p.with_error_code(error.code())
                    } else {
                        p
                    }
                })
                .collect();
            t
        })
        .collect()
}
