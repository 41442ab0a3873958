//! A node's client traffic counters, for a console that charts the whole cluster's traffic:
//! each node counts only what clients produce to the partitions it leads and fetch from it
//! (followers' copies are not counted), so the cluster's rate is the sum of the nodes' rates.
//! A console asks every live node once a second ([`PeerCall::Traffic`]) and takes the rates of
//! the counters itself; the answer is the counters, not rates, so that two consoles asking the
//! same node do not disturb each other.

use std::collections::BTreeMap;
use std::sync::atomic::Ordering;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::PeerCall;
use crate::broker::Broker;

/// How long a console's sampler waits for another node's counters (it samples once a second).
const TRAFFIC_TIMEOUT: Duration = Duration::from_millis(800);

/// A node's client traffic since it started, per topic.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct TrafficTotals {
    /// Which run of the node these are from (when it started): its counters start again
    /// from zero at every start.
    pub run: i64,
    /// When they were read, on the node's own clock (the one its sessions are timed on), so
    /// that the asker's rates do not depend on how long the answer took.
    pub at_ms: i64,
    pub topics: BTreeMap<String, TopicTraffic>,
}

/// What clients produced to and fetched from a topic's partitions on one node. A partition
/// that leaves the node (reassigned, deleted) takes its counts with it.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct TopicTraffic {
    pub produced_records: u64,
    pub produced_bytes: u64,
    pub fetched_records: u64,
    pub fetched_bytes: u64,
}

impl Broker {
    /// This node's counters.
    pub fn traffic_totals(&self) -> TrafficTotals {
        let mut totals = TrafficTotals {
            run: self.started_at_ms,
            at_ms: self.liveness_ms(),
            topics: BTreeMap::new(),
        };
        for topic in self.topics.list() {
            let mut sum = TopicTraffic::default();
            for p in topic.partitions() {
                let c = p.counters();
                sum.produced_records += c.produced_records.load(Ordering::Relaxed);
                sum.produced_bytes += c.produced_bytes.load(Ordering::Relaxed);
                sum.fetched_records += c.fetched_records.load(Ordering::Relaxed);
                sum.fetched_bytes += c.fetched_bytes.load(Ordering::Relaxed);
            }
            totals.topics.insert(topic.name.to_string(), sum);
        }
        totals
    }

    /// Every live node's counters: this node's own, the others' asked over the internal
    /// listener at once. A fenced node is not listed (it is not serving clients; its counters
    /// start again from zero when it returns); a node that did not answer in time, or an older
    /// node that does not know the call, is listed with the reason (a console leaves its
    /// traffic out and counts it as missing).
    pub async fn cluster_traffic(&self) -> Vec<(i32, Result<TrafficTotals, String>)> {
        self.ask_live_nodes(&PeerCall::Traffic, TRAFFIC_TIMEOUT, || {
            self.traffic_totals()
        })
        .await
    }
}
