//! Replication throttling, as Kafka's (KIP-73): a bandwidth cap on the bytes a leader sends to
//! followers (`leader.replication.throttled.rate`) and a follower copies
//! (`follower.replication.throttled.rate`), applied only to the replicas a topic lists as
//! throttled (`leader.replication.throttled.replicas`, `follower.replication.throttled.replicas`:
//! `partition:node,...` or `*`). `kafka-reassign-partitions.sh --throttle` and
//! `sluice topic reassign --throttle` set all four so that the copy filling a new replica does
//! not starve client traffic; in-sync replicas keep up as they did. The rates are per node and
//! dynamic (IncrementalAlterConfigs on the node's broker resource). In a cluster they are kept in
//! the metadata log (any node may set any node's), so they survive restarts; a single node keeps
//! them in memory only.
//!
//! Beside them, Sluice's own cap on a node catching up: `replica.recovery.max.bytes.per.sec`
//! (default [`DEFAULT_RECOVERY_RATE`], 0 for none) bounds what a follower copies, from each
//! leader node, for its replicas that are out of the ISR (a node back from a crash or a
//! disk change, a replica added by a reassignment), with no topic config needed; its pace
//! rises by itself when the partitions grow faster than it copies ([`super::recovery_pace`]).

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};

use parking_lot::Mutex;

use crate::topic_config;

pub const LEADER_RATE: &str = "leader.replication.throttled.rate";
pub const FOLLOWER_RATE: &str = "follower.replication.throttled.rate";
/// Bytes per second a follower copies from each leader node for its replicas out of the ISR.
pub const RECOVERY_RATE: &str = "replica.recovery.max.bytes.per.sec";
/// 100 MiB/s (Redpanda's default for its learners' recovery, as I recall it; not checked);
/// measured here in bench/catchup_impact.py (docs/decisions/cluster-recovery-throttle.md).
pub const DEFAULT_RECOVERY_RATE: u64 = 100 * 1024 * 1024;
/// The smallest cap taken (64 KiB/s): below it a fetcher's pace, judged on the answers it gets,
/// would have too few to judge by.
pub const MIN_RECOVERY_RATE: u64 = 64 * 1024;
/// Accepted and ignored: Sluice has one log directory per node, nothing moves between them.
pub const ALTER_LOG_DIRS_RATE: &str = "replica.alter.log.dirs.io.max.bytes.per.second";

/// A token bucket: `rate` bytes per second, at most one second's worth saved up (or
/// `burst_ms`' worth). A transfer may overdraw it (a batch is never split); the next ones wait
/// until it is refilled.
#[derive(Debug, Default)]
pub struct Throttle {
    /// Bytes per second; 0: no limit.
    rate: AtomicU64,
    bucket: Mutex<Bucket>,
    /// How many milliseconds' worth may be saved up; 0: a second's.
    burst_ms: u64,
}

#[derive(Debug, Default)]
struct Bucket {
    tokens: f64,
    at_ms: i64,
}

impl Throttle {
    /// A bucket that saves up at most `burst_ms` of its rate: the transfers spread more evenly
    /// over each second than with a second's worth at once.
    pub fn with_burst_ms(burst_ms: u64) -> Throttle {
        Throttle {
            burst_ms,
            ..Throttle::default()
        }
    }

    /// The most the bucket holds at `rate`.
    fn depth(&self, rate: f64) -> f64 {
        match self.burst_ms {
            0 => rate,
            // At least a byte, or a tiny rate would never allow one.
            ms => (rate * ms as f64 / 1000.0).max(1.0),
        }
    }

    pub fn set_rate(&self, bytes_per_s: Option<u64>) {
        self.rate.store(bytes_per_s.unwrap_or(0), Ordering::Release);
        let mut b = self.bucket.lock();
        b.tokens = b.tokens.min(self.depth(bytes_per_s.unwrap_or(0) as f64));
    }

    pub fn rate(&self) -> Option<u64> {
        Some(self.rate.load(Ordering::Acquire)).filter(|r| *r > 0)
    }

    /// How many bytes may go now (`None`: no limit; 0: none until the bucket refills).
    pub fn allowance(&self, now_ms: i64) -> Option<usize> {
        let rate = self.rate()? as f64;
        let mut b = self.bucket.lock();
        let elapsed_s = (now_ms - b.at_ms).max(0) as f64 / 1000.0;
        b.tokens = (b.tokens + elapsed_s * rate).min(self.depth(rate));
        b.at_ms = now_ms;
        Some(b.tokens.max(0.0) as usize)
    }

    /// `bytes` went (throttled traffic only).
    pub fn spend(&self, bytes: usize) {
        if self.rate().is_some() {
            self.bucket.lock().tokens -= bytes as f64;
        }
    }
}

/// A node's throttles: the two of KIP-73 and the cap on recovering replicas.
#[derive(Debug)]
pub struct ReplicationThrottles {
    pub leader: Throttle,
    pub follower: Throttle,
    /// `replica.recovery.max.bytes.per.sec` in force (0: no cap); each replica fetcher keeps
    /// its own bucket ([`super::recovery_pace::RecoveryPace`]) at this rate.
    recovery: AtomicU64,
    /// Whether the recovery rate was set at run time (else it is the default).
    recovery_set: std::sync::atomic::AtomicBool,
}

impl Default for ReplicationThrottles {
    fn default() -> Self {
        ReplicationThrottles {
            leader: Throttle::default(),
            follower: Throttle::default(),
            recovery: AtomicU64::new(DEFAULT_RECOVERY_RATE),
            recovery_set: std::sync::atomic::AtomicBool::new(false),
        }
    }
}

fn parse_rate(key: &str, value: &str) -> Result<u64, String> {
    value
        .trim()
        .parse::<u64>()
        .map_err(|_| format!("'{key}' is a rate in bytes per second (0 or more), not '{value}'"))
}

impl ReplicationThrottles {
    /// Applies one broker config (`None`: back to no limit, or the recovery cap to its
    /// default). Anything else is not dynamic.
    pub fn set(&self, key: &str, value: Option<&str>) -> Result<(), String> {
        let rate = value.map(|v| parse_rate(key, v)).transpose()?;
        match key {
            LEADER_RATE => self.leader.set_rate(rate),
            FOLLOWER_RATE => self.follower.set_rate(rate),
            RECOVERY_RATE => self.set_recovery(rate.map(Self::check_recovery).transpose()?),
            ALTER_LOG_DIRS_RATE => {}
            _ => return Err(format!("'{key}' is not a dynamic broker config")),
        }
        Ok(())
    }

    /// Checks a recovery cap: 0 (none) or at least [`MIN_RECOVERY_RATE`].
    fn check_recovery(rate: u64) -> Result<u64, String> {
        if rate != 0 && rate < MIN_RECOVERY_RATE {
            return Err(format!(
                "'{RECOVERY_RATE}' is 0 (no cap) or at least {MIN_RECOVERY_RATE} bytes per \
                 second, not {rate}"
            ));
        }
        Ok(rate)
    }

    fn set_recovery(&self, rate: Option<u64>) {
        self.recovery
            .store(rate.unwrap_or(DEFAULT_RECOVERY_RATE), Ordering::Release);
        self.recovery_set.store(rate.is_some(), Ordering::Release);
    }

    /// The cap on recovering replicas, per leader node, in bytes per second (`None`: none).
    pub fn recovery_rate(&self) -> Option<u64> {
        Some(self.recovery.load(Ordering::Acquire)).filter(|r| *r > 0)
    }

    /// Sets every rate from a node's complete dynamic configs (a missing one: no limit, or
    /// the default recovery cap); changes only what differs, so applying the same configs
    /// again leaves the buckets be.
    pub fn apply_all(&self, configs: &BTreeMap<String, String>) {
        for (key, throttle) in [(LEADER_RATE, &self.leader), (FOLLOWER_RATE, &self.follower)] {
            let rate = configs.get(key).and_then(|v| v.trim().parse::<u64>().ok());
            if throttle.rate() != rate.filter(|r| *r > 0) {
                throttle.set_rate(rate);
                tracing::info!(key, ?rate, "replication throttle changed");
            }
        }
        let recovery = configs
            .get(RECOVERY_RATE)
            .and_then(|v| v.trim().parse::<u64>().ok());
        let before = self
            .recovery_set
            .load(Ordering::Acquire)
            .then(|| self.recovery.load(Ordering::Acquire));
        if before != recovery {
            self.set_recovery(recovery);
            tracing::info!(key = RECOVERY_RATE, rate = ?self.recovery_rate(), "recovery cap changed");
        }
    }

    /// The dynamic configs that are set, for DescribeConfigs.
    pub fn configs(&self) -> BTreeMap<&'static str, u64> {
        let mut set = BTreeMap::new();
        if let Some(r) = self.leader.rate() {
            set.insert(LEADER_RATE, r);
        }
        if let Some(r) = self.follower.rate() {
            set.insert(FOLLOWER_RATE, r);
        }
        if self.recovery_set.load(Ordering::Acquire) {
            set.insert(RECOVERY_RATE, self.recovery.load(Ordering::Acquire));
        }
        set
    }

    pub fn is_dynamic(key: &str) -> bool {
        matches!(
            key,
            LEADER_RATE | FOLLOWER_RATE | RECOVERY_RATE | ALTER_LOG_DIRS_RATE
        )
    }
}

/// Whether a topic's throttled-replicas config (`*`, or `partition:node` pairs) names
/// partition `partition`'s replica on `node`.
pub fn lists(value: Option<&str>, partition: i32, node: i32) -> bool {
    let Some(value) = value else {
        return false;
    };
    value.split(',').map(str::trim).any(|item| {
        item == "*"
            || item.split_once(':').is_some_and(|(p, n)| {
                p.trim().parse() == Ok(partition) && n.trim().parse() == Ok(node)
            })
    })
}

/// Checks a throttled-replicas value: empty, `*`, or `partition:node` pairs.
pub fn check_replica_list(key: &str, value: &str) -> Result<(), String> {
    let value = value.trim();
    if value.is_empty() || value == "*" {
        return Ok(());
    }
    for item in value.split(',').map(str::trim) {
        let valid = item.split_once(':').is_some_and(|(p, n)| {
            p.trim().parse::<i32>().is_ok_and(|p| p >= 0)
                && n.trim().parse::<i32>().is_ok_and(|n| n >= 0)
        });
        if !valid {
            return Err(format!(
                "'{key}' is '*' or a list of partition:node pairs, and '{item}' is neither"
            ));
        }
    }
    Ok(())
}

/// Which end of the copy a throttle caps.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Side {
    /// The leader sending to a follower.
    Leader,
    /// A follower fetching from its leader.
    Follower,
}

impl ReplicationThrottles {
    pub fn of(&self, side: Side) -> &Throttle {
        match side {
            Side::Leader => &self.leader,
            Side::Follower => &self.follower,
        }
    }
}

impl crate::broker::Broker {
    /// Whether the copy of `topic`-`partition` to `follower` is throttled on this `side`: its
    /// rate is set here, the topic lists this node's replica (`*.replication.throttled.replicas`
    /// of that side), and the follower is not in the ISR (an in-sync replica is never slowed
    /// down, as in Kafka). With no rate set (the default) this is one atomic load: it runs for
    /// every partition of every replica fetch.
    pub(crate) fn throttled(
        &self,
        side: Side,
        topic: &str,
        partition: i32,
        follower: sluice_cluster::NodeId,
    ) -> bool {
        if self.throttles.of(side).rate().is_none() {
            return false;
        }
        let list = match side {
            Side::Leader => topic_config::LEADER_THROTTLED_REPLICAS,
            Side::Follower => topic_config::FOLLOWER_THROTTLED_REPLICAS,
        };
        let listed = self
            .topics()
            .get(topic)
            .is_some_and(|t| lists(t.override_of(list).as_deref(), partition, self.node_id()));
        listed
            && self.replication().is_some_and(|r| {
                r.state()
                    .state
                    .partition_by_name(topic, partition)
                    .is_some_and(|(_, p)| !p.isr.contains(&follower))
            })
    }
}

impl crate::broker::Broker {
    /// For each of `partitions` this node follows: whether its replica here is out of the
    /// ISR, so that it copies within the recovery cap (all false without a cap, or on a single
    /// node). One look at the metadata for the whole fetch.
    pub(crate) fn recovering(
        &self,
        partitions: &[(
            std::sync::Arc<str>,
            std::sync::Arc<crate::partition::Partition>,
        )],
    ) -> Vec<bool> {
        let me = sluice_cluster::NodeId(self.node_id());
        match self.replication() {
            Some(r) if self.throttles.recovery_rate().is_some() => {
                let state = r.state();
                partitions
                    .iter()
                    .map(|(name, p)| {
                        state
                            .state
                            .partition_by_name(name, p.index)
                            .is_some_and(|(_, m)| !m.isr.contains(&me))
                    })
                    .collect()
            }
            _ => vec![false; partitions.len()],
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_bucket_allows_the_rate_and_refills_with_time() {
        let t = Throttle::default();
        assert_eq!(t.allowance(0), None, "no limit by default");
        t.set_rate(Some(1000));
        assert_eq!(t.allowance(0), Some(0), "nothing saved up at time 0");
        assert_eq!(t.allowance(500), Some(500));
        t.spend(800);
        assert_eq!(t.allowance(500), Some(0), "overdrawn");
        assert_eq!(t.allowance(1000), Some(200));
        assert_eq!(
            t.allowance(10_000),
            Some(1000),
            "one second's worth at most"
        );
        t.set_rate(None);
        assert_eq!(t.allowance(10_001), None);

        let shallow = Throttle::with_burst_ms(100);
        shallow.set_rate(Some(1000));
        assert_eq!(
            shallow.allowance(10_000),
            Some(100),
            "a tenth of a second's worth at most"
        );
    }

    #[test]
    fn dynamic_configs_parse_and_others_are_refused() {
        let t = ReplicationThrottles::default();
        t.set(FOLLOWER_RATE, Some("4096")).unwrap();
        assert_eq!(t.follower.rate(), Some(4096));
        assert_eq!(t.configs().get(FOLLOWER_RATE), Some(&4096));
        assert!(t.set(LEADER_RATE, Some("fast")).is_err());
        assert!(t.set("num.io.threads", Some("8")).is_err());
        t.set(FOLLOWER_RATE, None).unwrap();
        assert_eq!(t.follower.rate(), None);
    }

    #[test]
    fn the_recovery_cap_has_a_default_and_zero_turns_it_off() {
        let t = ReplicationThrottles::default();
        assert_eq!(t.recovery_rate(), Some(DEFAULT_RECOVERY_RATE));
        assert!(
            !t.configs().contains_key(RECOVERY_RATE),
            "a default is not a dynamic config"
        );
        t.set(RECOVERY_RATE, Some("0")).unwrap();
        assert_eq!(t.recovery_rate(), None);
        assert_eq!(t.configs().get(RECOVERY_RATE), Some(&0));
        assert!(t.set(RECOVERY_RATE, Some("-1")).is_err());
        assert!(
            t.set(RECOVERY_RATE, Some("1000")).is_err(),
            "below the smallest cap"
        );
        t.set(RECOVERY_RATE, Some(&MIN_RECOVERY_RATE.to_string()))
            .unwrap();
        t.set(RECOVERY_RATE, None).unwrap();
        assert_eq!(t.recovery_rate(), Some(DEFAULT_RECOVERY_RATE));

        let mut configs = BTreeMap::new();
        configs.insert(RECOVERY_RATE.to_string(), "1048576".to_string());
        t.apply_all(&configs);
        assert_eq!(t.recovery_rate(), Some(1_048_576));
        t.apply_all(&BTreeMap::new());
        assert_eq!(
            t.recovery_rate(),
            Some(DEFAULT_RECOVERY_RATE),
            "removed: the default again"
        );
    }

    #[test]
    fn throttled_replica_lists_name_partition_and_node() {
        assert!(lists(Some("*"), 3, 1));
        assert!(lists(Some("0:1, 1:2"), 1, 2));
        assert!(!lists(Some("0:1,1:2"), 1, 1));
        assert!(!lists(None, 0, 1));
        assert!(check_replica_list(topic_config::FOLLOWER_THROTTLED_REPLICAS, "0:1,2:3").is_ok());
        assert!(check_replica_list(topic_config::FOLLOWER_THROTTLED_REPLICAS, "").is_ok());
        assert!(check_replica_list(topic_config::FOLLOWER_THROTTLED_REPLICAS, "0-1").is_err());
    }
}
