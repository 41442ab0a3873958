//! Metadata: brokers, the node clients send controller requests to (Broker::advertised_controller),
//! and topics with their partitions' leaders. Unknown
//! topics named in the request are created when auto-creation is on (and, from v4, the client
//! allows it).

use std::sync::Arc;

use kafka_protocol::error::ResponseError;
use kafka_protocol::messages::metadata_response::{
    MetadataResponseBroker, MetadataResponsePartition, MetadataResponseTopic,
};
use kafka_protocol::messages::{BrokerId, MetadataRequest, MetadataResponse, ResponseKind};

use sluice_auth::acl::{Operation, ResourceType, CLUSTER_NAME};

use super::{str_bytes, topic_name};
use crate::broker::Broker;
use crate::handlers::{Call, Versions};
use crate::replication::Replication;
use crate::topics::Topic;
use sluice_cluster::metadata::{ClusterState, TopicInfo};
use sluice_cluster::NodeId;

/// "Authorized operations not requested" (KIP-430).
const OPERATIONS_UNSET: i32 = i32::MIN;

pub const VERSIONS: Versions = Versions::new(0, 12);

pub fn handle(broker: &Broker, request: MetadataRequest, call: &Call) -> ResponseKind {
    let authz = call.authz(broker);
    let topic_operations = request.include_topic_authorized_operations;
    let cluster_operations = request.include_cluster_authorized_operations;
    let mut response = if authz.is_unrestricted() {
        handle_authorized(broker, request, call)
    } else {
        handle_checked(broker, &authz, request, call)
    };
    // KIP-430: what the principal may do, when asked.
    if let ResponseKind::Metadata(r) = &mut response {
        if topic_operations {
            for t in r.topics.iter_mut().filter(|t| t.error_code == 0) {
                if let Some(name) = &t.name {
                    t.topic_authorized_operations =
                        authz.authorized_operations(ResourceType::Topic, name);
                }
            }
        }
        if cluster_operations {
            r.cluster_authorized_operations =
                authz.authorized_operations(ResourceType::Cluster, CLUSTER_NAME);
        }
    }
    response
}

/// Metadata with the authorizer's checks.
fn handle_checked(
    broker: &Broker,
    authz: &crate::security::Authz,
    mut request: MetadataRequest,
    call: &Call,
) -> ResponseKind {
    let version = call.version;
    let all = match &request.topics {
        None => true,
        Some(list) => list.is_empty() && version == 0,
    };
    let auto_create =
        (version < 4 || request.allow_auto_topic_creation) && broker.config().auto_create_topics;
    // Named topics the principal may not describe (or, missing, may not have created) are
    // answered TOPIC_AUTHORIZATION_FAILED whether they exist or not, as in Kafka: the answer
    // tells nothing about topics one may not see.
    let mut denied = Vec::new();
    if let Some(list) = request.topics.as_mut() {
        list.retain(|wanted| {
            let (name, exists) = match &wanted.name {
                Some(name) => (
                    Some(name.to_string()),
                    broker.topics().get(name).is_some() || in_cluster_state(broker, name),
                ),
                None => (
                    broker
                        .topics()
                        .get_by_id(wanted.topic_id)
                        .map(|t| t.name.to_string())
                        .or_else(|| broker.topic_name_of(wanted.topic_id)),
                    true,
                ),
            };
            let Some(name) = name else {
                return true; // an unknown topic id: UNKNOWN_TOPIC_ID, as before
            };
            let allowed = authz.topic(Operation::Describe, &name)
                && (exists || !auto_create || authz.may_create_topic(&name));
            if !allowed {
                denied.push(
                    MetadataResponseTopic::default()
                        .with_name(wanted.name.clone())
                        .with_topic_id(wanted.topic_id)
                        .with_error_code(ResponseError::TopicAuthorizationFailed.code())
                        .with_topic_authorized_operations(OPERATIONS_UNSET),
                );
            }
            allowed
        });
    }
    let mut response = handle_authorized(broker, request, call);
    if let ResponseKind::Metadata(r) = &mut response {
        if all {
            r.topics.retain(|t| {
                t.name
                    .as_ref()
                    .is_some_and(|n| authz.shows(Operation::Describe, ResourceType::Topic, n))
            });
        }
        r.topics.extend(denied);
    }
    response
}

fn in_cluster_state(broker: &Broker, name: &str) -> bool {
    broker
        .replication()
        .is_some_and(|r| r.state().state.names.contains_key(name))
}

fn handle_authorized(broker: &Broker, request: MetadataRequest, call: &Call) -> ResponseKind {
    let version = call.version;
    let allow_auto_create = version < 4 || request.allow_auto_topic_creation;
    if let Some(replication) = broker.replication() {
        return in_cluster(
            broker,
            replication,
            request,
            version,
            allow_auto_create,
            &call.peer.listener,
        );
    }
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
    let (host, port) = broker
        .address_for(&call.peer.listener, broker.node_id())
        .unwrap_or_default();
    ResponseKind::Metadata(
        MetadataResponse::default()
            .with_brokers(vec![MetadataResponseBroker::default()
                .with_node_id(BrokerId(broker.node_id()))
                .with_host(str_bytes(&host))
                .with_port(port)])
            .with_cluster_id(Some(str_bytes(broker.cluster_id())))
            .with_controller_id(BrokerId(broker.advertised_controller()))
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

/// In a cluster: everything from the applied metadata (internal topics included), the same on
/// every node.
fn in_cluster(
    broker: &Broker,
    replication: &Arc<Replication>,
    request: MetadataRequest,
    version: i16,
    allow_auto_create: bool,
    listener: &str,
) -> ResponseKind {
    let applied = replication.state();
    let state = &applied.state;
    let all = match &request.topics {
        None => true,
        Some(list) => list.is_empty() && version == 0,
    };
    let mut topics = Vec::new();
    if all {
        topics.extend(
            state
                .topics
                .values()
                .map(|t| describe_cluster_topic(state, t)),
        );
    } else {
        for wanted in request.topics.into_iter().flatten() {
            let found = match &wanted.name {
                Some(name) => state
                    .names
                    .get(name.as_str())
                    .and_then(|id| state.topics.get(id)),
                None => state.topics.get(&wanted.topic_id),
            };
            if let Some(t) = found {
                topics.push(describe_cluster_topic(state, t));
                continue;
            }
            let Some(name) = wanted.name else {
                topics.push(
                    MetadataResponseTopic::default()
                        .with_topic_id(wanted.topic_id)
                        .with_error_code(ResponseError::UnknownTopicId.code())
                        .with_topic_authorized_operations(OPERATIONS_UNSET),
                );
                continue;
            };
            let error = match crate::topics::validate_topic_name(&name) {
                Err(e) => e.response_error(),
                Ok(()) if allow_auto_create && broker.config().auto_create_topics => {
                    broker.auto_create_in_cluster(&name);
                    ResponseError::LeaderNotAvailable
                }
                Ok(()) => ResponseError::UnknownTopicOrPartition,
            };
            topics.push(
                MetadataResponseTopic::default()
                    .with_name(Some(name))
                    .with_error_code(error.code())
                    .with_topic_authorized_operations(OPERATIONS_UNSET),
            );
        }
    }
    // Every registered node, fenced ones too: they lead nothing and no client needs them,
    // but librdkafka retires a broker that leaves this list while a coordinator request may
    // still wait on it, and that request then hangs (librdkafka #5511): kept, it fails over.
    // A node without this client's listener is left out, as Kafka does.
    //
    // This node too before its own registration is applied (the first moments after a start):
    // Metadata names it the controller, and a client that finds no such broker in the list
    // holds its admin requests until its next refresh (librdkafka: CreateTopics timed out
    // after 30 s on a cluster started a moment before).
    let me = replication.node().registration();
    let unregistered = (!state.nodes.contains_key(&me.node)).then_some(me);
    let brokers = state
        .nodes
        .values()
        .map(|n| &n.registration)
        .chain(unregistered)
        .filter_map(|r| {
            let (host, port) = r.endpoint(listener)?;
            Some(
                MetadataResponseBroker::default()
                    .with_node_id(BrokerId(r.node.0))
                    .with_host(str_bytes(host))
                    .with_port(port)
                    .with_rack(r.rack.as_deref().map(str_bytes)),
            )
        })
        .collect();
    ResponseKind::Metadata(
        MetadataResponse::default()
            .with_brokers(brokers)
            .with_cluster_id(Some(str_bytes(broker.cluster_id())))
            .with_controller_id(BrokerId(broker.advertised_controller()))
            .with_topics(topics)
            .with_cluster_authorized_operations(OPERATIONS_UNSET),
    )
}

fn ids(nodes: impl IntoIterator<Item = NodeId>) -> Vec<BrokerId> {
    nodes.into_iter().map(|n| BrokerId(n.0)).collect()
}

fn describe_cluster_topic(state: &ClusterState, t: &TopicInfo) -> MetadataResponseTopic {
    MetadataResponseTopic::default()
        .with_name(Some(topic_name(&t.name)))
        .with_topic_id(t.id)
        .with_is_internal(crate::topics::is_internal(&t.name))
        .with_topic_authorized_operations(OPERATIONS_UNSET)
        .with_partitions(
            t.partitions
                .iter()
                .enumerate()
                .map(|(i, p)| {
                    let offline = p.replicas.iter().copied().filter(|r| !state.is_live(*r));
                    MetadataResponsePartition::default()
                        .with_error_code(if p.leader.is_some() {
                            0
                        } else {
                            ResponseError::LeaderNotAvailable.code()
                        })
                        .with_partition_index(i as i32)
                        .with_leader_id(BrokerId(p.leader.map_or(-1, |l| l.0)))
                        .with_leader_epoch(p.leader_epoch.0)
                        .with_replica_nodes(ids(p.replicas.iter().copied()))
                        .with_isr_nodes(ids(p.isr.iter().copied()))
                        .with_offline_replicas(ids(offline))
                })
                .collect(),
        )
}
