//! ApiVersions (KIP-35, KIP-511): what this broker speaks, exactly as implemented.

use kafka_protocol::messages::{ApiVersionsRequest, ResponseKind};
use sluice_wire::codec::api_versions_body;
use sluice_wire::Service;

use crate::broker::Broker;

pub fn handle(broker: &Broker, request: ApiVersionsRequest, version: i16) -> ResponseKind {
    if version >= 3 {
        tracing::debug!(
            client = %request.client_software_name,
            client_version = %request.client_software_version,
            "ApiVersions"
        );
    }
    ResponseKind::ApiVersions(api_versions_body(broker.api_table(), 0))
}
