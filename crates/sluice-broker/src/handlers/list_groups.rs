//! ListGroups, with the state filter (v4+) and type filter (v5+; every group here is "classic").

use kafka_protocol::messages::list_groups_response::ListedGroup;
use kafka_protocol::messages::{ListGroupsRequest, ListGroupsResponse, ResponseKind};

use super::str_bytes;
use crate::broker::Broker;

pub fn handle(broker: &Broker, request: ListGroupsRequest, _version: i16) -> ResponseKind {
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
        .filter_map(|id| {
            let state = coordinator.state_of(&id);
            if !states.is_empty() && !states.contains(&state.name().to_lowercase()) {
                return None;
            }
            if !types.is_empty() && !types.iter().any(|t| t == "classic") {
                return None;
            }
            let protocol_type = coordinator
                .group(&id)
                .map(|g| g.protocol_type.clone())
                .unwrap_or_default();
            Some(
                ListedGroup::default()
                    .with_group_id(kafka_protocol::messages::GroupId(str_bytes(&id)))
                    .with_protocol_type(str_bytes(&protocol_type))
                    .with_group_state(str_bytes(state.name()))
                    .with_group_type(str_bytes("classic")),
            )
        })
        .collect();
    ResponseKind::ListGroups(ListGroupsResponse::default().with_groups(groups))
}
