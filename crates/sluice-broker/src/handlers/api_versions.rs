//! ApiVersions (KIP-35, KIP-511): what this broker speaks, exactly as implemented, and (v3+,
//! KIP-584) its features: `transaction.version` 2, so that clients use KIP-890's transaction
//! protocol.
//!
//! A supported feature whose minimum version is 0 is listed only to requests of v4 and later
//! (KIP-1022): clients that send v3 (the Java client up to 3.8) reject a 0 minimum and drop the
//! connection, so Kafka leaves such features out of their answer (KAFKA-17492), and so do we.
//! The finalized level (2) is shown to every v3+ request, as Kafka does, on a single node and
//! in a cluster alike (in a cluster a partition leader adds the partition to the transaction
//! through its coordinator, wherever that runs: `handlers::produce`).

use kafka_protocol::messages::api_versions_response::{FinalizedFeatureKey, SupportedFeatureKey};
use kafka_protocol::messages::{ApiVersionsRequest, ResponseKind};
use sluice_wire::codec::api_versions_body;
use sluice_wire::Service;

use crate::broker::Broker;
use crate::handlers::{Call, Versions};

/// `transaction.version` 0 is the classic transaction protocol, which we also serve.
const TRANSACTION_VERSION_MIN: i16 = 0;

pub const VERSIONS: Versions = Versions::new(0, 4);

pub fn handle(broker: &Broker, request: ApiVersionsRequest, call: &Call) -> ResponseKind {
    let version = call.version;
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
        let supported = [SupportedFeatureKey::default()
            .with_name(name.clone())
            .with_min_version(TRANSACTION_VERSION_MIN)
            .with_max_version(2)];
        body = body
            .with_supported_features(
                supported
                    .into_iter()
                    .filter(|f| version >= 4 || f.min_version > 0)
                    .collect(),
            )
            .with_finalized_features_epoch(1);
        body = body.with_finalized_features(vec![FinalizedFeatureKey::default()
            .with_name(name)
            .with_min_version_level(2)
            .with_max_version_level(2)]);
    }
    ResponseKind::ApiVersions(body)
}
