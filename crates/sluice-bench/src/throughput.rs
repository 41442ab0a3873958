//! `sluice bench produce` / `consume`: closed-loop maximum throughput. Producers send as fast
//! as their in-flight limit allows; consumers read a topic from its start to the end offsets
//! it had when they began.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::clock::RunClock;
use crate::cluster::{ensure_topic, offsets};
use crate::consumer::{Consumer, ConsumerConfig, ConsumerShared};
use crate::e2e::compression;
use crate::error::BenchError;
use crate::producer::{Producer, ProducerConfig};

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ProduceConfig {
    pub bootstrap: String,
    pub topic: String,
    pub record_bytes: usize,
    pub duration_s: f64,
    pub producers: usize,
    pub partitions: i32,
    /// Replicas per partition if the topic has to be created (-1: the broker's default).
    pub replication_factor: i16,
    pub acks: i16,
    pub batch_bytes: usize,
    pub max_in_flight: usize,
    pub compression: String,
    pub topic_configs: Vec<(String, String)>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ThroughputResult {
    pub what: String,
    pub records: u64,
    pub bytes: u64,
    pub seconds: f64,
    pub msg_per_s: f64,
    pub mb_per_s: f64,
    pub errors: Vec<(String, u64)>,
}

/// Produces for `duration_s` as fast as possible; counts what was acknowledged (or sent, with
/// acks=0).
pub fn produce(config: &ProduceConfig) -> Result<ThroughputResult, BenchError> {
    if config.record_bytes < crate::payload::HEADER_BYTES
        || config.producers == 0
        || config.duration_s <= 0.0
        || config.replication_factor == 0
        || config.replication_factor < -1
    {
        return Err(BenchError::Setup(format!(
            "need --size ≥ {}, --producers ≥ 1, a positive --duration and --replication-factor ≥ 1 (or -1)",
            crate::payload::HEADER_BYTES
        )));
    }
    let (layout, _) = ensure_topic(
        &config.bootstrap,
        &config.topic,
        config.partitions,
        config.replication_factor,
        &config.topic_configs,
    )?;
    let clock = RunClock::start();
    let stop = Arc::new(AtomicBool::new(false));
    let mut producers = Vec::new();
    for id in 0..config.producers {
        let pc = ProducerConfig {
            id: id as u32,
            bootstrap: config.bootstrap.clone(),
            layout: layout.clone(),
            rate_per_s: None,
            total: u64::MAX / 2,
            record_bytes: config.record_bytes,
            acks: config.acks,
            linger_ns: 0,
            batch_bytes: config.batch_bytes,
            max_in_flight: config.max_in_flight,
            compression: compression(&config.compression)?,
        };
        producers.push(Producer::start(pc, clock, 0, Arc::clone(&stop))?);
    }
    std::thread::sleep(Duration::from_secs_f64(config.duration_s));
    let counted = |p: &Producer| {
        if config.acks == 0 {
            // Requests that could not be sent (no connection to a leader) are not throughput.
            let sent = p.counters.sent.load(Ordering::Relaxed);
            sent.saturating_sub(p.counters.failed.load(Ordering::Relaxed))
        } else {
            p.counters.acked.load(Ordering::Relaxed)
        }
    };
    let records: u64 = producers.iter().map(counted).sum();
    let seconds = clock.now_ns() as f64 / 1e9;
    stop.store(true, Ordering::Relaxed);
    let mut errors = std::collections::BTreeMap::new();
    for p in producers {
        for (e, n) in p.join()?.errors {
            *errors.entry(e).or_insert(0u64) += n;
        }
    }
    let bytes = records * config.record_bytes as u64;
    Ok(ThroughputResult {
        what: format!(
            "produce {} B, acks={}, {} producer(s)",
            config.record_bytes, config.acks, config.producers
        ),
        records,
        bytes,
        seconds,
        msg_per_s: records as f64 / seconds,
        mb_per_s: bytes as f64 / seconds / 1e6,
        errors: errors.into_iter().collect(),
    })
}

/// Reads `topic` from its start to its current end with `consumers` consumers.
pub fn consume(
    bootstrap: &str,
    topic: &str,
    consumers: usize,
) -> Result<ThroughputResult, BenchError> {
    if consumers == 0 {
        return Err(BenchError::Setup("--consumers must be at least 1".into()));
    }
    let mut conn = crate::cluster::connect(bootstrap)?;
    let layout = crate::cluster::layout(&mut conn, topic)?;
    let start = offsets(&layout, -2)?;
    let end = offsets(&layout, -1)?;
    let expected: u64 = layout
        .leaders
        .iter()
        .map(|(p, _)| {
            (end.get(p).copied().unwrap_or(0) - start.get(p).copied().unwrap_or(0)).max(0) as u64
        })
        .sum();
    if expected == 0 {
        return Err(BenchError::Setup(format!(
            "topic {topic} is empty: produce to it first"
        )));
    }
    let clock = RunClock::start();
    let stop = Arc::new(AtomicBool::new(false));
    let shared = Arc::new(ConsumerShared::default());
    let mut threads = Vec::new();
    for c in 0..consumers {
        let partitions: Vec<(i32, String, i64)> = layout
            .leaders
            .iter()
            .enumerate()
            .filter(|(i, _)| i % consumers == c)
            .map(|(_, (p, addr))| (*p, addr.clone(), start.get(p).copied().unwrap_or(0)))
            .collect();
        if partitions.is_empty() {
            continue;
        }
        let cc = ConsumerConfig {
            bootstrap: bootstrap.to_string(),
            topic: topic.to_string(),
            partitions,
            producers: 0,
            warmup_until_ns: u64::MAX,
            max_wait_ms: 100,
        };
        threads.push(Consumer::start(
            cc,
            clock,
            Arc::clone(&shared),
            Arc::clone(&stop),
        )?);
    }
    let deadline = clock.now_ns() + 600_000_000_000;
    while shared.received.load(Ordering::Relaxed) < expected && clock.now_ns() < deadline {
        std::thread::sleep(Duration::from_millis(2));
    }
    let seconds = clock.now_ns() as f64 / 1e9;
    stop.store(true, Ordering::Relaxed);
    for t in threads {
        t.join()?;
    }
    let records = shared.received.load(Ordering::Relaxed);
    let bytes = shared.bytes.load(Ordering::Relaxed);
    if records < expected {
        return Err(BenchError::Kafka(format!(
            "read {records} of the {expected} records of {topic} in {seconds:.0} s: a \
             partition's leader stayed unreachable or the broker stopped serving"
        )));
    }
    Ok(ThroughputResult {
        what: format!("consume {topic}, {consumers} consumer(s)"),
        records,
        bytes,
        seconds,
        msg_per_s: records as f64 / seconds,
        mb_per_s: bytes as f64 / seconds / 1e6,
        errors: Vec::new(),
    })
}
