//! InitProducerId for idempotent producers (KIP-98): a fresh producer id, epoch 0. As in
//! Kafka, an idempotent producer that asks again (KIP-360) simply gets a new id.
//! Transactional ids need the transaction coordinator, which is not here yet.

use kafka_protocol::error::ResponseError;
use kafka_protocol::messages::{
    InitProducerIdRequest, InitProducerIdResponse, ProducerId, ResponseKind,
};

use crate::broker::Broker;

pub fn handle(broker: &Broker, request: InitProducerIdRequest, _version: i16) -> ResponseKind {
    let response = InitProducerIdResponse::default()
        .with_producer_id(ProducerId(-1))
        .with_producer_epoch(-1);
    if let Some(id) = &request.transactional_id {
        tracing::info!(transactional_id = %id.0, "refusing InitProducerId: transactions are not supported yet");
        return ResponseKind::InitProducerId(
            response.with_error_code(ResponseError::TransactionalIdAuthorizationFailed.code()),
        );
    }
    match broker.producer_ids.next() {
        Ok(id) => ResponseKind::InitProducerId(
            response
                .with_producer_id(ProducerId(id))
                .with_producer_epoch(0),
        ),
        Err(e) => {
            tracing::error!(error = %e, "cannot allocate a producer id");
            ResponseKind::InitProducerId(
                response.with_error_code(ResponseError::CoordinatorNotAvailable.code()),
            )
        }
    }
}
