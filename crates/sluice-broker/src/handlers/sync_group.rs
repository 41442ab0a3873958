//! SyncGroup: the leader hands in the assignment; every member waits for its share.

use kafka_protocol::error::ResponseError;
use kafka_protocol::messages::{ResponseKind, SyncGroupRequest, SyncGroupResponse};
use sluice_wire::Reply;

use super::str_bytes;
use crate::broker::Broker;
use crate::group::answer_when_committed;
use crate::group::state::SyncResult;
use crate::handlers::{Call, Versions};

pub const VERSIONS: Versions = Versions::new(0, 5);

pub fn handle(broker: &Broker, request: SyncGroupRequest, call: &Call) -> Reply {
    let respond = respond_with(call.version);
    let failed = |error: ResponseError| SyncResult {
        error: error.code(),
        protocol_type: String::new(),
        protocol_name: None,
        assignment: Default::default(),
    };
    let groups = &broker.groups;
    let mut coordinator = match groups.lock_for(&request.group_id) {
        Ok(c) => c,
        // As Kafka: the rebalance's state is gone with the coordinator that is being
        // replaced; the member joins again, here, without looking the coordinator up (older
        // clients do not expect COORDINATOR_LOAD_IN_PROGRESS from SyncGroup).
        Err(ResponseError::CoordinatorLoadInProgress) => {
            return Reply::Ready(Box::new(respond(failed(
                ResponseError::RebalanceInProgress,
            ))))
        }
        Err(e) => return Reply::Ready(Box::new(respond(failed(e)))),
    };
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
    let written = groups.record(&mut coordinator, &records);
    if !records.is_empty() {
        // The leader's assignment: the members hear it (`stored`) only once its record is
        // committed, in a cluster with at least `min.insync.replicas` in sync; if it was not
        // appended or not committed, they all hear the error and the group rebalances, as on
        // Kafka. The outcome counts only while this node still coordinates the group in the
        // epoch it appended in: a take-over in a later epoch (even of this node again)
        // rebuilt the group from what the log kept.
        match (&written, broker.arc()) {
            (Ok(waits), Some(b)) => {
                let (waits, group, generation) = (
                    waits.clone(),
                    request.group_id.to_string(),
                    request.generation_id,
                );
                let epoch = groups.shards.check(&group);
                tokio::spawn(async move {
                    let outcome = crate::commit::committed(waits).await;
                    if let Ok(mut coordinator) = b.groups.lock_for(&group) {
                        if b.groups.shards.check(&group) == epoch {
                            coordinator.stored(&group, generation, outcome, b.groups.now_ms());
                        }
                    }
                });
            }
            // Refused at the append; or the broker is shutting down (no answer is sent then).
            (written, _) => coordinator.stored(
                &request.group_id,
                request.generation_id,
                written.as_ref().map(|_| ()).map_err(|e| *e),
                groups.now_ms(),
            ),
        }
    }
    let fence = crate::group::fence_later(broker, &request.group_id);
    drop(coordinator);
    // The leader hears the outcome through its own wait in the group, with the others: one
    // decision (the task's), not a second wait on the same commit that could end otherwise.
    let written = written.map(|_| Vec::new());
    answer_when_committed(
        written,
        reply,
        fence,
        failed,
        ResponseError::RebalanceInProgress,
        respond,
    )
}

fn respond_with(version: i16) -> impl Fn(SyncResult) -> ResponseKind + Copy {
    move |r: SyncResult| {
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
    }
}
