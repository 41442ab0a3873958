//! CreatePartitions: grow a topic; a manual assignment may name only this node.

use kafka_protocol::messages::create_partitions_response::CreatePartitionsTopicResult;
use kafka_protocol::messages::{CreatePartitionsRequest, CreatePartitionsResponse, ResponseKind};

use super::str_bytes;
use crate::broker::Broker;
use crate::error::BrokerError;
use crate::handlers::{Call, Versions};
use sluice_auth::acl::Operation;
use sluice_wire::Reply;

pub const VERSIONS: Versions = Versions::new(0, 3);

pub fn handle(broker: &Broker, mut request: CreatePartitionsRequest, call: &Call) -> Reply {
    let authz = call.authz(broker);
    let denied: Vec<CreatePartitionsTopicResult> = super::take_denied(&mut request.topics, |t| {
        authz.topic(Operation::Alter, &t.name)
    })
    .into_iter()
    .map(|t| {
        CreatePartitionsTopicResult::default()
            .with_name(t.name)
            .with_error_code(kafka_protocol::ResponseError::TopicAuthorizationFailed.code())
            .with_error_message(Some(str_bytes("not authorized to alter the topic")))
    })
    .collect();
    let reply = handle_authorized(broker, request);
    if denied.is_empty() {
        return reply;
    }
    super::map_response(reply, move |r| {
        if let ResponseKind::CreatePartitions(r) = r {
            r.results.extend(denied);
        }
    })
}

fn handle_authorized(broker: &Broker, request: CreatePartitionsRequest) -> Reply {
    if let Some(replication) = broker.replication() {
        let replication = std::sync::Arc::clone(replication);
        return Reply::Later(Box::pin(async move {
            let mut results = Vec::new();
            for topic in request.topics {
                let outcome = if topic.assignments.is_some() {
                    Err(BrokerError::InvalidReplicaAssignment(
                        "manual replica assignments are not supported in a cluster yet".into(),
                    ))
                } else if crate::topics::is_internal(&topic.name) {
                    // More partitions would move every group (or transactional id) to another
                    // partition, away from its state.
                    Err(BrokerError::InvalidPartitions(format!(
                        "internal topic '{}' cannot get more partitions",
                        topic.name.as_str()
                    )))
                } else {
                    replication
                        .add_partitions(&topic.name, topic.count, request.validate_only)
                        .await
                };
                let result = CreatePartitionsTopicResult::default().with_name(topic.name);
                results.push(match outcome {
                    Ok(()) => result,
                    Err(e) => result
                        .with_error_code(e.code())
                        .with_error_message(Some(str_bytes(&e.to_string()))),
                });
            }
            Some(ResponseKind::CreatePartitions(
                CreatePartitionsResponse::default().with_results(results),
            ))
        }));
    }
    Reply::Ready(Box::new(on_one_node(broker, request)))
}

fn on_one_node(broker: &Broker, request: CreatePartitionsRequest) -> ResponseKind {
    let node = broker.node_id();
    let results = request
        .topics
        .into_iter()
        .map(|topic| {
            let bad_assignment = topic.assignments.as_ref().and_then(|assignments| {
                assignments
                    .iter()
                    .find(|a| a.broker_ids.len() != 1 || a.broker_ids[0].0 != node)
                    .map(|a| {
                        BrokerError::InvalidReplicaAssignment(format!(
                            "assignment to brokers {:?}: this cluster has only broker {node}",
                            a.broker_ids.iter().map(|b| b.0).collect::<Vec<_>>()
                        ))
                    })
            });
            let outcome = match bad_assignment {
                Some(e) => Err(e),
                None => {
                    broker
                        .topics()
                        .add_partitions(&topic.name, topic.count, request.validate_only)
                }
            };
            let result = CreatePartitionsTopicResult::default().with_name(topic.name);
            match outcome {
                Ok(()) => result,
                Err(e) => result
                    .with_error_code(e.code())
                    .with_error_message(Some(str_bytes(&e.to_string()))),
            }
        })
        .collect();
    ResponseKind::CreatePartitions(CreatePartitionsResponse::default().with_results(results))
}
