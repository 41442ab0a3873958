//! A consumer on its own thread: long-poll fetches from the given partitions, and for every
//! benchmark record the latency (receive time − due time) and its arrival for loss checks.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;

use kafka_protocol::messages::fetch_request::{FetchPartition, FetchTopic};
use kafka_protocol::messages::{ApiKey, BrokerId, FetchRequest, TopicName};
use kafka_protocol::protocol::StrBytes;
use sluice_client::blocking::BlockingConnection;
use sluice_client::lean::for_each_value;

use crate::clock::RunClock;
use crate::cluster::connect;
use crate::error::BenchError;
use crate::latency::Latencies;
use crate::payload;
use crate::tracker::Tracker;

#[derive(Debug, Clone)]
pub struct ConsumerConfig {
    pub topic: String,
    /// Partitions to read, with their leader and the offset to start at.
    pub partitions: Vec<(i32, String, i64)>,
    pub producers: usize,
    /// Records due before this (ns on the run clock) are not counted in the latencies.
    pub warmup_until_ns: u64,
    pub max_wait_ms: i32,
}

/// Readable while consumers run.
#[derive(Debug, Default)]
pub struct ConsumerShared {
    pub received: AtomicU64,
    pub bytes: AtomicU64,
    pub last_receive_ns: AtomicU64,
    pub latencies: Mutex<Latencies>,
}

#[derive(Debug, Default)]
pub struct ConsumerOutcome {
    pub tracker: Tracker,
    pub fetch_errors: HashMap<i16, u64>,
}

pub struct Consumer {
    handle: JoinHandle<Result<ConsumerOutcome, BenchError>>,
}

impl Consumer {
    pub fn start(
        config: ConsumerConfig,
        clock: RunClock,
        shared: Arc<ConsumerShared>,
        stop: Arc<AtomicBool>,
    ) -> Result<Consumer, BenchError> {
        let handle = std::thread::Builder::new()
            .name("bench-consumer".into())
            .spawn(move || run(config, clock, shared, stop))
            .map_err(|e| BenchError::io("starting a consumer thread", e))?;
        Ok(Consumer { handle })
    }

    pub fn join(self) -> Result<ConsumerOutcome, BenchError> {
        self.handle
            .join()
            .map_err(|_| BenchError::Setup("a consumer thread panicked".into()))?
    }
}

struct Source {
    conn: BlockingConnection,
    version: i16,
    offsets: Vec<(i32, i64)>,
}

fn run(
    config: ConsumerConfig,
    clock: RunClock,
    shared: Arc<ConsumerShared>,
    stop: Arc<AtomicBool>,
) -> Result<ConsumerOutcome, BenchError> {
    let mut sources: HashMap<String, Source> = HashMap::new();
    for (partition, addr, offset) in &config.partitions {
        if !sources.contains_key(addr) {
            let conn = connect(addr)?;
            let version = conn.version_for(ApiKey::Fetch, 4, 12)?;
            sources.insert(
                addr.clone(),
                Source {
                    conn,
                    version,
                    offsets: Vec::new(),
                },
            );
        }
        if let Some(s) = sources.get_mut(addr) {
            s.offsets.push((*partition, *offset));
        }
    }
    let topic = TopicName(StrBytes::from_string(config.topic.clone()));
    let mut outcome = ConsumerOutcome {
        tracker: Tracker::new(config.producers),
        ..ConsumerOutcome::default()
    };
    let mut local = Latencies::default();
    let mut last_merge_ns = clock.now_ns();
    // With several brokers to poll, none may hold the thread for long.
    let max_wait_ms = if sources.len() > 1 {
        1
    } else {
        config.max_wait_ms
    };
    while !stop.load(Ordering::Relaxed) {
        for source in sources.values_mut() {
            let request = FetchRequest::default()
                .with_replica_id(BrokerId(-1))
                .with_max_wait_ms(max_wait_ms)
                .with_min_bytes(1)
                .with_max_bytes(32 << 20)
                .with_session_epoch(-1)
                .with_topics(vec![FetchTopic::default()
                    .with_topic(topic.clone())
                    .with_partitions(
                        source
                            .offsets
                            .iter()
                            .map(|(p, o)| {
                                FetchPartition::default()
                                    .with_partition(*p)
                                    .with_fetch_offset(*o)
                                    .with_current_leader_epoch(-1)
                                    .with_log_start_offset(-1)
                                    .with_partition_max_bytes(8 << 20)
                            })
                            .collect(),
                    )]);
            let response = source.conn.call(&request, source.version, source.version)?;
            let now = clock.now_ns();
            if response.error_code != 0 {
                *outcome.fetch_errors.entry(response.error_code).or_default() += 1;
                continue;
            }
            for t in &response.responses {
                for p in &t.partitions {
                    let Some(slot) = source
                        .offsets
                        .iter_mut()
                        .find(|(i, _)| *i == p.partition_index)
                    else {
                        continue;
                    };
                    if p.error_code != 0 {
                        *outcome.fetch_errors.entry(p.error_code).or_default() += 1;
                        continue;
                    }
                    let Some(records) = &p.records else { continue };
                    let mut count = 0u64;
                    slot.1 = for_each_value(records, slot.1, |_, value| {
                        count += 1;
                        if let Some(stamp) = payload::read(value) {
                            outcome.tracker.arrive(stamp.producer, stamp.sequence);
                            if stamp.due_ns >= config.warmup_until_ns {
                                local.record_ns(now.saturating_sub(stamp.due_ns));
                            }
                        }
                    })?;
                    if count > 0 {
                        shared.received.fetch_add(count, Ordering::Relaxed);
                        shared
                            .bytes
                            .fetch_add(records.len() as u64, Ordering::Relaxed);
                        shared.last_receive_ns.store(now, Ordering::Relaxed);
                    }
                }
            }
        }
        if clock.now_ns() - last_merge_ns > 50_000_000 && !local.is_empty() {
            if let Ok(mut all) = shared.latencies.lock() {
                all.add(&local);
            }
            local.reset();
            last_merge_ns = clock.now_ns();
        }
    }
    if let Ok(mut all) = shared.latencies.lock() {
        all.add(&local);
    }
    Ok(outcome)
}
