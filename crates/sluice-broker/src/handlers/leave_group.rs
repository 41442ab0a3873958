//! LeaveGroup: one member (v0-2) or several, by member id or instance id (v3+, KIP-345).

use kafka_protocol::error::ResponseError;
use kafka_protocol::messages::leave_group_response::MemberResponse;
use kafka_protocol::messages::{LeaveGroupRequest, LeaveGroupResponse, ResponseKind};

use crate::broker::Broker;
use crate::handlers::{Call, Versions};

pub const VERSIONS: Versions = Versions::new(0, 5);

pub fn handle(broker: &Broker, request: LeaveGroupRequest, call: &Call) -> ResponseKind {
    let version = call.version;
    let members: Vec<(String, Option<String>)> = if version >= 3 {
        request
            .members
            .iter()
            .map(|m| {
                (
                    m.member_id.to_string(),
                    m.group_instance_id.as_ref().map(|i| i.to_string()),
                )
            })
            .collect()
    } else {
        vec![(request.member_id.to_string(), None)]
    };
    let groups = &broker.groups;
    let mut coordinator = groups.coordinator.lock();
    let (results, records) = coordinator.leave(&request.group_id, &members, groups.now_ms());
    if !records.is_empty() {
        match groups.write(&records) {
            Ok(_) => {
                let now = groups.now_ms();
                for r in &records {
                    coordinator.apply(r, now);
                }
            }
            Err(e) => tracing::warn!(error = %e, "cannot write group state"),
        }
    }
    drop(coordinator);
    if version < 3 {
        let error = results
            .first()
            .copied()
            .unwrap_or(Err(ResponseError::UnknownMemberId));
        return ResponseKind::LeaveGroup(
            LeaveGroupResponse::default().with_error_code(error.err().map_or(0, |e| e.code())),
        );
    }
    let responses: Vec<MemberResponse> = members
        .iter()
        .zip(&results)
        .map(|((id, instance), e)| {
            MemberResponse::default()
                .with_member_id(super::str_bytes(id))
                .with_group_instance_id(instance.as_ref().map(|i| super::str_bytes(i)))
                .with_error_code(e.err().map_or(0, |e| e.code()))
        })
        .collect();
    // The top-level error is set only when the group itself is unknown.
    let top = if broker
        .groups
        .coordinator
        .lock()
        .group(&request.group_id)
        .is_none()
    {
        ResponseError::UnknownMemberId.code()
    } else {
        0
    };
    ResponseKind::LeaveGroup(
        LeaveGroupResponse::default()
            .with_error_code(top)
            .with_members(responses),
    )
}
