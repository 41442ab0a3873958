//! DeleteTopics, by name (v0-5) or by name or id (v6+).

use kafka_protocol::messages::delete_topics_response::DeletableTopicResult;
use kafka_protocol::messages::{
    DeleteTopicsRequest, DeleteTopicsResponse, ResponseKind, TopicName,
};

use super::{str_bytes, topic_name};
use crate::broker::Broker;
use crate::error::BrokerError;
use crate::handlers::{Call, Versions};

pub const VERSIONS: Versions = Versions::new(1, 6);

pub fn handle(broker: &Broker, request: DeleteTopicsRequest, call: &Call) -> ResponseKind {
    let version = call.version;
    let wanted: Vec<(Option<String>, uuid::Uuid)> = if version >= 6 {
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
    };
    let responses = wanted
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
