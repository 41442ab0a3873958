//! CreatePartitions: grow a topic; a manual assignment may name only this node, or in a
//! cluster the nodes the controller accepts for it.

use kafka_protocol::messages::create_partitions_request::CreatePartitionsAssignment;
use kafka_protocol::messages::create_partitions_response::CreatePartitionsTopicResult;
use kafka_protocol::messages::{CreatePartitionsRequest, CreatePartitionsResponse, ResponseKind};

use super::str_bytes;
use crate::broker::Broker;
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
    let (Some(_), Some(broker)) = (broker.replication(), broker.arc()) else {
        return Reply::Ready(Box::new(on_one_node(broker, request)));
    };
    Reply::Later(Box::pin(async move {
        let mut results = Vec::new();
        for topic in request.topics {
            let outcome = broker
                .add_partitions_in_cluster(
                    &topic.name,
                    topic.count,
                    topic.assignments.as_deref().map(lists),
                    request.validate_only,
                )
                .await;
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
    }))
}

/// A request's assignment as lists of node ids, one per new partition.
fn lists(assignments: &[CreatePartitionsAssignment]) -> Vec<Vec<i32>> {
    assignments
        .iter()
        .map(|a| a.broker_ids.iter().map(|b| b.0).collect())
        .collect()
}

fn on_one_node(broker: &Broker, request: CreatePartitionsRequest) -> ResponseKind {
    let node = broker.node_id();
    let results = request
        .topics
        .into_iter()
        .map(|topic| {
            let bad_assignment = topic.assignments.as_ref().and_then(|assignments| {
                broker
                    .topics()
                    .check_one_node_growth(node, &topic.name, topic.count, &lists(assignments))
                    .err()
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
