//! AddPartitionsToTxn: a (pre-KIP-890) producer names the partitions it is about to write in
//! its transaction. v0-3 carry one transaction; v4+ (broker to broker) a batch, each possibly
//! `verify_only` (is the partition already in the transaction?). Answered once the addition is
//! durable: such a producer keeps its epoch from one transaction to the next, so after a crash
//! only a durable addition tells its next transaction's data apart from the data of the one
//! before it whose marker was lost (see `Broker::heal_transactions`).

use kafka_protocol::error::ResponseError;
use kafka_protocol::messages::add_partitions_to_txn_request::AddPartitionsToTxnTopic;
use kafka_protocol::messages::add_partitions_to_txn_response::{
    AddPartitionsToTxnPartitionResult, AddPartitionsToTxnResult, AddPartitionsToTxnTopicResult,
};
use kafka_protocol::messages::{
    AddPartitionsToTxnRequest, AddPartitionsToTxnResponse, ResponseKind, TopicName,
};
use sluice_wire::Reply;

use crate::broker::Broker;
use crate::commit::committed;
use crate::handlers::{Call, Versions};
use sluice_auth::acl::Operation;

fn results(
    topics: &[AddPartitionsToTxnTopic],
    error: impl Fn(&TopicName, i32) -> Option<ResponseError>,
) -> Vec<AddPartitionsToTxnTopicResult> {
    topics
        .iter()
        .map(|t| {
            AddPartitionsToTxnTopicResult::default()
                .with_name(t.name.clone())
                .with_results_by_partition(
                    t.partitions
                        .iter()
                        .map(|&p| {
                            AddPartitionsToTxnPartitionResult::default()
                                .with_partition_index(p)
                                .with_partition_error_code(
                                    error(&t.name, p).map_or(0, |e| e.code()),
                                )
                        })
                        .collect(),
                )
        })
        .collect()
}

/// Adds (or with `verify_only` checks) one transaction's partitions; returns per-partition
/// errors and what to wait on.
fn add(
    broker: &Broker,
    id: &str,
    producer_id: i64,
    epoch: i16,
    topics: &[AddPartitionsToTxnTopic],
    verify_only: bool,
) -> (Vec<AddPartitionsToTxnTopicResult>, crate::commit::Waits) {
    let unknown =
        |name: &TopicName, p: i32| !broker.partition_exists(name, p) || name.starts_with("__");
    if topics
        .iter()
        .any(|t| t.partitions.iter().any(|&p| unknown(&t.name, p)))
    {
        // Like Kafka: the unknown ones fail, the rest are not attempted.
        let r = results(topics, |n, p| {
            Some(if unknown(n, p) {
                ResponseError::UnknownTopicOrPartition
            } else {
                ResponseError::OperationNotAttempted
            })
        });
        return (r, Vec::new());
    }
    let partitions: Vec<(String, i32)> = topics
        .iter()
        .flat_map(|t| t.partitions.iter().map(|&p| (t.name.to_string(), p)))
        .collect();
    let now = broker.txns.now_ms();
    let mut coordinator = match broker.txns.lock_for(id) {
        Ok(c) => c,
        Err(e) => return (results(topics, |_, _| Some(e)), Vec::new()),
    };
    if verify_only {
        let meta = coordinator.get(id).filter(|m| m.producer_id == producer_id);
        let r = results(topics, |n, p| match meta {
            None => Some(ResponseError::InvalidProducerIdMapping),
            Some(m) if m.producer_epoch != epoch => Some(ResponseError::ProducerFenced),
            Some(m)
                if m.state == crate::txn::state::TxnState::Ongoing
                    && m.partitions.contains(&(n.to_string(), p)) =>
            {
                None
            }
            Some(_) => Some(ResponseError::InvalidTxnState),
        });
        // Answered from the state: in a cluster, once what it read is committed.
        return (r, broker.txns.settled(id));
    }
    match coordinator.add_partitions(id, producer_id, epoch, &partitions, false, now) {
        Ok(None) => (results(topics, |_, _| None), broker.txns.settled(id)),
        Ok(Some(meta)) => match broker.txns.put(&mut coordinator, meta) {
            Ok(waits) => (results(topics, |_, _| None), waits),
            Err(e) => (results(topics, |_, _| Some(e)), Vec::new()),
        },
        Err(e) => (results(topics, |_, _| Some(e)), Vec::new()),
    }
}

pub const VERSIONS: Versions = Versions::new(0, 5);

pub fn handle(broker: &Broker, request: AddPartitionsToTxnRequest, call: &Call) -> Reply {
    let version = call.version;
    let mut waits = Vec::new();
    let authz = call.authz(broker);
    let add = |broker: &Broker,
               id: &str,
               producer_id: i64,
               epoch: i16,
               topics: &[AddPartitionsToTxnTopic],
               verify_only: bool| {
        match refused(&authz, id, topics) {
            Some(results) => (results, Vec::new()),
            None => add(broker, id, producer_id, epoch, topics, verify_only),
        }
    };
    let response = if version <= 3 {
        let (r, w) = add(
            broker,
            &request.v3_and_below_transactional_id,
            request.v3_and_below_producer_id.0,
            request.v3_and_below_producer_epoch,
            &request.v3_and_below_topics,
            false,
        );
        waits.extend(w);
        AddPartitionsToTxnResponse::default().with_results_by_topic_v3_and_below(r)
    } else {
        let results: Vec<AddPartitionsToTxnResult> = request
            .transactions
            .iter()
            .map(|t| {
                let (r, w) = add(
                    broker,
                    &t.transactional_id,
                    t.producer_id.0,
                    t.producer_epoch,
                    &t.topics,
                    t.verify_only,
                );
                waits.extend(w);
                AddPartitionsToTxnResult::default()
                    .with_transactional_id(t.transactional_id.clone())
                    .with_topic_results(r)
            })
            .collect();
        AddPartitionsToTxnResponse::default().with_results_by_transaction(results)
    };
    if waits.is_empty() {
        return Reply::Ready(Box::new(ResponseKind::AddPartitionsToTxn(response)));
    }
    Reply::Later(Box::pin(async move {
        let response = match committed(waits).await {
            Ok(()) => response,
            Err(e) => fail_all(response, e.code()),
        };
        Some(ResponseKind::AddPartitionsToTxn(response))
    }))
}

/// Kafka's checks: Write on the transactional id (else every partition
/// TRANSACTIONAL_ID_AUTHORIZATION_FAILED), Write on each topic (else that topic's partitions
/// TOPIC_AUTHORIZATION_FAILED and the others OPERATION_NOT_ATTEMPTED: nothing is added).
fn refused(
    authz: &crate::security::Authz,
    id: &str,
    topics: &[AddPartitionsToTxnTopic],
) -> Option<Vec<AddPartitionsToTxnTopicResult>> {
    if authz.is_unrestricted() {
        return None;
    }
    let txn_denied = !authz.transactional_id(Operation::Write, id);
    let denied: Vec<bool> = topics
        .iter()
        .map(|t| txn_denied || !authz.topic(Operation::Write, &t.name))
        .collect();
    if !denied.contains(&true) {
        return None;
    }
    Some(
        topics
            .iter()
            .zip(denied)
            .map(|(t, denied)| {
                let error = if txn_denied {
                    ResponseError::TransactionalIdAuthorizationFailed
                } else if denied {
                    ResponseError::TopicAuthorizationFailed
                } else {
                    ResponseError::OperationNotAttempted
                };
                AddPartitionsToTxnTopicResult::default()
                    .with_name(t.name.clone())
                    .with_results_by_partition(
                        t.partitions
                            .iter()
                            .map(|p| {
                                AddPartitionsToTxnPartitionResult::default()
                                    .with_partition_index(*p)
                                    .with_partition_error_code(error.code())
                            })
                            .collect(),
                    )
            })
            .collect(),
    )
}

/// The same answer with every partition failed (the addition could not be made durable).
fn fail_all(mut response: AddPartitionsToTxnResponse, code: i16) -> AddPartitionsToTxnResponse {
    let topics = response.results_by_topic_v3_and_below.iter_mut().chain(
        response
            .results_by_transaction
            .iter_mut()
            .flat_map(|t| t.topic_results.iter_mut()),
    );
    for t in topics {
        for p in &mut t.results_by_partition {
            p.partition_error_code = code;
        }
    }
    response
}
