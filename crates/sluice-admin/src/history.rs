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
    at_ms: Option<i64>,
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
        let t_ms = broker.now_ms();
        let mut totals = Totals {
            at_ms: Some(t_ms),
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
        let lags: Vec<(String, i64)> = broker
            .groups_summary()
            .into_iter()
            .take(MAX_CHARTED_GROUPS)
            .filter_map(|g| broker.group_status(&g.group))
            .map(|s| {
                let lag = s.total_lag();
                (s.group, lag)
            })
            .collect();

        let mut inner = self.inner.lock();
        let last = std::mem::replace(&mut inner.last, totals.clone());
        if let Some(then) = last.at_ms {
            let secs = ((t_ms - then) as f64 / 1000.0).max(1e-3);
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
                let (r0, b0) = last
                    .per_topic
                    .get(name)
                    .copied()
                    .unwrap_or((records, bytes));
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

#[cfg(test)]
mod tests {
    use super::*;
    use sluice_broker::publish::NewRecord;
    use sluice_broker::BrokerConfig;
    use sluice_log::ManualClock;

    #[test]
    fn rates_from_counter_deltas_over_the_clock() {
        let dir = tempfile::tempdir().unwrap();
        let clock = ManualClock::new(1_000_000);
        let config = BrokerConfig {
            data_dir: dir.path().to_path_buf(),
            offsets_topic_partitions: 1,
            ..Default::default()
        };
        let broker = Broker::open(config, clock.clone()).unwrap();
        broker
            .topics()
            .create("t", 1, Default::default(), false)
            .unwrap();
        let history = History::default();
        history.sample(&broker);
        assert!(
            history.traffic().is_empty(),
            "the first sample is the baseline"
        );
        for _ in 0..10 {
            broker.publish("t", 0, NewRecord::default()).unwrap();
        }
        clock.advance_ms(2_000);
        history.sample(&broker);
        let points = history.traffic();
        assert_eq!(points.len(), 1);
        assert!(
            (points[0].produce_msgs_per_s - 5.0).abs() < 1e-9,
            "{points:?}"
        );
        assert!((history.topic_rate("t").msgs_per_s - 5.0).abs() < 1e-9);
        assert_eq!(points[0].t_ms, 1_002_000);
        for _ in 0..POINTS + 5 {
            clock.advance_ms(1_000);
            history.sample(&broker);
        }
        assert_eq!(
            history.traffic().len(),
            POINTS,
            "15 minutes are kept, no more"
        );
        assert_eq!(history.topic_rate("t").msgs_per_s, 0.0);
    }
}
