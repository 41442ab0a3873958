//! ListGroups, with the state filter (v4+) and type filter (v5+: "classic", or "consumer" for
//! groups of the new protocol, KIP-848).

use kafka_protocol::error::ResponseError;
use kafka_protocol::messages::list_groups_response::ListedGroup;
use kafka_protocol::messages::{ListGroupsRequest, ListGroupsResponse, ResponseKind};

use super::str_bytes;
use crate::broker::Broker;
use crate::handlers::{Call, Versions};
use sluice_auth::acl::{Operation, ResourceType};
use sluice_wire::Reply;

pub const VERSIONS: Versions = Versions::new(0, 5);

pub fn handle(broker: &Broker, request: ListGroupsRequest, call: &Call) -> Reply {
    // Describe on the cluster lists every group; without it, the groups one may describe.
    let authz = call.authz(broker);
    let all = authz.cluster_quietly(Operation::Describe);
    let shown = |id: &str| all || authz.shows(Operation::Describe, ResourceType::Group, id);
    let coordinator = broker.groups.coordinator.lock();
    let states: Vec<String> = request
        .states_filter
        .iter()
        .map(|s| s.to_lowercase())
        .collect();
    let types: Vec<String> = request
        .types_filter
        .iter()
        .map(|s| s.to_lowercase())
        .collect();
    let groups = coordinator
        .group_ids()
        .into_iter()
        .filter(|id| shown(id))
        .filter_map(|id| {
            let (state, group_type, protocol_type) = match coordinator.consumer_group(&id) {
                Some(g) => (g.state(), "consumer", "consumer".to_string()),
                None => (
                    coordinator.state_of(&id).name(),
                    "classic",
                    coordinator
                        .group(&id)
                        .map(|g| g.protocol_type.clone())
                        .unwrap_or_default(),
                ),
            };
            if !states.is_empty() && !states.contains(&state.to_lowercase()) {
                return None;
            }
            if !types.is_empty() && !types.iter().any(|t| t == group_type) {
                return None;
            }
            Some(
                ListedGroup::default()
                    .with_group_id(kafka_protocol::messages::GroupId(str_bytes(&id)))
                    .with_protocol_type(str_bytes(&protocol_type))
                    .with_group_state(str_bytes(state))
                    .with_group_type(str_bytes(group_type)),
            )
        })
        .collect();
    // As Kafka: the groups it has, and COORDINATOR_LOAD_IN_PROGRESS while a partition's are
    // still being read (an admin client asks again). Asked under the lock, which a load
    // holds until it is done: a partition read meanwhile cannot be missed.
    let error = if broker.groups.shards.any_loading() {
        ResponseError::CoordinatorLoadInProgress.code()
    } else {
        0
    };
    // In a cluster, what was read is sent once every group partition led here is committed.
    let waits = broker.groups.shards.settled_everywhere();
    drop(coordinator);
    let response = ResponseKind::ListGroups(
        ListGroupsResponse::default()
            .with_error_code(error)
            .with_groups(groups),
    );
    // A listing that could not be settled says LOAD_IN_PROGRESS whatever the wait's error:
    // admin clients ask again on it, where NOT_COORDINATOR fails a broker-wide listing.
    super::after_fence(response, waits, |mut response, _| {
        if let ResponseKind::ListGroups(r) = &mut response {
            r.groups.clear();
            r.error_code = ResponseError::CoordinatorLoadInProgress.code();
        }
        response
    })
}
