//! DescribeCluster (KIP-700): the live nodes and, as the controller, this node
//! (Broker::advertised_controller). From v2 (KIP-1073) fenced nodes too when asked, marked fenced.

use kafka_protocol::error::ResponseError;
use kafka_protocol::messages::describe_cluster_response::DescribeClusterBroker;
use kafka_protocol::messages::{
    BrokerId, DescribeClusterRequest, DescribeClusterResponse, ResponseKind,
};

use super::str_bytes;
use crate::broker::Broker;
use crate::handlers::{Call, Versions};

/// Endpoint types of DescribeCluster v1+ (KIP-919).
const ENDPOINT_BROKERS: i8 = 1;

pub const VERSIONS: Versions = Versions::new(0, 2);

pub fn handle(broker: &Broker, request: DescribeClusterRequest, call: &Call) -> ResponseKind {
    let version = call.version;
    let mut response = DescribeClusterResponse::default()
        .with_cluster_id(str_bytes(broker.cluster_id()))
        .with_controller_id(BrokerId(broker.advertised_controller()))
        .with_cluster_authorized_operations(if request.include_cluster_authorized_operations {
            call.authz(broker).authorized_operations(
                sluice_auth::acl::ResourceType::Cluster,
                sluice_auth::acl::CLUSTER_NAME,
            )
        } else {
            i32::MIN
        });
    if version >= 1 {
        response = response.with_endpoint_type(ENDPOINT_BROKERS);
        if request.endpoint_type != ENDPOINT_BROKERS {
            return ResponseKind::DescribeCluster(
                response
                    .with_error_code(ResponseError::UnsupportedEndpointType.code())
                    .with_error_message(Some(str_bytes(
                        "Sluice brokers serve only the broker endpoint type (1)",
                    ))),
            );
        }
    }
    let include_fenced = version >= 2 && request.include_fenced_brokers;
    let brokers = broker
        .cluster_nodes(&call.peer.listener)
        .into_iter()
        .filter(|(.., fenced)| include_fenced || !fenced)
        .map(|(id, host, port, rack, fenced)| {
            DescribeClusterBroker::default()
                .with_broker_id(BrokerId(id))
                .with_host(str_bytes(&host))
                .with_port(port)
                .with_rack(rack.as_deref().map(str_bytes))
                .with_is_fenced(fenced)
        })
        .collect();
    ResponseKind::DescribeCluster(response.with_brokers(brokers))
}
