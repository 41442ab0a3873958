//! A bank processor: a member of the processors' consumer group on the commands topic. For
//! each partition it owns it holds the partition's accounts in memory (a [`Ledger`]), rebuilt
//! when the partition is assigned from the balance snapshots and the events written so far.
//! Each command's effects — the event, the new balance snapshot, the saga's next command —
//! and the consumed offsets are written in one transaction (consume-transform-produce,
//! read_committed), committed every `commit_ms` or `commit_records`.
//!
//! Members are static (`group.instance.id`): a processor that dies and comes back within the
//! session timeout gets its partitions again without moving anyone else's. On a rebalance the
//! open transaction is aborted and the ledgers rebuilt from what is committed. Any error of the transactional producer ends the process (the bench restarts
//! it); its successor, with the same transactional id, fences whatever it left open.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use rdkafka::consumer::{BaseConsumer, Consumer, ConsumerContext, Rebalance};
use rdkafka::message::Message;
use rdkafka::producer::{BaseProducer, BaseRecord, Producer};
use rdkafka::{ClientContext, Offset, TopicPartitionList};

use crate::error::BankError;
use crate::kafka::{config, read_settled, send_waiting};
use crate::ledger::{Effects, Ledger};
use crate::record::{
    account_key, decode_account, decode_balance, partition_of, Record, Tag, Topics,
};

#[derive(Debug, Clone)]
pub struct ProcessorConfig {
    pub bootstrap: String,
    pub prefix: String,
    /// This processor's number: its transactional id is `<prefix>-processor-<index>`.
    pub index: u32,
    pub commit_ms: u64,
    pub commit_records: usize,
}

/// Counts rebalance callbacks (a revocation and an assignment each count), so the loop
/// notices that one happened.
struct Rebalances(AtomicU64);

impl ClientContext for Rebalances {}

impl ConsumerContext for Rebalances {
    fn pre_rebalance(&self, _: &BaseConsumer<Self>, _: &Rebalance<'_>) {
        self.0.fetch_add(1, Ordering::SeqCst);
    }

    fn post_rebalance(&self, _: &BaseConsumer<Self>, _: &Rebalance<'_>) {
        self.0.fetch_add(1, Ordering::SeqCst);
    }
}

const TXN_TIMEOUT: Duration = Duration::from_secs(30);

pub fn run(cfg: &ProcessorConfig) -> Result<(), BankError> {
    let topics = Topics::new(&cfg.prefix);
    let partitions = crate::kafka::partition_count(&cfg.bootstrap, &topics.commands)?;
    let consumer: BaseConsumer<Rebalances> = config(&cfg.bootstrap)
        .set("group.id", format!("{}-processors", cfg.prefix))
        .set("enable.auto.commit", "false")
        .set("isolation.level", "read_committed")
        .set("auto.offset.reset", "earliest")
        .set("partition.assignment.strategy", "range")
        // Static membership (KIP-345): a processor restarted with its number takes its
        // partitions back without a rebalance of the others.
        .set(
            "group.instance.id",
            format!("{}-processor-{}", cfg.prefix, cfg.index),
        )
        .set("session.timeout.ms", "10000")
        .set("heartbeat.interval.ms", "1000")
        .set("fetch.wait.max.ms", "5")
        .create_with_context(Rebalances(AtomicU64::new(0)))
        .map_err(|e| BankError::kafka("creating the consumer", e))?;
    consumer
        .subscribe(&[&topics.commands])
        .map_err(|e| BankError::kafka("subscribing", e))?;
    let producer: BaseProducer = config(&cfg.bootstrap)
        .set(
            "transactional.id",
            format!("{}-processor-{}", cfg.prefix, cfg.index),
        )
        .set("transaction.timeout.ms", "10000")
        .set("linger.ms", "1")
        .create()
        .map_err(|e| BankError::kafka("creating the producer", e))?;
    producer
        .init_transactions(TXN_TIMEOUT)
        .map_err(|e| BankError::kafka("init_transactions", e))?;
    tracing::info!(index = cfg.index, "processor started");

    let mut ledgers: HashMap<i32, Ledger> = HashMap::new();
    let mut handled = 0u64;
    let mut open: Option<(Instant, usize)> = None;
    let commit_every = Duration::from_millis(cfg.commit_ms);
    // Runs until its bench (the parent) goes away.
    let parent = std::os::unix::process::parent_id();
    while std::os::unix::process::parent_id() == parent {
        let polled = consumer.poll(Duration::from_millis(if open.is_some() { 1 } else { 20 }));
        let seen = consumer.context().0.load(Ordering::SeqCst);
        if seen != handled {
            if open.take().is_some() {
                producer
                    .abort_transaction(TXN_TIMEOUT)
                    .map_err(|e| BankError::kafka("abort_transaction at a rebalance", e))?;
                ledgers.values_mut().for_each(Ledger::rollback);
            }
            let assigned = assigned_partitions(&consumer)?;
            ledgers = rebuild(&cfg.bootstrap, &topics, &assigned, partitions)?;
            tracing::info!(index = cfg.index, ?assigned, "partitions assigned");
            println!("ASSIGNED {assigned:?}");
            handled = seen;
        }
        producer.poll(Duration::ZERO);
        match polled {
            None => {}
            Some(Err(e)) => {
                if let Some((code, reason)) = consumer.client().fatal_error() {
                    return Err(BankError::Setup(format!(
                        "the consumer failed for good: {code:?}: {reason}"
                    )));
                }
                tracing::debug!(error = %e, "consumer");
            }
            Some(Ok(m)) => {
                let Some(ledger) = ledgers.get_mut(&m.partition()) else {
                    tracing::warn!(
                        partition = m.partition(),
                        "a command of a partition not held"
                    );
                    continue;
                };
                let command = match Record::decode(m.payload().unwrap_or_default()) {
                    Ok(c) => c,
                    Err(e) => {
                        tracing::warn!(error = %e, offset = m.offset(), "skipping a bad command");
                        continue;
                    }
                };
                if open.is_none() {
                    producer
                        .begin_transaction()
                        .map_err(|e| BankError::kafka("begin_transaction", e))?;
                    open = Some((crate::clock::now(), 0));
                }
                if let Some(effects) = ledger.apply(&command) {
                    write_effects(&producer, &topics, partitions, &effects)?;
                }
                if let Some((_, n)) = open.as_mut() {
                    *n += 1;
                }
            }
        }
        if let Some((since, n)) = open {
            if n >= cfg.commit_records || since.elapsed() >= commit_every {
                commit(&consumer, &producer)?;
                ledgers.values_mut().for_each(Ledger::commit);
                open = None;
            }
        }
    }
    if open.is_some() {
        producer
            .abort_transaction(TXN_TIMEOUT)
            .map_err(|e| BankError::kafka("abort_transaction at exit", e))?;
    }
    Ok(())
}

/// The commands partitions the consumer holds now.
fn assigned_partitions(consumer: &BaseConsumer<Rebalances>) -> Result<Vec<i32>, BankError> {
    Ok(consumer
        .assignment()
        .map_err(|e| BankError::kafka("assignment", e))?
        .elements()
        .iter()
        .map(|e| e.partition())
        .collect())
}

/// Queues a command's effects in the open transaction: its event (on the partition of the
/// account it happened to), the account's new balance, the saga's next command.
fn write_effects(
    producer: &BaseProducer,
    topics: &Topics,
    partitions: i32,
    effects: &Effects,
) -> Result<(), BankError> {
    let event_account = match effects.event.tag {
        Tag::Credited => effects.event.to,
        _ => effects.event.from,
    };
    send(
        producer,
        &topics.events,
        partition_of(event_account, partitions),
        &account_key(event_account),
        &effects.event.encode(),
    )?;
    if let Some((account, balance)) = effects.balance {
        send(
            producer,
            &topics.balances,
            partition_of(account, partitions),
            &account_key(account),
            &balance.to_be_bytes(),
        )?;
    }
    if let Some(next) = effects.next {
        send(
            producer,
            &topics.commands,
            partition_of(next.to, partitions),
            &account_key(next.to),
            &next.encode(),
        )?;
    }
    Ok(())
}

/// Commits the open transaction with the consumer's positions.
fn commit(consumer: &BaseConsumer<Rebalances>, producer: &BaseProducer) -> Result<(), BankError> {
    let positions = consumer
        .position()
        .map_err(|e| BankError::kafka("position", e))?;
    let mut offsets = TopicPartitionList::new();
    for e in positions.elements() {
        if let Offset::Offset(o) = e.offset() {
            offsets
                .add_partition_offset(e.topic(), e.partition(), Offset::Offset(o))
                .map_err(|e| BankError::kafka("offsets", e))?;
        }
    }
    let group = consumer
        .group_metadata()
        .ok_or_else(|| BankError::Setup("the consumer has no group metadata".into()))?;
    let t0 = crate::clock::now();
    producer
        .send_offsets_to_transaction(&offsets, &group, TXN_TIMEOUT)
        .map_err(|e| BankError::kafka("send_offsets_to_transaction", e))?;
    let t1 = crate::clock::now();
    // The crate's commit flushes first, polling in 100 ms steps when its records are still in
    // flight; a short poll loop here gets them answered without those waits.
    while producer.in_flight_count() > 0 && t1.elapsed() < TXN_TIMEOUT {
        producer.poll(Duration::from_millis(1));
    }
    producer
        .commit_transaction(TXN_TIMEOUT)
        .map_err(|e| BankError::kafka("commit_transaction", e))?;
    let took = t0.elapsed();
    if took > Duration::from_millis(50) {
        tracing::info!(
            offsets_ms = (t1 - t0).as_millis() as u64,
            commit_ms = t1.elapsed().as_millis() as u64,
            "a slow transaction commit"
        );
    }
    Ok(())
}

/// Queues a record, waiting while the producer's queue is full.
fn send(
    producer: &BaseProducer,
    topic: &str,
    partition: i32,
    key: &[u8],
    value: &[u8],
) -> Result<(), BankError> {
    let record = BaseRecord::<[u8], [u8]>::to(topic)
        .partition(partition)
        .key(key)
        .payload(value);
    send_waiting(producer, record, TXN_TIMEOUT)
        .map_err(|e| BankError::kafka(format!("sending to {topic}"), e))
}

/// The ledgers of `assigned`: each account's newest balance snapshot, then the ids of the
/// events written since the start (so duplicates are recognised). Waits for transactions
/// still open on those partitions (a previous owner's) to end first.
pub fn rebuild(
    bootstrap: &str,
    topics: &Topics,
    assigned: &[i32],
    partitions: i32,
) -> Result<HashMap<i32, Ledger>, BankError> {
    let mut ledgers: HashMap<i32, Ledger> =
        assigned.iter().map(|p| (*p, Ledger::default())).collect();
    let deadline = crate::clock::now() + Duration::from_secs(120);
    read_settled(
        bootstrap,
        &topics.balances,
        assigned,
        deadline,
        // A record this service did not write is skipped, not fatal: failing here would fail
        // every rebuild of the partition, forever.
        |p, key, value| {
            match (decode_account(key), decode_balance(value)) {
                (Ok(account), Ok(balance)) if partition_of(account, partitions) == p => {
                    if let Some(l) = ledgers.get_mut(&p) {
                        l.set_balance(account, balance);
                    }
                }
                _ => tracing::warn!(
                    partition = p,
                    "skipping a snapshot this service did not write"
                ),
            }
            Ok(())
        },
    )?;
    read_settled(
        bootstrap,
        &topics.events,
        assigned,
        deadline,
        |p, _, value| {
            match (Record::decode(value), ledgers.get_mut(&p)) {
                (Ok(event), Some(l)) => l.replay(&event),
                (Err(e), _) => {
                    tracing::warn!(partition = p, error = %e, "skipping an unreadable event")
                }
                (Ok(_), None) => {}
            }
            Ok(())
        },
    )?;
    Ok(ledgers)
}
