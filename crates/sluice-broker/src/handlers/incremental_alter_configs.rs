//! IncrementalAlterConfigs (KIP-339): SET, DELETE, APPEND and SUBTRACT on a topic's overrides.

use kafka_protocol::messages::incremental_alter_configs_request::AlterConfigsResource;
use kafka_protocol::messages::incremental_alter_configs_response::AlterConfigsResourceResponse;
use kafka_protocol::messages::{
    IncrementalAlterConfigsRequest, IncrementalAlterConfigsResponse, ResponseKind,
};

use super::alter_configs::static_broker_configs;
use super::{str_bytes, RESOURCE_BROKER, RESOURCE_TOPIC};
use crate::broker::Broker;
use crate::error::BrokerError;
use crate::handlers::{Call, Versions};
use crate::topic_config::{self, ConfigError, Kind};

const SET: i8 = 0;
const DELETE: i8 = 1;
const APPEND: i8 = 2;
const SUBTRACT: i8 = 3;

pub const VERSIONS: Versions = Versions::new(0, 1);

pub fn handle(
    broker: &Broker,
    request: IncrementalAlterConfigsRequest,
    _call: &Call,
) -> ResponseKind {
    let responses = request
        .resources
        .into_iter()
        .map(|resource| {
            let (resource_type, resource_name) =
                (resource.resource_type, resource.resource_name.clone());
            let outcome = match resource_type {
                RESOURCE_TOPIC => alter_topic(broker, resource, request.validate_only),
                RESOURCE_BROKER => Err(static_broker_configs()),
                other => Err(BrokerError::InvalidRequest(format!(
                    "resource type {other} has no configs here"
                ))),
            };
            let response = AlterConfigsResourceResponse::default()
                .with_resource_type(resource_type)
                .with_resource_name(resource_name);
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
}

fn alter_topic(
    broker: &Broker,
    resource: AlterConfigsResource,
    validate_only: bool,
) -> Result<(), BrokerError> {
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
                if !matches!(def.kind, Kind::List(_)) {
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
    broker.topics().set_configs(&name, overrides, validate_only)
}
