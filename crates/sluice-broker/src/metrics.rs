//! Prometheus metrics (`/metrics`, text format). Two kinds:
//! - measured as things happen: request latency per API, fsync latency, connections (the
//!   histograms' own locks; a few per request), and per-partition produce/fetch counters kept as
//!   plain atomics on the partition so the hot path pays one atomic add;
//! - read at scrape time: log start/end offsets, high watermarks, sizes, consumer group lag,
//!   the process's memory and CPU.

use std::fmt::Write;
use std::sync::atomic::{AtomicU64, Ordering};

use kafka_protocol::messages::ApiKey;
use prometheus_client::encoding::{EncodeLabelSet, EncodeLabelValue, LabelValueEncoder};
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{exponential_buckets, Histogram};
use prometheus_client::registry::Registry;

use crate::broker::Broker;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ApiLabels {
    api: ApiName,
}

/// An API key as a label value, spelled as Kafka names it ("Produce"), without allocating on
/// the request path.
#[derive(Clone, Copy, Debug, Hash, PartialEq, Eq)]
struct ApiName(ApiKey);

impl EncodeLabelValue for ApiName {
    fn encode(&self, encoder: &mut LabelValueEncoder) -> Result<(), std::fmt::Error> {
        write!(encoder, "{:?}", self.0)
    }
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct DenialLabels {
    api: DeniedApi,
}

/// Where a denied request came in: a Kafka API ("Fetch"), or the admin port ("admin-http":
/// the console and the HTTP API).
#[derive(Clone, Copy, Debug, Hash, PartialEq, Eq)]
enum DeniedApi {
    Kafka(ApiKey),
    AdminHttp,
}

impl EncodeLabelValue for DeniedApi {
    fn encode(&self, encoder: &mut LabelValueEncoder) -> Result<(), std::fmt::Error> {
        match self {
            DeniedApi::Kafka(api) => write!(encoder, "{api:?}"),
            DeniedApi::AdminHttp => encoder.write_str("admin-http"),
        }
    }
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct PartitionLabels {
    topic: String,
    partition: String,
}

/// A follower of a partition this node leads.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ReplicaLabels {
    topic: String,
    partition: String,
    replica: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct LagLabels {
    group: String,
    topic: String,
    partition: String,
}

/// The metrics measured as things happen.
#[derive(Debug)]
pub struct Metrics {
    request_seconds: Family<ApiLabels, Histogram>,
    /// Produce latencies since the console's sampler last took them, in µs (HDR, 3 digits).
    produce_window: parking_lot::Mutex<hdrhistogram::Histogram<u64>>,
    fsync_seconds: Histogram,
    connections: Gauge,
    /// Responses that could not be encoded at the request's version (each one a bug).
    unencodable_responses: Family<ApiVersionLabels, Counter>,
    /// The (API, version) pairs already logged, so each is logged once.
    unencodable_logged: parking_lot::Mutex<std::collections::HashSet<(i16, i16)>>,
    /// SASL logins, by outcome (`success`, `failure`).
    authentications: Family<OutcomeLabels, Counter>,
    tls_handshake_failures: Counter,
    authorization_denials: Family<DenialLabels, Counter>,
    connections_refused: Family<ReasonLabels, Counter>,
    throttled: Family<QuotaLabels, Counter>,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct QuotaLabels {
    quota: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ReasonLabels {
    reason: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct OutcomeLabels {
    outcome: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ApiVersionLabels {
    api: ApiName,
    version: i16,
}

fn latency_buckets() -> impl Iterator<Item = f64> {
    // 20 µs … ~5 s
    exponential_buckets(0.000_02, 2.0, 18)
}

impl Default for Metrics {
    fn default() -> Self {
        Metrics {
            request_seconds: Family::new_with_constructor(|| Histogram::new(latency_buckets())),
            produce_window: parking_lot::Mutex::new(
                hdrhistogram::Histogram::new_with_max(60_000_000, 3)
                    .expect("1 µs..60 s at 3 significant digits is a valid HDR range"),
            ),
            fsync_seconds: Histogram::new(latency_buckets()),
            connections: Gauge::default(),
            unencodable_responses: Family::default(),
            unencodable_logged: Default::default(),
            authentications: Family::default(),
            tls_handshake_failures: Counter::default(),
            authorization_denials: Family::default(),
            connections_refused: Family::default(),
            throttled: Family::default(),
        }
    }
}

impl Metrics {
    pub fn observe_request(&self, api: ApiKey, seconds: f64) {
        if api == ApiKey::Produce {
            self.produce_window
                .lock()
                .saturating_record((seconds * 1e6) as u64);
        }
        self.request_seconds
            .get_or_create(&ApiLabels { api: ApiName(api) })
            .observe(seconds);
    }

    /// The 99th percentile of produce latency (µs) since the last call, and the count; the
    /// window restarts.
    pub fn take_produce_p99(&self) -> (u64, u64) {
        let mut window = self.produce_window.lock();
        let result = (window.value_at_quantile(0.99), window.len());
        window.reset();
        result
    }

    pub fn observe_fsync(&self, seconds: f64) {
        self.fsync_seconds.observe(seconds);
    }

    /// Counts a response that could not be encoded, and logs the first of each API and version.
    pub fn response_unencodable(&self, api: ApiKey, version: i16, reason: &str) {
        self.unencodable_responses
            .get_or_create(&ApiVersionLabels {
                api: ApiName(api),
                version,
            })
            .inc();
        if self.unencodable_logged.lock().insert((api as i16, version)) {
            tracing::error!(?api, version, %reason, "cannot encode a response; answered with an error or closed the connection (logged once per API and version)");
        }
    }

    pub fn connection_opened(&self) {
        self.connections.inc();
    }

    pub fn connections(&self) -> i64 {
        self.connections.get()
    }

    pub fn connection_closed(&self) {
        self.connections.dec();
    }

    pub fn authentication(&self, succeeded: bool) {
        let outcome = if succeeded { "success" } else { "failure" };
        self.authentications
            .get_or_create(&OutcomeLabels { outcome })
            .inc();
    }

    pub fn tls_handshake_failed(&self) {
        self.tls_handshake_failures.inc();
    }

    pub fn throttled(&self, quota: &'static str) {
        self.throttled.get_or_create(&QuotaLabels { quota }).inc();
    }

    pub fn connection_refused(&self, reason: &'static str) {
        self.connections_refused
            .get_or_create(&ReasonLabels { reason })
            .inc();
    }

    /// A denial by the ACLs, of a Kafka API's request or (`None`) of the admin port's.
    pub fn authorization_denied(&self, api: Option<ApiKey>) {
        let api = api.map_or(DeniedApi::AdminHttp, DeniedApi::Kafka);
        self.authorization_denials
            .get_or_create(&DenialLabels { api })
            .inc();
    }
}

/// The whole exposition, built at scrape time.
pub fn render(broker: &Broker) -> String {
    let mut registry = Registry::with_prefix("sluice");
    let m = &broker.metrics;
    registry.register(
        "request_duration_seconds",
        "Time to answer a request, by API",
        m.request_seconds.clone(),
    );
    registry.register(
        "fsync_duration_seconds",
        "Time of one fdatasync of a partition's log",
        m.fsync_seconds.clone(),
    );
    registry.register(
        "connections",
        "Open client connections",
        m.connections.clone(),
    );
    registry.register(
        "unencodable_responses",
        "Responses that could not be encoded at the request's version (a bug; the client got an error or a closed connection)",
        m.unencodable_responses.clone(),
    );
    registry.register(
        "sasl_authentications",
        "SASL logins (and re-authentications), by outcome",
        m.authentications.clone(),
    );
    registry.register(
        "tls_handshake_failures",
        "TLS handshakes that failed or timed out",
        m.tls_handshake_failures.clone(),
    );
    registry.register(
        "quota_throttled_responses",
        "Answers that told a client over its quota to wait (throttle_time_ms > 0), by quota",
        m.throttled.clone(),
    );
    registry.register(
        "connections_refused",
        "New connections closed at once, by the limit they met",
        m.connections_refused.clone(),
    );
    registry.register(
        "authorization_denials",
        "Requests (or parts of them) the ACLs denied, by Kafka API (admin-http: the admin port)",
        m.authorization_denials.clone(),
    );
    let audit_dropped = Counter::<u64>::default();
    audit_dropped.inc_by(broker.audit.dropped());
    registry.register(
        "audit_events_dropped",
        "Audit events lost because the audit log's writer fell behind or failed",
        audit_dropped,
    );
    let sessions = Gauge::<i64>::default();
    sessions.set(i64::try_from(broker.fetch_sessions.len()).unwrap_or(i64::MAX));
    registry.register(
        "fetch_sessions",
        "Open incremental fetch sessions (KIP-227)",
        sessions,
    );

    let produced_records = Family::<PartitionLabels, Counter>::default();
    let produced_bytes = Family::<PartitionLabels, Counter>::default();
    let fetched_bytes = Family::<PartitionLabels, Counter>::default();
    let fetched_records = Family::<PartitionLabels, Counter>::default();
    let log_end = Family::<PartitionLabels, Gauge>::default();
    let log_start = Family::<PartitionLabels, Gauge>::default();
    let high_watermark = Family::<PartitionLabels, Gauge>::default();
    let size = Family::<PartitionLabels, Gauge>::default();
    let replica_lag_records = Family::<ReplicaLabels, Gauge>::default();
    let replica_lag_seconds = Family::<ReplicaLabels, Gauge<f64, AtomicU64>>::default();
    let mut under_replicated = 0i64;
    let now_ms = broker.liveness_ms();
    for topic in broker.topics().list() {
        for p in topic.partitions() {
            let labels = PartitionLabels {
                topic: topic.name.to_string(),
                partition: p.index.to_string(),
            };
            let lag = p.follower_lag(now_ms);
            if lag.iter().any(|f| !f.in_sync) {
                under_replicated += 1;
            }
            for f in lag {
                let replica = ReplicaLabels {
                    topic: topic.name.to_string(),
                    partition: p.index.to_string(),
                    replica: f.node.0.to_string(),
                };
                if let Some(records) = f.records {
                    replica_lag_records.get_or_create(&replica).set(records);
                }
                replica_lag_seconds
                    .get_or_create(&replica)
                    .set(f.ms as f64 / 1000.0);
            }
            let c = p.counters();
            produced_records
                .get_or_create(&labels)
                .inc_by(c.produced_records.load(Ordering::Relaxed));
            produced_bytes
                .get_or_create(&labels)
                .inc_by(c.produced_bytes.load(Ordering::Relaxed));
            fetched_bytes
                .get_or_create(&labels)
                .inc_by(c.fetched_bytes.load(Ordering::Relaxed));
            fetched_records
                .get_or_create(&labels)
                .inc_by(c.fetched_records.load(Ordering::Relaxed));
            let info = p.info();
            log_end.get_or_create(&labels).set(info.log_end.0);
            log_start.get_or_create(&labels).set(info.log_start.0);
            high_watermark
                .get_or_create(&labels)
                .set(info.high_watermark.0);
            size.get_or_create(&labels)
                .set(i64::try_from(info.size_bytes).unwrap_or(i64::MAX));
        }
    }
    registry.register(
        "produce_records",
        "Records appended, by partition",
        produced_records,
    );
    registry.register(
        "produce_bytes",
        "Bytes appended, by partition",
        produced_bytes,
    );
    registry.register(
        "fetch_bytes",
        "Bytes returned to fetches, by partition",
        fetched_bytes,
    );
    registry.register(
        "fetch_records",
        "Records returned to fetches (consumers and followers), by partition",
        fetched_records,
    );
    registry.register(
        "log_end_offset",
        "Offset after the last stored record",
        log_end,
    );
    registry.register("log_start_offset", "First offset still stored", log_start);
    registry.register(
        "high_watermark",
        "Offset consumers can read up to",
        high_watermark,
    );
    registry.register("log_size_bytes", "Bytes of the partition's segments", size);
    registry.register(
        "replica_lag_records",
        "Records a follower lacks of what this leader has, by partition and follower",
        replica_lag_records,
    );
    registry.register(
        "replica_lag_seconds",
        "Time since a follower last had everything this leader had, by partition and follower",
        replica_lag_seconds,
    );
    let under = Gauge::<i64>::default();
    under.set(under_replicated);
    registry.register(
        "under_replicated_partitions",
        "Partitions this node leads with a replica out of the ISR",
        under,
    );

    let lag = Family::<LagLabels, Gauge>::default();
    for group in broker.groups_summary() {
        if let Some(status) = broker.group_status(&group.group) {
            for o in status.offsets {
                if let Some(l) = o.lag {
                    lag.get_or_create(&LagLabels {
                        group: group.group.clone(),
                        topic: o.topic.clone(),
                        partition: o.partition.to_string(),
                    })
                    .set(l);
                }
            }
        }
    }
    registry.register(
        "consumer_group_lag",
        "Log end offset minus committed offset",
        lag,
    );

    let mut out = String::new();
    if prometheus_client::encoding::text::encode(&mut out, &registry).is_err() {
        return String::from("# encoding failed\n");
    }
    // The conventional process metrics, unprefixed, and those of components beside the
    // broker, before the final # EOF.
    let mut process = process_metrics();
    for write in broker.extra_metrics.lock().iter() {
        write(&mut process);
    }
    if let Some(eof) = out.rfind("# EOF") {
        out.insert_str(eof, &process);
    } else {
        out.push_str(&process);
    }
    out
}

/// `process_resident_memory_bytes` and `process_cpu_seconds_total` from /proc/self.
fn process_metrics() -> String {
    let mut out = String::new();
    let page = 4096f64;
    if let Ok(statm) = std::fs::read_to_string("/proc/self/statm") {
        if let Some(rss) = statm
            .split_whitespace()
            .nth(1)
            .and_then(|v| v.parse::<f64>().ok())
        {
            let _ = writeln!(
                out,
                "# HELP process_resident_memory_bytes Resident memory size in bytes."
            );
            let _ = writeln!(out, "# TYPE process_resident_memory_bytes gauge");
            let _ = writeln!(out, "process_resident_memory_bytes {}", rss * page);
        }
    }
    if let Ok(stat) = std::fs::read_to_string("/proc/self/stat") {
        // Fields after the command name (which may contain spaces): utime is field 14, stime 15.
        if let Some(rest) = stat.rsplit_once(") ").map(|(_, r)| r) {
            let fields: Vec<&str> = rest.split_whitespace().collect();
            let ticks = |i: usize| {
                fields
                    .get(i)
                    .and_then(|v| v.parse::<f64>().ok())
                    .unwrap_or(0.0)
            };
            // Linux reports in USER_HZ, which is 100 on every mainstream configuration.
            let seconds = (ticks(11) + ticks(12)) / 100.0;
            let _ = writeln!(
                out,
                "# HELP process_cpu_seconds Total user and system CPU time spent in seconds."
            );
            let _ = writeln!(out, "# TYPE process_cpu_seconds counter");
            let _ = writeln!(out, "process_cpu_seconds_total {seconds}");
        }
    }
    out
}
