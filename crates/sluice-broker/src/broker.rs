//! The broker: its topics, the API versions it speaks, request dispatch, and the background
//! work (interval flushes, retention).

use std::sync::Arc;

use kafka_protocol::messages::ApiKey;
use serde::Serialize;
use sluice_log::Clock;
use sluice_wire::{ApiTable, Peer, Reply, Request, Service};
use tokio_util::sync::CancellationToken;

use crate::config::BrokerConfig;
use crate::error::BrokerError;
use crate::handlers;
use crate::metadata_store::MetadataStore;
use crate::producer_ids::ProducerIds;
use crate::topics::{Topic, Topics};

/// At most this many `authorization denied` lines per window (the rest are counted in
/// `sluice_authorization_denials_total`, and audited when an audit log is set, not logged).
const DENIAL_LINES_PER_WINDOW: u32 = 100;
const DENIAL_WINDOW_MS: i64 = 10_000;

pub struct Broker {
    pub(crate) config: BrokerConfig,
    pub(crate) cluster_id: String,
    /// The data directory's id (see [`crate::metadata_store::ClusterIdentity`]).
    directory_id: uuid::Uuid,
    pub(crate) topics: Topics,
    pub(crate) clock: Arc<dyn Clock>,
    pub(crate) producer_ids: ProducerIds,
    pub(crate) groups: crate::group::GroupService,
    pub(crate) metrics: Arc<crate::metrics::Metrics>,
    pub(crate) txns: crate::txn::TxnService,
    /// Order of appends that wait for a transaction coordinator's verdict.
    pub(crate) append_turns: crate::txn::append_turns::AppendTurns,
    pub(crate) fetch_sessions: Arc<crate::fetch_session::FetchSessions>,
    /// Set once this broker joined a cluster (`sluice serve --cluster`).
    pub(crate) replication: std::sync::OnceLock<Arc<crate::replication::Replication>>,
    /// The dynamic replication throttles (`*.replication.throttled.rate`).
    pub(crate) throttles: crate::replication::throttle::ReplicationThrottles,
    api_table: ApiTable,
    pub(crate) started_at_ms: i64,
    /// Where the HTTP admin port listens (reported to the other nodes' consoles).
    pub(crate) admin_address: std::sync::OnceLock<String>,
    /// The single node's SASL users (a cluster keeps them in its metadata).
    pub(crate) local_users: crate::security::credentials::LocalUsers,
    pub(crate) local_acls: crate::security::acls::LocalAcls,
    pub(crate) local_quotas: crate::quotas::store::LocalQuotas,
    pub(crate) quota_buckets: crate::quotas::throttle::Buckets,
    /// Failed logins per address, to slow down password guessing.
    pub(crate) failed_logins: crate::security::failures::FailedLogins,
    /// Security events (logins, user changes), when `audit_log_file` is set.
    pub(crate) audit: crate::security::audit::AuditLog,
    /// How many refusals the log shows (every one is counted and audited).
    pub(crate) denial_log: crate::security::log_budget::LogBudget,
    /// Drawn at start: makes an unknown SCRAM user's challenge stable, like a real one's.
    pub(crate) unknown_user_secret: [u8; 32],
    /// Metrics of components running beside the broker (the outbox relay), appended to
    /// `/metrics` as OpenMetrics text.
    pub(crate) extra_metrics: parking_lot::Mutex<Vec<ExtraMetrics>>,
    /// The outbox relays running beside the broker, each as its status (JSON), for the
    /// console.
    outbox_relays: parking_lot::Mutex<Vec<RelayStatus>>,
    /// This broker, for work that outlives a request (finishing a transaction).
    me: std::sync::Weak<Broker>,
}

/// Writes a component's metric families (OpenMetrics text, no `# EOF`).
pub type ExtraMetrics = Arc<dyn Fn(&mut String) + Send + Sync>;

/// An outbox relay's status as the admin API shows it (`/api/outbox`).
pub type RelayStatus = Arc<dyn Fn() -> serde_json::Value + Send + Sync>;

impl std::fmt::Debug for Broker {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Broker(node {})", self.config.node_id)
    }
}

impl Broker {
    /// Opens the data directory, recovering every partition's log.
    pub fn open(config: BrokerConfig, clock: Arc<dyn Clock>) -> Result<Arc<Broker>, BrokerError> {
        Broker::open_with_timer(config, Arc::clone(&clock), clock)
    }

    /// [`Broker::open`], with `timer` for the group and transaction coordinators' sessions,
    /// rebalance and transaction timeouts: a clock that a step of the wall clock does not move
    /// (`MonotonicClock`), so that an NTP step or a hand-set clock on a coordinator neither
    /// expires every member's session nor aborts every open transaction. `clock` (the wall
    /// clock) stamps records and drives retention.
    pub fn open_with_timer(
        config: BrokerConfig,
        clock: Arc<dyn Clock>,
        timer: Arc<dyn Clock>,
    ) -> Result<Arc<Broker>, BrokerError> {
        let store = Arc::new(MetadataStore::open(&config.data_dir.join("meta"))?);
        let identity = store.identity(config.node_id)?;
        let producer_ids = ProducerIds::open(Arc::clone(&store))?;
        let local_users = crate::security::credentials::LocalUsers::open(Arc::clone(&store))?;
        let local_acls = crate::security::acls::LocalAcls::open(Arc::clone(&store))?;
        let local_quotas = crate::quotas::store::LocalQuotas::open(Arc::clone(&store))?;
        let audit = match &config.security.audit_log_file {
            Some(path) => crate::security::audit::AuditLog::open(path, Arc::clone(&clock))
                .map_err(|source| BrokerError::Metadata {
                    path: path.clone(),
                    source,
                })?,
            None => crate::security::audit::AuditLog::new(Arc::clone(&clock)),
        };
        let audit = match &config.security.audit_log_topic {
            Some(topic) => audit.with_topic(topic),
            None => audit,
        };
        let metrics = Arc::new(crate::metrics::Metrics::default());
        let topics = Topics::open(
            &config.data_dir,
            store,
            config.topic_defaults.clone(),
            config.topic_limits.clone(),
            Arc::clone(&clock),
            Arc::clone(&metrics),
        )?;
        let groups = if config.clustered {
            crate::group::GroupService::clustered(config.groups.clone(), Arc::clone(&timer))
        } else {
            crate::group::GroupService::open(
                &topics,
                config.offsets_topic_partitions,
                config.groups.clone(),
                Arc::clone(&timer),
            )?
        };
        let txns = if config.clustered {
            crate::txn::TxnService::clustered(
                config.transaction_max_timeout_ms,
                config.transactional_id_expiration_ms,
                Arc::clone(&timer),
            )
        } else {
            crate::txn::TxnService::open(
                &topics,
                config.transaction_state_partitions,
                config.transaction_max_timeout_ms,
                config.transactional_id_expiration_ms,
                timer,
            )?
        };
        let broker = Arc::new_cyclic(|me| Broker {
            extra_metrics: parking_lot::Mutex::new(Vec::new()),
            outbox_relays: parking_lot::Mutex::new(Vec::new()),
            groups,
            txns,
            metrics,
            started_at_ms: clock.now_ms(),
            cluster_id: config.cluster_id.clone().unwrap_or(identity.cluster_id),
            directory_id: identity.directory_id.unwrap_or_default(),
            config,
            topics,
            clock,
            producer_ids,
            fetch_sessions: Arc::default(),
            replication: std::sync::OnceLock::new(),
            throttles: Default::default(),
            api_table: handlers::api_table(),
            admin_address: std::sync::OnceLock::new(),
            append_turns: Default::default(),
            local_users,
            local_acls,
            local_quotas,
            quota_buckets: Default::default(),
            failed_logins: Default::default(),
            unknown_user_secret: random_secret(),
            audit,
            denial_log: crate::security::log_budget::LogBudget::new(
                DENIAL_LINES_PER_WINDOW,
                DENIAL_WINDOW_MS,
            ),
            me: me.clone(),
        });
        if !broker.config.clustered {
            // In a cluster, markers are committed before a transaction completes, and a
            // coordinator taking over finishes what its partition's log left half-done.
            broker.heal_transactions();
        }
        Ok(broker)
    }

    /// This broker as an `Arc` (it always lives in one).
    pub(crate) fn arc(&self) -> Option<Arc<Broker>> {
        self.me.upgrade()
    }

    pub fn config(&self) -> &BrokerConfig {
        &self.config
    }

    pub fn cluster_id(&self) -> &str {
        &self.cluster_id
    }

    /// The id of this node's data directory, made when the directory was first used.
    pub fn directory_id(&self) -> uuid::Uuid {
        self.directory_id
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
        if let Some(replication) = self.replication.get() {
            // In a cluster the controller creates it; the client retries meanwhile.
            let known = replication.state().state.names.contains_key(name);
            if !known && allow && self.config.auto_create_topics {
                self.auto_create_in_cluster(name);
            } else if !known {
                return Err(BrokerError::UnknownTopic(name.to_string()));
            }
            return Err(BrokerError::NotLeader(format!(
                "topic '{name}' is being created; retry"
            )));
        }
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

    /// Whether partition `index` of `topic` exists (in a cluster: anywhere in it, not only
    /// on this node).
    pub(crate) fn partition_exists(&self, topic: &str, index: i32) -> bool {
        match self.replication.get() {
            Some(r) => {
                let applied = r.state();
                let state = &applied.state;
                state
                    .names
                    .get(topic)
                    .and_then(|id| state.topics.get(id))
                    .is_some_and(|t| index >= 0 && (index as usize) < t.partitions.len())
            }
            None => self
                .topics
                .get(topic)
                .and_then(|t| t.partition(index))
                .is_some(),
        }
    }

    /// Asks the controller, in the background, to create a topic a client named (Kafka's
    /// `auto.create.topics.enable`), with the broker's defaults.
    pub(crate) fn auto_create_in_cluster(&self, name: &str) {
        let Some(replication) = self.replication.get().cloned() else {
            return;
        };
        if crate::topics::is_internal(name) {
            // Made as an internal topic (compacted, fsynced), never with a client's defaults.
            self.ensure_coordinator_topic(name);
            return;
        }
        let name = name.to_string();
        let partitions = self.config.num_partitions;
        tokio::spawn(async move {
            let rf = replication.default_replication_factor();
            match replication
                .create_topic(&name, partitions, rf, Default::default(), false)
                .await
            {
                Ok(_) | Err(BrokerError::TopicExists(_)) => {}
                Err(e) => tracing::warn!(topic = %name, error = %e, "auto-creating a topic failed"),
            }
        });
    }

    /// Starts the interval flusher, the retention task, the log cleaner and the group
    /// coordinator's clock; all stop with `shutdown`.
    pub fn start_background(self: &Arc<Self>, shutdown: CancellationToken) {
        self.spawn_audit_topic(shutdown.clone());
        let broker = Arc::clone(self);
        let stop = shutdown.clone();
        tokio::spawn(async move {
            let mut tick = tokio::time::interval(std::time::Duration::from_millis(100));
            tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            loop {
                tokio::select! {
                    () = stop.cancelled() => return,
                    _ = tick.tick() => {
                        broker.groups.tick();
                        broker.tick_transactions();
                    }
                }
            }
        });
        let broker = Arc::clone(self);
        let stop = shutdown.clone();
        tokio::spawn(async move {
            let mut tick = tokio::time::interval(broker.config.cleaner_interval);
            tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            loop {
                tokio::select! {
                    () = stop.cancelled() => return,
                    _ = tick.tick() => {}
                }
                let b = Arc::clone(&broker);
                let _ = tokio::task::spawn_blocking(move || b.clean_logs()).await;
            }
        });
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

    /// One pass of the log cleaner over the compacted topics, paced to
    /// `cleaner_max_bytes_per_s` so that it does not starve produce and fetch. Blocking.
    pub fn clean_logs(&self) {
        let rate = self.config.cleaner_max_bytes_per_s.max(1);
        for partition in self.topics.all_partitions() {
            if !partition.config().compact {
                continue;
            }
            let throttle = |bytes: u64| {
                let pause = std::time::Duration::from_secs_f64(bytes as f64 / rate as f64);
                std::thread::sleep(pause.min(std::time::Duration::from_secs(10)));
            };
            if let Err(e) = partition.compact(throttle) {
                tracing::warn!(?partition, error = %e, "compaction failed");
            }
        }
    }

    /// Flushes and closes every log, recording a clean shutdown (and, in a cluster, the
    /// partitions' high watermarks).
    pub fn close(&self) {
        // The audit events still queued for the file are written first.
        self.audit.stop();
        for partition in self.topics.all_partitions() {
            if let Err(e) = partition.close() {
                tracing::error!(?partition, error = %e, "closing partition failed");
            }
        }
        self.save_high_watermarks();
    }

    pub fn groups_summary(&self) -> Vec<GroupSummary> {
        let coordinator = self.groups.coordinator.lock();
        coordinator
            .group_ids()
            .into_iter()
            .map(|id| GroupSummary {
                state: coordinator.state_of(&id).name(),
                protocol_type: coordinator
                    .group(&id)
                    .map(|g| g.protocol_type.clone())
                    .unwrap_or_default(),
                members: coordinator.group(&id).map_or(0, |g| g.members.len()),
                group: id,
            })
            .collect()
    }

    /// A group's members, assignments and per-partition lag; `None` if there is no such group.
    pub fn group_status(&self, id: &str) -> Option<GroupStatus> {
        use crate::group::state::GroupState;
        let coordinator = self.groups.coordinator.lock();
        let state = coordinator.state_of(id);
        if state == GroupState::Dead {
            return None;
        }
        if let Some(g) = coordinator.consumer_group(id) {
            let members = g
                .members
                .values()
                .map(|m| GroupMemberStatus {
                    member_id: m.id.clone(),
                    instance_id: m.instance_id.clone(),
                    client_id: m.client_id.clone(),
                    client_host: m.client_host.clone(),
                    assignment: m.assigned_list(),
                })
                .collect();
            return Some(GroupStatus {
                group: id.to_string(),
                state: g.state(),
                protocol_type: "consumer".to_string(),
                protocol: Some(g.assignor().to_string()),
                generation: g.epoch,
                members,
                offsets: self.offset_statuses(&coordinator, id),
            });
        }
        let group = coordinator.group(id);
        // Assignments only while the group is Stable, as DescribeGroups shows them: during a
        // rebalance a member's is the last generation's.
        let stable = state == crate::group::state::GroupState::Stable;
        let members = group
            .map(|g| {
                g.members
                    .values()
                    .map(|m| GroupMemberStatus {
                        member_id: m.id.clone(),
                        instance_id: m.instance_id.clone(),
                        client_id: m.client_id.clone(),
                        client_host: m.client_host.clone(),
                        assignment: if stable {
                            sluice_wire::consumer_protocol::decode_assignment(&m.assignment)
                        } else {
                            Vec::new()
                        },
                    })
                    .collect()
            })
            .unwrap_or_default();
        let offsets = self.offset_statuses(&coordinator, id);
        Some(GroupStatus {
            group: id.to_string(),
            state: state.name(),
            protocol_type: group.map(|g| g.protocol_type.clone()).unwrap_or_default(),
            protocol: group.and_then(|g| g.protocol_name.clone()),
            generation: group.map_or(0, |g| g.generation),
            members,
            offsets,
        })
    }

    /// A group's committed offsets with their partitions' ends and the lag.
    fn offset_statuses(
        &self,
        coordinator: &crate::group::coordinator::Coordinator,
        id: &str,
    ) -> Vec<GroupOffsetStatus> {
        coordinator
            .committed(id)
            .into_iter()
            .flatten()
            .map(|((topic, partition), c)| {
                // A partition held elsewhere: its leader's end, asked every few seconds.
                let end = self
                    .topics
                    .get(topic)
                    .and_then(|t| t.partition(*partition))
                    .map(|p| p.progress().visible.0)
                    .or_else(|| {
                        self.replication
                            .get()
                            .and_then(|r| r.remote_ends.get(topic, *partition))
                    });
                GroupOffsetStatus {
                    topic: topic.clone(),
                    partition: *partition,
                    committed_offset: c.offset,
                    log_end_offset: end,
                    lag: end.map(|e| (e - c.offset).max(0)),
                }
            })
            .collect()
    }

    /// Records a security event in the audit log (if there is one).
    pub fn record_audit(&self, event: crate::security::audit::AuditEvent) {
        self.audit.record(event);
    }

    /// The broker's clock, in ms since the epoch.
    pub fn now_ms(&self) -> i64 {
        self.clock.now_ms()
    }

    pub fn metrics(&self) -> &crate::metrics::Metrics {
        &self.metrics
    }

    /// Adds a component's metrics to `/metrics`.
    pub fn add_metrics(&self, write: ExtraMetrics) {
        self.extra_metrics.lock().push(write);
    }

    /// Adds an outbox relay running beside the broker to `/api/outbox`.
    pub fn add_outbox_relay(&self, status: RelayStatus) {
        self.outbox_relays.lock().push(status);
    }

    /// The statuses of the outbox relays running beside the broker.
    pub fn outbox_relays(&self) -> Vec<serde_json::Value> {
        self.outbox_relays.lock().iter().map(|s| s()).collect()
    }

    /// The Prometheus exposition of this broker's metrics.
    pub fn metrics_text(&self) -> String {
        crate::metrics::render(self)
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

/// 256 bits from the operating system's random source (through UUID v4).
fn random_secret() -> [u8; 32] {
    let mut secret = [0u8; 32];
    secret[..16].copy_from_slice(uuid::Uuid::new_v4().as_bytes());
    secret[16..].copy_from_slice(uuid::Uuid::new_v4().as_bytes());
    secret
}

#[derive(Debug, Serialize)]
pub struct GroupSummary {
    pub group: String,
    pub state: &'static str,
    pub protocol_type: String,
    pub members: usize,
}

#[derive(Debug, Serialize)]
pub struct GroupStatus {
    pub group: String,
    pub state: &'static str,
    pub protocol_type: String,
    pub protocol: Option<String>,
    pub generation: i32,
    pub members: Vec<GroupMemberStatus>,
    pub offsets: Vec<GroupOffsetStatus>,
}

impl GroupStatus {
    /// The lag summed over the partitions with a committed offset.
    pub fn total_lag(&self) -> i64 {
        self.offsets.iter().filter_map(|o| o.lag).sum()
    }
}

#[derive(Debug, Serialize)]
pub struct GroupMemberStatus {
    pub member_id: String,
    pub instance_id: Option<String>,
    pub client_id: String,
    pub client_host: String,
    pub assignment: Vec<(String, Vec<i32>)>,
}

#[derive(Debug, Serialize)]
pub struct GroupOffsetStatus {
    pub topic: String,
    pub partition: i32,
    pub committed_offset: i64,
    pub log_end_offset: Option<i64>,
    pub lag: Option<i64>,
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
    type Session = crate::security::Session;

    fn api_table(&self) -> &ApiTable {
        &self.api_table
    }

    fn open_session(&self, peer: &Peer) -> crate::security::Session {
        crate::security::Session::open(peer, &self.config.security)
    }

    fn max_frame_bytes(&self, session: &crate::security::Session) -> Option<usize> {
        session.frame_limit()
    }

    fn sasl_token(
        &self,
        frame: &bytes::Bytes,
        peer: &Peer,
        session: &crate::security::Session,
    ) -> Option<sluice_wire::PendingToken> {
        session
            .expects_bare_token()
            .then(|| handlers::sasl_authenticate::bare_token(self, frame, peer, session))
    }

    fn tls_handshake_failed(&self) {
        self.metrics.tls_handshake_failed();
    }

    fn muted_for(&self, session: &crate::security::Session) -> Option<std::time::Duration> {
        session.muted_for(|| self.clock.now_ms())
    }

    fn connection_refused(&self, reason: &'static str) {
        self.metrics.connection_refused(reason);
    }

    fn connection_creation_rate(&self, ip: std::net::IpAddr) -> Option<f64> {
        self.client_quotas()
            .connection_creation_rate(&sluice_cluster::metadata::quotas::ip_entity_name(ip))
    }

    fn request_done(&self, api: ApiKey, elapsed: std::time::Duration) {
        self.metrics.observe_request(api, elapsed.as_secs_f64());
    }

    fn response_unencodable(&self, api: ApiKey, version: i16, reason: &str) {
        self.metrics.response_unencodable(api, version, reason);
    }

    fn connection_opened(&self) {
        self.metrics.connection_opened();
    }

    fn connection_closed(&self) {
        self.metrics.connection_closed();
    }

    fn call(&self, request: Request, peer: &Peer, session: &crate::security::Session) -> Reply {
        self.serve(request, peer, session, None).0
    }

    fn call_metered(
        &self,
        request: Request,
        peer: &Peer,
        session: &crate::security::Session,
        received: std::time::Instant,
    ) -> (Reply, Option<sluice_wire::CodecMeter>) {
        self.serve(request, peer, session, Some(received))
    }
}

impl Broker {
    /// One request, admitted and dispatched; `received` (when its frame was read) lets a
    /// request-time quota count its decoding.
    fn serve(
        &self,
        request: Request,
        peer: &Peer,
        session: &crate::security::Session,
        received: Option<std::time::Instant>,
    ) -> (Reply, Option<sluice_wire::CodecMeter>) {
        if let Err(reason) = session.admit(request.api_key, || self.clock.now_ms()) {
            return (Reply::Close(reason), None);
        }
        let call = handlers::Call {
            api: request.api_key,
            version: request.version(),
            client_id: request.header.client_id.as_deref().unwrap_or_default(),
            peer,
            session,
        };
        self.dispatch_metered(request.api_key, request.body, &call, received)
    }
}
