//! FindCoordinator: this node coordinates every group (key type 0) and every transactional id
//! (key type 1). Batched keys from v4 (KIP-699).

use kafka_protocol::error::ResponseError;
use kafka_protocol::messages::find_coordinator_response::Coordinator;
use kafka_protocol::messages::{
    BrokerId, FindCoordinatorRequest, FindCoordinatorResponse, ResponseKind,
};
use kafka_protocol::protocol::StrBytes;

use super::str_bytes;
use crate::broker::Broker;
use crate::handlers::{Call, Versions};

const KEY_GROUP: i8 = 0;
const KEY_TRANSACTION: i8 = 1;

pub const VERSIONS: Versions = Versions::new(0, 6);

pub fn handle(broker: &Broker, request: FindCoordinatorRequest, call: &Call) -> ResponseKind {
    let version = call.version;
    let (node_id, host, port) = broker.coordinator_endpoint();
    let answer = |key: &StrBytes| -> (i16, Option<StrBytes>) {
        if request.key_type != KEY_GROUP && request.key_type != KEY_TRANSACTION {
            (
                ResponseError::InvalidRequest.code(),
                Some(str_bytes("key type must be 0 (group) or 1 (transaction)")),
            )
        } else if key.is_empty() && request.key_type == KEY_GROUP {
            (
                ResponseError::InvalidGroupId.code(),
                Some(str_bytes("empty group id")),
            )
        } else if key.is_empty() {
            (
                ResponseError::InvalidRequest.code(),
                Some(str_bytes("empty transactional id")),
            )
        } else {
            (0, None)
        }
    };
    if version >= 4 {
        let coordinators = request
            .coordinator_keys
            .iter()
            .map(|key| {
                let (error, message) = answer(key);
                Coordinator::default()
                    .with_key(key.clone())
                    .with_node_id(BrokerId(if error == 0 { node_id } else { -1 }))
                    .with_host(if error == 0 {
                        str_bytes(&host)
                    } else {
                        StrBytes::default()
                    })
                    .with_port(if error == 0 { port } else { -1 })
                    .with_error_code(error)
                    .with_error_message(message)
            })
            .collect();
        return ResponseKind::FindCoordinator(
            FindCoordinatorResponse::default().with_coordinators(coordinators),
        );
    }
    let (error, message) = answer(&request.key);
    let response = FindCoordinatorResponse::default()
        .with_error_code(error)
        .with_error_message(message);
    ResponseKind::FindCoordinator(if error == 0 {
        response
            .with_node_id(BrokerId(node_id))
            .with_host(str_bytes(&host))
            .with_port(port)
    } else {
        response.with_node_id(BrokerId(-1)).with_port(-1)
    })
}
