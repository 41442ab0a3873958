//! Each relay instance's status, written every [`REPORT_EVERY`] to the compacted topic
//! [`STATUS_TOPIC`], so that every broker's console lists every instance of every relay —
//! standalone (`sluice outbox`) or inside a broker, active or standing by — and not only the
//! relays its own process runs.
//!
//! The key names the source, the slot and the instance; the value is a [`StatusReport`]. A
//! clean stop writes a tombstone (the instance leaves the list); an instance that stops
//! reporting (killed, cut off) is shown as silent once its last report is older than
//! [`SILENT_AFTER`], and no more after [`FORGOTTEN_AFTER`]. The topic is `compact,delete` with a
//! day's retention, so the keys of instances long gone leave it too.
//!
//! Best effort: a broker that refuses the reports (no such topic allowed, an ACL) is warned
//! about once per kind of refusal and never slows or stops the relay.

use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use rdkafka::admin::{AdminClient, AdminOptions, NewTopic, TopicReplication};
use rdkafka::client::DefaultClientContext;
use rdkafka::error::{KafkaError, RDKafkaErrorCode};
use rdkafka::producer::{BaseRecord, DeliveryResult, Producer, ProducerContext, ThreadedProducer};
use rdkafka::ClientContext;
use serde::{Deserialize, Serialize};
use tokio::sync::watch;
use tokio::task::JoinHandle;

use crate::config::OutboxConfig;
use crate::stats::{Snapshot, State, Stats};

/// The topic every relay instance reports to; the brokers' consoles read it.
/// Not `sluice.outbox.*`, the progress topics' names (a slot named `status`).
pub const STATUS_TOPIC: &str = "sluice-outbox-status";
/// How often an instance reports.
pub const REPORT_EVERY: Duration = Duration::from_secs(2);
/// An instance whose last report is older than this is shown as silent.
pub const SILENT_AFTER: Duration = Duration::from_secs(10);
/// An instance silent for longer than this is no longer shown.
pub const FORGOTTEN_AFTER: Duration = Duration::from_secs(600);
/// The status topic's retention: old instances' keys leave it after about this long.
const RETENTION_MS: &str = "86400000";
/// How long the reports wait to try again after the broker refused to make the topic, or
/// refused their login.
const REFUSED_RETRY: Duration = Duration::from_secs(60);
/// How long a relay that failed at start waits for the topic, to report its failure.
const FAILED_REPORT_WITHIN: Duration = Duration::from_secs(4);
/// The status topic's segments: sealed, so compacted and deleted, after an hour.
const SEGMENT_MS: &str = "3600000";

/// One instance's report: who it is, when it reported, and its figures.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct StatusReport {
    pub slot: String,
    /// The database read (`OutboxConfig::source_identity`: no user or password).
    pub source: String,
    /// `HOST:PID` of the process running the instance.
    pub instance: String,
    /// When that process started, ms since the epoch.
    pub started_at_ms: i64,
    /// When it was written, ms since the epoch (the instance's clock).
    pub reported_at_ms: i64,
    #[serde(flatten)]
    pub snapshot: Snapshot,
}

impl StatusReport {
    /// This process's report, now, of the relay `slot` reading `source`.
    pub fn now(slot: &str, source: &str, stats: &Stats) -> StatusReport {
        let instance = this_instance();
        StatusReport {
            slot: slot.to_string(),
            source: source.to_string(),
            instance: instance.name.clone(),
            started_at_ms: instance.started_at_ms,
            reported_at_ms: now_ms(),
            snapshot: stats.snapshot(),
        }
    }

    /// The status topic's key for an instance.
    pub fn key_of(source: &str, slot: &str, instance: &str, started_at_ms: i64) -> String {
        format!("{source}|{slot}|{instance}|{started_at_ms}")
    }
}

/// This process as a relay instance: `HOST:PID`, and when it started (ms since the epoch),
/// which tells apart two processes with one host name and PID (containers' PID 1).
#[derive(Debug, Clone)]
pub struct Instance {
    pub name: String,
    pub started_at_ms: i64,
}

pub fn this_instance() -> &'static Instance {
    static INSTANCE: OnceLock<Instance> = OnceLock::new();
    INSTANCE.get_or_init(|| {
        let host = std::fs::read_to_string("/proc/sys/kernel/hostname")
            .ok()
            .map(|h| h.trim().to_string())
            .filter(|h| !h.is_empty())
            .or_else(|| std::env::var("HOSTNAME").ok())
            .unwrap_or_else(|| "unknown-host".to_string());
        Instance {
            name: format!("{host}:{}", std::process::id()),
            started_at_ms: now_ms(),
        }
    })
}

fn now_ms() -> i64 {
    crate::clock::now_us() / 1000
}

/// Warns about reports the broker does not take: once per kind of refusal (a cluster still
/// starting must not use up the warning a lasting refusal needs).
#[derive(Default)]
struct Refusals {
    last: Mutex<String>,
    logins: crate::client_props::LoginRefusals,
}

impl Refusals {
    fn warn(&self, what: &str, error: &dyn std::fmt::Display) {
        let said = format!("{what}: {error}");
        let Ok(mut last) = self.last.lock() else {
            return;
        };
        if *last != said {
            tracing::warn!(
                %error,
                topic = STATUS_TOPIC,
                "{what}: the consoles list this relay instance only once its reports go \
                 through (it publishes as usual)"
            );
            *last = said;
        }
    }
}

impl ClientContext for Refusals {
    fn error(&self, error: KafkaError, reason: &str) {
        self.logins.note(&error, reason);
        tracing::debug!(%error, reason, "librdkafka (status reports)");
    }
}

impl ProducerContext for Refusals {
    type DeliveryOpaque = ();

    fn delivery(&self, result: &DeliveryResult<'_>, _: ()) {
        if let Err((e, _)) = result {
            self.warn("a status report was refused", e);
        }
    }
}

/// The reporting task of one relay instance; [`StatusReports::finish`] writes its last report.
pub struct StatusReports {
    done: watch::Sender<bool>,
    task: JoinHandle<()>,
}

impl StatusReports {
    /// Starts reporting `stats` for the relay `cfg` describes.
    pub fn start(cfg: &OutboxConfig, stats: Arc<Stats>) -> StatusReports {
        let (done, done_rx) = watch::channel(false);
        let reporter = Reporter {
            brokers: cfg.brokers.clone(),
            client: cfg.client.clone(),
            slot: cfg.slot.clone(),
            source: cfg.source_identity(),
            stats,
        };
        StatusReports {
            done,
            task: tokio::spawn(reporter.run(done_rx)),
        }
    }

    /// Call once the relay has stopped: a clean stop removes the instance from the list, a
    /// failure is left as its last report (the console shows why it failed).
    pub async fn finish(self) {
        let _ = self.done.send(true);
        // A failed relay's wait for the topic, then the flush.
        if tokio::time::timeout(Duration::from_secs(8), self.task)
            .await
            .is_err()
        {
            tracing::debug!("the last status report was not written within 8 s");
        }
    }
}

struct Reporter {
    brokers: String,
    client: crate::ClientProperties,
    slot: String,
    source: String,
    stats: Arc<Stats>,
}

/// How one set of the reporter's clients ended.
enum Turn {
    /// The relay stopped (its last report written, where it could be).
    Finished,
    /// Sluice refused the clients' login: they are dropped, so that they do not log in again
    /// and again (librdkafka would, every half second), and made anew later.
    LoginRefused,
}

impl Reporter {
    async fn run(self, mut done: watch::Receiver<bool>) {
        let me = this_instance();
        let key = StatusReport::key_of(&self.source, &self.slot, &me.name, me.started_at_ms);
        loop {
            let Some((admin, producer)) = self.clients() else {
                return;
            };
            match self.turn(admin, producer, &key, &mut done).await {
                Turn::Finished => return,
                Turn::LoginRefused => {
                    tokio::select! {
                        _ = tokio::time::sleep(REFUSED_RETRY) => {}
                        changed = done.changed() => {
                            if changed.is_err() || *done.borrow() {
                                return;
                            }
                        }
                    }
                }
            }
        }
    }

    /// The admin client (needed until the topic is there) and the producer.
    fn clients(
        &self,
    ) -> Option<(
        AdminClient<DefaultClientContext>,
        ThreadedProducer<Refusals>,
    )> {
        let mut config = crate::sink::client_config(&self.brokers, &self.client);
        let admin = match config.create() {
            Ok(a) => a,
            Err(e) => {
                tracing::warn!(error = %e, "no status reports: the admin client was not made");
                return None;
            }
        };
        config
            .set("linger.ms", "0")
            .set("message.timeout.ms", "10000")
            // A retried report must not land after the tombstone that follows it.
            .set("enable.idempotence", "true")
            // The topic is made as the relays make it ([`ensure_topic`]), never by a send.
            .set("allow.auto.create.topics", "false");
        // Threaded: its own thread serves the delivery reports.
        match config.create_with_context(Refusals::default()) {
            Ok(p) => Some((admin, p)),
            Err(e) => {
                tracing::warn!(error = %e, "no status reports: the producer was not made");
                None
            }
        }
    }

    async fn turn(
        &self,
        admin: AdminClient<DefaultClientContext>,
        producer: ThreadedProducer<Refusals>,
        key: &str,
        done: &mut watch::Receiver<bool>,
    ) -> Turn {
        let mut admin = Some(admin);
        // Reports start once the topic is there as the relays make it (sending first would
        // have a broker that creates topics on use make it with its defaults).
        let mut topic_ready = false;
        let mut next_try = crate::clock::now();
        loop {
            if let Some(why) = producer.context().logins.settled() {
                producer
                    .context()
                    .warn("Sluice refused the status reports' login", &why);
                return Turn::LoginRefused;
            }
            if let Some(a) = admin.as_ref().filter(|_| crate::clock::now() >= next_try) {
                tokio::select! {
                    made = ensure_topic(a, &producer) => match made {
                        Made::Ready => topic_ready = true,
                        Made::Refused => next_try = crate::clock::now() + REFUSED_RETRY,
                        Made::NotYet => {}
                    },
                    _ = done.changed() => {}
                }
                if topic_ready {
                    admin = None;
                }
            }
            if topic_ready {
                self.send(&producer, key, false);
            }
            if *done.borrow() {
                break;
            }
            tokio::select! {
                _ = tokio::time::sleep(REPORT_EVERY) => {}
                changed = done.changed() => {
                    if changed.is_err() || *done.borrow() {
                        break;
                    }
                }
            }
        }
        // A relay that failed at once (a database it cannot reach) stopped before the topic
        // was there: its failure is still worth a report, if one comes quickly.
        let failed = self.stats.state() == State::Failed;
        if let Some(a) = admin.as_ref().filter(|_| failed) {
            let made = tokio::time::timeout(FAILED_REPORT_WITHIN, ensure_topic(a, &producer));
            topic_ready = matches!(made.await, Ok(Made::Ready));
        }
        if !topic_ready {
            return Turn::Finished;
        }
        self.send(&producer, key, !failed);
        let flushed = tokio::task::spawn_blocking(move || {
            let _ = producer.flush(Duration::from_secs(3));
        });
        let _ = flushed.await;
        Turn::Finished
    }

    fn send(&self, producer: &ThreadedProducer<Refusals>, key: &str, tombstone: bool) {
        let value = if tombstone {
            None
        } else {
            let report = StatusReport::now(&self.slot, &self.source, &self.stats);
            match serde_json::to_vec(&report) {
                Ok(v) => Some(v),
                Err(e) => return producer.context().warn("a status report was not made", &e),
            }
        };
        // One partition, the one the consoles read, whatever the topic has.
        let mut record = BaseRecord::to(STATUS_TOPIC).key(key).partition(0);
        if let Some(v) = &value {
            record = record.payload(v);
        }
        if let Err((e, _)) = producer.send(record) {
            producer.context().warn("a status report was not sent", &e);
        }
    }
}

/// What [`ensure_topic`] found.
enum Made {
    /// The topic is there (made now, or before).
    Ready,
    /// The broker will not make it, and it is not there: try again after [`REFUSED_RETRY`].
    Refused,
    /// Not now (no broker answered): try again at the next report.
    NotYet,
}

/// Makes the status topic unless it exists. A lasting refusal (an ACL that allows writing to
/// the topic but not making it, a policy, settings the broker refuses) is fine when an
/// administrator made the topic.
async fn ensure_topic(
    admin: &AdminClient<DefaultClientContext>,
    producer: &ThreadedProducer<Refusals>,
) -> Made {
    let spec = NewTopic::new(STATUS_TOPIC, 1, TopicReplication::Fixed(-1))
        .set("cleanup.policy", "compact,delete")
        .set("retention.ms", RETENTION_MS)
        // Only sealed segments are compacted or deleted: an hour's segments, not a week's.
        .set("segment.ms", SEGMENT_MS)
        // The broker's clock dates a report, so a relay host's clock cannot make it look
        // fresh or silent.
        .set("message.timestamp.type", "LogAppendTime");
    let options = AdminOptions::new()
        .operation_timeout(Some(Duration::from_secs(10)))
        .request_timeout(Some(Duration::from_secs(15)));
    let refusals = producer.context();
    let code = match admin.create_topics([&spec], &options).await {
        Ok(results) => match results.into_iter().find_map(Result::err) {
            None | Some((_, RDKafkaErrorCode::TopicAlreadyExists)) => return Made::Ready,
            Some((_, code)) => code,
        },
        Err(e) => {
            refusals.warn("the status topic was not created", &e);
            return Made::NotYet;
        }
    };
    if !matches!(
        code,
        RDKafkaErrorCode::TopicAuthorizationFailed
            | RDKafkaErrorCode::ClusterAuthorizationFailed
            | RDKafkaErrorCode::PolicyViolation
            | RDKafkaErrorCode::InvalidConfig
            | RDKafkaErrorCode::InvalidPartitions
            | RDKafkaErrorCode::InvalidReplicationFactor
    ) {
        refusals.warn("the status topic was not created", &code);
        return Made::NotYet;
    }
    // Blocking (up to 5 s, even past a caller's timeout): both runtimes that run relays are
    // multi-threaded.
    let exists = tokio::task::block_in_place(|| {
        producer
            .client()
            .fetch_metadata(Some(STATUS_TOPIC), Duration::from_secs(5))
            .is_ok_and(|m| {
                m.topics()
                    .iter()
                    .any(|t| t.name() == STATUS_TOPIC && t.error().is_none())
            })
    });
    if exists {
        return Made::Ready;
    }
    refusals.warn("the status topic was not created", &code);
    Made::Refused
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_report_reads_back_with_its_figures_at_the_top_level() {
        let stats = Stats::default();
        stats.set_state(State::Standby);
        stats.set_position(0x16B_3748, None);
        let report = StatusReport {
            slot: "s".into(),
            source: "postgres://h:5432/d".into(),
            instance: "host:42".into(),
            started_at_ms: 5,
            reported_at_ms: 7,
            snapshot: stats.snapshot(),
        };
        let json: serde_json::Value = serde_json::to_value(&report).expect("a report serialises");
        assert_eq!(json["state"], "standby");
        assert_eq!(json["position"], "0/16B3748");
        assert_eq!(json["instance"], "host:42");
        let back: StatusReport = serde_json::from_value(json).expect("and reads back");
        assert_eq!(back.snapshot.state, State::Standby);
        assert_eq!(back.reported_at_ms, 7);
    }

    #[test]
    fn the_instance_name_is_host_and_pid() {
        let name = &this_instance().name;
        let (host, pid) = name.rsplit_once(':').expect("HOST:PID");
        assert!(!host.is_empty());
        assert_eq!(pid, std::process::id().to_string());
    }
}
