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
use crate::cluster::{connect, layout};
use crate::error::BenchError;
use crate::latency::Latencies;
use crate::payload;
use crate::producer::{leadership_moved, REFRESH_EVERY_NS};
use crate::tracker::Tracker;

#[derive(Debug, Clone)]
pub struct ConsumerConfig {
    /// Where the leaders are looked up again after one moves.
    pub bootstrap: String,
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

/// Connects to each partition's leader (`leaders`: partition → address), carrying over the
/// connections of `sources` that still serve; the offsets come from `sources` and `orphans`
/// (partitions whose connection ended). A leader that cannot be reached leaves its partitions
/// in the returned orphans.
fn route(
    mut sources: HashMap<String, Source>,
    orphans: Vec<(i32, i64)>,
    leaders: &HashMap<i32, String>,
) -> (HashMap<String, Source>, Vec<(i32, i64)>) {
    let mut positions: Vec<(i32, i64)> = orphans;
    for source in sources.values_mut() {
        positions.append(&mut source.offsets);
    }
    let mut left = Vec::new();
    for (partition, offset) in positions {
        let Some(addr) = leaders.get(&partition) else {
            left.push((partition, offset));
            continue;
        };
        if !sources.contains_key(addr) {
            let opened = connect(addr).and_then(|conn| {
                let version = conn.version_for(ApiKey::Fetch, 4, 12)?;
                Ok(Source {
                    conn,
                    version,
                    offsets: Vec::new(),
                })
            });
            match opened {
                Ok(source) => {
                    sources.insert(addr.clone(), source);
                }
                Err(_) => {
                    left.push((partition, offset));
                    continue;
                }
            }
        }
        if let Some(s) = sources.get_mut(addr) {
            s.offsets.push((partition, offset));
        }
    }
    sources.retain(|_, s| !s.offsets.is_empty());
    (sources, left)
}

fn run(
    config: ConsumerConfig,
    clock: RunClock,
    shared: Arc<ConsumerShared>,
    stop: Arc<AtomicBool>,
) -> Result<ConsumerOutcome, BenchError> {
    let leaders: HashMap<i32, String> = config
        .partitions
        .iter()
        .map(|(p, addr, _)| (*p, addr.clone()))
        .collect();
    let positions = config.partitions.iter().map(|(p, _, o)| (*p, *o)).collect();
    // Partitions whose leader could not be reached, with their next offsets: a leader gone
    // since the layout was read (killed as the run starts) is looked up again below.
    let (mut sources, mut orphans) = route(HashMap::new(), positions, &leaders);
    let mut moved = false;
    let mut refreshed_ns = 0u64;
    let topic = TopicName(StrBytes::from_string(config.topic.clone()));
    let mut outcome = ConsumerOutcome {
        tracker: Tracker::new(config.producers),
        ..ConsumerOutcome::default()
    };
    let mut local = Latencies::default();
    let mut last_merge_ns = clock.now_ns();
    while !stop.load(Ordering::Relaxed) {
        let now = clock.now_ns();
        if (moved || !orphans.is_empty()) && now.saturating_sub(refreshed_ns) >= REFRESH_EVERY_NS {
            // A leader moved or went away: look the leaders up again and follow them.
            refreshed_ns = now;
            moved = false;
            match connect(&config.bootstrap).and_then(|mut c| layout(&mut c, &config.topic)) {
                Ok(found) => {
                    let leaders: HashMap<i32, String> = found.leaders.into_iter().collect();
                    (sources, orphans) = route(sources, std::mem::take(&mut orphans), &leaders);
                }
                Err(_) => moved = true,
            }
        }
        if sources.is_empty() {
            std::thread::sleep(std::time::Duration::from_millis(10));
            continue;
        }
        // With several brokers to poll, none may hold the thread for long.
        let max_wait_ms = if sources.len() > 1 {
            1
        } else {
            config.max_wait_ms
        };
        let mut gone: Vec<String> = Vec::new();
        for (addr, source) in sources.iter_mut() {
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
            let response = match source.conn.call(&request, source.version, source.version) {
                Ok(r) => r,
                Err(_) => {
                    // The connection ended (a leader killed or cut off): its partitions wait
                    // for the leaders to be looked up again.
                    gone.push(addr.clone());
                    continue;
                }
            };
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
                        moved |= leadership_moved(p.error_code);
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
        if moved {
            // Answers that leadership moved come back at once: no busy loop until the next
            // look at the leaders.
            std::thread::sleep(std::time::Duration::from_millis(5));
        }
        for addr in gone {
            if let Some(mut source) = sources.remove(&addr) {
                orphans.append(&mut source.offsets);
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
