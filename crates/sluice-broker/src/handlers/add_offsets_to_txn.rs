//! AddOffsetsToTxn: the transaction will commit offsets of a consumer group
//! (`send_offsets_to_transaction`). On a single node not waited on for durability: the offsets
//! are committed only through the transaction's fsynced `Prepare*` state, which carries them.
//! In a cluster answered once committed, so that a new coordinator knows of it.

use kafka_protocol::error::ResponseError;
use kafka_protocol::messages::{AddOffsetsToTxnRequest, AddOffsetsToTxnResponse, ResponseKind};
use sluice_wire::Reply;

use crate::broker::Broker;
use crate::handlers::{Call, Versions};

fn answer(error: Option<ResponseError>) -> Option<ResponseKind> {
    Some(ResponseKind::AddOffsetsToTxn(
        AddOffsetsToTxnResponse::default().with_error_code(error.map_or(0, |e| e.code())),
    ))
}

pub const VERSIONS: Versions = Versions::new(0, 4);

pub fn handle(broker: &Broker, request: AddOffsetsToTxnRequest, _call: &Call) -> Reply {
    if request.group_id.is_empty() {
        return Reply::Ready(Box::new(ResponseKind::AddOffsetsToTxn(
            AddOffsetsToTxnResponse::default()
                .with_error_code(ResponseError::InvalidGroupId.code()),
        )));
    }
    let now = broker.txns.now_ms();
    let waits =
        broker.txns.lock_for(&request.transactional_id).and_then(
            |mut coordinator| match coordinator.add_offsets(
                &request.transactional_id,
                request.producer_id.0,
                request.producer_epoch,
                &request.group_id,
                now,
            ) {
                Ok(None) => Ok(broker.txns.settled(&request.transactional_id)),
                Ok(Some(meta)) => broker.txns.put(&mut coordinator, meta),
                Err(e) => Err(e),
            },
        );
    match waits.map(|w| broker.txns.before_answer(w)) {
        Ok(waits) if !waits.is_empty() => Reply::Later(Box::pin(async move {
            answer(crate::commit::committed(waits).await.err())
        })),
        outcome => {
            Reply::Ready(Box::new(answer(outcome.err()).unwrap_or_else(|| {
                ResponseKind::AddOffsetsToTxn(Default::default())
            })))
        }
    }
}
