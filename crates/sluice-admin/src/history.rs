//! The console's memory of the last 15 minutes: once a second the sampler reads the traffic
//! counters of every node of the cluster (this node's own, the others' over the internal
//! listener: [`Broker::cluster_traffic`]) and this node's group lag, and keeps rates in ring
//! buffers (900 points each). Nothing is written to disk; a restart starts the charts afresh.

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::sync::Arc;
use std::time::Duration;

use parking_lot::Mutex;
use serde::Serialize;
use sluice_broker::replication::traffic_report::TrafficTotals;
use sluice_broker::Broker;
use tokio_util::sync::CancellationToken;

/// Points kept per series: 15 minutes at one a second.
pub const POINTS: usize = 900;
pub const INTERVAL: Duration = Duration::from_secs(1);
/// Groups whose lag is charted (the rest are listed but not charted).
const MAX_CHARTED_GROUPS: usize = 200;

/// The cluster's client traffic over one sampling interval (the sum of the nodes that
/// answered).
#[derive(Debug, Clone, Copy, Serialize, Default)]
pub struct TrafficPoint {
    pub t_ms: i64,
    pub produce_msgs_per_s: f64,
    pub produce_bytes_per_s: f64,
    pub consume_msgs_per_s: f64,
    pub consume_bytes_per_s: f64,
    /// P99 of produce request latency in the interval, on this node (the node the console
    /// runs on); `None` without produce requests.
    pub produce_p99_us: Option<u64>,
    /// Nodes whose traffic the rates include (1 on a single node).
    pub nodes_counted: u32,
    /// Live nodes that did not answer in time (their traffic is missing from this point).
    pub nodes_missing: u32,
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

#[derive(Debug, Default)]
struct Inner {
    traffic: VecDeque<TrafficPoint>,
    topic_rates: HashMap<String, TopicRate>,
    lag: BTreeMap<String, VecDeque<LagPoint>>,
    /// Each node's counters when it last answered, and when.
    last: HashMap<i32, (i64, TrafficTotals)>,
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
                    _ = tick.tick() => {
                        let nodes = broker.cluster_traffic().await;
                        history.record(&broker, nodes);
                    }
                }
            }
        });
    }

    /// Samples this node alone (a single node; tests).
    pub fn sample(&self, broker: &Broker) {
        let own = vec![(broker.config().node_id, Ok(broker.traffic_totals()))];
        self.record(broker, own);
    }

    /// Records a point from the nodes' counters (a node's first answer only sets its
    /// baseline; one that did not answer keeps its last, so its next answer's rate covers the
    /// whole gap) and this node's produce latency and group lag.
    pub fn record(&self, broker: &Broker, nodes: Vec<(i32, Result<TrafficTotals, String>)>) {
        let t_ms = broker.now_ms();
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
        let mut point = TrafficPoint {
            t_ms,
            produce_p99_us: (produced > 0).then_some(p99),
            ..TrafficPoint::default()
        };
        let mut rates: HashMap<String, TopicRate> = HashMap::new();
        let live: Vec<i32> = nodes.iter().map(|(id, _)| *id).collect();
        for (node, totals) in nodes {
            let Ok(totals) = totals else {
                point.nodes_missing += 1;
                continue;
            };
            let Some((then, last)) = inner.last.insert(node, (t_ms, totals.clone())) else {
                continue;
            };
            point.nodes_counted += 1;
            let secs = ((t_ms - then) as f64 / 1000.0).max(1e-3);
            let rate = |now: u64, before: u64| now.saturating_sub(before) as f64 / secs;
            point.consume_msgs_per_s += rate(totals.fetched_records, last.fetched_records);
            point.consume_bytes_per_s += rate(totals.fetched_bytes, last.fetched_bytes);
            for (name, &(records, bytes)) in &totals.produced {
                let (r0, b0) = last.produced.get(name).copied().unwrap_or((records, bytes));
                let r = rates.entry(name.clone()).or_default();
                r.msgs_per_s += rate(records, r0);
                r.bytes_per_s += rate(bytes, b0);
                point.produce_msgs_per_s += rate(records, r0);
                point.produce_bytes_per_s += rate(bytes, b0);
            }
        }
        // Nodes no longer in the cluster are forgotten.
        inner.last.retain(|id, _| live.contains(id));
        if point.nodes_counted > 0 {
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

    #[test]
    fn the_nodes_rates_are_summed_and_a_silent_node_keeps_its_baseline() {
        let dir = tempfile::tempdir().unwrap();
        let clock = ManualClock::new(1_000_000);
        let config = BrokerConfig {
            data_dir: dir.path().to_path_buf(),
            offsets_topic_partitions: 1,
            ..Default::default()
        };
        let broker = Broker::open(config, clock.clone()).unwrap();
        let totals = |records: u64, fetched: u64| TrafficTotals {
            produced: [("t".to_string(), (records, records * 100))].into(),
            fetched_records: fetched,
            fetched_bytes: fetched * 100,
        };
        let history = History::default();
        history.record(&broker, vec![(1, Ok(totals(0, 0))), (2, Ok(totals(50, 0)))]);
        assert!(history.traffic().is_empty(), "baselines only");

        clock.advance_ms(1_000);
        let down = Err("timed out".to_string());
        history.record(
            &broker,
            vec![(1, Ok(totals(10, 4))), (2, Ok(totals(80, 6))), (3, down)],
        );
        let p = history.latest().unwrap();
        assert_eq!((p.produce_msgs_per_s, p.consume_msgs_per_s), (40.0, 10.0));
        assert_eq!((p.nodes_counted, p.nodes_missing), (2, 1));
        assert_eq!(history.topic_rate("t").bytes_per_s, 4_000.0);

        // Node 2 misses an answer: the next one's rate covers both seconds.
        clock.advance_ms(1_000);
        history.record(
            &broker,
            vec![(1, Ok(totals(10, 4))), (2, Err("timed out".to_string()))],
        );
        let p = history.latest().unwrap();
        assert_eq!(
            (p.produce_msgs_per_s, p.nodes_counted, p.nodes_missing),
            (0.0, 1, 1)
        );
        clock.advance_ms(1_000);
        history.record(
            &broker,
            vec![(1, Ok(totals(10, 4))), (2, Ok(totals(100, 6)))],
        );
        let p = history.latest().unwrap();
        assert_eq!(
            p.produce_msgs_per_s, 10.0,
            "20 records over the 2 s since its last answer"
        );

        // A node that restarted counts from zero: no negative rate.
        clock.advance_ms(1_000);
        history.record(&broker, vec![(1, Ok(totals(10, 4))), (2, Ok(totals(3, 0)))]);
        assert_eq!(history.latest().unwrap().produce_msgs_per_s, 0.0);
    }
}
