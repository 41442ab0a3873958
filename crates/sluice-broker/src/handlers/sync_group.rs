//! SyncGroup: the leader hands in the assignment; every member waits for its share.

use kafka_protocol::messages::{ResponseKind, SyncGroupRequest, SyncGroupResponse};
use sluice_wire::Reply;

use super::str_bytes;
use crate::broker::Broker;
use crate::group::coordinator::Reply as GroupReply;
use crate::group::state::SyncResult;
use crate::group::GroupService;
use crate::handlers::{Call, Versions};

pub const VERSIONS: Versions = Versions::new(0, 5);

pub fn handle(broker: &Broker, request: SyncGroupRequest, call: &Call) -> Reply {
    let version = call.version;
    let groups = &broker.groups;
    let mut coordinator = groups.coordinator.lock();
    let (reply, records) = coordinator.sync(
        &request.group_id,
        request.generation_id,
        &request.member_id,
        request.group_instance_id.as_deref(),
        request
            .assignments
            .iter()
            .map(|a| (a.member_id.to_string(), a.assignment.clone()))
            .collect(),
    );
    let waits = match groups.write(&records) {
        Ok(w) => {
            let now = groups.now_ms();
            for r in &records {
                coordinator.apply(r, now);
            }
            w
        }
        Err(e) => {
            tracing::warn!(error = %e, "cannot write group state");
            Vec::new()
        }
    };
    drop(coordinator);
    let respond = move |r: SyncResult| {
        let mut response = SyncGroupResponse::default()
            .with_error_code(r.error)
            .with_assignment(r.assignment);
        if version >= 5 {
            response = response
                .with_protocol_type(
                    (!r.protocol_type.is_empty()).then(|| str_bytes(&r.protocol_type)),
                )
                .with_protocol_name(r.protocol_name.map(|n| str_bytes(&n)));
        }
        ResponseKind::SyncGroup(response)
    };
    match reply {
        GroupReply::Now(r) if waits.is_empty() => Reply::Ready(Box::new(respond(r))),
        GroupReply::Now(r) => Reply::Later(Box::pin(async move {
            GroupService::wait_durable(waits).await;
            Some(respond(r))
        })),
        GroupReply::Later(rx) => Reply::Later(Box::pin(async move {
            GroupService::wait_durable(waits).await;
            let r = rx.await.unwrap_or(SyncResult {
                error: kafka_protocol::error::ResponseError::RebalanceInProgress.code(),
                protocol_type: String::new(),
                protocol_name: None,
                assignment: Default::default(),
            });
            Some(respond(r))
        })),
    }
}
