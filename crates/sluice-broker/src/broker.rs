//! The broker: its topics, the API versions it speaks, request dispatch, and the background
//! work (interval flushes, retention).

use std::sync::Arc;

use kafka_protocol::messages::{ApiKey, RequestKind, ResponseKind};
use serde::Serialize;
use sluice_log::Clock;
use sluice_wire::{ApiRange, ApiTable, Peer, Reply, Request, Service};
use tokio_util::sync::CancellationToken;

use crate::config::BrokerConfig;
use crate::error::BrokerError;
use crate::handlers;
use crate::metadata_store::MetadataStore;
use crate::producer_ids::ProducerIds;
use crate::topics::{Topic, Topics};

pub struct Broker {
    pub(crate) config: BrokerConfig,
    pub(crate) cluster_id: String,
    pub(crate) topics: Topics,
    pub(crate) clock: Arc<dyn Clock>,
    pub(crate) producer_ids: ProducerIds,
    api_table: ApiTable,
    started_at_ms: i64,
}

impl std::fmt::Debug for Broker {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Broker(node {})", self.config.node_id)
    }
}

/// The API versions Sluice implements; ApiVersions advertises exactly these. Each is the
/// range current clients negotiate, capped where a later version needs something we lack.
pub fn api_table() -> ApiTable {
    let r = |key, min, max| ApiRange { key, min, max };
    ApiTable::new(vec![
        r(ApiKey::Produce, 3, 13),
        r(ApiKey::Fetch, 4, 17),
        r(ApiKey::ListOffsets, 1, 7),
        r(ApiKey::Metadata, 0, 12),
        r(ApiKey::ApiVersions, 0, 4),
        r(ApiKey::CreateTopics, 2, 7),
        r(ApiKey::DeleteTopics, 1, 6),
        r(ApiKey::DescribeConfigs, 1, 4),
        r(ApiKey::AlterConfigs, 0, 2),
        r(ApiKey::CreatePartitions, 0, 3),
        r(ApiKey::IncrementalAlterConfigs, 0, 1),
        r(ApiKey::DescribeCluster, 0, 2),
        r(ApiKey::InitProducerId, 0, 5),
    ])
}

impl Broker {
    /// Opens the data directory, recovering every partition's log.
    pub fn open(config: BrokerConfig, clock: Arc<dyn Clock>) -> Result<Arc<Broker>, BrokerError> {
        let store = Arc::new(MetadataStore::open(&config.data_dir.join("meta"))?);
        let identity = store.identity(config.node_id)?;
        let producer_ids = ProducerIds::open(Arc::clone(&store))?;
        let topics = Topics::open(
            &config.data_dir,
            store,
            config.topic_defaults.clone(),
            config.topic_limits.clone(),
            Arc::clone(&clock),
        )?;
        Ok(Arc::new(Broker {
            started_at_ms: clock.now_ms(),
            config,
            cluster_id: identity.cluster_id,
            topics,
            clock,
            producer_ids,
            api_table: api_table(),
        }))
    }

    pub fn config(&self) -> &BrokerConfig {
        &self.config
    }

    pub fn cluster_id(&self) -> &str {
        &self.cluster_id
    }

    pub fn topics(&self) -> &Topics {
        &self.topics
    }

    pub fn node_id(&self) -> i32 {
        self.config.node_id
    }

    /// Looks a topic up, creating it when the broker auto-creates topics and the name is legal.
    pub(crate) fn topic_or_auto_create(
        &self,
        name: &str,
        allow: bool,
    ) -> Result<Arc<Topic>, BrokerError> {
        if let Some(topic) = self.topics.get(name) {
            return Ok(topic);
        }
        crate::topics::validate_topic_name(name)?;
        if !(allow && self.config.auto_create_topics) {
            return Err(BrokerError::UnknownTopic(name.to_string()));
        }
        match self
            .topics
            .create(name, self.config.num_partitions, Default::default(), false)
        {
            Ok(Some(topic)) => Ok(topic),
            // Created by a concurrent request in between.
            Err(BrokerError::TopicExists(_)) | Ok(None) => self
                .topics
                .get(name)
                .ok_or_else(|| BrokerError::UnknownTopic(name.to_string())),
            Err(e) => Err(e),
        }
    }

    /// Starts the interval flusher and the retention task; both stop with `shutdown`.
    pub fn start_background(self: &Arc<Self>, shutdown: CancellationToken) {
        let broker = Arc::clone(self);
        let stop = shutdown.clone();
        tokio::spawn(async move {
            let mut tick = tokio::time::interval(broker.config.flush_check_interval);
            tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            loop {
                tokio::select! {
                    () = stop.cancelled() => return,
                    _ = tick.tick() => {}
                }
                let now_ms = broker.clock.now_ms();
                for partition in broker.topics.all_partitions() {
                    partition.flush_if_due(now_ms);
                }
            }
        });
        let broker = Arc::clone(self);
        tokio::spawn(async move {
            let mut tick = tokio::time::interval(broker.config.retention_check_interval);
            tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            loop {
                tokio::select! {
                    () = shutdown.cancelled() => return,
                    _ = tick.tick() => {}
                }
                let producer_cutoff_ms =
                    broker.clock.now_ms() - broker.config.producer_id_expiration_ms;
                for partition in broker.topics.all_partitions() {
                    partition.expire_producers(producer_cutoff_ms);
                    match partition.apply_retention() {
                        Ok(0) => {}
                        Ok(n) => {
                            tracing::info!(?partition, segments = n, "retention deleted segments")
                        }
                        Err(e) => tracing::warn!(?partition, error = %e, "retention failed"),
                    }
                }
            }
        });
    }

    /// Flushes and closes every log, recording a clean shutdown.
    pub fn close(&self) {
        for partition in self.topics.all_partitions() {
            if let Err(e) = partition.close() {
                tracing::error!(?partition, error = %e, "closing partition failed");
            }
        }
    }

    pub fn status(&self) -> BrokerStatus {
        let topics = self
            .topics
            .list()
            .iter()
            .map(|t| TopicStatus {
                name: t.name.to_string(),
                id: t.id.to_string(),
                configs: t.overrides(),
                partitions: t
                    .partitions()
                    .iter()
                    .map(|p| {
                        let info = p.info();
                        PartitionStatus {
                            partition: p.index,
                            log_start_offset: info.log_start.0,
                            log_end_offset: info.log_end.0,
                            high_watermark: info.high_watermark.0,
                            size_bytes: info.size_bytes,
                            segments: info.segments,
                            offline: info.offline,
                        }
                    })
                    .collect(),
            })
            .collect();
        BrokerStatus {
            node_id: self.config.node_id,
            cluster_id: self.cluster_id.clone(),
            version: env!("CARGO_PKG_VERSION"),
            uptime_ms: self.clock.now_ms().saturating_sub(self.started_at_ms),
            kafka_listener: format!(
                "{}:{}",
                self.config.advertised_host, self.config.advertised_port
            ),
            data_dir: self.config.data_dir.display().to_string(),
            topics,
        }
    }
}

#[derive(Debug, Serialize)]
pub struct BrokerStatus {
    pub node_id: i32,
    pub cluster_id: String,
    pub version: &'static str,
    pub uptime_ms: i64,
    pub kafka_listener: String,
    pub data_dir: String,
    pub topics: Vec<TopicStatus>,
}

#[derive(Debug, Serialize)]
pub struct TopicStatus {
    pub name: String,
    pub id: String,
    pub configs: std::collections::BTreeMap<String, String>,
    pub partitions: Vec<PartitionStatus>,
}

#[derive(Debug, Serialize)]
pub struct PartitionStatus {
    pub partition: i32,
    pub log_start_offset: i64,
    pub log_end_offset: i64,
    pub high_watermark: i64,
    pub size_bytes: u64,
    pub segments: usize,
    pub offline: bool,
}

impl Service for Broker {
    fn api_table(&self) -> &ApiTable {
        &self.api_table
    }

    fn call(&self, request: Request, peer: &Peer) -> Reply {
        let version = request.version();
        let ready = |r: ResponseKind| Reply::Ready(Box::new(r));
        match request.body {
            RequestKind::ApiVersions(req) => {
                ready(handlers::api_versions::handle(self, req, version))
            }
            RequestKind::Metadata(req) => ready(handlers::metadata::handle(self, req, version)),
            RequestKind::Produce(req) => handlers::produce::handle(self, req, version),
            RequestKind::Fetch(req) => handlers::fetch::handle(self, req, version),
            RequestKind::ListOffsets(req) => {
                ready(handlers::list_offsets::handle(self, req, version))
            }
            RequestKind::CreateTopics(req) => {
                ready(handlers::create_topics::handle(self, req, version))
            }
            RequestKind::DeleteTopics(req) => {
                ready(handlers::delete_topics::handle(self, req, version))
            }
            RequestKind::CreatePartitions(req) => {
                ready(handlers::create_partitions::handle(self, req, version))
            }
            RequestKind::DescribeConfigs(req) => {
                ready(handlers::describe_configs::handle(self, req, version))
            }
            RequestKind::AlterConfigs(req) => {
                ready(handlers::alter_configs::handle(self, req, version))
            }
            RequestKind::IncrementalAlterConfigs(req) => ready(
                handlers::incremental_alter_configs::handle(self, req, version),
            ),
            RequestKind::DescribeCluster(req) => {
                ready(handlers::describe_cluster::handle(self, req, version))
            }
            RequestKind::InitProducerId(req) => {
                ready(handlers::init_producer_id::handle(self, req, version))
            }
            other => {
                // The API table admits only the requests above; reaching here is our bug.
                tracing::error!(peer = %peer.addr, request = ?std::mem::discriminant(&other), "request without a handler");
                Reply::Silent
            }
        }
    }
}
