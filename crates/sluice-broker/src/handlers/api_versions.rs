//! ApiVersions (KIP-35, KIP-511): what this broker speaks, exactly as implemented, and (v3+,
//! KIP-584) its features: `transaction.version` 2, so that clients use KIP-890's transaction
//! protocol.

use kafka_protocol::messages::api_versions_response::{FinalizedFeatureKey, SupportedFeatureKey};
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
    let mut body = api_versions_body(broker.api_table(), 0);
    if version >= 3 {
        let name = super::str_bytes("transaction.version");
        body = body
            .with_supported_features(vec![SupportedFeatureKey::default()
                .with_name(name.clone())
                .with_min_version(0)
                .with_max_version(2)])
            .with_finalized_features_epoch(1)
            .with_finalized_features(vec![FinalizedFeatureKey::default()
                .with_name(name)
                .with_min_version_level(2)
                .with_max_version_level(2)]);
    }
    ResponseKind::ApiVersions(body)
}
