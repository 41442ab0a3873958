//! librdkafka clients as the workload uses them, and reading a topic's partitions to their
//! stable end.

use std::collections::HashSet;
use std::time::{Duration, Instant};

use rdkafka::config::ClientConfig;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::error::KafkaError;
use rdkafka::message::Message;
use rdkafka::producer::{BaseProducer, BaseRecord, ProducerContext};
use rdkafka::types::RDKafkaErrorCode;
use rdkafka::{Offset, TopicPartitionList};

use crate::error::BankError;

pub fn config(bootstrap: &str) -> ClientConfig {
    let mut c = ClientConfig::new();
    c.set("bootstrap.servers", bootstrap)
        .set("log_level", "3")
        .set("socket.connection.setup.timeout.ms", "5000")
        .set("reconnect.backoff.max.ms", "500");
    // librdkafka's own debug contexts (e.g. "eos,protocol"), for tracing a run.
    if let Ok(debug) = std::env::var("SLUICE_BANK_RDKAFKA_DEBUG") {
        c.set("debug", debug).set("log_level", "7");
    }
    c
}

/// A reader's client context: the end-of-partition events it asks for are not errors.
pub struct Quiet;

impl rdkafka::ClientContext for Quiet {
    fn error(&self, error: KafkaError, reason: &str) {
        if error.rdkafka_error_code() != Some(rdkafka::types::RDKafkaErrorCode::PartitionEOF) {
            tracing::warn!(%error, reason, "librdkafka");
        }
    }
}

impl rdkafka::consumer::ConsumerContext for Quiet {}

fn reader(bootstrap: &str, committed: bool) -> Result<BaseConsumer<Quiet>, BankError> {
    config(bootstrap)
        .set("group.id", "sluice-bank-reader")
        .set("enable.auto.commit", "false")
        .set("enable.partition.eof", "true")
        .set(
            "isolation.level",
            if committed {
                "read_committed"
            } else {
                "read_uncommitted"
            },
        )
        .create_with_context(Quiet)
        .map_err(|e| BankError::kafka("creating a reader", e))
}

/// Waits until no transaction is open on `topic`'s `partitions` (the last stable offset is the
/// high watermark), then reads them from the start to that end with read_committed, calling
/// `each(partition, key, value)` for every record. `deadline` bounds the whole read.
pub fn read_settled(
    bootstrap: &str,
    topic: &str,
    partitions: &[i32],
    deadline: Instant,
    mut each: impl FnMut(i32, &[u8], &[u8]) -> Result<(), BankError>,
) -> Result<(), BankError> {
    if partitions.is_empty() {
        return Ok(());
    }
    let committed = reader(bootstrap, true)?;
    let uncommitted = reader(bootstrap, false)?;
    for &p in partitions {
        loop {
            let left = deadline.saturating_duration_since(crate::clock::now());
            if left.is_zero() {
                return Err(BankError::Setup(format!(
                    "{topic}-{p} kept an open transaction until the deadline"
                )));
            }
            let timeout = left.min(Duration::from_secs(5));
            let (_, high) = uncommitted
                .fetch_watermarks(topic, p, timeout)
                .map_err(|e| BankError::kafka(format!("high watermark of {topic}-{p}"), e))?;
            let (_, stable) = committed
                .fetch_watermarks(topic, p, timeout)
                .map_err(|e| BankError::kafka(format!("stable offset of {topic}-{p}"), e))?;
            if stable >= high {
                break;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }
    let mut list = TopicPartitionList::new();
    for &p in partitions {
        list.add_partition_offset(topic, p, Offset::Beginning)
            .map_err(|e| BankError::kafka("assigning", e))?;
    }
    committed
        .assign(&list)
        .map_err(|e| BankError::kafka(format!("assigning {topic}"), e))?;
    let mut left: HashSet<i32> = partitions.iter().copied().collect();
    while !left.is_empty() {
        if crate::clock::now() > deadline {
            return Err(BankError::Setup(format!(
                "reading {topic} did not reach its end in time (partitions {left:?} left)"
            )));
        }
        match committed.poll(Duration::from_millis(100)) {
            None => {}
            Some(Ok(m)) => each(
                m.partition(),
                m.key().unwrap_or_default(),
                m.payload().unwrap_or_default(),
            )?,
            Some(Err(KafkaError::PartitionEOF(p))) => {
                left.remove(&p);
            }
            Some(Err(e)) => tracing::debug!(error = %e, topic, "reader"),
        }
    }
    Ok(())
}

/// `topic`'s partition count.
pub fn partition_count(bootstrap: &str, topic: &str) -> Result<i32, BankError> {
    let c = reader(bootstrap, false)?;
    let md = c
        .fetch_metadata(Some(topic), Duration::from_secs(10))
        .map_err(|e| BankError::kafka(format!("metadata of {topic}"), e))?;
    let n = md
        .topics()
        .first()
        .map(|t| t.partitions().len())
        .unwrap_or(0);
    i32::try_from(n)
        .ok()
        .filter(|n| *n > 0)
        .ok_or_else(|| BankError::Setup(format!("topic {topic} has no partitions")))
}

/// Queues a record, waiting (at most `timeout`) while the producer's queue is full.
pub fn send_waiting<'a, C: ProducerContext>(
    producer: &BaseProducer<C>,
    mut record: BaseRecord<'a, [u8], [u8], C::DeliveryOpaque>,
    timeout: Duration,
) -> Result<(), KafkaError> {
    let deadline = crate::clock::now() + timeout;
    loop {
        match producer.send(record) {
            Ok(()) => return Ok(()),
            Err((KafkaError::MessageProduction(RDKafkaErrorCode::QueueFull), back))
                if crate::clock::now() < deadline =>
            {
                record = back;
                producer.poll(Duration::from_millis(5));
            }
            Err((e, _)) => return Err(e),
        }
    }
}
