//! Watches the events topic as a read_committed consumer while the workload runs: the
//! latency from a transfer's send to its final credit becoming visible, completions per
//! second, and whether every transfer has finished (for the drain).

use std::collections::HashSet;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use hdrhistogram::Histogram;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::message::Message;
use rdkafka::{Offset, TopicPartitionList};

use crate::error::BankError;
use crate::generator::now_us;
use crate::kafka::config;
use crate::record::{Record, Tag, Topics};

#[derive(Debug)]
pub struct Observed {
    /// Send to final credit visible, microseconds.
    pub latency_us: Histogram<u64>,
    /// Send to the debit (the saga's first step) visible, microseconds.
    pub debit_latency_us: Histogram<u64>,
    /// Transfers whose debit step is visible (debited or refused).
    pub first_steps: HashSet<u64>,
    pub debited: HashSet<u64>,
    pub credited: HashSet<u64>,
    pub refused: u64,
    /// Completed transfers (credited or refused) per second since the monitor started.
    pub per_second: Vec<u64>,
    /// The slowest send-to-credit of each second, milliseconds.
    pub max_latency_ms_per_second: Vec<u64>,
    pub last_completion: Option<Instant>,
}

impl Observed {
    pub fn completed(&self) -> u64 {
        self.credited.len() as u64 + self.refused
    }
}

pub fn run(
    bootstrap: &str,
    prefix: &str,
    partitions: i32,
    observed: &Arc<Mutex<Observed>>,
    stop: &Arc<AtomicBool>,
) -> Result<(), BankError> {
    let topics = Topics::new(prefix);
    let consumer: BaseConsumer = config(bootstrap)
        .set("group.id", format!("{prefix}-monitor"))
        .set("enable.auto.commit", "false")
        .set("isolation.level", "read_committed")
        .set("fetch.wait.max.ms", "5")
        .create()
        .map_err(|e| BankError::kafka("creating the monitor", e))?;
    let mut list = TopicPartitionList::new();
    for p in 0..partitions {
        list.add_partition_offset(&topics.events, p, Offset::Beginning)
            .map_err(|e| BankError::kafka("monitor", e))?;
    }
    consumer
        .assign(&list)
        .map_err(|e| BankError::kafka("assigning the monitor", e))?;
    let start = crate::clock::now();
    while !stop.load(Ordering::SeqCst) {
        let Some(Ok(m)) = consumer.poll(Duration::from_millis(50)) else {
            continue;
        };
        let Ok(e) = Record::decode(m.payload().unwrap_or_default()) else {
            continue;
        };
        let mut o = observed
            .lock()
            .map_err(|_| BankError::Setup("the monitor's state was poisoned".into()))?;
        let completed = match e.tag {
            Tag::Debited => {
                if o.first_steps.insert(e.id) {
                    let latency = (now_us() - e.sent_us).max(0) as u64;
                    o.debit_latency_us.saturating_record(latency);
                }
                o.debited.insert(e.id);
                false
            }
            Tag::Refused => {
                let new = o.first_steps.insert(e.id);
                if new {
                    o.refused += 1;
                }
                new
            }
            Tag::Credited => {
                let new = o.credited.insert(e.id);
                if new {
                    let latency = (now_us() - e.sent_us).max(0) as u64;
                    o.latency_us.saturating_record(latency);
                    let second = start.elapsed().as_secs() as usize;
                    if o.max_latency_ms_per_second.len() <= second {
                        o.max_latency_ms_per_second.resize(second + 1, 0);
                    }
                    let slowest = &mut o.max_latency_ms_per_second[second];
                    *slowest = (*slowest).max(latency / 1000);
                }
                new
            }
            Tag::Transfer | Tag::Credit => false,
        };
        if completed {
            let second = start.elapsed().as_secs() as usize;
            if o.per_second.len() <= second {
                o.per_second.resize(second + 1, 0);
            }
            o.per_second[second] += 1;
            o.last_completion = Some(crate::clock::now());
        }
    }
    Ok(())
}

pub fn observed() -> Result<Observed, BankError> {
    Ok(Observed {
        latency_us: Histogram::new_with_bounds(1, 600_000_000, 3)
            .map_err(|e| BankError::Setup(format!("histogram: {e}")))?,
        debit_latency_us: Histogram::new_with_bounds(1, 600_000_000, 3)
            .map_err(|e| BankError::Setup(format!("histogram: {e}")))?,
        first_steps: HashSet::new(),
        debited: HashSet::new(),
        credited: HashSet::new(),
        refused: 0,
        per_second: Vec::new(),
        max_latency_ms_per_second: Vec::new(),
        last_completion: None,
    })
}
