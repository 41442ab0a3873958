//! AlterConfigs (the original, non-incremental form): the given set replaces all of a
//! topic's overrides, or of a node's dynamic configs (the replication throttle rates; every
//! other broker setting is static).

use std::collections::BTreeMap;

use kafka_protocol::messages::alter_configs_response::AlterConfigsResourceResponse;
use kafka_protocol::messages::{AlterConfigsRequest, AlterConfigsResponse, ResponseKind};

use sluice_wire::Reply;

use super::config_change::{self, Change};
use super::{str_bytes, RESOURCE_BROKER, RESOURCE_TOPIC};
use crate::broker::Broker;
use crate::error::BrokerError;
use crate::handlers::{Call, Versions};
use crate::replication::throttle::{FOLLOWER_RATE, LEADER_RATE, RECOVERY_RATE};
use crate::topic_config::ConfigError;
use sluice_auth::acl::Operation;

pub const VERSIONS: Versions = Versions::new(0, 2);

pub fn handle(broker: &Broker, request: AlterConfigsRequest, call: &Call) -> Reply {
    let authz = call.authz(broker);
    let resources = request
        .resources
        .into_iter()
        .map(|resource| {
            let name = resource.resource_name.to_string();
            if let Err(e) = super::config_access(
                &authz,
                Operation::AlterConfigs,
                resource.resource_type,
                &name,
            ) {
                return (resource.resource_type, resource.resource_name, Err(e));
            }
            let configs = resource
                .configs
                .into_iter()
                .map(|c| match c.value {
                    Some(v) => Ok((c.name.to_string(), v.to_string())),
                    None => Err(BrokerError::InvalidConfig(ConfigError(format!(
                        "config '{}' has a null value",
                        &*c.name
                    )))),
                })
                .collect::<Result<BTreeMap<_, _>, _>>();
            let change = match resource.resource_type {
                RESOURCE_TOPIC => configs.map(|configs| Change::Topic { name, configs }),
                // The whole set: the dynamic configs not named go back to their defaults.
                RESOURCE_BROKER => configs.map(|configs| {
                    let mut changes: Vec<(String, Option<String>)> = configs
                        .iter()
                        .map(|(k, v)| (k.clone(), Some(v.clone())))
                        .collect();
                    for key in [LEADER_RATE, FOLLOWER_RATE, RECOVERY_RATE] {
                        if !configs.contains_key(key) {
                            changes.push((key.to_string(), None));
                        }
                    }
                    Change::Broker { name, changes }
                }),
                other => Err(BrokerError::InvalidRequest(format!(
                    "resource type {other} has no configs here"
                ))),
            };
            (resource.resource_type, resource.resource_name, change)
        })
        .collect();
    config_change::apply(broker, resources, request.validate_only, |outcomes| {
        ResponseKind::AlterConfigs(
            AlterConfigsResponse::default().with_responses(
                outcomes
                    .into_iter()
                    .map(|(kind, name, outcome)| result(kind, name, outcome))
                    .collect(),
            ),
        )
    })
}

fn result(
    resource_type: i8,
    resource_name: kafka_protocol::protocol::StrBytes,
    outcome: Result<(), BrokerError>,
) -> AlterConfigsResourceResponse {
    let response = AlterConfigsResourceResponse::default()
        .with_resource_type(resource_type)
        .with_resource_name(resource_name);
    match outcome {
        Ok(()) => response,
        Err(e) => response
            .with_error_code(e.code())
            .with_error_message(Some(str_bytes(&e.to_string()))),
    }
}
