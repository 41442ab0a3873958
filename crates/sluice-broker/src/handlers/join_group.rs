//! JoinGroup: the first step of a rebalance. Answered when the group's join phase completes
//! (every member rejoined, or the rebalance timeout passed).

use kafka_protocol::error::ResponseError;
use kafka_protocol::messages::join_group_response::JoinGroupResponseMember;
use kafka_protocol::messages::{JoinGroupRequest, JoinGroupResponse, ResponseKind};
use sluice_wire::Reply;

use super::str_bytes;
use crate::broker::Broker;
use crate::group::answer_when_committed;
use crate::group::coordinator::JoinRequest;
use crate::group::state::JoinResult;
use crate::handlers::{Call, Versions};

pub const VERSIONS: Versions = Versions::new(0, 9);

pub fn handle(broker: &Broker, request: JoinGroupRequest, call: &Call) -> Reply {
    let version = call.version;
    let join = JoinRequest {
        group_id: request.group_id.to_string(),
        member_id: request.member_id.to_string(),
        instance_id: request.group_instance_id.as_ref().map(|s| s.to_string()),
        client_id: call.client_id.to_string(),
        client_host: call.client_host(),
        session_timeout_ms: i64::from(request.session_timeout_ms),
        // v0 has no rebalance timeout: it is the session timeout.
        rebalance_timeout_ms: i64::from(if version >= 1 {
            request.rebalance_timeout_ms
        } else {
            request.session_timeout_ms
        }),
        protocol_type: request.protocol_type.to_string(),
        protocols: request
            .protocols
            .iter()
            .map(|p| (p.name.to_string(), p.metadata.clone()))
            .collect(),
        require_known_member_id: version >= 4,
    };
    let member_id = request.member_id.to_string();
    let failed = move |error: ResponseError| JoinResult {
        error: error.code(),
        generation: -1,
        protocol_type: String::new(),
        protocol_name: None,
        leader: String::new(),
        member_id: member_id.clone(),
        members: Vec::new(),
    };
    let respond = move |r: JoinResult| ResponseKind::JoinGroup(response(r));
    let groups = &broker.groups;
    let mut coordinator = match groups.lock_for(&join.group_id) {
        Ok(c) => c,
        Err(e) => return Reply::Ready(Box::new(respond(failed(e)))),
    };
    let fence = crate::group::fence_later(broker, &join.group_id);
    let (reply, records) = coordinator.join(join, groups.now_ms());
    let written = groups.record(&mut coordinator, &records);
    drop(coordinator);
    answer_when_committed(
        written,
        reply,
        fence,
        failed,
        ResponseError::UnknownMemberId,
        respond,
    )
}

fn response(r: JoinResult) -> JoinGroupResponse {
    JoinGroupResponse::default()
        .with_error_code(r.error)
        .with_generation_id(r.generation)
        .with_protocol_type((!r.protocol_type.is_empty()).then(|| str_bytes(&r.protocol_type)))
        .with_protocol_name(Some(str_bytes(
            r.protocol_name.as_deref().unwrap_or_default(),
        )))
        .with_leader(str_bytes(&r.leader))
        .with_member_id(str_bytes(&r.member_id))
        .with_members(
            r.members
                .into_iter()
                .map(|(id, instance, metadata)| {
                    JoinGroupResponseMember::default()
                        .with_member_id(str_bytes(&id))
                        .with_group_instance_id(instance.map(|i| str_bytes(&i)))
                        .with_metadata(metadata)
                })
                .collect(),
        )
}
