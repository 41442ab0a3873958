//! FindCoordinator: where a group (key type 0) or a transactional id (key type 1) is
//! coordinated. A single node coordinates everything; in a cluster a group's coordinator is
//! the leader of its `__consumer_offsets` partition. Batched keys from v4 (KIP-699).

use kafka_protocol::error::ResponseError;
use kafka_protocol::messages::find_coordinator_response::Coordinator;
use kafka_protocol::messages::{
    BrokerId, FindCoordinatorRequest, FindCoordinatorResponse, ResponseKind,
};
use kafka_protocol::protocol::StrBytes;

use super::str_bytes;
use crate::broker::Broker;
use crate::handlers::{Call, Versions};
use sluice_auth::acl::Operation;

const KEY_GROUP: i8 = 0;
const KEY_TRANSACTION: i8 = 1;

pub const VERSIONS: Versions = Versions::new(0, 6);

pub fn handle(broker: &Broker, request: FindCoordinatorRequest, call: &Call) -> ResponseKind {
    let version = call.version;
    let authz = call.authz(broker);
    let answer = |key: &StrBytes| -> Result<(i32, String, i32), (i16, Option<StrBytes>)> {
        if request.key_type == KEY_GROUP && !authz.group(Operation::Describe, key) {
            Err((ResponseError::GroupAuthorizationFailed.code(), None))
        } else if request.key_type == KEY_TRANSACTION
            && !authz.transactional_id(Operation::Describe, key)
        {
            Err((
                ResponseError::TransactionalIdAuthorizationFailed.code(),
                None,
            ))
        } else if request.key_type != KEY_GROUP && request.key_type != KEY_TRANSACTION {
            Err((
                ResponseError::InvalidRequest.code(),
                Some(str_bytes("key type must be 0 (group) or 1 (transaction)")),
            ))
        } else if key.is_empty() && request.key_type == KEY_GROUP {
            Err((
                ResponseError::InvalidGroupId.code(),
                Some(str_bytes("empty group id")),
            ))
        } else if key.is_empty() {
            Err((
                ResponseError::InvalidRequest.code(),
                Some(str_bytes("empty transactional id")),
            ))
        } else if request.key_type == KEY_GROUP {
            broker.group_coordinator(key).map_err(|e| {
                (
                    e.code(),
                    Some(str_bytes(
                        "the group's coordinator is not available yet; retry",
                    )),
                )
            })
        } else {
            broker.txn_coordinator(key).map_err(|e| {
                (
                    e.code(),
                    Some(str_bytes(
                        "the transaction coordinator is not available yet; retry",
                    )),
                )
            })
        }
    };
    // The coordinator's address on the listener this client came in on; a coordinator
    // without that listener is not available to this client.
    let answer = |key: &StrBytes| {
        answer(key).and_then(|(node, _, _)| {
            let (host, port) = broker.address_for(&call.peer.listener, node).ok_or((
                ResponseError::CoordinatorNotAvailable.code(),
                Some(str_bytes(&format!(
                    "the coordinator, node {node}, has no listener {}",
                    call.peer.listener
                ))),
            ))?;
            Ok((node, host, port))
        })
    };
    if version >= 4 {
        let coordinators = request
            .coordinator_keys
            .iter()
            .map(|key| {
                let found = Coordinator::default().with_key(key.clone());
                match answer(key) {
                    Ok((node_id, host, port)) => found
                        .with_node_id(BrokerId(node_id))
                        .with_host(str_bytes(&host))
                        .with_port(port),
                    Err((error, message)) => found
                        .with_node_id(BrokerId(-1))
                        .with_port(-1)
                        .with_error_code(error)
                        .with_error_message(message),
                }
            })
            .collect();
        return ResponseKind::FindCoordinator(
            FindCoordinatorResponse::default().with_coordinators(coordinators),
        );
    }
    let response = FindCoordinatorResponse::default();
    ResponseKind::FindCoordinator(match answer(&request.key) {
        Ok((node_id, host, port)) => response
            .with_node_id(BrokerId(node_id))
            .with_host(str_bytes(&host))
            .with_port(port),
        Err((error, message)) => response
            .with_node_id(BrokerId(-1))
            .with_port(-1)
            .with_error_code(error)
            .with_error_message(message),
    })
}
