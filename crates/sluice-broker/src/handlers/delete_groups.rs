//! DeleteGroups: an empty group and its committed offsets (NON_EMPTY_GROUP otherwise).

use kafka_protocol::messages::delete_groups_response::DeletableGroupResult;
use kafka_protocol::messages::{DeleteGroupsRequest, DeleteGroupsResponse, ResponseKind};

use crate::broker::Broker;
use crate::handlers::{Call, Versions};

pub const VERSIONS: Versions = Versions::new(0, 2);

pub fn handle(broker: &Broker, request: DeleteGroupsRequest, _call: &Call) -> ResponseKind {
    let groups = &broker.groups;
    let mut coordinator = groups.coordinator.lock();
    let results = request
        .groups_names
        .iter()
        .map(|id| {
            let error = match coordinator.delete_group(id) {
                Ok(records) => match groups.write(&records) {
                    Ok(_) => {
                        let now = groups.now_ms();
                        for r in &records {
                            coordinator.apply(r, now);
                        }
                        0
                    }
                    Err(e) => e.code(),
                },
                Err(e) => e.code(),
            };
            DeletableGroupResult::default()
                .with_group_id(id.clone())
                .with_error_code(error)
        })
        .collect();
    ResponseKind::DeleteGroups(DeleteGroupsResponse::default().with_results(results))
}
