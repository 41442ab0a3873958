//! IncrementalAlterConfigs (KIP-339): SET, DELETE, APPEND and SUBTRACT on a topic's overrides;
//! SET and DELETE of a node's dynamic configs (the replication throttle rates).

use kafka_protocol::messages::incremental_alter_configs_request::AlterConfigsResource;
use kafka_protocol::messages::incremental_alter_configs_response::AlterConfigsResourceResponse;
use kafka_protocol::messages::{
    IncrementalAlterConfigsRequest, IncrementalAlterConfigsResponse, ResponseKind,
};

use sluice_wire::Reply;

use super::config_change::{self, Change};
use super::{str_bytes, RESOURCE_BROKER, RESOURCE_TOPIC};
use crate::broker::Broker;
use crate::error::BrokerError;
use crate::handlers::{Call, Versions};
use crate::topic_config::{self, ConfigError, Kind};
use sluice_auth::acl::Operation;

const SET: i8 = 0;
const DELETE: i8 = 1;
const APPEND: i8 = 2;
const SUBTRACT: i8 = 3;

pub const VERSIONS: Versions = Versions::new(0, 1);

pub fn handle(broker: &Broker, request: IncrementalAlterConfigsRequest, call: &Call) -> Reply {
    let authz = call.authz(broker);
    let resources = request
        .resources
        .into_iter()
        .map(|resource| {
            let (kind, name) = (resource.resource_type, resource.resource_name.clone());
            if let Err(e) = super::config_access(&authz, Operation::AlterConfigs, kind, &name) {
                return (kind, name, Err(e));
            }
            let change = match kind {
                RESOURCE_TOPIC => alter_topic(broker, resource),
                RESOURCE_BROKER => alter_broker(resource),
                other => Err(BrokerError::InvalidRequest(format!(
                    "resource type {other} has no configs here"
                ))),
            };
            (kind, name, change)
        })
        .collect();
    config_change::apply(broker, resources, request.validate_only, |outcomes| {
        let responses = outcomes
            .into_iter()
            .map(|(kind, name, outcome)| {
                let response = AlterConfigsResourceResponse::default()
                    .with_resource_type(kind)
                    .with_resource_name(name);
                match outcome {
                    Ok(()) => response,
                    Err(e) => response
                        .with_error_code(e.code())
                        .with_error_message(Some(str_bytes(&e.to_string()))),
                }
            })
            .collect();
        ResponseKind::IncrementalAlterConfigs(
            IncrementalAlterConfigsResponse::default().with_responses(responses),
        )
    })
}

/// A node's dynamic configs: SET and DELETE (they are not lists).
fn alter_broker(resource: AlterConfigsResource) -> Result<Change, BrokerError> {
    let changes = resource
        .configs
        .into_iter()
        .map(|c| {
            let key = c.name.to_string();
            match c.config_operation {
                SET => c
                    .value
                    .map(|v| (key.clone(), Some(v.to_string())))
                    .ok_or_else(|| {
                        BrokerError::InvalidConfig(ConfigError(format!(
                            "SET of '{key}' needs a value"
                        )))
                    }),
                DELETE => Ok((key, None)),
                other => Err(BrokerError::InvalidRequest(format!(
                    "operation {other} does not apply to broker config '{key}'"
                ))),
            }
        })
        .collect::<Result<Vec<_>, _>>()?;
    Ok(Change::Broker {
        name: resource.resource_name.to_string(),
        changes,
    })
}

fn alter_topic(broker: &Broker, resource: AlterConfigsResource) -> Result<Change, BrokerError> {
    let name = resource.resource_name.to_string();
    let topic = broker
        .topics()
        .get(&name)
        .ok_or_else(|| BrokerError::UnknownTopic(name.clone()))?;
    let mut overrides = topic.overrides();
    let invalid = |msg: String| BrokerError::InvalidConfig(ConfigError(msg));
    for change in resource.configs {
        let key = change.name.to_string();
        let def = topic_config::def(&key)
            .ok_or_else(|| invalid(format!("unknown topic config '{key}'")))?;
        let value = change.value.map(|v| v.to_string());
        match change.config_operation {
            SET => {
                let value =
                    value.ok_or_else(|| invalid(format!("SET of '{key}' needs a value")))?;
                overrides.insert(key, value);
            }
            DELETE => {
                overrides.remove(&key);
            }
            APPEND | SUBTRACT => {
                if !matches!(def.kind, Kind::List(_) | Kind::Replicas) {
                    return Err(invalid(format!(
                        "'{key}' is not a list; APPEND and SUBTRACT apply only to lists"
                    )));
                }
                let value = value
                    .ok_or_else(|| invalid(format!("APPEND/SUBTRACT of '{key}' needs a value")))?;
                let current = topic_config::value_of(&key, &overrides, broker.topics().defaults())
                    .unwrap_or("")
                    .to_string();
                let mut items: Vec<String> = current
                    .split(',')
                    .map(str::trim)
                    .filter(|s| !s.is_empty())
                    .map(String::from)
                    .collect();
                for item in value.split(',').map(str::trim).filter(|s| !s.is_empty()) {
                    if change.config_operation == APPEND {
                        if !items.iter().any(|i| i == item) {
                            items.push(item.to_string());
                        }
                    } else {
                        items.retain(|i| i != item);
                    }
                }
                overrides.insert(key, items.join(","));
            }
            other => {
                return Err(BrokerError::InvalidRequest(format!(
                    "unknown config operation {other}"
                )))
            }
        }
    }
    Ok(Change::Topic {
        name,
        configs: overrides,
    })
}
