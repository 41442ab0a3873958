//! ConsumerGroupHeartbeat (KIP-848): join, stay in, and leave a group of the new protocol;
//! the answer carries the member's epoch and, when it changed, its assignment. The group's
//! logic is in `group/consumer.rs`; here requests are checked as Kafka checks them and topic
//! ids are translated.

use kafka_protocol::error::ResponseError;
use kafka_protocol::messages::consumer_group_heartbeat_response::{Assignment, TopicPartitions};
use kafka_protocol::messages::{
    ConsumerGroupHeartbeatRequest, ConsumerGroupHeartbeatResponse, ResponseKind,
};
use kafka_protocol::protocol::StrBytes;
use sluice_wire::Reply;

use crate::broker::Broker;
use crate::commit::Waits;
use crate::group::consumer::{self, Heartbeat, LEAVE_EPOCH, STATIC_LEAVE_EPOCH};
use crate::handlers::{Call, Versions};
use sluice_auth::acl::{Operation, ResourceType};

fn refuse(error: ResponseError, message: &str) -> ResponseKind {
    ResponseKind::ConsumerGroupHeartbeat(
        ConsumerGroupHeartbeatResponse::default()
            .with_error_code(error.code())
            .with_error_message(Some(StrBytes::from_string(message.to_string())))
            .with_member_epoch(-1),
    )
}

/// Kafka's checks of a heartbeat's fields, before the group sees it.
fn invalid(request: &ConsumerGroupHeartbeatRequest, version: i16) -> Option<&'static str> {
    let joining = request.member_epoch == 0;
    if request.group_id.is_empty() {
        return Some("GroupId can't be empty.");
    }
    if request.instance_id.as_ref().is_some_and(|i| i.is_empty()) {
        return Some("InstanceId can't be empty.");
    }
    if request.member_epoch < STATIC_LEAVE_EPOCH {
        return Some("MemberEpoch is invalid.");
    }
    if request.member_id.is_empty() && (version >= 1 || !joining) {
        return Some("MemberId can't be empty.");
    }
    if joining {
        if request.rebalance_timeout_ms <= 0 {
            return Some("RebalanceTimeoutMs must be provided in first request.");
        }
        if request
            .topic_partitions
            .as_ref()
            .is_none_or(|t| !t.is_empty())
        {
            return Some("TopicPartitions must be empty when (re-)joining.");
        }
        // An empty list is a subscription (a pattern that matches no topic yet, as the Java
        // client 4.0 sends): Kafka takes it since 4.0 (KAFKA-18095).
        if request.subscribed_topic_names.is_none() && request.subscribed_topic_regex.is_none() {
            return Some(
                "SubscribedTopicNames or SubscribedTopicRegex must be set in first request.",
            );
        }
    }
    None
}

pub const VERSIONS: Versions = Versions::new(0, 1);

pub fn handle(broker: &Broker, request: ConsumerGroupHeartbeatRequest, call: &Call) -> Reply {
    let version = call.version;
    if let Some(message) = invalid(&request, version) {
        return refuse(ResponseError::InvalidRequest, message).into();
    }
    if let Some(assignor) = request.server_assignor.as_deref() {
        if !consumer::ASSIGNORS.contains(&assignor) {
            return refuse(
                ResponseError::UnsupportedAssignor,
                &format!(
                    "assignor '{assignor}' is not one of {:?}",
                    consumer::ASSIGNORS
                ),
            )
            .into();
        }
    }
    // Describe on every topic named in the subscription (Kafka 4.0, KAFKA-18813): a member
    // may not learn, through its assignment, of topics it may not see.
    let authz = call.authz(broker);
    if let Some(names) = &request.subscribed_topic_names {
        let hidden: Vec<&str> = names
            .iter()
            .map(|n| n.as_str())
            .filter(|n| !authz.topic(Operation::Describe, n))
            .collect();
        if !hidden.is_empty() {
            return refuse(
                ResponseError::TopicAuthorizationFailed,
                &format!(
                    "not authorized to describe {} subscribed topic(s)",
                    hidden.len()
                ),
            )
            .into();
        }
    }
    let topics = broker.topics();
    let member_id = if request.member_id.is_empty() {
        uuid::Uuid::new_v4().to_string()
    } else {
        request.member_id.to_string()
    };
    let owned = request.topic_partitions.as_ref().map(|parts| {
        let mut owned = consumer::Assignment::new();
        for tp in parts {
            if let Some(t) = topics.get_by_id(tp.topic_id) {
                owned
                    .entry(t.name.to_string())
                    .or_default()
                    .extend(tp.partitions.iter().copied());
            }
        }
        owned
    });
    let heartbeat = Heartbeat {
        group_id: request.group_id.to_string(),
        member_id,
        member_epoch: request.member_epoch,
        instance_id: request.instance_id.as_ref().map(|s| s.to_string()),
        rebalance_timeout_ms: request.rebalance_timeout_ms,
        subscribed_topic_names: request
            .subscribed_topic_names
            .as_ref()
            .map(|names| names.iter().map(|n| n.to_string()).collect()),
        subscribed_topic_regex: request
            .subscribed_topic_regex
            .as_ref()
            .map(|r| r.to_string()),
        server_assignor: request.server_assignor.as_ref().map(|a| a.to_string()),
        owned,
        client_id: call.client_id.to_string(),
        client_host: call.client_host(),
    };
    // As in Kafka's group coordinator, a subscription (by name or by a regex, matched whole
    // against every topic) may take internal topics too: clients exclude them themselves
    // when they want to (`exclude.internal.topics`).
    let partitions_of = |name: &str| topics.get(name).map(|t| t.partition_count());
    // A regex matches only the topics the member may describe.
    let all_topics = || {
        topics
            .list()
            .iter()
            .filter(|t| authz.shows(Operation::Describe, ResourceType::Topic, &t.name))
            .map(|t| t.name.to_string())
            .collect()
    };
    let groups = &broker.groups;
    let mut coordinator = match groups.lock_for(&request.group_id) {
        Ok(c) => c,
        Err(e) => return refuse(e, "this node does not coordinate the group").into(),
    };
    let fence = crate::group::fence_later(broker, &request.group_id);
    let interval = coordinator.config.consumer.heartbeat_interval_ms;
    let (reply, records) =
        coordinator.consumer_heartbeat(heartbeat, &partitions_of, &all_topics, groups.now_ms());
    let written = groups.record(&mut coordinator, &records);
    let group_id = request.group_id.to_string();
    let waits = match written {
        Ok(waits) => waits,
        Err(e) => {
            coordinator.consumer_answer_lost(&group_id, &reply.member_id);
            return refuse(e, "cannot write the group's new state").into();
        }
    };
    drop(coordinator);
    // If the answer's record is not committed, the member hears an error instead, and the
    // assignment it missed must be sent again.
    let lost = {
        let broker = broker.arc();
        let member = reply.member_id.clone();
        move || {
            if let Some(b) = broker {
                b.groups
                    .coordinator
                    .lock()
                    .consumer_answer_lost(&group_id, &member);
            }
        }
    };
    if let Some((error, message)) = reply.error {
        // Fenced too: an UNKNOWN_MEMBER_ID read from a group just unloaded would make the
        // member drop its partitions; the fence answers NOT_COORDINATOR instead.
        return answer_when_committed(waits, fence, refuse(error, &message), lost);
    }
    let leaving = reply.member_epoch == LEAVE_EPOCH || reply.member_epoch == STATIC_LEAVE_EPOCH;
    let assignment = reply.assignment.map(|a| {
        Assignment::default().with_topic_partitions(
            a.into_iter()
                .filter_map(|(name, partitions)| {
                    let topic = topics.get(&name)?;
                    Some(
                        TopicPartitions::default()
                            .with_topic_id(topic.id)
                            .with_partitions(partitions.into_iter().collect()),
                    )
                })
                .collect(),
        )
    });
    let response = ResponseKind::ConsumerGroupHeartbeat(
        ConsumerGroupHeartbeatResponse::default()
            .with_member_id(Some(StrBytes::from_string(reply.member_id)))
            .with_member_epoch(reply.member_epoch)
            .with_heartbeat_interval_ms(if leaving { 0 } else { interval })
            .with_assignment(assignment),
    );
    answer_when_committed(waits, fence, response, lost)
}

/// An answer that changed the group is sent once its record is committed; one that changed
/// nothing, once what the group's log partition holds is (the read fence, in a cluster): no
/// member is told an epoch or an assignment a coordinator taking over would not know.
/// `lost` runs when the answer is replaced by an error.
fn answer_when_committed(
    waits: Waits,
    fence: impl FnOnce() -> Waits,
    response: ResponseKind,
    lost: impl FnOnce() + Send + 'static,
) -> Reply {
    let waits = if waits.is_empty() { fence() } else { waits };
    super::after_fence(response, waits, move |_, e| {
        lost();
        refuse(e, "the group's new state is not committed")
    })
}
