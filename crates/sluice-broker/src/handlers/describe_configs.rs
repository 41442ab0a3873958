//! DescribeConfigs for topics (their overrides over the broker defaults) and for this broker
//! (its settings, read-only).

use std::collections::BTreeMap;

use kafka_protocol::error::ResponseError;
use kafka_protocol::messages::describe_configs_response::{
    DescribeConfigsResourceResult, DescribeConfigsResult,
};
use kafka_protocol::messages::{DescribeConfigsRequest, DescribeConfigsResponse, ResponseKind};
use kafka_protocol::protocol::StrBytes;

use super::{str_bytes, RESOURCE_BROKER, RESOURCE_TOPIC};
use crate::broker::Broker;
use crate::handlers::{Call, Versions};
use crate::replication::throttle;
use crate::topic_config::{self, DEFS};
use sluice_auth::acl::Operation;

/// ConfigSource values (KIP-226).
const DYNAMIC_TOPIC_CONFIG: i8 = 1;
const DYNAMIC_BROKER_CONFIG: i8 = 2;
const DYNAMIC_DEFAULT_BROKER_CONFIG: i8 = 3;
const STATIC_BROKER_CONFIG: i8 = 4;
const DEFAULT_CONFIG: i8 = 5;
const RECOVERY_DOC: &str =
    "bytes per second a follower copies from each leader for its replicas out of the ISR (0: no cap)";

/// How the HTTP admin API names a config source.
pub(crate) fn source_name(source: i8) -> &'static str {
    match source {
        DYNAMIC_TOPIC_CONFIG => "topic",
        STATIC_BROKER_CONFIG => "broker",
        DYNAMIC_BROKER_CONFIG => "dynamic broker",
        DYNAMIC_DEFAULT_BROKER_CONFIG => "dynamic default broker",
        _ => "default",
    }
}

/// One described config.
pub(crate) struct Entry {
    pub name: StrBytes,
    pub value: Option<StrBytes>,
    pub config_source: i8,
    pub config_type: i8,
    pub doc: &'static str,
    pub read_only: bool,
}

/// Every topic config (or just `keys`) with its effective value and where it comes from.
/// `replicas`: the topic's replication factor in a cluster, where `min.insync.replicas`
/// defaults to a majority of it (`None` on a single node).
pub(crate) fn topic_entries(
    broker: &Broker,
    overrides: &BTreeMap<String, String>,
    keys: Option<&[StrBytes]>,
    replicas: Option<usize>,
) -> Vec<Entry> {
    let defaults = broker.topics().defaults();
    let majority = replicas.map(|r| (r / 2 + 1).to_string());
    DEFS.iter()
        .filter(|d| keys.is_none_or(|k| k.iter().any(|k| &**k == d.name)))
        .map(|d| {
            let (value, source) = match overrides.get(d.name) {
                Some(v) => (v.as_str(), DYNAMIC_TOPIC_CONFIG),
                None if d.name == topic_config::MIN_INSYNC_REPLICAS && majority.is_some() => {
                    (majority.as_deref().unwrap_or(d.default), DEFAULT_CONFIG)
                }
                None => {
                    let v = defaults.get(d.name).unwrap_or(d.default);
                    (
                        v,
                        if v == d.default {
                            DEFAULT_CONFIG
                        } else {
                            STATIC_BROKER_CONFIG
                        },
                    )
                }
            };
            Entry {
                name: str_bytes(d.name),
                value: Some(str_bytes(value)),
                config_source: source,
                config_type: d.kind.type_code(),
                doc: d.doc,
                read_only: false,
            }
        })
        .collect()
}

/// The broker's settings under Kafka's broker config names.
fn broker_entries(broker: &Broker, keys: Option<&[StrBytes]>) -> Vec<Entry> {
    let config = broker.config();
    let defaults = broker.topics().defaults();
    let topic_default = |name: &str| defaults.get(name).unwrap_or("").to_string();
    let settings: Vec<(&'static str, String, i8)> = vec![
        ("broker.id", config.node_id.to_string(), 3),
        ("node.id", config.node_id.to_string(), 3),
        (
            "auto.create.topics.enable",
            config.auto_create_topics.to_string(),
            1,
        ),
        ("num.partitions", config.num_partitions.to_string(), 3),
        ("default.replication.factor", "1".into(), 3),
        ("log.dirs", config.data_dir.display().to_string(), 2),
        (
            "log.retention.ms",
            topic_default(topic_config::RETENTION_MS),
            5,
        ),
        (
            "log.retention.bytes",
            topic_default(topic_config::RETENTION_BYTES),
            5,
        ),
        (
            "log.segment.bytes",
            topic_default(topic_config::SEGMENT_BYTES),
            3,
        ),
        ("log.roll.ms", topic_default(topic_config::SEGMENT_MS), 5),
        (
            "log.index.interval.bytes",
            topic_default(topic_config::INDEX_INTERVAL_BYTES),
            3,
        ),
        (
            "log.message.timestamp.type",
            topic_default(topic_config::TIMESTAMP_TYPE),
            2,
        ),
        ("log.flush.mode", topic_default(topic_config::FLUSH_MODE), 2),
        (
            "log.flush.interval.ms",
            topic_default(topic_config::FLUSH_INTERVAL_MS),
            5,
        ),
        (
            "message.max.bytes",
            topic_default(topic_config::MAX_MESSAGE_BYTES),
            3,
        ),
        (
            "min.insync.replicas",
            topic_default(topic_config::MIN_INSYNC_REPLICAS),
            3,
        ),
        (
            "log.retention.check.interval.ms",
            config.retention_check_interval.as_millis().to_string(),
            5,
        ),
    ];
    let wanted = |name: &str| keys.is_none_or(|k| k.iter().any(|k| &**k == name));
    let mut entries: Vec<Entry> = settings
        .into_iter()
        .filter(|(name, _, _)| wanted(name))
        .map(|(name, value, config_type)| Entry {
            name: str_bytes(name),
            value: Some(str_bytes(&value)),
            config_source: STATIC_BROKER_CONFIG,
            config_type,
            doc: "",
            read_only: true,
        })
        .collect();
    // The dynamic ones: the replication throttle rates in force, where set (in a cluster,
    // applied from the metadata log, after a restart too).
    let dynamic = broker.throttles.configs();
    // In a cluster, what this node has from the cluster-wide default rather than its own.
    let own = broker
        .replication()
        .map(|r| r.broker_configs(r.me()).into_keys().collect::<Vec<_>>());
    for (name, rate) in &dynamic {
        if wanted(name) {
            let defaulted = own
                .as_ref()
                .is_some_and(|own| !own.iter().any(|k| k == name));
            entries.push(Entry {
                name: str_bytes(name),
                value: Some(str_bytes(&rate.to_string())),
                config_source: if defaulted {
                    DYNAMIC_DEFAULT_BROKER_CONFIG
                } else {
                    DYNAMIC_BROKER_CONFIG
                },
                config_type: 5,
                doc: dynamic_doc(name),
                read_only: false,
            });
        }
    }
    // The recovery cap is in force by default: shown with its default when not set.
    if !dynamic.contains_key(throttle::RECOVERY_RATE) && wanted(throttle::RECOVERY_RATE) {
        entries.push(Entry {
            name: str_bytes(throttle::RECOVERY_RATE),
            value: Some(str_bytes(&throttle::DEFAULT_RECOVERY_RATE.to_string())),
            config_source: DEFAULT_CONFIG,
            config_type: 5,
            doc: RECOVERY_DOC,
            read_only: false,
        });
    }
    entries
}

/// What a dynamic broker config is, for DescribeConfigs' documentation field.
fn dynamic_doc(name: &str) -> &'static str {
    if name == throttle::RECOVERY_RATE {
        RECOVERY_DOC
    } else {
        "bytes per second for throttled replicas (KIP-73)"
    }
}

/// The cluster-wide default dynamic broker configs that are set.
fn cluster_default_entries(broker: &Broker, keys: Option<&[StrBytes]>) -> Vec<Entry> {
    let Some(replication) = broker.replication() else {
        return Vec::new();
    };
    let wanted = |name: &str| keys.is_none_or(|k| k.iter().any(|k| &**k == name));
    replication
        .broker_configs(sluice_cluster::NodeId::CLUSTER_DEFAULT)
        .into_iter()
        .filter(|(name, _)| wanted(name))
        .map(|(name, value)| Entry {
            doc: dynamic_doc(&name),
            name: str_bytes(&name),
            value: Some(str_bytes(&value)),
            config_source: DYNAMIC_DEFAULT_BROKER_CONFIG,
            config_type: 5,
            read_only: false,
        })
        .collect()
}

pub const VERSIONS: Versions = Versions::new(1, 4);

pub fn handle(broker: &Broker, request: DescribeConfigsRequest, call: &Call) -> ResponseKind {
    let version = call.version;
    let authz = call.authz(broker);
    let results = request
        .resources
        .into_iter()
        .map(|resource| {
            let result = DescribeConfigsResult::default()
                .with_resource_type(resource.resource_type)
                .with_resource_name(resource.resource_name.clone());
            if let Err(e) = super::config_access(
                &authz,
                Operation::DescribeConfigs,
                resource.resource_type,
                &resource.resource_name,
            ) {
                return result
                    .with_error_code(e.code())
                    .with_error_message(Some(str_bytes(&e.to_string())));
            }
            // Null asks for every config; so does an empty list (as the Java admin client's
            // describe-all sends null, an empty list can only mean the same).
            let keys = resource
                .configuration_keys
                .as_deref()
                .filter(|k| !k.is_empty());
            let entries = match resource.resource_type {
                RESOURCE_TOPIC => match broker.topics().get(&resource.resource_name) {
                    Some(topic) => topic_entries(
                        broker,
                        &topic.overrides(),
                        keys,
                        cluster_replicas(broker, &resource.resource_name),
                    ),
                    None => {
                        return result
                            .with_error_code(ResponseError::UnknownTopicOrPartition.code())
                            .with_error_message(Some(str_bytes(&format!(
                                "unknown topic '{}'",
                                &*resource.resource_name
                            ))))
                    }
                },
                // In a cluster, the broker named "" is the cluster-wide default (Kafka's
                // `--entity-default`): only the dynamic defaults set, as Kafka lists them.
                RESOURCE_BROKER
                    if resource.resource_name.is_empty() && broker.replication().is_some() =>
                {
                    cluster_default_entries(broker, keys)
                }
                RESOURCE_BROKER
                    if resource.resource_name.is_empty()
                        || *resource.resource_name == *broker.node_id().to_string() =>
                {
                    broker_entries(broker, keys)
                }
                RESOURCE_BROKER => {
                    return result
                        .with_error_code(ResponseError::InvalidRequest.code())
                        .with_error_message(Some(str_bytes(&format!(
                            "this is broker {}, not '{}'",
                            broker.node_id(),
                            &*resource.resource_name
                        ))))
                }
                other => {
                    return result
                        .with_error_code(ResponseError::InvalidRequest.code())
                        .with_error_message(Some(str_bytes(&format!(
                            "resource type {other} has no configs here"
                        ))))
                }
            };
            result.with_configs(
                entries
                    .into_iter()
                    .map(|e| {
                        DescribeConfigsResourceResult::default()
                            .with_name(e.name)
                            .with_value(e.value)
                            .with_read_only(e.read_only)
                            .with_config_source(e.config_source)
                            .with_config_type(if version >= 3 { e.config_type } else { 0 })
                            .with_documentation(
                                (version >= 3 && request.include_documentation)
                                    .then(|| str_bytes(e.doc)),
                            )
                    })
                    .collect(),
            )
        })
        .collect();
    ResponseKind::DescribeConfigs(DescribeConfigsResponse::default().with_results(results))
}

/// The replication factor of topic `name` in a cluster (`None` on a single node).
pub(crate) fn cluster_replicas(broker: &Broker, name: &str) -> Option<usize> {
    let replication = broker.replication()?;
    let state = replication.state();
    let topic = state.state.topic_by_name(name)?;
    topic.partitions.first().map(|p| p.target().len())
}
