//! LeaveGroup: one member (v0-2) or several, by member id or instance id (v3+, KIP-345).

use kafka_protocol::error::ResponseError;
use kafka_protocol::messages::leave_group_response::MemberResponse;
use kafka_protocol::messages::{LeaveGroupRequest, LeaveGroupResponse, ResponseKind};
use sluice_wire::Reply;

use crate::broker::Broker;
use crate::commit::committed;
use crate::handlers::{Call, Versions};

pub const VERSIONS: Versions = Versions::new(0, 5);

pub fn handle(broker: &Broker, request: LeaveGroupRequest, call: &Call) -> Reply {
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
    let top_only = |error: ResponseError| {
        Reply::Ready(Box::new(ResponseKind::LeaveGroup(
            LeaveGroupResponse::default().with_error_code(error.code()),
        )))
    };
    let groups = &broker.groups;
    let mut coordinator = match groups.lock_for(&request.group_id) {
        Ok(c) => c,
        Err(e) => return top_only(e),
    };
    let (results, records) = coordinator.leave(&request.group_id, &members, groups.now_ms());
    let written = groups.record(&mut coordinator, &records);
    // The top-level error is set only when the group itself is unknown.
    let unknown = coordinator.group(&request.group_id).is_none();
    drop(coordinator);
    let waits = match written {
        Ok(waits) => waits,
        Err(e) => return top_only(e),
    };
    let response = if version < 3 {
        let error = results
            .first()
            .copied()
            .unwrap_or(Err(ResponseError::UnknownMemberId));
        LeaveGroupResponse::default().with_error_code(error.err().map_or(0, |e| e.code()))
    } else {
        members_response(&members, &results, unknown)
    };
    Reply::Later(Box::pin(async move {
        let response = match committed(waits).await {
            Ok(()) => response,
            Err(e) => LeaveGroupResponse::default().with_error_code(e.code()),
        };
        Some(ResponseKind::LeaveGroup(response))
    }))
}

fn members_response(
    members: &[(String, Option<String>)],
    results: &[Result<(), ResponseError>],
    unknown: bool,
) -> LeaveGroupResponse {
    let responses: Vec<MemberResponse> = members
        .iter()
        .zip(results)
        .map(|((id, instance), e)| {
            MemberResponse::default()
                .with_member_id(super::str_bytes(id))
                .with_group_instance_id(instance.as_ref().map(|i| super::str_bytes(i)))
                .with_error_code(e.err().map_or(0, |e| e.code()))
        })
        .collect();
    let top = if unknown {
        ResponseError::UnknownMemberId.code()
    } else {
        0
    };
    LeaveGroupResponse::default()
        .with_error_code(top)
        .with_members(responses)
}
