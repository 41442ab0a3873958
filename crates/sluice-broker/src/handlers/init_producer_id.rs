//! InitProducerId (KIP-98, KIP-360). Without a transactional id: a fresh producer id, epoch 0
//! (an idempotent producer that asks again simply gets a new id, as in Kafka). With one: the
//! transaction coordinator bumps the id's epoch, fencing any older producer with the same id,
//! and first aborts a transaction that producer left open.

use kafka_protocol::error::ResponseError;
use kafka_protocol::messages::{
    InitProducerIdRequest, InitProducerIdResponse, ProducerId, ResponseKind,
};
use sluice_wire::Reply;

use crate::broker::Broker;
use crate::commit::committed;
use crate::handlers::{Call, Versions};
use crate::txn::coordinator::Init;

fn answer(error: ResponseError) -> ResponseKind {
    ResponseKind::InitProducerId(
        InitProducerIdResponse::default()
            .with_producer_id(ProducerId(-1))
            .with_producer_epoch(-1)
            .with_error_code(error.code()),
    )
}

fn granted(producer_id: i64, epoch: i16) -> ResponseKind {
    ResponseKind::InitProducerId(
        InitProducerIdResponse::default()
            .with_producer_id(ProducerId(producer_id))
            .with_producer_epoch(epoch),
    )
}

pub const VERSIONS: Versions = Versions::new(0, 5);

pub fn handle(broker: &Broker, request: InitProducerIdRequest, _call: &Call) -> Reply {
    let Some(id) = request.transactional_id.as_ref().map(|t| t.0.to_string()) else {
        return Reply::Ready(Box::new(match broker.producer_ids.next() {
            Ok(id) => granted(id, 0),
            Err(e) => {
                tracing::error!(error = %e, "cannot allocate a producer id");
                answer(ResponseError::CoordinatorNotAvailable)
            }
        }));
    };
    let now = broker.txns.now_ms();
    let expected = Some((request.producer_id.0, request.producer_epoch));
    let mut alloc = || {
        broker
            .producer_ids
            .next()
            .map_err(|_| ResponseError::CoordinatorNotAvailable)
    };
    let (outcome, waits, claim) = {
        let mut coordinator = match broker.txns.lock_for(&id) {
            Ok(c) => c,
            Err(e) => return Reply::Ready(Box::new(answer(e))),
        };
        let outcome = match coordinator.init(
            &id,
            request.transaction_timeout_ms,
            expected,
            &mut alloc,
            now,
        ) {
            Ok(o) => o,
            Err(e) => return Reply::Ready(Box::new(answer(e))),
        };
        let written = match &outcome {
            Init::Ready(m) => broker
                .txns
                .put(&mut coordinator, m.clone())
                .map(|w| (w, None)),
            // The open transaction is aborted first, by this request's finisher.
            Init::AbortFirst(m) => broker
                .txns
                .put_prepare(&mut coordinator, m.clone())
                .map(|(w, claim)| (w, Some(claim))),
        };
        match written {
            Ok((waits, claim)) => (outcome, waits, claim),
            Err(e) => return Reply::Ready(Box::new(answer(e))),
        }
    };
    let Some(broker) = broker.arc() else {
        return Reply::Ready(Box::new(answer(ResponseError::CoordinatorNotAvailable)));
    };
    Reply::Later(Box::pin(async move {
        if let Err(e) = committed(waits).await {
            return Some(answer(e));
        }
        Some(match outcome {
            Init::Ready(meta) => granted(meta.producer_id, meta.producer_epoch),
            Init::AbortFirst(prepare) => match claim {
                Some(claim) => match broker.finish_txn(prepare, claim).await {
                    Ok(done) => granted(done.producer_id, done.producer_epoch),
                    // The fencing abort is decided and committed; the coordinator's tick
                    // finishes it. As on Kafka, the client is told to retry, not given a
                    // marker's error (NOT_ENOUGH_REPLICAS, NOT_LEADER_OR_FOLLOWER, ...),
                    // which the Java producer takes as fatal in initTransactions().
                    Err(
                        e @ (ResponseError::NotCoordinator
                        | ResponseError::CoordinatorNotAvailable
                        | ResponseError::CoordinatorLoadInProgress),
                    ) => answer(e),
                    Err(_) => answer(ResponseError::ConcurrentTransactions),
                },
                None => answer(ResponseError::ConcurrentTransactions),
            },
        })
    }))
}
