//! EndTxn: commit or abort. The decision (`Prepare*`) is made durable first, then markers go
//! to every partition of the transaction and, on commit, its offsets to the groups; the answer
//! comes when the completed state is written (durable first in a cluster; see `txn`). v5+ (KIP-890) bumps the producer epoch and
//! returns it: the markers carry the new epoch, fencing late writes of the ended transaction.

use kafka_protocol::error::ResponseError;
use kafka_protocol::messages::{EndTxnRequest, EndTxnResponse, ProducerId, ResponseKind};
use sluice_wire::Reply;

use crate::broker::Broker;
use crate::commit::committed;
use crate::handlers::{Call, Versions};
use crate::txn::coordinator::End;

fn answer(result: Result<(i64, i16), ResponseError>) -> Option<ResponseKind> {
    let response = match result {
        Ok((pid, epoch)) => EndTxnResponse::default()
            .with_producer_id(ProducerId(pid))
            .with_producer_epoch(epoch),
        Err(e) => EndTxnResponse::default()
            .with_error_code(e.code())
            .with_producer_id(ProducerId(-1))
            .with_producer_epoch(-1),
    };
    Some(ResponseKind::EndTxn(response))
}

pub const VERSIONS: Versions = Versions::new(0, 5);

pub fn handle(broker: &Broker, request: EndTxnRequest, call: &Call) -> Reply {
    let version = call.version;
    let now = broker.txns.now_ms();
    let mut alloc = || {
        broker
            .producer_ids
            .next()
            .map_err(|_| ResponseError::CoordinatorNotAvailable)
    };
    let step = broker
        .txns
        .lock_for(&request.transactional_id)
        .and_then(|mut coordinator| {
            coordinator
                .end(
                    &request.transactional_id,
                    (request.producer_id.0, request.producer_epoch),
                    request.committed,
                    version >= 5,
                    &mut alloc,
                    now,
                )
                .and_then(|end| match end {
                    End::Done {
                        producer_id,
                        producer_epoch,
                    } => Ok((
                        None,
                        broker.txns.settled(&request.transactional_id),
                        (producer_id, producer_epoch),
                    )),
                    End::Write(meta) => {
                        let ids = (meta.producer_id, meta.producer_epoch);
                        Ok((None, broker.txns.put(&mut coordinator, meta)?, ids))
                    }
                    End::Finish(prepare) => {
                        let ids = (prepare.producer_id, prepare.producer_epoch);
                        let (waits, claim) =
                            broker.txns.put_prepare(&mut coordinator, prepare.clone())?;
                        Ok((Some((prepare, claim)), waits, ids))
                    }
                })
        });
    let (prepare, waits, ids) = match step {
        Ok(s) => s,
        Err(e) => {
            return Reply::Ready(Box::new(
                answer(Err(e)).unwrap_or_else(|| ResponseKind::EndTxn(EndTxnResponse::default())),
            ))
        }
    };
    let Some(broker) = broker.arc() else {
        return Reply::Ready(Box::new(ResponseKind::EndTxn(
            EndTxnResponse::default()
                .with_error_code(ResponseError::CoordinatorNotAvailable.code()),
        )));
    };
    Reply::Later(Box::pin(async move {
        if let Err(e) = committed(waits).await {
            return answer(Err(e));
        }
        match prepare {
            None => answer(Ok(ids)),
            // The decision is committed: the transaction will end as decided, whatever
            // happens to its markers now. A finisher that fails (a partition's leader moved,
            // this node lost the id) leaves it to the coordinator's tick, here or where the id
            // went, as Kafka's marker writer retries in the background; the client hears
            // success, as from Kafka, not an error that librdkafka takes as the transaction's
            // failure (it would then abort one that commits).
            Some((prepare, claim)) => {
                let id = prepare.transactional_id.clone();
                // The ids the completed state will have (a new producer id when the epoch is
                // exhausted), as the finisher's success answers them.
                let will_be = crate::txn::coordinator::completed(&prepare, 0);
                match broker.finish_txn(prepare, claim).await {
                    Ok(done) => answer(Ok((done.producer_id, done.producer_epoch))),
                    Err(e) => {
                        tracing::info!(transactional_id = %id, error = ?e, "transaction decided; its markers are left to the coordinator's retries");
                        answer(Ok((will_be.producer_id, will_be.producer_epoch)))
                    }
                }
            }
        }
    }))
}
