//! A load-generating producer on its own thread. Open loop: record `i` is due at the
//! schedule's time and carries that time, however late it leaves; closed loop (no rate): as
//! fast as the in-flight limit allows. Each connection has a reader thread that matches
//! responses to requests in order.

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc::{sync_channel, Receiver, SyncSender};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;

use bytes::Bytes;
use kafka_protocol::messages::produce_request::{PartitionProduceData, TopicProduceData};
use kafka_protocol::messages::{ApiKey, ProduceRequest, TopicName};
use kafka_protocol::protocol::StrBytes;
use kafka_protocol::records::Compression;
use sluice_client::blocking::{BlockingConnection, ResponseReader};
use sluice_client::codec::{decode_response, read_frame};
use sluice_client::lean::encode_values;
use sluice_client::OutRecord;

use crate::clock::{wall_ms, RunClock};
use crate::cluster::{connect, layout, TopicLayout};
use crate::error::BenchError;
use crate::payload::{self, Stamp};
use crate::schedule::Schedule;
use crate::timing::{precise_timers_for_this_thread, Waiter};

#[derive(Debug, Clone)]
pub struct ProducerConfig {
    pub id: u32,
    /// Where the leaders are looked up again after one moves.
    pub bootstrap: String,
    pub layout: TopicLayout,
    /// Messages per second; `None` sends as fast as possible (closed loop).
    pub rate_per_s: Option<f64>,
    pub total: u64,
    pub record_bytes: usize,
    pub acks: i16,
    pub linger_ns: u64,
    pub batch_bytes: usize,
    pub max_in_flight: usize,
    pub compression: Compression,
}

/// Progress counters, readable while the producer runs.
#[derive(Debug, Default)]
pub struct ProducerCounters {
    pub sent: AtomicU64,
    pub acked: AtomicU64,
    pub failed: AtomicU64,
    /// When the last record left, ns on the run clock.
    pub last_send_ns: AtomicU64,
}

#[derive(Debug, Default, Clone)]
pub struct ProducerOutcome {
    pub sent: u64,
    pub acked: u64,
    /// Sequence ranges `[first, first + n)` whose produce failed: not expected at a consumer.
    pub failed_ranges: Vec<(u64, u64)>,
    pub errors: BTreeMap<String, u64>,
}

struct Pending {
    correlation_id: i32,
    first: u64,
    count: u64,
}

struct Pipe {
    conn: BlockingConnection,
    version: i16,
    pending: Option<SyncSender<Pending>>,
    reader: Option<JoinHandle<()>>,
}

/// Shared between the producer thread and its reader threads.
struct Shared {
    counters: Arc<ProducerCounters>,
    outcome: Mutex<ProducerOutcome>,
    /// Set by a reader when an answer says a partition's leadership moved, or its connection
    /// ended: the producer looks the leaders up again before its next request.
    moved: AtomicBool,
}

impl Shared {
    /// Counts `count` records from `first` on as failed, under `error`.
    fn fail(&self, first: u64, count: u64, error: String) {
        self.counters.failed.fetch_add(count, Ordering::Relaxed);
        if let Ok(mut o) = self.outcome.lock() {
            o.failed_ranges.push((first, count));
            *o.errors.entry(error).or_default() += 1;
        }
    }
}

/// Kafka's answers that name a partition's leadership as moved: NOT_LEADER_OR_FOLLOWER,
/// LEADER_NOT_AVAILABLE, FENCED_LEADER_EPOCH, UNKNOWN_LEADER_EPOCH.
pub(crate) fn leadership_moved(code: i16) -> bool {
    matches!(code, 5 | 6 | 74 | 75)
}

/// The shortest pause between two lookups of the leaders (a cluster electing a new leader
/// answers the same error to every request meanwhile).
pub(crate) const REFRESH_EVERY_NS: u64 = 100_000_000;

fn reader_loop(
    mut stream: ResponseReader,
    version: i16,
    pending: Receiver<Pending>,
    shared: Arc<Shared>,
) {
    while let Ok(p) = pending.recv() {
        let result = read_frame(&mut stream)
            .map_err(|e| e.to_string())
            .and_then(|frame| {
                decode_response::<ProduceRequest>(frame, version, p.correlation_id)
                    .map_err(|e| e.to_string())
            });
        let error = match result {
            Ok(response) => response
                .responses
                .iter()
                .flat_map(|t| t.partition_responses.iter())
                .find(|r| r.error_code != 0)
                .map(|r| {
                    if leadership_moved(r.error_code) {
                        shared.moved.store(true, Ordering::Relaxed);
                    }
                    format!("produce error code {}", r.error_code)
                }),
            Err(e) => {
                shared.moved.store(true, Ordering::Relaxed);
                Some(e)
            }
        };
        match error {
            None => {
                shared.counters.acked.fetch_add(p.count, Ordering::Relaxed);
            }
            Some(e) => shared.fail(p.first, p.count, e),
        }
    }
}

impl Pipe {
    fn open(
        addr: &str,
        acks: i16,
        max_in_flight: usize,
        shared: &Arc<Shared>,
    ) -> Result<Pipe, BenchError> {
        let mut conn = connect(addr)?;
        let version = conn.version_for(ApiKey::Produce, 3, 12)?;
        if acks == 0 {
            return Ok(Pipe {
                conn,
                version,
                pending: None,
                reader: None,
            });
        }
        let (tx, rx) = sync_channel(max_in_flight.saturating_sub(1));
        let stream = conn.split_reader()?;
        let shared = Arc::clone(shared);
        let reader = std::thread::Builder::new()
            .name("bench-acks".into())
            .spawn(move || reader_loop(stream, version, rx, shared))
            .map_err(|e| BenchError::io("starting a reader thread", e))?;
        Ok(Pipe {
            conn,
            version,
            pending: Some(tx),
            reader: Some(reader),
        })
    }

    fn finish(mut self) {
        drop(self.pending.take());
        if let Some(r) = self.reader.take() {
            let _ = r.join();
        }
    }
}

pub struct Producer {
    pub counters: Arc<ProducerCounters>,
    handle: JoinHandle<Result<ProducerOutcome, BenchError>>,
}

impl Producer {
    /// Starts the producer thread; its schedule starts at `start_ns` on `clock`.
    pub fn start(
        config: ProducerConfig,
        clock: RunClock,
        start_ns: u64,
        stop: Arc<AtomicBool>,
    ) -> Result<Producer, BenchError> {
        let counters = Arc::new(ProducerCounters::default());
        let c = Arc::clone(&counters);
        let handle = std::thread::Builder::new()
            .name(format!("bench-producer-{}", config.id))
            .spawn(move || run(config, clock, start_ns, stop, c))
            .map_err(|e| BenchError::io("starting a producer thread", e))?;
        Ok(Producer { counters, handle })
    }

    pub fn join(self) -> Result<ProducerOutcome, BenchError> {
        self.handle
            .join()
            .map_err(|_| BenchError::Setup("a producer thread panicked".into()))?
    }
}

fn run(
    config: ProducerConfig,
    clock: RunClock,
    start_ns: u64,
    stop: Arc<AtomicBool>,
    counters: Arc<ProducerCounters>,
) -> Result<ProducerOutcome, BenchError> {
    let _ = precise_timers_for_this_thread();
    let mut waiter = Waiter::default();
    if config.record_bytes < payload::HEADER_BYTES {
        return Err(BenchError::Setup(format!(
            "records must be at least {} bytes",
            payload::HEADER_BYTES
        )));
    }
    if config.layout.leaders.is_empty() {
        return Err(BenchError::Setup(format!(
            "topic {} has no partition with a leader",
            config.layout.topic
        )));
    }
    let shared = Arc::new(Shared {
        counters: Arc::clone(&counters),
        outcome: Mutex::new(ProducerOutcome::default()),
        moved: AtomicBool::new(false),
    });
    let mut pipes: HashMap<String, Pipe> = HashMap::new();
    for (_, addr) in &config.layout.leaders {
        if !pipes.contains_key(addr) {
            // A leader gone since the layout was read (killed as the run starts) is looked up
            // again, as after a failed send.
            match Pipe::open(addr, config.acks, config.max_in_flight, &shared) {
                Ok(pipe) => {
                    pipes.insert(addr.clone(), pipe);
                }
                Err(_) => shared.moved.store(true, Ordering::Relaxed),
            }
        }
    }
    let mut leaders = config.layout.leaders.clone();
    let mut refreshed_ns = 0u64;
    let mut retired: Vec<Pipe> = Vec::new();
    let schedule = config
        .rate_per_s
        .map(|r| Schedule::new(r, config.total as f64 / r));
    // Stay under batch_bytes counting the batch header (61 B) and each record's framing
    // (length, attributes, deltas, key, headers: at most 16 B for these sizes).
    let max_records =
        (config.batch_bytes.saturating_sub(61) / (config.record_bytes + 16)).max(1) as u64;
    // Padding that does not compress away: a fixed pseudo-random pattern per producer.
    let mut filler = vec![0u8; config.record_bytes * max_records as usize];
    let mut x = 0x9E37_79B9_7F4A_7C15u64 ^ u64::from(config.id);
    for b in filler.iter_mut() {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        *b = x as u8;
    }
    let topic = TopicName(StrBytes::from_string(config.layout.topic.clone()));
    let mut next_partition = config.id as usize % leaders.len();
    let mut seq = 0u64;
    let mut result = Ok(());
    while seq < config.total && !stop.load(Ordering::Relaxed) {
        let due = match &schedule {
            Some(s) => {
                let now = clock.now_ns().saturating_sub(start_ns);
                let due = s.due_by(now);
                if due <= seq {
                    waiter.wait_until(&clock, start_ns + s.due_ns(seq));
                    continue;
                }
                let first_due = s.due_ns(seq);
                if config.linger_ns > 0
                    && due - seq < max_records
                    && now < first_due + config.linger_ns
                {
                    let full_at = s.due_ns((seq + max_records - 1).min(s.total() - 1));
                    waiter.wait_until(
                        &clock,
                        start_ns + (first_due + config.linger_ns).min(full_at),
                    );
                    continue;
                }
                due
            }
            None => config.total,
        };
        let n = (due - seq).min(max_records);
        for i in 0..n {
            let at = (i as usize) * config.record_bytes;
            let due_ns = schedule
                .as_ref()
                .map_or_else(|| clock.now_ns(), |s| start_ns + s.due_ns(seq + i));
            payload::write(
                &mut filler[at..at + config.record_bytes],
                Stamp {
                    producer: config.id,
                    sequence: seq + i,
                    due_ns,
                },
            );
        }
        let values: Vec<&[u8]> = filler[..n as usize * config.record_bytes]
            .chunks(config.record_bytes)
            .collect();
        let batch = match config.compression {
            Compression::None => encode_values(&values, wall_ms()),
            codec => {
                let records: Vec<OutRecord> = values
                    .iter()
                    .map(|v| OutRecord {
                        value: Some(Bytes::copy_from_slice(v)),
                        timestamp_ms: wall_ms(),
                        ..OutRecord::default()
                    })
                    .collect();
                sluice_client::records::encode_batch(&records, codec)?
            }
        };
        // A leader moved: look them up again (at most every REFRESH_EVERY_NS); until then,
        // and for a partition without a leader, the requests fail and are counted so.
        let now = clock.now_ns();
        if now.saturating_sub(refreshed_ns) >= REFRESH_EVERY_NS
            && shared.moved.swap(false, Ordering::Relaxed)
        {
            refreshed_ns = now;
            match connect(&config.bootstrap).and_then(|mut c| layout(&mut c, &config.layout.topic))
            {
                // A partition without a leader now keeps its old address: its requests fail
                // and ask for another look.
                Ok(found) => {
                    for (partition, addr) in leaders.iter_mut() {
                        if let Some((_, a)) = found.leaders.iter().find(|(p, _)| p == partition) {
                            addr.clone_from(a);
                        }
                    }
                }
                Err(_) => shared.moved.store(true, Ordering::Relaxed),
            }
        }
        let (partition, addr) = leaders[next_partition].clone();
        next_partition = (next_partition + 1) % leaders.len();
        let request = ProduceRequest::default()
            .with_acks(config.acks)
            .with_timeout_ms(30_000)
            .with_topic_data(vec![TopicProduceData::default()
                .with_name(topic.clone())
                .with_partition_data(vec![PartitionProduceData::default()
                    .with_index(partition)
                    .with_records(Some(batch))])]);
        if !pipes.contains_key(&addr) {
            match Pipe::open(&addr, config.acks, config.max_in_flight, &shared) {
                Ok(pipe) => {
                    pipes.insert(addr.clone(), pipe);
                }
                Err(e) => {
                    shared.moved.store(true, Ordering::Relaxed);
                    shared.fail(seq, n, format!("connecting to {addr}: {e}"));
                    seq += n;
                    counters.sent.fetch_add(n, Ordering::Relaxed);
                    if schedule.is_none() {
                        // Closed loop: no schedule paces the failures.
                        std::thread::sleep(std::time::Duration::from_millis(10));
                    }
                    continue;
                }
            }
        }
        let Some(pipe) = pipes.get_mut(&addr) else {
            result = Err(BenchError::Setup(format!("no connection to {addr}")));
            break;
        };
        let version = pipe.version;
        let sent = pipe
            .conn
            .send(&request, version)
            .and_then(|correlation_id| {
                if let Some(tx) = &pipe.pending {
                    // Blocks while max_in_flight requests await their responses.
                    tx.send(Pending {
                        correlation_id,
                        first: seq,
                        count: n,
                    })
                    .map_err(|_| {
                        sluice_client::ClientError::Protocol("the response reader stopped".into())
                    })?;
                }
                Ok(())
            });
        if let Err(e) = sent {
            // The leader went away: its connection is dropped and the leaders looked up
            // again; these records count as failed, as a producer without retries has them.
            shared.moved.store(true, Ordering::Relaxed);
            shared.fail(seq, n, format!("sending to {addr}: {e}"));
            // Its reader is joined at the end, once it has counted what was in flight.
            retired.extend(pipes.remove(&addr));
            seq += n;
            counters.sent.fetch_add(n, Ordering::Relaxed);
            continue;
        }
        seq += n;
        counters.sent.fetch_add(n, Ordering::Relaxed);
        counters
            .last_send_ns
            .store(clock.now_ns(), Ordering::Relaxed);
    }
    for pipe in pipes.into_values().chain(retired) {
        pipe.finish();
    }
    result?;
    let mut outcome = shared
        .outcome
        .lock()
        .map(|o| o.clone())
        .map_err(|_| BenchError::Setup("producer state poisoned".into()))?;
    outcome.sent = seq;
    outcome.acked = counters.acked.load(Ordering::Relaxed);
    Ok(outcome)
}
