//! DeleteTopics, by name (v0-5) or by name or id (v6+).

use kafka_protocol::messages::delete_topics_response::DeletableTopicResult;
use kafka_protocol::messages::{
    DeleteTopicsRequest, DeleteTopicsResponse, ResponseKind, TopicName,
};

use super::{str_bytes, topic_name};
use crate::broker::Broker;
use crate::error::BrokerError;
use crate::handlers::{Call, Versions};
use sluice_auth::acl::Operation;
use sluice_wire::Reply;

pub const VERSIONS: Versions = Versions::new(1, 6);

pub fn handle(broker: &Broker, mut request: DeleteTopicsRequest, call: &Call) -> Reply {
    // Delete on each topic; a topic one may not delete is TOPIC_AUTHORIZATION_FAILED whether
    // it exists or not.
    let authz = call.authz(broker);
    let failed = |name: Option<TopicName>, id: uuid::Uuid| {
        DeletableTopicResult::default()
            .with_name(name)
            .with_topic_id(id)
            .with_error_code(kafka_protocol::ResponseError::TopicAuthorizationFailed.code())
    };
    let denied: Vec<DeletableTopicResult> = if call.version >= 6 {
        // Each id resolved once, here: an id unknown now is answered now (not looked up
        // again later, when it might name a topic that was never checked).
        let mut unknown = Vec::new();
        let refused = super::take_denied(&mut request.topics, |t| {
            let name = t
                .name
                .as_ref()
                .map(|n| n.to_string())
                .or_else(|| broker.topic_name_of(t.topic_id));
            match name {
                Some(n) => authz.topic(Operation::Delete, &n),
                None => {
                    unknown.push(t.topic_id);
                    false
                }
            }
        })
        .into_iter()
        .map(|t| {
            if unknown.contains(&t.topic_id) {
                DeletableTopicResult::default()
                    .with_topic_id(t.topic_id)
                    .with_error_code(kafka_protocol::ResponseError::UnknownTopicId.code())
            } else {
                failed(t.name, t.topic_id)
            }
        })
        .collect::<Vec<_>>();
        refused
    } else {
        super::take_denied(&mut request.topic_names, |n| {
            authz.topic(Operation::Delete, n)
        })
        .into_iter()
        .map(|n| failed(Some(n), uuid::Uuid::nil()))
        .collect()
    };
    let reply = handle_authorized(broker, request, call);
    if denied.is_empty() {
        return reply;
    }
    super::map_response(reply, move |r| {
        if let ResponseKind::DeleteTopics(r) = r {
            r.responses.extend(denied);
        }
    })
}

fn handle_authorized(broker: &Broker, request: DeleteTopicsRequest, call: &Call) -> Reply {
    if let (Some(replication), Some(broker)) = (broker.replication(), broker.arc()) {
        let replication = std::sync::Arc::clone(replication);
        let version = call.version;
        return Reply::Later(Box::pin(async move {
            let mut responses = Vec::new();
            for (name, id) in wanted(request, version) {
                let state = replication.state();
                let name = match name {
                    Some(name) => Ok(name),
                    None => state
                        .state
                        .topics
                        .get(&id)
                        .map(|t| t.name.clone())
                        .ok_or(BrokerError::UnknownTopicId(id)),
                };
                let asked = name.as_ref().ok().map(|n| topic_name(n));
                let outcome = match &name {
                    Ok(n) if crate::topics::is_internal(n) => Err(BrokerError::InvalidTopic(
                        format!("{n} is internal and cannot be deleted"),
                    )),
                    Ok(n) => replication.delete_topic(n).await,
                    Err(_) => Err(BrokerError::UnknownTopicId(id)),
                };
                responses.push(match outcome {
                    Ok(deleted) => {
                        if let Ok(n) = &name {
                            broker.groups.forget_topic(n);
                        }
                        DeletableTopicResult::default()
                            .with_name(asked)
                            .with_topic_id(deleted)
                    }
                    Err(e) => DeletableTopicResult::default()
                        .with_name(asked.or_else(|| (version < 6).then(TopicName::default)))
                        .with_topic_id(id)
                        .with_error_code(e.code())
                        .with_error_message(Some(str_bytes(&e.to_string()))),
                });
            }
            Some(ResponseKind::DeleteTopics(
                DeleteTopicsResponse::default().with_responses(responses),
            ))
        }));
    }
    Reply::Ready(Box::new(on_one_node(broker, request, call.version)))
}

/// The topics a request names: by name before v6, by name or id from v6.
fn wanted(request: DeleteTopicsRequest, version: i16) -> Vec<(Option<String>, uuid::Uuid)> {
    if version >= 6 {
        request
            .topics
            .into_iter()
            .map(|t| (t.name.map(|n| n.to_string()), t.topic_id))
            .collect()
    } else {
        request
            .topic_names
            .into_iter()
            .map(|n| (Some(n.to_string()), uuid::Uuid::nil()))
            .collect()
    }
}

fn on_one_node(broker: &Broker, request: DeleteTopicsRequest, version: i16) -> ResponseKind {
    let responses = wanted(request, version)
        .into_iter()
        .map(|(name, id)| {
            let name = match name {
                Some(name) => Ok(name),
                None => broker
                    .topics()
                    .get_by_id(id)
                    .map(|t| t.name.to_string())
                    .ok_or(BrokerError::UnknownTopicId(id)),
            };
            // Before v6 the name is not nullable: answer with the one asked for.
            let asked = name.as_ref().ok().map(|n| topic_name(n));
            let outcome = name.and_then(|n| broker.delete_topic(&n));
            match outcome {
                Ok(topic) => DeletableTopicResult::default()
                    .with_name(Some(topic_name(&topic.name)))
                    .with_topic_id(topic.id),
                Err(e) => DeletableTopicResult::default()
                    .with_name(asked.or_else(|| (version < 6).then(TopicName::default)))
                    .with_topic_id(id)
                    .with_error_code(e.code())
                    .with_error_message(Some(str_bytes(&e.to_string()))),
            }
        })
        .collect();
    ResponseKind::DeleteTopics(DeleteTopicsResponse::default().with_responses(responses))
}
