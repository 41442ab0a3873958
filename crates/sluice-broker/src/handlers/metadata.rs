//! Metadata: brokers, the controller, and topics with their partitions' leaders. Unknown
//! topics named in the request are created when auto-creation is on (and, from v4, the client
//! allows it).

use std::sync::Arc;

use kafka_protocol::error::ResponseError;
use kafka_protocol::messages::metadata_response::{
    MetadataResponseBroker, MetadataResponsePartition, MetadataResponseTopic,
};
use kafka_protocol::messages::{BrokerId, MetadataRequest, MetadataResponse, ResponseKind};

use super::{str_bytes, topic_name};
use crate::broker::Broker;
use crate::handlers::{Call, Versions};
use crate::topics::Topic;

/// "Authorized operations not requested" (KIP-430).
const OPERATIONS_UNSET: i32 = i32::MIN;

pub const VERSIONS: Versions = Versions::new(0, 12);

pub fn handle(broker: &Broker, request: MetadataRequest, call: &Call) -> ResponseKind {
    let version = call.version;
    let allow_auto_create = version < 4 || request.allow_auto_topic_creation;
    let topics = match request.topics {
        // v0: an empty list means all topics; v1+: null means all, empty means none.
        None => broker
            .topics()
            .list()
            .iter()
            .map(|t| describe(broker, t))
            .collect(),
        Some(list) if list.is_empty() && version == 0 => broker
            .topics()
            .list()
            .iter()
            .map(|t| describe(broker, t))
            .collect(),
        Some(list) => list
            .into_iter()
            .map(|wanted| match wanted.name {
                Some(name) => match broker.topic_or_auto_create(&name, allow_auto_create) {
                    Ok(topic) => describe(broker, &topic),
                    Err(e) => MetadataResponseTopic::default()
                        .with_name(Some(name))
                        .with_error_code(e.code())
                        .with_topic_authorized_operations(OPERATIONS_UNSET),
                },
                None => match broker.topics().get_by_id(wanted.topic_id) {
                    Some(topic) => describe(broker, &topic),
                    None => MetadataResponseTopic::default()
                        .with_topic_id(wanted.topic_id)
                        .with_error_code(ResponseError::UnknownTopicId.code())
                        .with_topic_authorized_operations(OPERATIONS_UNSET),
                },
            })
            .collect(),
    };
    let config = broker.config();
    ResponseKind::Metadata(
        MetadataResponse::default()
            .with_brokers(vec![MetadataResponseBroker::default()
                .with_node_id(BrokerId(config.node_id))
                .with_host(str_bytes(&config.advertised_host))
                .with_port(config.advertised_port)])
            .with_cluster_id(Some(str_bytes(broker.cluster_id())))
            .with_controller_id(BrokerId(config.node_id))
            .with_topics(topics)
            .with_cluster_authorized_operations(OPERATIONS_UNSET),
    )
}

fn describe(broker: &Broker, topic: &Arc<Topic>) -> MetadataResponseTopic {
    let node = BrokerId(broker.node_id());
    MetadataResponseTopic::default()
        .with_name(Some(topic_name(&topic.name)))
        .with_topic_id(topic.id)
        .with_is_internal(crate::topics::is_internal(&topic.name))
        .with_topic_authorized_operations(OPERATIONS_UNSET)
        .with_partitions(
            topic
                .partitions()
                .iter()
                .map(|p| {
                    // A partition whose log failed still serves reads, so it stays listed with
                    // its leader; its producers get KAFKA_STORAGE_ERROR.
                    MetadataResponsePartition::default()
                        .with_partition_index(p.index)
                        .with_leader_id(node)
                        .with_leader_epoch(p.leader_epoch().0)
                        .with_replica_nodes(vec![node])
                        .with_isr_nodes(vec![node])
                })
                .collect(),
        )
}
