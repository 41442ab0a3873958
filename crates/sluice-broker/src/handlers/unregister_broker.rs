//! UnregisterBroker (KIP-500; `kafka-cluster.sh unregister`, the Java Admin's
//! `unregisterBroker`, and the last step of `sluice cluster remove-node`): forgets a node that
//! is down and holds no replica. It leaves the broker list and the metadata group. Refused
//! with a message for a node that still runs, still holds replicas, or is a voter of the
//! metadata group; BROKER_ID_NOT_REGISTERED for a node the cluster does not know. The single
//! node has no other node to forget.

use kafka_protocol::messages::{ResponseKind, UnregisterBrokerRequest, UnregisterBrokerResponse};
use sluice_cluster::NodeId;
use sluice_wire::Reply;

use super::str_bytes;
use crate::broker::Broker;
use crate::error::BrokerError;
use crate::handlers::{Call, Versions};

pub const VERSIONS: Versions = Versions::new(0, 0);

pub fn handle(broker: &Broker, request: UnregisterBrokerRequest, _call: &Call) -> Reply {
    let node = NodeId(request.broker_id.0);
    let Some(replication) = broker.replication().cloned() else {
        let e = if node.0 == broker.node_id() {
            BrokerError::InvalidRequest("this single node cannot unregister itself".into())
        } else {
            BrokerError::NodeNotRegistered(format!("node {node} is not registered"))
        };
        return Reply::Ready(Box::new(answer(Err(e))));
    };
    Reply::Later(Box::pin(async move {
        Some(answer(replication.remove_node(node).await))
    }))
}

fn answer(outcome: Result<(), BrokerError>) -> ResponseKind {
    let response = UnregisterBrokerResponse::default();
    ResponseKind::UnregisterBroker(match outcome {
        Ok(()) => response,
        Err(e) => response
            .with_error_code(e.code())
            .with_error_message(Some(str_bytes(&e.to_string()))),
    })
}
