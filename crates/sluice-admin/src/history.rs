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
    /// Live nodes whose traffic this point leaves out: no answer in time (yet: a late answer
    /// fills the points it missed), a first answer after a restart, or an older node.
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
    /// Each node's counters when it last answered.
    last: HashMap<i32, Baseline>,
}

#[derive(Debug, Clone)]
struct Baseline {
    /// The point its answer went into (this node's clock).
    point_t_ms: i64,
    totals: TrafficTotals,
}

impl TrafficPoint {
    fn add(&mut self, other: &TrafficPoint) {
        self.produce_msgs_per_s += other.produce_msgs_per_s;
        self.produce_bytes_per_s += other.produce_bytes_per_s;
        self.consume_msgs_per_s += other.consume_msgs_per_s;
        self.consume_bytes_per_s += other.consume_bytes_per_s;
    }
}

/// Per topic, a node's (produce, consume) rates between two readings of its counters. A topic
/// new since the first reading counts from zero; a count that went down (a partition left the
/// node) counts as no traffic for that topic this once.
fn rates_between(
    before: &TrafficTotals,
    now: &TrafficTotals,
) -> BTreeMap<String, (TopicRate, TopicRate)> {
    let secs = ((now.at_ms - before.at_ms) as f64 / 1000.0).max(1e-3);
    let rate = |now: u64, before: u64| now.saturating_sub(before) as f64 / secs;
    now.topics
        .iter()
        .map(|(topic, n)| {
            let b = before.topics.get(topic).copied().unwrap_or_default();
            let produce = TopicRate {
                msgs_per_s: rate(n.produced_records, b.produced_records),
                bytes_per_s: rate(n.produced_bytes, b.produced_bytes),
            };
            let consume = TopicRate {
                msgs_per_s: rate(n.fetched_records, b.fetched_records),
                bytes_per_s: rate(n.fetched_bytes, b.fetched_bytes),
            };
            (topic.clone(), (produce, consume))
        })
        .collect()
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

    /// Records a point from the nodes' counters and this node's produce latency and group
    /// lag. A node's rate is the growth of its counters over its own clock since its last
    /// answer; its first answer (and its first after a restart) only sets that baseline. A
    /// node that missed points gets its rate over the gap added to them when it answers again,
    /// so the charts' area stays what was counted.
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
            let baseline = Baseline {
                point_t_ms: t_ms,
                totals,
            };
            let previous = inner.last.insert(node, baseline.clone());
            let Some(previous) = previous.filter(|b| b.totals.run == baseline.totals.run) else {
                point.nodes_missing += 1; // a baseline only: its traffic since is unknown
                continue;
            };
            let node_rates = rates_between(&previous.totals, &baseline.totals);
            let mut sum = TrafficPoint::default();
            for (topic, r) in &node_rates {
                let at = rates.entry(topic.clone()).or_default();
                at.msgs_per_s += r.0.msgs_per_s;
                at.bytes_per_s += r.0.bytes_per_s;
                sum.produce_msgs_per_s += r.0.msgs_per_s;
                sum.produce_bytes_per_s += r.0.bytes_per_s;
                sum.consume_msgs_per_s += r.1.msgs_per_s;
                sum.consume_bytes_per_s += r.1.bytes_per_s;
            }
            point.add(&sum);
            point.nodes_counted += 1;
            // The points it missed since its last answer get the same rate.
            for missed in inner.traffic.iter_mut().rev() {
                if missed.t_ms <= previous.point_t_ms {
                    break;
                }
                missed.add(&sum);
                missed.nodes_counted += 1;
                missed.nodes_missing = missed.nodes_missing.saturating_sub(1);
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
    use sluice_broker::replication::traffic_report::TopicTraffic;
    use sluice_broker::BrokerConfig;
    use sluice_log::ManualClock;

    fn broker_in(dir: &std::path::Path, clock: Arc<dyn sluice_log::Clock>) -> Arc<Broker> {
        let config = BrokerConfig {
            data_dir: dir.to_path_buf(),
            offsets_topic_partitions: 1,
            ..Default::default()
        };
        Broker::open(config, clock).unwrap()
    }

    #[test]
    fn rates_from_counter_deltas_over_the_clock() {
        let dir = tempfile::tempdir().unwrap();
        let clock = ManualClock::new(1_000_000);
        let broker = broker_in(dir.path(), clock.clone());
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
    fn the_nodes_rates_are_summed_and_a_silent_node_fills_its_gap() {
        let dir = tempfile::tempdir().unwrap();
        let clock = ManualClock::new(1_000_000);
        let broker = broker_in(dir.path(), clock.clone());
        let reading = |run: i64, at_ms: i64, topics: &[(&str, u64, u64)]| {
            Ok(TrafficTotals {
                run,
                at_ms,
                topics: topics
                    .iter()
                    .map(|&(t, produced, fetched)| {
                        let c = TopicTraffic {
                            produced_records: produced,
                            produced_bytes: produced * 100,
                            fetched_records: fetched,
                            fetched_bytes: fetched * 100,
                        };
                        (t.to_string(), c)
                    })
                    .collect(),
            })
        };
        let down = || Err("timed out".to_string());
        let history = History::default();
        let next = |nodes| {
            clock.advance_ms(1_000);
            history.record(&broker, nodes);
            history.latest().unwrap()
        };
        history.record(
            &broker,
            vec![
                (1, reading(1, 0, &[("t", 0, 0)])),
                (2, reading(2, 500, &[("t", 50, 0)])),
            ],
        );
        assert!(history.traffic().is_empty(), "baselines only");

        // Rates over each node's own clock, summed; a node that did not answer is counted.
        let p = next(vec![
            (1, reading(1, 1_000, &[("t", 10, 4)])),
            (2, reading(2, 1_500, &[("t", 80, 6)])),
            (3, down()),
        ]);
        assert_eq!((p.produce_msgs_per_s, p.consume_msgs_per_s), (40.0, 10.0));
        assert_eq!((p.nodes_counted, p.nodes_missing), (2, 1));
        assert_eq!(history.topic_rate("t").bytes_per_s, 4_000.0);

        // Node 2 misses a point; its next answer's rate fills that point too.
        let p = next(vec![(1, reading(1, 2_000, &[("t", 10, 4)])), (2, down())]);
        assert_eq!(
            (p.produce_msgs_per_s, p.nodes_counted, p.nodes_missing),
            (0.0, 1, 1)
        );
        let p = next(vec![
            (1, reading(1, 3_000, &[("t", 10, 4)])),
            (2, reading(2, 3_500, &[("t", 100, 6)])),
        ]);
        assert_eq!(p.produce_msgs_per_s, 10.0, "20 records over its 2 s");
        let points = history.traffic();
        let filled = points[points.len() - 2];
        assert_eq!(
            (
                filled.produce_msgs_per_s,
                filled.nodes_counted,
                filled.nodes_missing
            ),
            (10.0, 2, 0)
        );

        // A restarted node (another run) starts a new baseline: no negative or partial rate.
        let p = next(vec![
            (1, reading(1, 4_000, &[("t", 10, 4)])),
            (2, reading(3, 10, &[("t", 3, 0)])),
        ]);
        assert_eq!(
            (p.produce_msgs_per_s, p.nodes_counted, p.nodes_missing),
            (0.0, 1, 1)
        );
        let p = next(vec![
            (1, reading(1, 5_000, &[("t", 10, 4)])),
            (2, reading(3, 1_010, &[("t", 8, 0)])),
        ]);
        assert_eq!(p.produce_msgs_per_s, 5.0);

        // A topic new on a node counts from zero; one whose partition left counts nothing
        // this once rather than a negative rate.
        let p = next(vec![
            (1, reading(1, 6_000, &[("t", 4, 4), ("u", 7, 0)])),
            (2, reading(3, 2_010, &[("t", 8, 0)])),
        ]);
        assert_eq!(p.produce_msgs_per_s, 7.0);
        assert_eq!(history.topic_rate("u").msgs_per_s, 7.0);
    }
}
