//! OffsetDelete (KIP-496): forget a group's committed offsets for some partitions, unless the
//! group's members are subscribed to the topic (GROUP_SUBSCRIBED_TO_TOPIC).

use kafka_protocol::error::ResponseError;
use kafka_protocol::messages::offset_delete_response::{
    OffsetDeleteResponsePartition, OffsetDeleteResponseTopic,
};
use kafka_protocol::messages::{OffsetDeleteRequest, OffsetDeleteResponse, ResponseKind};

use sluice_wire::Reply;

use crate::broker::Broker;
use crate::commit::committed;
use crate::group::records::{OffsetKey, Record};
use crate::group::state::GroupState;
use crate::handlers::{Call, Versions};
use sluice_auth::acl::Operation;

pub const VERSIONS: Versions = Versions::new(0, 0);

pub fn handle(broker: &Broker, mut request: OffsetDeleteRequest, call: &Call) -> Reply {
    // Delete on the group, then Read on each topic (Kafka's checks).
    let authz = call.authz(broker);
    if !authz.group(Operation::Delete, &request.group_id) {
        return Reply::Ready(Box::new(ResponseKind::OffsetDelete(
            OffsetDeleteResponse::default()
                .with_error_code(ResponseError::GroupAuthorizationFailed.code()),
        )));
    }
    let denied = super::take_denied(&mut request.topics, |t| {
        authz.topic(Operation::Read, &t.name)
    });
    let denied: Vec<OffsetDeleteResponseTopic> = denied
        .iter()
        .map(|t| {
            OffsetDeleteResponseTopic::default()
                .with_name(t.name.clone())
                .with_partitions(
                    t.partitions
                        .iter()
                        .map(|p| {
                            OffsetDeleteResponsePartition::default()
                                .with_partition_index(p.partition_index)
                                .with_error_code(ResponseError::TopicAuthorizationFailed.code())
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
        if let ResponseKind::OffsetDelete(r) = r {
            r.topics.extend(denied);
        }
    })
}

fn handle_authorized(broker: &Broker, request: OffsetDeleteRequest) -> Reply {
    let top_only = |error: ResponseError| {
        Reply::Ready(Box::new(ResponseKind::OffsetDelete(
            OffsetDeleteResponse::default().with_error_code(error.code()),
        )))
    };
    let groups = &broker.groups;
    let mut coordinator = match groups.lock_for(&request.group_id) {
        Ok(c) => c,
        Err(e) => return top_only(e),
    };
    if coordinator.state_of(&request.group_id) == GroupState::Dead {
        return top_only(ResponseError::GroupIdNotFound);
    }
    let subscribed = coordinator.subscribed_topics(&request.group_id);
    let mut records = Vec::new();
    let topics: Vec<OffsetDeleteResponseTopic> = request
        .topics
        .iter()
        .map(|t| {
            let partitions = t
                .partitions
                .iter()
                .map(|p| {
                    let error = if subscribed.iter().any(|s| s.as_str() == t.name.as_str()) {
                        Some(ResponseError::GroupSubscribedToTopic)
                    } else if !broker.partition_exists(&t.name, p.partition_index) {
                        Some(ResponseError::UnknownTopicOrPartition)
                    } else {
                        records.push(Record::OffsetTombstone(OffsetKey {
                            group: request.group_id.to_string(),
                            topic: t.name.to_string(),
                            partition: p.partition_index,
                        }));
                        None
                    };
                    OffsetDeleteResponsePartition::default()
                        .with_partition_index(p.partition_index)
                        .with_error_code(error.map_or(0, |e| e.code()))
                })
                .collect();
            OffsetDeleteResponseTopic::default()
                .with_name(t.name.clone())
                .with_partitions(partitions)
        })
        .collect();
    let written = groups.record(&mut coordinator, &records);
    drop(coordinator);
    let waits = match written {
        Ok(waits) => waits,
        Err(e) => return top_only(e),
    };
    Reply::Later(Box::pin(async move {
        let response = match committed(waits).await {
            Ok(()) => OffsetDeleteResponse::default().with_topics(topics),
            Err(e) => OffsetDeleteResponse::default().with_error_code(e.code()),
        };
        Some(ResponseKind::OffsetDelete(response))
    }))
}
