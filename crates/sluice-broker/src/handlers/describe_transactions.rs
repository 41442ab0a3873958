//! DescribeTransactions: each transactional id's state, producer, timeout, start time and the
//! partitions of its open transaction.

use kafka_protocol::error::ResponseError;
use kafka_protocol::messages::describe_transactions_response::{TopicData, TransactionState};
use kafka_protocol::messages::{
    DescribeTransactionsRequest, DescribeTransactionsResponse, ProducerId, ResponseKind,
};

use super::{str_bytes, topic_name};
use crate::broker::Broker;
use crate::handlers::{Call, Versions};
use sluice_auth::acl::{Operation, ResourceType};
use sluice_wire::Reply;

pub const VERSIONS: Versions = Versions::new(0, 0);

pub fn handle(broker: &Broker, request: DescribeTransactionsRequest, call: &Call) -> Reply {
    let authz = call.authz(broker);
    let coordinator = broker.txns.coordinator.lock();
    let states = request
        .transactional_ids
        .iter()
        .map(|id| {
            let base = TransactionState::default().with_transactional_id(id.clone());
            if !authz.transactional_id(Operation::Describe, id) {
                return base
                    .with_error_code(ResponseError::TransactionalIdAuthorizationFailed.code())
                    .with_producer_id(ProducerId(-1))
                    .with_producer_epoch(-1)
                    .with_transaction_start_time_ms(-1);
            }
            if let Err(e) = broker.txns.check(id) {
                return base
                    .with_error_code(e.code())
                    .with_producer_id(ProducerId(-1))
                    .with_producer_epoch(-1)
                    .with_transaction_start_time_ms(-1);
            }
            let Some(m) = coordinator.get(id) else {
                return base
                    .with_error_code(ResponseError::TransactionalIdNotFound.code())
                    .with_producer_id(ProducerId(-1))
                    .with_producer_epoch(-1)
                    .with_transaction_start_time_ms(-1);
            };
            let mut topics: Vec<TopicData> = Vec::new();
            // Topics one may not describe are left out, as in Kafka.
            for (topic, p) in m
                .partitions
                .iter()
                .filter(|(t, _)| authz.shows(Operation::Describe, ResourceType::Topic, t))
            {
                match topics.iter_mut().find(|t| *t.topic == **topic) {
                    Some(t) => t.partitions.push(*p),
                    None => topics.push(
                        TopicData::default()
                            .with_topic(topic_name(topic))
                            .with_partitions(vec![*p]),
                    ),
                }
            }
            base.with_transaction_state(str_bytes(m.state.name()))
                .with_transaction_timeout_ms(m.timeout_ms)
                .with_transaction_start_time_ms(m.start_ms)
                .with_producer_id(ProducerId(m.producer_id))
                .with_producer_epoch(m.producer_epoch)
                .with_topics(topics)
        })
        .collect::<Vec<_>>();
    // In a cluster, what was read is sent once the ids' records are committed (an id found
    // missing too: its expiry may not be).
    let not_found = ResponseError::TransactionalIdNotFound.code();
    let read_from_state = move |code: i16| code == 0 || code == not_found;
    let waits = broker.txns.shards.settled_all(
        states
            .iter()
            .filter(|t| read_from_state(t.error_code))
            .map(|t| t.transactional_id.as_str()),
    );
    drop(coordinator);
    let response = ResponseKind::DescribeTransactions(
        DescribeTransactionsResponse::default().with_transaction_states(states),
    );
    super::after_fence(response, waits, move |mut response, error| {
        if let ResponseKind::DescribeTransactions(r) = &mut response {
            for t in r
                .transaction_states
                .iter_mut()
                .filter(|t| read_from_state(t.error_code))
            {
                *t = TransactionState::default()
                    .with_transactional_id(t.transactional_id.clone())
                    .with_error_code(error.code())
                    .with_producer_id(ProducerId(-1))
                    .with_producer_epoch(-1)
                    .with_transaction_start_time_ms(-1);
            }
        }
        response
    })
}
