//! AlterConfigs (the original, non-incremental form): the given set replaces all of a
//! topic's overrides. Broker settings are static.

use std::collections::BTreeMap;

use kafka_protocol::messages::alter_configs_response::AlterConfigsResourceResponse;
use kafka_protocol::messages::{AlterConfigsRequest, AlterConfigsResponse, ResponseKind};

use super::{str_bytes, RESOURCE_BROKER, RESOURCE_TOPIC};
use crate::broker::Broker;
use crate::error::BrokerError;
use crate::handlers::{Call, Versions};
use crate::topic_config::ConfigError;

pub const VERSIONS: Versions = Versions::new(0, 2);

pub fn handle(broker: &Broker, request: AlterConfigsRequest, _call: &Call) -> ResponseKind {
    let responses = request
        .resources
        .into_iter()
        .map(|resource| {
            let outcome = match resource.resource_type {
                RESOURCE_TOPIC => resource
                    .configs
                    .into_iter()
                    .map(|c| match c.value {
                        Some(v) => Ok((c.name.to_string(), v.to_string())),
                        None => Err(BrokerError::InvalidConfig(ConfigError(format!(
                            "config '{}' has a null value",
                            &*c.name
                        )))),
                    })
                    .collect::<Result<BTreeMap<_, _>, _>>()
                    .and_then(|configs| {
                        broker.topics().set_configs(
                            &resource.resource_name,
                            configs,
                            request.validate_only,
                        )
                    }),
                RESOURCE_BROKER => Err(static_broker_configs()),
                other => Err(BrokerError::InvalidRequest(format!(
                    "resource type {other} has no configs here"
                ))),
            };
            result(resource.resource_type, resource.resource_name, outcome)
        })
        .collect();
    ResponseKind::AlterConfigs(AlterConfigsResponse::default().with_responses(responses))
}

pub(crate) fn static_broker_configs() -> BrokerError {
    BrokerError::InvalidRequest(
        "broker settings are static in Sluice: set them in the config file, environment or flags"
            .into(),
    )
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
