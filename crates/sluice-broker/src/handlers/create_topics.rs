//! CreateTopics: validated like Kafka validates them; on one node the replication factor is 1
//! and a manual assignment may name only this node; in a cluster the controller checks a
//! manual assignment's nodes.

use std::collections::BTreeMap;

use kafka_protocol::messages::create_topics_request::CreatableTopic;
use kafka_protocol::messages::create_topics_response::{
    CreatableTopicConfigs, CreatableTopicResult,
};
use kafka_protocol::messages::{
    CreateTopicsRequest, CreateTopicsResponse, ResponseKind, TopicName,
};

use super::{describe_configs::topic_entries, str_bytes};
use crate::broker::Broker;
use crate::error::BrokerError;
use crate::handlers::{Call, Versions};
use sluice_wire::Reply;

pub const VERSIONS: Versions = Versions::new(2, 7);

pub fn handle(broker: &Broker, mut request: CreateTopicsRequest, call: &Call) -> Reply {
    // Create on the cluster, or on each topic.
    let authz = call.authz(broker);
    let denied: Vec<CreatableTopicResult> =
        super::take_denied(&mut request.topics, |t| authz.may_create_topic(&t.name))
            .into_iter()
            .map(|t| {
                CreatableTopicResult::default()
                    .with_name(t.name)
                    .with_error_code(kafka_protocol::ResponseError::TopicAuthorizationFailed.code())
                    .with_error_message(Some(str_bytes("not authorized to create the topic")))
                    .with_num_partitions(-1)
                    .with_replication_factor(-1)
            })
            .collect();
    let reply = handle_authorized(broker, request, call);
    if denied.is_empty() {
        return reply;
    }
    super::map_response(reply, move |r| {
        if let ResponseKind::CreateTopics(r) = r {
            r.topics.extend(denied);
        }
    })
}

fn handle_authorized(broker: &Broker, request: CreateTopicsRequest, call: &Call) -> Reply {
    if let (Some(_), Some(broker)) = (broker.replication(), broker.arc()) {
        return in_cluster(broker, request, call.version);
    }
    Reply::Ready(Box::new(on_one_node(broker, request, call.version)))
}

fn on_one_node(broker: &Broker, request: CreateTopicsRequest, version: i16) -> ResponseKind {
    let validate_only = request.validate_only;
    let mut seen = std::collections::HashSet::new();
    let topics = request
        .topics
        .into_iter()
        .map(|topic| {
            let name = topic.name.clone();
            let outcome = match repeated(&mut seen, &name) {
                Some(e) => Err(e),
                None => create(broker, topic, validate_only).map(|(partitions, id)| Created {
                    partitions,
                    replication_factor: 1,
                    id,
                    overrides: broker
                        .topics()
                        .get(&name)
                        .map(|t| t.overrides())
                        .unwrap_or_default(),
                }),
            };
            answer(broker, name, outcome, version)
        })
        .collect();
    ResponseKind::CreateTopics(CreateTopicsResponse::default().with_topics(topics))
}

/// What creating one topic came to.
struct Created {
    partitions: i32,
    replication_factor: i32,
    id: uuid::Uuid,
    overrides: BTreeMap<String, String>,
}

/// A topic named twice in one request is refused (each time after the first).
fn repeated(
    seen: &mut std::collections::HashSet<TopicName>,
    name: &TopicName,
) -> Option<BrokerError> {
    (!seen.insert(name.clone())).then(|| {
        BrokerError::InvalidRequest(format!(
            "topic '{}' appears more than once in the request",
            &**name
        ))
    })
}

/// One topic's result; from v5 a created topic's configs come with it.
fn answer(
    broker: &Broker,
    name: TopicName,
    outcome: Result<Created, BrokerError>,
    version: i16,
) -> CreatableTopicResult {
    // No message unless there is an error: Kafka answers null there (the codec's default is
    // an empty string, which clients such as aiokafka take for a message).
    let result = CreatableTopicResult::default()
        .with_name(name)
        .with_num_partitions(-1)
        .with_replication_factor(-1)
        .with_error_message(None);
    let created = match outcome {
        Ok(created) => created,
        Err(e) => {
            return result
                .with_error_code(e.code())
                .with_error_message(Some(str_bytes(&e.to_string())))
        }
    };
    let result = result
        .with_num_partitions(created.partitions)
        .with_replication_factor(created.replication_factor as i16)
        .with_topic_id(created.id);
    if version < 5 {
        return result;
    }
    result.with_configs(Some(
        topic_entries(
            broker,
            &created.overrides,
            None,
            broker
                .replication()
                .map(|_| created.replication_factor.max(0) as usize),
        )
        .into_iter()
        .map(|e| {
            CreatableTopicConfigs::default()
                .with_name(e.name)
                .with_value(e.value)
                .with_config_source(e.config_source)
        })
        .collect(),
    ))
}

fn create(
    broker: &Broker,
    topic: CreatableTopic,
    validate_only: bool,
) -> Result<(i32, uuid::Uuid), BrokerError> {
    let node = broker.node_id();
    let partitions = if topic.assignments.is_empty() {
        if !(topic.replication_factor == -1 || topic.replication_factor == 1) {
            return Err(BrokerError::InvalidReplicationFactor(format!(
                "replication factor {} is larger than the 1 available broker",
                topic.replication_factor
            )));
        }
        if topic.num_partitions == -1 {
            broker.config().num_partitions
        } else {
            topic.num_partitions
        }
    } else {
        let assignment = manual_assignment(&topic)?;
        crate::topics::check_one_node_assignment(node, &assignment)?;
        assignment.len() as i32
    };
    let configs = configs_of(topic.configs)?;
    let created = broker
        .topics()
        .create(&topic.name, partitions, configs, validate_only)?;
    Ok((partitions, created.map_or(uuid::Uuid::nil(), |t| t.id)))
}

/// In a cluster: checked here as on one node, then created by the controller; each topic is
/// answered once this node has applied it.
fn in_cluster(broker: std::sync::Arc<Broker>, request: CreateTopicsRequest, version: i16) -> Reply {
    let validate_only = request.validate_only;
    Reply::Later(Box::pin(async move {
        let mut seen = std::collections::HashSet::new();
        let mut results = Vec::with_capacity(request.topics.len());
        for topic in request.topics {
            let name = topic.name.clone();
            let outcome = match repeated(&mut seen, &name) {
                Some(e) => Err(e),
                None => create_in_cluster(&broker, topic, validate_only).await,
            };
            results.push(answer(&broker, name, outcome, version));
        }
        Some(ResponseKind::CreateTopics(
            CreateTopicsResponse::default().with_topics(results),
        ))
    }))
}

async fn create_in_cluster(
    broker: &Broker,
    mut topic: CreatableTopic,
    validate_only: bool,
) -> Result<Created, BrokerError> {
    let configs = configs_of(std::mem::take(&mut topic.configs))?;
    let (partitions, replication_factor, id) = if topic.assignments.is_empty() {
        broker
            .create_topic_in_cluster(
                &topic.name,
                topic.num_partitions,
                i32::from(topic.replication_factor),
                configs.clone(),
                validate_only,
            )
            .await?
    } else {
        broker.check_new_topic_in_cluster(&topic.name)?;
        broker
            .create_assigned_topic_in_cluster(
                &topic.name,
                manual_assignment(&topic)?,
                configs.clone(),
                validate_only,
            )
            .await?
    };
    Ok(Created {
        partitions,
        replication_factor,
        id,
        overrides: configs,
    })
}

/// A manual assignment's replica lists in partition order, once its shape is right: the
/// partition count and replication factor left to it (-1), partitions numbered 0..n.
fn manual_assignment(topic: &CreatableTopic) -> Result<Vec<Vec<i32>>, BrokerError> {
    if topic.num_partitions != -1 || topic.replication_factor != -1 {
        return Err(BrokerError::InvalidRequest(
            "with a manual assignment, numPartitions and replicationFactor must be -1".into(),
        ));
    }
    let mut assignments: Vec<_> = topic.assignments.iter().collect();
    assignments.sort_unstable_by_key(|a| a.partition_index);
    if assignments
        .iter()
        .enumerate()
        .any(|(i, a)| a.partition_index != i as i32)
    {
        return Err(BrokerError::InvalidReplicaAssignment(
            "partitions of a manual assignment must be numbered 0..n".into(),
        ));
    }
    Ok(assignments
        .into_iter()
        .map(|a| a.broker_ids.iter().map(|b| b.0).collect())
        .collect())
}

fn configs_of(
    configs: Vec<kafka_protocol::messages::create_topics_request::CreatableTopicConfig>,
) -> Result<BTreeMap<String, String>, BrokerError> {
    let mut out = BTreeMap::new();
    for c in configs {
        let Some(value) = c.value else {
            return Err(BrokerError::InvalidConfig(
                crate::topic_config::ConfigError(format!("config '{}' has a null value", &*c.name)),
            ));
        };
        out.insert(c.name.to_string(), value.to_string());
    }
    Ok(out)
}
