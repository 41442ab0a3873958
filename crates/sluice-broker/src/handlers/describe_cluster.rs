//! DescribeCluster (KIP-700): this node is the whole cluster and its controller.

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
        .with_controller_id(BrokerId(broker.node_id()))
        .with_cluster_authorized_operations(i32::MIN);
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
    let config = broker.config();
    ResponseKind::DescribeCluster(response.with_brokers(vec![DescribeClusterBroker::default()
            .with_broker_id(BrokerId(config.node_id))
            .with_host(str_bytes(&config.advertised_host))
            .with_port(config.advertised_port)]))
}
