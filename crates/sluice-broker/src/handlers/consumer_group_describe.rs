//! ConsumerGroupDescribe (KIP-848): a group of the new protocol as admin tools show it — its
//! epochs, assignor, and each member's epoch, subscription, current and target assignment. A
//! group that is not one (classic, or only committed offsets) is GROUP_ID_NOT_FOUND, on which
//! clients fall back to DescribeGroups, as with Kafka.

use kafka_protocol::error::ResponseError;
use kafka_protocol::messages::consumer_group_describe_response::{
    Assignment, DescribedGroup, Member, TopicPartitions,
};
use kafka_protocol::messages::{
    ConsumerGroupDescribeRequest, ConsumerGroupDescribeResponse, ResponseKind, TopicName,
};

use super::str_bytes;
use crate::broker::Broker;
use crate::group::consumer;
use crate::handlers::{Call, Versions};
use sluice_auth::acl::{Operation, ResourceType};
use sluice_wire::Reply;

/// Kafka's member type of a member of the new protocol (v1).
const CONSUMER_MEMBER: i8 = 1;

pub const VERSIONS: Versions = Versions::new(0, 1);

pub fn handle(broker: &Broker, request: ConsumerGroupDescribeRequest, call: &Call) -> Reply {
    let authz = call.authz(broker);
    let topics = broker.topics();
    let assignment = |a: &consumer::Assignment| {
        Assignment::default().with_topic_partitions(
            a.iter()
                .filter_map(|(name, partitions)| {
                    let topic = topics.get(name)?;
                    Some(
                        TopicPartitions::default()
                            .with_topic_id(topic.id)
                            .with_topic_name(TopicName(str_bytes(name)))
                            .with_partitions(partitions.iter().copied().collect()),
                    )
                })
                .collect(),
        )
    };
    let coordinator = broker.groups.coordinator.lock();
    let groups = request
        .group_ids
        .iter()
        .map(|id| {
            let described = DescribedGroup::default()
                .with_group_id(id.clone())
                .with_authorized_operations(i32::MIN);
            if !authz.group(Operation::Describe, id) {
                return described.with_error_code(ResponseError::GroupAuthorizationFailed.code());
            }
            if let Err(e) = broker.groups.check(id) {
                return described.with_error_code(e.code());
            }
            let Some(group) = coordinator.consumer_group(id) else {
                return described
                    .with_error_code(ResponseError::GroupIdNotFound.code())
                    .with_error_message(Some(str_bytes(&format!(
                        "group '{}' is not a consumer group of the new protocol",
                        &**id
                    ))));
            };
            let members = group
                .members
                .values()
                .map(|m| {
                    Member::default()
                        .with_member_id(str_bytes(&m.id))
                        .with_instance_id(m.instance_id.as_deref().map(str_bytes))
                        .with_member_epoch(m.epoch)
                        .with_client_id(str_bytes(&m.client_id))
                        .with_client_host(str_bytes(&m.client_host))
                        .with_subscribed_topic_names(
                            m.subscribed_topic_names
                                .iter()
                                .map(|t| TopicName(str_bytes(t)))
                                .collect(),
                        )
                        .with_subscribed_topic_regex(
                            m.subscribed_topic_regex
                                .as_ref()
                                .map(|r| str_bytes(r.as_str())),
                        )
                        .with_assignment(assignment(&m.assigned))
                        .with_target_assignment(assignment(
                            group
                                .target
                                .get(&m.id)
                                .unwrap_or(&consumer::Assignment::new()),
                        ))
                        .with_member_type(CONSUMER_MEMBER)
                })
                .collect();
            described
                .with_group_state(str_bytes(group.state()))
                .with_group_epoch(group.epoch)
                .with_assignment_epoch(group.assignment_epoch)
                .with_assignor_name(str_bytes(group.assignor()))
                .with_members(members)
        })
        .collect::<Vec<_>>();
    // In a cluster, what was read is sent once the groups' records are committed (a group
    // found missing too: its delete may not be).
    let waits = broker.groups.shards.settled_all(
        groups
            .iter()
            .filter(|g| read_from_state(g.error_code))
            .map(|g| g.group_id.as_str()),
    );
    drop(coordinator);
    // A group holding a topic one may not describe is not shown (Kafka 4.0).
    let mut groups = groups;
    for g in groups.iter_mut().filter(|g| g.error_code == 0) {
        let names = g.members.iter().flat_map(|m| {
            m.subscribed_topic_names
                .iter()
                .map(|n| n.to_string())
                .chain(
                    m.assignment
                        .topic_partitions
                        .iter()
                        .map(|t| t.topic_name.to_string()),
                )
        });
        let hidden = names
            .collect::<Vec<_>>()
            .iter()
            .any(|n| !authz.shows(Operation::Describe, ResourceType::Topic, n));
        if hidden {
            *g = DescribedGroup::default()
                .with_group_id(g.group_id.clone())
                .with_error_code(ResponseError::TopicAuthorizationFailed.code())
                .with_error_message(Some(str_bytes(
                    "the group holds topics this principal may not describe",
                )))
                .with_authorized_operations(i32::MIN);
        }
    }
    // KIP-430: what the principal may do with each group found, when asked.
    if request.include_authorized_operations {
        for g in groups.iter_mut().filter(|g| g.error_code == 0) {
            g.authorized_operations = authz.authorized_operations(ResourceType::Group, &g.group_id);
        }
    }
    let response = ResponseKind::ConsumerGroupDescribe(
        ConsumerGroupDescribeResponse::default().with_groups(groups),
    );
    super::after_fence(response, waits, failed)
}

/// Whether an answer with this code was read from the coordinator's state: a description,
/// or the group found missing.
fn read_from_state(code: i16) -> bool {
    code == 0 || code == ResponseError::GroupIdNotFound.code()
}

/// `response` with `error` in place of every answer read from the state.
fn failed(mut response: ResponseKind, error: ResponseError) -> ResponseKind {
    if let ResponseKind::ConsumerGroupDescribe(r) = &mut response {
        for g in r
            .groups
            .iter_mut()
            .filter(|g| read_from_state(g.error_code))
        {
            *g = DescribedGroup::default()
                .with_group_id(g.group_id.clone())
                .with_error_code(error.code())
                .with_authorized_operations(i32::MIN);
        }
    }
    response
}
