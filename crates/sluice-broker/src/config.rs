//! The broker's settings (the binary builds them from file, environment and flags).

use std::path::PathBuf;
use std::time::Duration;

use crate::topic_config::Defaults;
use crate::topics::TopicLimits;

#[derive(Debug, Clone)]
pub struct BrokerConfig {
    pub node_id: i32,
    /// The cluster's id when this node belongs to one (the same on every node); a single node
    /// keeps the one it made at first start.
    pub cluster_id: Option<String>,
    /// Host and port clients are told to connect to (Metadata, DescribeCluster).
    pub advertised_host: String,
    pub advertised_port: i32,
    pub data_dir: PathBuf,
    /// Create unknown topics named in Metadata or Produce requests (`auto.create.topics.enable`).
    pub auto_create_topics: bool,
    /// Partitions of an auto-created topic, or of CreateTopics with -1 (`num.partitions`).
    pub num_partitions: i32,
    /// Topic config defaults (`log.retention.ms` and friends, under their topic names).
    pub topic_defaults: Defaults,
    pub topic_limits: TopicLimits,
    /// How often retention runs (`log.retention.check.interval.ms`).
    pub retention_check_interval: Duration,
    /// How often the interval flusher looks for partitions due a flush.
    pub flush_check_interval: Duration,
    /// Forget an idempotent producer's sequence state after this long without a write
    /// (`producer.id.expiration.ms`).
    pub producer_id_expiration_ms: i64,
    /// How often the cleaner looks for compacted topics with new sealed segments.
    pub cleaner_interval: Duration,
    /// The cleaner reads and writes at most this many bytes per second.
    pub cleaner_max_bytes_per_s: u64,
    pub offsets_topic_partitions: i32,
    pub groups: crate::group::coordinator::GroupConfig,
    /// Partitions of `__transaction_state` (`transaction.state.log.num.partitions`).
    pub transaction_state_partitions: i32,
    /// The longest transaction timeout a producer may ask for (`transaction.max.timeout.ms`).
    pub transaction_max_timeout_ms: i32,
    /// Forget a transactional id idle this long (`transactional.id.expiration.ms`).
    pub transactional_id_expiration_ms: i64,
    /// This node will join a cluster (`sluice serve --cluster`): the offsets topic comes from
    /// the cluster's metadata instead of being created here.
    pub clustered: bool,
    /// Listeners, SASL mechanisms, certificate principals, session lifetimes.
    pub security: crate::security::SecurityConfig,
}

impl Default for BrokerConfig {
    fn default() -> Self {
        BrokerConfig {
            node_id: 1,
            cluster_id: None,
            advertised_host: "127.0.0.1".into(),
            advertised_port: 9092,
            data_dir: PathBuf::from("./data"),
            auto_create_topics: true,
            num_partitions: 1,
            topic_defaults: Defaults::default(),
            topic_limits: TopicLimits::default(),
            retention_check_interval: Duration::from_secs(60),
            flush_check_interval: Duration::from_millis(10),
            producer_id_expiration_ms: 24 * 3600 * 1000,
            cleaner_interval: Duration::from_secs(15),
            cleaner_max_bytes_per_s: 50 * 1024 * 1024,
            offsets_topic_partitions: 16,
            groups: Default::default(),
            transaction_state_partitions: 16,
            transaction_max_timeout_ms: 900_000,
            transactional_id_expiration_ms: 7 * 24 * 3600 * 1000,
            clustered: false,
            security: Default::default(),
        }
    }
}
