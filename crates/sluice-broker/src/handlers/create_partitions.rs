//! CreatePartitions: grow a topic; a manual assignment may name only this node, or in a
//! cluster the nodes the controller accepts for it.

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
        let counts: Vec<Result<(), BrokerError>> = request
            .topics
            .iter()
            .map(|t| broker.topics().check_partition_count(t.count))
            .collect();
        return Reply::Later(Box::pin(async move {
            let mut results = Vec::new();
            for (topic, count) in request.topics.into_iter().zip(counts) {
                let outcome = if crate::topics::is_internal(&topic.name) {
                    // More partitions would move every group (or transactional id) to another
                    // partition, away from its state.
                    Err(BrokerError::InvalidPartitions(format!(
                        "internal topic '{}' cannot get more partitions",
                        topic.name.as_str()
                    )))
                } else if let (true, Err(e)) = (
                    // Kafka answers an unknown topic before it looks at the count.
                    replication
                        .state()
                        .state
                        .names
                        .contains_key(topic.name.as_str()),
                    count,
                ) {
                    Err(e)
                } else {
                    let assignment = topic.assignments.as_ref().map(|a| {
                        a.iter()
                            .map(|r| {
                                r.broker_ids
                                    .iter()
                                    .map(|b| sluice_cluster::NodeId(b.0))
                                    .collect()
                            })
                            .collect()
                    });
                    replication
                        .add_partitions(&topic.name, topic.count, assignment, request.validate_only)
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
            let current = broker
                .topics()
                .get(&topic.name)
                .map(|t| t.partition_count());
            let additional = current.map_or(0, |c| i64::from(topic.count) - i64::from(c));
            // An unknown topic or a count that is no increase: the topics answer that first,
            // as Kafka does.
            let bad_assignment = topic
                .assignments
                .as_ref()
                .filter(|_| additional > 0)
                .and_then(|assignments| {
                    let lists: Vec<Vec<i32>> = assignments
                        .iter()
                        .map(|a| a.broker_ids.iter().map(|b| b.0).collect())
                        .collect();
                    let growing = current.map(|c| (c, additional));
                    crate::topics::check_one_node_assignment(node, &lists, growing).err()
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
