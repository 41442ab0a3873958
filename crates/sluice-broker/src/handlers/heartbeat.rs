//! Heartbeat: keeps a member alive and tells it when a rebalance started.

use kafka_protocol::error::ResponseError;
use kafka_protocol::messages::{HeartbeatRequest, HeartbeatResponse, ResponseKind};

use crate::broker::Broker;
use crate::handlers::{Call, Versions};

pub const VERSIONS: Versions = Versions::new(0, 4);

pub fn handle(broker: &Broker, request: HeartbeatRequest, _call: &Call) -> ResponseKind {
    let groups = &broker.groups;
    let error = groups.lock_for(&request.group_id).and_then(|mut c| {
        c.heartbeat(
            &request.group_id,
            request.generation_id,
            &request.member_id,
            request.group_instance_id.as_deref(),
            groups.now_ms(),
        )
    });
    // As Kafka: a coordinator still loading the group answers a heartbeat blindly.
    let error = match error {
        Err(ResponseError::CoordinatorLoadInProgress) => Ok(()),
        e => e,
    };
    ResponseKind::Heartbeat(
        HeartbeatResponse::default().with_error_code(error.err().map_or(0, |e| e.code())),
    )
}
