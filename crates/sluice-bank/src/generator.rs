//! The load generator: transfer commands at a fixed offered rate, each between two random
//! accounts, sent with an idempotent producer to the source account's partition. Every
//! `DUPLICATE_EVERY`-th transfer is sent again `DUPLICATE_AFTER` transfers later (the same
//! id), as a client retrying on its own would; by then the first copy is usually committed
//! (often by a processor that has restarted since), so the processors must recognise it from
//! what they rebuilt, not only from memory.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use rdkafka::message::DeliveryResult;
use rdkafka::producer::{BaseProducer, BaseRecord, Producer, ProducerContext};
use rdkafka::ClientContext;

use crate::checker::Sent;
use crate::error::BankError;
use crate::kafka::{config, send_waiting};
use crate::record::{account_key, partition_of, Record, Tag, Topics};

pub const DUPLICATE_EVERY: u64 = 500;
pub const DUPLICATE_AFTER: u64 = 2_000;

pub use crate::clock::now_us;

/// A small deterministic generator (xorshift64*), enough to pick accounts and amounts.
#[derive(Debug, Clone)]
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Rng {
        Rng(seed.max(1))
    }

    pub fn next_u64(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        self.0 = x;
        x.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    pub fn below(&mut self, n: u64) -> u64 {
        self.next_u64() % n.max(1)
    }
}

#[derive(Default)]
struct Deliveries {
    acked: Mutex<Vec<u64>>,
    failed: Mutex<Vec<(u64, String)>>,
}

impl ClientContext for Deliveries {}

impl ProducerContext for Deliveries {
    type DeliveryOpaque = Box<u64>;

    fn delivery(&self, result: &DeliveryResult<'_>, id: Box<u64>) {
        match result {
            Ok(_) => self.acked.lock().map(|mut v| v.push(*id)).unwrap_or(()),
            Err((e, _)) => self
                .failed
                .lock()
                .map(|mut v| v.push((*id, e.to_string())))
                .unwrap_or(()),
        }
    }
}

#[derive(Debug)]
pub struct Generated {
    pub sent: HashMap<u64, Sent>,
    pub started: Instant,
    pub finished: Instant,
    pub failed_sends: usize,
    pub first_failure: Option<String>,
}

#[derive(Debug, Clone)]
pub struct GeneratorConfig {
    pub bootstrap: String,
    pub prefix: String,
    pub partitions: i32,
    pub accounts: u32,
    pub rate: u64,
    pub duration: Duration,
    pub seed: u64,
}

pub fn run(cfg: &GeneratorConfig) -> Result<Generated, BankError> {
    let topics = Topics::new(&cfg.prefix);
    let producer: BaseProducer<Deliveries> = config(&cfg.bootstrap)
        .set("enable.idempotence", "true")
        .set("linger.ms", "1")
        .set("message.timeout.ms", "60000")
        .set("queue.buffering.max.messages", "1000000")
        .create_with_context(Deliveries::default())
        .map_err(|e| BankError::kafka("creating the load generator", e))?;
    // Connected, with its producer id, before the clock starts: the first second's latency
    // would otherwise measure the client's start.
    producer
        .client()
        .fetch_metadata(Some(&topics.commands), Duration::from_secs(30))
        .map_err(|e| BankError::kafka("the load generator's first metadata", e))?;
    std::thread::sleep(Duration::from_secs(1));
    let mut rng = Rng::new(cfg.seed);
    let mut pending: HashMap<u64, Record> = HashMap::new();
    let mut again: std::collections::VecDeque<(u64, Record)> = std::collections::VecDeque::new();
    let started = crate::clock::now();
    let end = started + cfg.duration;
    let mut next_id = 1u64;
    let per_us = cfg.rate.max(1) as f64 / 1e6;
    while crate::clock::now() < end {
        let due = (started.elapsed().as_micros() as f64 * per_us) as u64 + 1;
        while next_id <= due {
            let from = rng.below(u64::from(cfg.accounts)) as u32;
            let to = ((u64::from(from) + 1 + rng.below(u64::from(cfg.accounts.max(2)) - 1))
                % u64::from(cfg.accounts)) as u32;
            let r = Record {
                tag: Tag::Transfer,
                id: next_id,
                from,
                to,
                amount: 1 + rng.below(100) as i64,
                sent_us: now_us(),
            };
            send(&producer, &topics.commands, cfg.partitions, &r)?;
            if next_id.is_multiple_of(DUPLICATE_EVERY) {
                again.push_back((next_id + DUPLICATE_AFTER, r));
            }
            while again.front().is_some_and(|(due, _)| *due <= next_id) {
                if let Some((_, dup)) = again.pop_front() {
                    send(&producer, &topics.commands, cfg.partitions, &dup)?;
                }
            }
            pending.insert(next_id, r);
            next_id += 1;
        }
        producer.poll(Duration::ZERO);
        std::thread::sleep(Duration::from_micros(500));
    }
    for (_, dup) in again.drain(..) {
        send(&producer, &topics.commands, cfg.partitions, &dup)?;
    }
    let finished = crate::clock::now();
    if producer.flush(Duration::from_secs(90)).is_err() {
        tracing::warn!("the load generator's last sends were not all answered");
    }
    producer.poll(Duration::ZERO);
    let acked: std::collections::HashSet<u64> = producer
        .context()
        .acked
        .lock()
        .map(|v| v.iter().copied().collect())
        .unwrap_or_default();
    let failed = producer
        .context()
        .failed
        .lock()
        .map(|v| v.clone())
        .unwrap_or_default();
    let sent = pending
        .into_iter()
        .map(|(id, r)| {
            (
                id,
                Sent {
                    from: r.from,
                    to: r.to,
                    amount: r.amount,
                    acknowledged: acked.contains(&id),
                },
            )
        })
        .collect();
    Ok(Generated {
        sent,
        started,
        finished,
        failed_sends: failed.len(),
        first_failure: failed.first().map(|(id, e)| format!("transfer {id}: {e}")),
    })
}

fn send(
    producer: &BaseProducer<Deliveries>,
    topic: &str,
    partitions: i32,
    r: &Record,
) -> Result<(), BankError> {
    let key = account_key(r.from);
    let value = r.encode();
    let record = BaseRecord::<[u8], [u8], Box<u64>>::with_opaque_to(topic, Box::new(r.id))
        .partition(partition_of(r.from, partitions))
        .key(&key[..])
        .payload(&value[..]);
    send_waiting(producer, record, Duration::from_secs(60))
        .map_err(|e| BankError::kafka("sending a transfer", e))
}
