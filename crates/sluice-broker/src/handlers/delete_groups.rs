//! DeleteGroups: an empty group and its committed offsets (NON_EMPTY_GROUP otherwise).

use kafka_protocol::messages::delete_groups_response::DeletableGroupResult;
use kafka_protocol::messages::{DeleteGroupsRequest, DeleteGroupsResponse, ResponseKind};

use sluice_wire::Reply;

use crate::broker::Broker;
use crate::commit::committed;
use crate::handlers::{Call, Versions};
use kafka_protocol::ResponseError;
use sluice_auth::acl::Operation;

pub const VERSIONS: Versions = Versions::new(0, 2);

pub fn handle(broker: &Broker, request: DeleteGroupsRequest, call: &Call) -> Reply {
    let groups = &broker.groups;
    let authz = call.authz(broker);
    let mut pending = Vec::new();
    for id in &request.groups_names {
        if !authz.group(Operation::Delete, id) {
            pending.push((id.clone(), Err(ResponseError::GroupAuthorizationFailed)));
            continue;
        }
        let written = groups.lock_for(id).and_then(|mut coordinator| {
            let records = coordinator.delete_group(id)?;
            groups.record(&mut coordinator, &records)
        });
        pending.push((id.clone(), written));
    }
    Reply::Later(Box::pin(async move {
        let mut results = Vec::new();
        // All at once: one stalled offsets partition does not hold the others' answers for
        // its whole timeout each.
        let outcomes = futures::future::join_all(pending.into_iter().map(|(id, written)| async {
            let outcome = match written {
                Ok(waits) => committed(waits).await,
                Err(e) => Err(e),
            };
            (id, outcome)
        }))
        .await;
        for (id, outcome) in outcomes {
            results.push(
                DeletableGroupResult::default()
                    .with_group_id(id)
                    .with_error_code(outcome.err().map_or(0, |e| e.code())),
            );
        }
        Some(ResponseKind::DeleteGroups(
            DeleteGroupsResponse::default().with_results(results),
        ))
    }))
}
