//! The console's memory of the last 15 minutes: once a second the sampler reads the broker's
//! traffic counters and group lag and keeps rates in ring buffers (900 points each). Nothing
//! is written to disk; a restart starts the charts afresh.

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use parking_lot::Mutex;
use serde::Serialize;
use sluice_broker::Broker;
use tokio_util::sync::CancellationToken;

/// Points kept per series: 15 minutes at one a second.
pub const POINTS: usize = 900;
pub const INTERVAL: Duration = Duration::from_secs(1);
/// Groups whose lag is charted (the rest are listed but not charted).
const MAX_CHARTED_GROUPS: usize = 200;

/// Cluster-wide traffic over one sampling interval.
#[derive(Debug, Clone, Copy, Serialize, Default)]
pub struct TrafficPoint {
    pub t_ms: i64,
    pub produce_msgs_per_s: f64,
    pub produce_bytes_per_s: f64,
    pub consume_msgs_per_s: f64,
    pub consume_bytes_per_s: f64,
    /// P99 of produce request latency in the interval; `None` without produce requests.
    pub produce_p99_us: Option<u64>,
}

/// A topic's produce rate over the last interval.
#[derive(Debug, Clone, Copy, Serialize, Default)]
pub struct TopicRate {
    pub msgs_per_s: f64,
    pub bytes_per_s: f64,
}

/// A group's total lag at one moment.
#[derive(Debug, Clone, Copy, Serialize)]
pub struct LagPoint {
    pub t_ms: i64,
    pub lag: i64,
}

#[derive(Debug, Default, Clone)]
struct Totals {
    at: Option<std::time::Instant>,
    per_topic: HashMap<String, (u64, u64)>,
    consumed_records: u64,
    consumed_bytes: u64,
}

#[derive(Debug, Default)]
struct Inner {
    traffic: VecDeque<TrafficPoint>,
    topic_rates: HashMap<String, TopicRate>,
    lag: BTreeMap<String, VecDeque<LagPoint>>,
    last: Totals,
}

#[derive(Debug, Default)]
pub struct History {
    inner: Mutex<Inner>,
}

fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
}

fn push<T>(ring: &mut VecDeque<T>, item: T) {
    if ring.len() == POINTS {
        ring.pop_front();
    }
    ring.push_back(item);
}

impl History {
    /// Samples once a second until `shutdown`.
    pub fn spawn(self: &Arc<Self>, broker: Arc<Broker>, shutdown: CancellationToken) {
        let history = Arc::clone(self);
        tokio::spawn(async move {
            let mut tick = tokio::time::interval(INTERVAL);
            tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            loop {
                tokio::select! {
                    () = shutdown.cancelled() => return,
                    _ = tick.tick() => history.sample(&broker),
                }
            }
        });
    }

    /// Reads the counters and records a point (the first call only sets the baseline).
    pub fn sample(&self, broker: &Broker) {
        let mut totals = Totals {
            at: Some(std::time::Instant::now()),
            ..Totals::default()
        };
        for topic in broker.topics().list() {
            let mut sum = (0u64, 0u64);
            for p in topic.partitions() {
                let c = p.counters();
                sum.0 += c.produced_records.load(Ordering::Relaxed);
                sum.1 += c.produced_bytes.load(Ordering::Relaxed);
                totals.consumed_records += c.fetched_records.load(Ordering::Relaxed);
                totals.consumed_bytes += c.fetched_bytes.load(Ordering::Relaxed);
            }
            totals.per_topic.insert(topic.name.to_string(), sum);
        }
        let (p99, produced) = broker.metrics().take_produce_p99();
        let t_ms = now_ms();
        let lags: Vec<(String, i64)> = broker
            .groups_summary()
            .into_iter()
            .take(MAX_CHARTED_GROUPS)
            .filter_map(|g| broker.group_status(&g.group))
            .map(|s| (s.group, s.offsets.iter().filter_map(|o| o.lag).sum()))
            .collect();

        let mut inner = self.inner.lock();
        let last = std::mem::replace(&mut inner.last, totals.clone());
        if let Some(then) = last.at {
            let secs = totals
                .at
                .map_or(1.0, |now| now.duration_since(then).as_secs_f64())
                .max(1e-3);
            let rate = |now: u64, before: u64| now.saturating_sub(before) as f64 / secs;
            let mut point = TrafficPoint {
                t_ms,
                consume_msgs_per_s: rate(totals.consumed_records, last.consumed_records),
                consume_bytes_per_s: rate(totals.consumed_bytes, last.consumed_bytes),
                produce_p99_us: (produced > 0).then_some(p99),
                ..TrafficPoint::default()
            };
            let mut rates = HashMap::with_capacity(totals.per_topic.len());
            for (name, &(records, bytes)) in &totals.per_topic {
                let (r0, b0) = last.per_topic.get(name).copied().unwrap_or((records, bytes));
                let r = TopicRate {
                    msgs_per_s: rate(records, r0),
                    bytes_per_s: rate(bytes, b0),
                };
                point.produce_msgs_per_s += r.msgs_per_s;
                point.produce_bytes_per_s += r.bytes_per_s;
                rates.insert(name.clone(), r);
            }
            inner.topic_rates = rates;
            push(&mut inner.traffic, point);
        }
        inner.lag.retain(|g, _| lags.iter().any(|(l, _)| l == g));
        for (group, lag) in lags {
            push(inner.lag.entry(group).or_default(), LagPoint { t_ms, lag });
        }
    }

    pub fn traffic(&self) -> Vec<TrafficPoint> {
        self.inner.lock().traffic.iter().copied().collect()
    }

    pub fn latest(&self) -> Option<TrafficPoint> {
        self.inner.lock().traffic.back().copied()
    }

    pub fn topic_rate(&self, topic: &str) -> TopicRate {
        self.inner
            .lock()
            .topic_rates
            .get(topic)
            .copied()
            .unwrap_or_default()
    }

    pub fn lag(&self, group: &str) -> Vec<LagPoint> {
        self.inner
            .lock()
            .lag
            .get(group)
            .map(|r| r.iter().copied().collect())
            .unwrap_or_default()
    }
}
