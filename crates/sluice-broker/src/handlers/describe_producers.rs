//! DescribeProducers: per partition, every idempotent or transactional producer this replica
//! knows, with its epoch, last sequence and, if it has a transaction open there, where that
//! began (what `kafka-transactions.sh describe-producers` prints and `find-hanging` looks
//! for). Any replica answers, from its own producer state, as in Kafka.

use kafka_protocol::error::ResponseError;
use kafka_protocol::messages::describe_producers_response::{
    PartitionResponse, ProducerState, TopicResponse,
};
use kafka_protocol::messages::{
    DescribeProducersRequest, DescribeProducersResponse, ProducerId, ResponseKind,
};

use crate::broker::Broker;
use crate::handlers::{Call, Versions};
use sluice_auth::acl::Operation;

pub const VERSIONS: Versions = Versions::new(0, 0);

pub fn handle(broker: &Broker, mut request: DescribeProducersRequest, call: &Call) -> ResponseKind {
    let authz = call.authz(broker);
    let denied: Vec<TopicResponse> = super::take_denied(&mut request.topics, |t| {
        authz.topic(Operation::Read, &t.name)
    })
    .into_iter()
    .map(|t| {
        TopicResponse::default().with_name(t.name).with_partitions(
            t.partition_indexes
                .iter()
                .map(|p| {
                    PartitionResponse::default()
                        .with_partition_index(*p)
                        .with_error_code(ResponseError::TopicAuthorizationFailed.code())
                })
                .collect(),
        )
    })
    .collect();
    let mut response = handle_authorized(broker, request);
    if let ResponseKind::DescribeProducers(r) = &mut response {
        r.topics.extend(denied);
    }
    response
}

fn handle_authorized(broker: &Broker, request: DescribeProducersRequest) -> ResponseKind {
    let topics = request
        .topics
        .iter()
        .map(|t| {
            let topic = broker.topics().get(&t.name);
            let partitions = t
                .partition_indexes
                .iter()
                .map(|&index| {
                    let base = PartitionResponse::default().with_partition_index(index);
                    match topic.as_ref().and_then(|x| x.partition(index)) {
                        None => base.with_error_code(ResponseError::UnknownTopicOrPartition.code()),
                        Some(p) => base.with_active_producers(
                            p.active_producers()
                                .into_iter()
                                .map(|o| {
                                    ProducerState::default()
                                        .with_producer_id(ProducerId(o.producer_id))
                                        .with_producer_epoch(i32::from(o.producer_epoch))
                                        .with_last_sequence(o.last_sequence)
                                        .with_last_timestamp(o.last_timestamp)
                                        .with_coordinator_epoch(-1)
                                        .with_current_txn_start_offset(
                                            o.txn_first_offset.map_or(-1, |f| f.0),
                                        )
                                })
                                .collect(),
                        ),
                    }
                })
                .collect();
            TopicResponse::default()
                .with_name(t.name.clone())
                .with_partitions(partitions)
        })
        .collect();
    ResponseKind::DescribeProducers(DescribeProducersResponse::default().with_topics(topics))
}
