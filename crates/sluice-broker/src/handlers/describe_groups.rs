//! DescribeGroups: state, protocol, and each member's client, host, metadata and assignment
//! (the last three only while the group is Stable, as Kafka shows them).

use kafka_protocol::error::ResponseError;
use kafka_protocol::messages::describe_groups_response::{DescribedGroup, DescribedGroupMember};
use kafka_protocol::messages::{DescribeGroupsRequest, DescribeGroupsResponse, ResponseKind};

use super::str_bytes;
use crate::broker::Broker;
use crate::group::state::GroupState;
use crate::handlers::{Call, Versions};
use sluice_auth::acl::{Operation, ResourceType};
use sluice_wire::Reply;

pub const VERSIONS: Versions = Versions::new(0, 5);

pub fn handle(broker: &Broker, request: DescribeGroupsRequest, call: &Call) -> Reply {
    let version = call.version;
    let authz = call.authz(broker);
    let coordinator = broker.groups.coordinator.lock();
    let groups = request
        .groups
        .iter()
        .map(|id| {
            if !authz.group(Operation::Describe, id) {
                return DescribedGroup::default()
                    .with_group_id(id.clone())
                    .with_error_code(ResponseError::GroupAuthorizationFailed.code())
                    .with_authorized_operations(i32::MIN);
            }
            if let Err(e) = broker.groups.check(id) {
                return DescribedGroup::default()
                    .with_group_id(id.clone())
                    .with_error_code(e.code())
                    .with_authorized_operations(i32::MIN);
            }
            if let Some(group) = coordinator.consumer_group(id) {
                // A group of the new protocol (KIP-848), shown as Kafka shows it to
                // DescribeGroups: protocol type "consumer", assignments in the consumer
                // protocol's bytes.
                return DescribedGroup::default()
                    .with_group_id(id.clone())
                    .with_group_state(str_bytes(group.state()))
                    .with_protocol_type(str_bytes("consumer"))
                    .with_protocol_data(str_bytes(""))
                    .with_authorized_operations(i32::MIN)
                    .with_members(
                        group
                            .members
                            .values()
                            .map(|m| {
                                member(
                                    &m.id,
                                    m.instance_id.as_deref(),
                                    &m.client_id,
                                    &m.client_host,
                                )
                                .with_member_assignment(
                                    sluice_wire::consumer_protocol::encode_assignment(
                                        &m.assigned_list(),
                                    ),
                                )
                            })
                            .collect(),
                    );
            }
            let state = coordinator.state_of(id);
            let described = DescribedGroup::default()
                .with_group_id(id.clone())
                .with_group_state(str_bytes(state.name()))
                .with_authorized_operations(i32::MIN);
            if state == GroupState::Dead && version >= 6 {
                return described
                    .with_error_code(ResponseError::GroupIdNotFound.code())
                    .with_error_message(Some(str_bytes(&format!("no group '{}'", &**id))));
            }
            let Some(group) = coordinator.group(id) else {
                return described;
            };
            // As Kafka: the protocol and each member's metadata and assignment only once the
            // group is Stable. Before, the assignment is the last generation's (or none yet),
            // which a tool would show as current.
            let stable = state == GroupState::Stable;
            let protocol = if stable {
                group.protocol_name.clone().unwrap_or_default()
            } else {
                String::new()
            };
            described
                .with_protocol_type(str_bytes(&group.protocol_type))
                .with_protocol_data(str_bytes(&protocol))
                .with_members(
                    group
                        .members
                        .values()
                        .map(|m| {
                            let shown = member(
                                &m.id,
                                m.instance_id.as_deref(),
                                &m.client_id,
                                &m.client_host,
                            );
                            if stable {
                                shown
                                    .with_member_metadata(m.metadata_for(&protocol))
                                    .with_member_assignment(m.assignment.clone())
                            } else {
                                shown
                            }
                        })
                        .collect(),
                )
        })
        .collect::<Vec<_>>();
    // In a cluster, what was read is sent once the groups' records are committed.
    let waits = broker.groups.shards.settled_all(
        groups
            .iter()
            .filter(|g| g.error_code == 0)
            .map(|g| g.group_id.as_str()),
    );
    drop(coordinator);
    // KIP-430: what the principal may do with each group found, when asked.
    let mut groups = groups;
    if request.include_authorized_operations {
        for g in groups.iter_mut().filter(|g| g.error_code == 0) {
            g.authorized_operations = authz.authorized_operations(ResourceType::Group, &g.group_id);
        }
    }
    let response =
        ResponseKind::DescribeGroups(DescribeGroupsResponse::default().with_groups(groups));
    super::after_fence(response, waits, failed)
}

/// `response` with `error` in place of every group described.
fn failed(mut response: ResponseKind, error: ResponseError) -> ResponseKind {
    if let ResponseKind::DescribeGroups(r) = &mut response {
        for g in r.groups.iter_mut().filter(|g| g.error_code == 0) {
            *g = DescribedGroup::default()
                .with_group_id(g.group_id.clone())
                .with_error_code(error.code())
                .with_authorized_operations(i32::MIN);
        }
    }
    response
}

/// A member's identity, as both kinds of group show it.
fn member(
    id: &str,
    instance_id: Option<&str>,
    client_id: &str,
    host: &str,
) -> DescribedGroupMember {
    DescribedGroupMember::default()
        .with_member_id(str_bytes(id))
        .with_group_instance_id(instance_id.map(str_bytes))
        .with_client_id(str_bytes(client_id))
        .with_client_host(str_bytes(host))
}
