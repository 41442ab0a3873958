//! `sluice bench e2e`: open-loop producers at a fixed offered rate, consumers in the same
//! process, end-to-end latency from each record's due time to its arrival (BENCHMARKS.md).

use std::io::Write;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use kafka_protocol::records::Compression;
use serde::{Deserialize, Serialize};

use crate::clock::RunClock;
use crate::cluster::ensure_topic;
use crate::consumer::{Consumer, ConsumerConfig, ConsumerShared};
use crate::error::BenchError;
use crate::latency::LatencySummary;
use crate::producer::{Producer, ProducerConfig};
use crate::tracker::Tracker;

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct E2eConfig {
    pub bootstrap: String,
    pub topic: String,
    pub rate_per_s: f64,
    pub record_bytes: usize,
    pub duration_s: f64,
    pub warmup_s: f64,
    pub producers: usize,
    pub consumers: usize,
    pub partitions: i32,
    /// Replicas per partition if the topic has to be created (-1: the broker's default).
    #[serde(default = "one_replica")]
    pub replication_factor: i16,
    /// 0, 1 or -1 (all).
    pub acks: i16,
    pub linger_ms: f64,
    pub batch_bytes: usize,
    pub max_in_flight: usize,
    /// none, gzip, snappy, lz4, zstd.
    pub compression: String,
    /// How long consumers may take after the last send to receive everything.
    pub drain_s: f64,
    /// Configs for the topic if it has to be created.
    pub topic_configs: Vec<(String, String)>,
}

fn one_replica() -> i16 {
    1
}

impl Default for E2eConfig {
    fn default() -> Self {
        E2eConfig {
            bootstrap: "127.0.0.1:9092".into(),
            topic: "sluice-bench".into(),
            rate_per_s: 10_000.0,
            record_bytes: 128,
            duration_s: 10.0,
            warmup_s: 1.0,
            producers: 1,
            consumers: 1,
            partitions: 1,
            replication_factor: 1,
            acks: 1,
            linger_ms: 0.0,
            batch_bytes: 1_000_000,
            max_in_flight: 5,
            compression: "none".into(),
            drain_s: 5.0,
            topic_configs: Vec::new(),
        }
    }
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct E2eResult {
    pub config: E2eConfig,
    pub sent: u64,
    pub acked: u64,
    pub failed: u64,
    pub errors: Vec<(String, u64)>,
    pub fetch_errors: Vec<(i16, u64)>,
    pub received: u64,
    pub lost: u64,
    pub duplicated: u64,
    pub offered_rate_per_s: f64,
    pub send_rate_per_s: f64,
    pub receive_rate_per_s: f64,
    pub latency: LatencySummary,
}

impl E2eResult {
    /// BENCHMARKS.md: sustained when both rates are ≥ 95% of the offered one and nothing is
    /// lost (or duplicated).
    pub fn sustained(&self) -> bool {
        self.send_rate_per_s >= 0.95 * self.offered_rate_per_s
            && self.receive_rate_per_s >= 0.95 * self.offered_rate_per_s
            && self.lost == 0
            && self.duplicated == 0
            && self.failed == 0
    }
}

pub fn compression(name: &str) -> Result<Compression, BenchError> {
    sluice_client::records::compression_from_name(name).ok_or_else(|| {
        BenchError::Setup(format!(
            "compression must be none, gzip, snappy, lz4 or zstd, not '{name}'"
        ))
    })
}

pub fn validate(c: &E2eConfig) -> Result<(), BenchError> {
    let bad = |m: String| Err(BenchError::Setup(m));
    if !(c.rate_per_s > 0.0 && c.rate_per_s.is_finite()) {
        return bad(format!("--rate must be positive, not {}", c.rate_per_s));
    }
    if c.duration_s <= 0.0 || c.warmup_s < 0.0 || c.warmup_s >= c.duration_s {
        return bad("--duration must be positive and longer than --warmup".into());
    }
    if c.record_bytes < crate::payload::HEADER_BYTES {
        return bad(format!(
            "--size must be at least {} bytes (the benchmark's stamp)",
            crate::payload::HEADER_BYTES
        ));
    }
    if c.producers == 0 || c.consumers == 0 || c.partitions < 1 || c.max_in_flight == 0 {
        return bad(
            "--producers, --consumers, --partitions and --max-in-flight must be at least 1".into(),
        );
    }
    if c.replication_factor == 0 || c.replication_factor < -1 {
        return bad(format!(
            "--replication-factor must be at least 1 (or -1 for the broker's default), not {}",
            c.replication_factor
        ));
    }
    if !matches!(c.acks, -1..=1) {
        return bad(format!("--acks must be 0, 1 or all, not {}", c.acks));
    }
    compression(&c.compression)?;
    Ok(())
}

/// Runs one end-to-end measurement; `progress` prints a live line to stderr.
pub fn run(config: &E2eConfig, progress: bool) -> Result<E2eResult, BenchError> {
    validate(config)?;
    let (layout, start_offsets) = ensure_topic(
        &config.bootstrap,
        &config.topic,
        config.partitions,
        config.replication_factor,
        &config.topic_configs,
    )?;
    if layout.leaders.is_empty() {
        return Err(BenchError::Kafka(format!(
            "topic {} has no partition with a leader",
            config.topic
        )));
    }
    let clock = RunClock::start();
    let stop_consumers = Arc::new(AtomicBool::new(false));
    let stop_producers = Arc::new(AtomicBool::new(false));
    let shared = Arc::new(ConsumerShared::default());
    let settle_ns = 200_000_000;
    let warmup_until_ns = settle_ns + (config.warmup_s * 1e9) as u64;
    let mut consumers = Vec::new();
    for c in 0..config.consumers {
        let partitions: Vec<(i32, String, i64)> = layout
            .leaders
            .iter()
            .enumerate()
            .filter(|(i, _)| i % config.consumers == c)
            .map(|(_, (p, addr))| (*p, addr.clone(), start_offsets.get(p).copied().unwrap_or(0)))
            .collect();
        if partitions.is_empty() {
            continue;
        }
        let cc = ConsumerConfig {
            bootstrap: config.bootstrap.clone(),
            topic: config.topic.clone(),
            partitions,
            producers: config.producers,
            warmup_until_ns,
            max_wait_ms: 500,
        };
        consumers.push(Consumer::start(
            cc,
            clock,
            Arc::clone(&shared),
            Arc::clone(&stop_consumers),
        )?);
    }
    // Consumers first, so that their first long poll is already waiting.
    std::thread::sleep(Duration::from_nanos(settle_ns));
    let per_producer_rate = config.rate_per_s / config.producers as f64;
    let total_per_producer = (per_producer_rate * config.duration_s).round().max(1.0) as u64;
    let mut producers = Vec::new();
    for id in 0..config.producers {
        let pc = ProducerConfig {
            id: id as u32,
            bootstrap: config.bootstrap.clone(),
            layout: layout.clone(),
            rate_per_s: Some(per_producer_rate),
            total: total_per_producer,
            record_bytes: config.record_bytes,
            acks: config.acks,
            linger_ns: (config.linger_ms * 1e6) as u64,
            batch_bytes: config.batch_bytes,
            max_in_flight: config.max_in_flight,
            compression: compression(&config.compression)?,
        };
        producers.push(Producer::start(
            pc,
            clock,
            settle_ns,
            Arc::clone(&stop_producers),
        )?);
    }

    let run_deadline_ns = settle_ns + ((config.duration_s * 2.0 + 10.0) * 1e9) as u64;
    let mut last_print = (clock.now_ns(), 0u64, 0u64);
    loop {
        let done = producers
            .iter()
            .all(|p| p.counters.sent.load(Ordering::Relaxed) >= total_per_producer);
        let now = clock.now_ns();
        if now > run_deadline_ns {
            // A broker that cannot keep up: stop offering, report what happened.
            stop_producers.store(true, Ordering::Relaxed);
        }
        if progress && now - last_print.0 >= 1_000_000_000 {
            let sent: u64 = producers
                .iter()
                .map(|p| p.counters.sent.load(Ordering::Relaxed))
                .sum();
            let received = shared.received.load(Ordering::Relaxed);
            let dt = (now - last_print.0) as f64 / 1e9;
            let p99 = shared.latencies.lock().map(|l| l.p99_us()).unwrap_or(0.0);
            let elapsed = now.saturating_sub(settle_ns) as f64 / 1e9;
            let mut err = std::io::stderr().lock();
            let _ = write!(
                err,
                "\r[{:5.1}/{:.0}s] sent {:>9.0}/s  recv {:>9.0}/s  p99 so far {:>9.1} µs   ",
                elapsed.min(config.duration_s),
                config.duration_s,
                (sent - last_print.1) as f64 / dt,
                (received - last_print.2) as f64 / dt,
                p99
            );
            let _ = err.flush();
            last_print = (now, sent, received);
        }
        if done || stop_producers.load(Ordering::Relaxed) {
            break;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let last_send_ns = producers
        .iter()
        .map(|p| p.counters.last_send_ns.load(Ordering::Relaxed))
        .max()
        .unwrap_or(settle_ns);
    let mut outcomes = Vec::new();
    for p in producers {
        outcomes.push(p.join()?);
    }
    let sent: Vec<u64> = outcomes.iter().map(|o| o.sent).collect();
    let failed: Vec<Vec<(u64, u64)>> = outcomes.iter().map(|o| o.failed_ranges.clone()).collect();
    let failed_total: u64 = failed.iter().flatten().map(|(_, n)| n).sum();
    let expected: u64 = sent.iter().sum::<u64>() - failed_total;
    let drain_deadline = clock.now_ns() + (config.drain_s * 1e9) as u64;
    // A failed request may still have been written (a leader killed after it replicated the
    // batch): its records then arrive too, so with failures the count cannot say that every
    // acknowledged record is in, and the drain runs its full time.
    while (failed_total > 0 || shared.received.load(Ordering::Relaxed) < expected)
        && clock.now_ns() < drain_deadline
    {
        std::thread::sleep(Duration::from_millis(5));
    }
    stop_consumers.store(true, Ordering::Relaxed);
    let mut tracker = Tracker::new(config.producers);
    let mut fetch_errors = std::collections::BTreeMap::new();
    for c in consumers {
        let outcome = c.join()?;
        tracker.merge(&outcome.tracker);
        for (code, n) in outcome.fetch_errors {
            *fetch_errors.entry(code).or_insert(0u64) += n;
        }
    }
    if progress {
        let _ = writeln!(std::io::stderr().lock());
    }
    // Rates over the scheduled duration, or over longer if the broker made sending or
    // receiving take longer.
    let send_s = (last_send_ns.saturating_sub(settle_ns) as f64 / 1e9).max(config.duration_s);
    let last_receive = shared
        .last_receive_ns
        .load(Ordering::Relaxed)
        .max(settle_ns + 1);
    let errors: std::collections::BTreeMap<String, u64> = outcomes
        .iter()
        .flat_map(|o| o.errors.clone())
        .fold(Default::default(), |mut m, (k, v)| {
            *m.entry(k).or_insert(0) += v;
            m
        });
    let latency = shared
        .latencies
        .lock()
        .map(|l| l.summary())
        .map_err(|_| BenchError::Setup("latency histogram poisoned".into()))?;
    let total_sent: u64 = sent.iter().sum();
    Ok(E2eResult {
        config: config.clone(),
        sent: total_sent,
        acked: outcomes.iter().map(|o| o.acked).sum(),
        failed: failed_total,
        errors: errors.into_iter().collect(),
        fetch_errors: fetch_errors.into_iter().collect(),
        received: tracker.received,
        lost: tracker.missing(&sent, &failed),
        duplicated: tracker.duplicates,
        offered_rate_per_s: config.rate_per_s,
        send_rate_per_s: total_sent as f64 / send_s,
        receive_rate_per_s: tracker.received as f64
            / ((last_receive - settle_ns) as f64 / 1e9).max(config.duration_s),
        latency,
    })
}
