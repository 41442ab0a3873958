//! Publishing into Sluice: a transactional producer (librdkafka) that writes a batch of
//! committed database transactions' rows and the relay's new position, to its compacted
//! progress topic, in one Kafka transaction; and reading that position back on start.

use std::collections::HashSet;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use rdkafka::admin::{AdminClient, AdminOptions, NewTopic, ResourceSpecifier, TopicReplication};
use rdkafka::client::DefaultClientContext;
use rdkafka::config::ClientConfig;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::error::{KafkaError, RDKafkaErrorCode};
use rdkafka::message::{Header, Message, OwnedHeaders};
use rdkafka::producer::{BaseProducer, BaseRecord, DeliveryResult, Producer, ProducerContext};
use rdkafka::{ClientContext, Offset, TopicPartitionList};
use serde::{Deserialize, Serialize};

use crate::client_props::{hide_secrets, ClientProperties, LoginRefusals};
use crate::config::OutboxConfig;
use crate::error::OutboxError;
use crate::row::{OutboxRow, RowTag, SourceTxn};

const TIMEOUT: Duration = Duration::from_secs(30);

/// What the progress topic holds under the relay's key.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct Progress {
    /// The end of the last published database transaction (for PostgreSQL, its LSN).
    pub end: u64,
    /// The same, as the database writes it (e.g. `0/16B3748`).
    pub position: String,
    /// Rows this relay has published in all.
    pub rows: u64,
    /// The database it is a position in (`OutboxConfig::source_identity`).
    #[serde(default)]
    pub source: String,
    /// Where reading the change log again shows this batch's transactions (the position
    /// committed before it), so a relay with `--delete-published` that stopped between the
    /// commit and the delete can delete the batch's rows after its restart. `end` and
    /// position as above.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub batch_start: Option<(u64, String)>,
}

/// Records delivery failures so a failed commit can say which row Sluice refused (None: the
/// position record), and the first refused login.
#[derive(Default)]
pub struct Deliveries {
    first_failure: Mutex<Option<(Option<RowTag>, KafkaError)>>,
    refused_logins: LoginRefusals,
}

impl ClientContext for Deliveries {
    fn error(&self, error: KafkaError, reason: &str) {
        self.refused_logins.note(&error, reason);
        tracing::warn!(%error, reason, "librdkafka");
    }
}

impl ProducerContext for Deliveries {
    type DeliveryOpaque = Box<Option<RowTag>>;

    fn delivery(&self, result: &DeliveryResult<'_>, row: Box<Option<RowTag>>) {
        if let Err((e, _)) = result {
            // Only a broker's refusal of the record names why a transaction failed: not a
            // purge once it failed (seen: the position record's reported before the refused
            // row), a timeout, a lost connection, or the producer fenced (its transaction
            // aborted by the broker, for its timeout or by a newer instance).
            if matches!(
                e.rdkafka_error_code(),
                Some(
                    RDKafkaErrorCode::PurgeQueue
                        | RDKafkaErrorCode::PurgeInflight
                        | RDKafkaErrorCode::MessageTimedOut
                        | RDKafkaErrorCode::AllBrokersDown
                        | RDKafkaErrorCode::State
                        | RDKafkaErrorCode::Fenced
                        | RDKafkaErrorCode::ProducerFenced
                        | RDKafkaErrorCode::InvalidProducerEpoch
                        | RDKafkaErrorCode::OutOfOrderSequenceNumber
                        | RDKafkaErrorCode::UnknownProducerId
                )
            ) {
                return;
            }
            if let Ok(mut first) = self.first_failure.lock() {
                first.get_or_insert((*row, e.clone()));
            }
        }
    }
}

/// A reader's context: the end-of-partition events it asks for are not errors.
struct Quiet;

impl ClientContext for Quiet {
    fn error(&self, error: KafkaError, reason: &str) {
        if error.rdkafka_error_code() != Some(RDKafkaErrorCode::PartitionEOF) {
            tracing::warn!(%error, reason, "librdkafka");
        }
    }
}

impl rdkafka::consumer::ConsumerContext for Quiet {}

/// A client of the relay's: `client`'s login, the relay's own settings over it.
pub(crate) fn client_config(brokers: &str, client: &ClientProperties) -> ClientConfig {
    let mut c = ClientConfig::new();
    client.apply(&mut c);
    c.set("bootstrap.servers", brokers)
        .set("log_level", "3")
        // Longer than the 5 s a broker may hold a failed login's answer (Sluice doubles the
        // pause per failure from one address), so that the refusal is seen, not a timeout.
        .set("socket.connection.setup.timeout.ms", "10000")
        .set("reconnect.backoff.max.ms", "500");
    c
}

/// Waits until a broker answers `producer` (or TIMEOUT passes). A refused login would otherwise
/// show only as `init_transactions` timing out after TIMEOUT, with no reason given; it stops the
/// wait at once and is named.
fn check_login(
    producer: &BaseProducer<Deliveries>,
    brokers: &str,
    client: &ClientProperties,
) -> Result<(), OutboxError> {
    let deadline = crate::clock::now() + TIMEOUT;
    loop {
        let answered = producer
            .client()
            .fetch_metadata(None, Duration::from_millis(500));
        let Err(e) = answered else {
            return Ok(());
        };
        // The error callback runs from poll, one event at a time, behind librdkafka's log
        // lines: poll for a while, which serves every event queued, not once.
        producer.poll(Duration::from_millis(50));
        if let Some(why) = producer.context().refused_logins.settled() {
            return Err(OutboxError::Login(format!(
                "{} (brokers {brokers}, security.protocol={}{})",
                hide_secrets(&why, client),
                client.protocol(),
                client
                    .get("sasl.username")
                    .map(|u| format!(", sasl.username={u}"))
                    .unwrap_or_default()
            )));
        }
        if crate::clock::now() >= deadline {
            return Err(broker(
                &format!("no Kafka broker answered at {brokers}"),
                &e,
            ));
        }
    }
}

pub struct Sink {
    producer: BaseProducer<Deliveries>,
    admin: AdminClient<DefaultClientContext>,
    known_topics: HashSet<String>,
    progress_topic: String,
    key: String,
    brokers: String,
    client: ClientProperties,
    source: String,
    /// The producer's `batch.size`: [`PRODUCER_BATCH_BYTES`], or less once a topic refused a
    /// batch of rows it would take one by one (see [`OutboxError::BatchTooLarge`]).
    batch_bytes: usize,
    /// When the open transaction began (None: none is open).
    began: Option<Instant>,
    /// An abort did not complete: the producer takes no more transactions (the session ends
    /// and the next one makes a new producer, whose InitProducerId aborts what is left).
    unusable: bool,
    /// The producer's `transaction.timeout.ms`.
    transaction_timeout: Duration,
}

fn broker(what: &str, e: &KafkaError) -> OutboxError {
    OutboxError::Broker(format!("{what}: {e}"))
}

impl Sink {
    /// Connects and takes the relay's transactional id: any earlier instance's producer is
    /// fenced and its open transaction aborted. `batch_bytes`: the producer's `batch.size`
    /// (None: [`PRODUCER_BATCH_BYTES`]). Blocking.
    pub fn connect(cfg: &OutboxConfig, batch_bytes: Option<usize>) -> Result<Sink, OutboxError> {
        let batch_bytes = batch_bytes.unwrap_or(PRODUCER_BATCH_BYTES).max(1);
        let producer: BaseProducer<Deliveries> = client_config(&cfg.brokers, &cfg.client)
            .set("transactional.id", cfg.transactional_id())
            // A large database transaction is one Sluice transaction, open while its rows
            // are read and sent (a successor fences an open one at once).
            .set(
                "transaction.timeout.ms",
                cfg.transaction_timeout_ms.to_string(),
            )
            .set("linger.ms", "1")
            // The broker's and topic's limits decide what is too large, not the client's.
            .set("message.max.bytes", LARGEST_RECORD_BYTES.to_string())
            // What librdkafka holds unsent: a large database transaction streams through it
            // (`Change::Part`), so it bounds the relay's memory; room for the largest row.
            .set(
                "queue.buffering.max.kbytes",
                ((LARGEST_RECORD_BYTES + (1 << 20)) / 1024).to_string(),
            )
            // Set, not left to the default, so that a refusal can name it (`too_large`).
            .set("batch.size", batch_bytes.to_string())
            // Keys land where Kafka's Java producer puts them.
            .set("partitioner", "murmur2_random")
            .create_with_context(Deliveries::default())
            .map_err(|e| broker("creating the producer", &e))?;
        check_login(&producer, &cfg.brokers, &cfg.client)?;
        producer.init_transactions(TIMEOUT).map_err(|e| {
            broker(
                &format!(
                    "no Kafka broker at {} took the transactional id",
                    cfg.brokers
                ),
                &e,
            )
        })?;
        let admin = client_config(&cfg.brokers, &cfg.client)
            .create()
            .map_err(|e| broker("creating the admin client", &e))?;
        Ok(Sink {
            producer,
            admin,
            known_topics: HashSet::new(),
            progress_topic: cfg.progress_topic(),
            key: cfg.slot.clone(),
            brokers: cfg.brokers.clone(),
            client: cfg.client.clone(),
            source: cfg.source_identity(),
            batch_bytes,
            began: None,
            unusable: false,
            transaction_timeout: Duration::from_millis(cfg.transaction_timeout_ms),
        })
    }

    /// Creates the topics not seen yet (broker defaults for partitions and replicas); one
    /// that exists already is fine, one that cannot be made stops the relay.
    pub async fn ensure_topics(&mut self, topics: &[&str]) -> Result<(), OutboxError> {
        let new: Vec<String> = topics
            .iter()
            .filter(|t| !self.known_topics.contains(**t))
            .map(|t| t.to_string())
            .collect::<HashSet<_>>()
            .into_iter()
            .collect();
        if new.is_empty() {
            return Ok(());
        }
        let is_progress = |t: &str| t == self.progress_topic;
        let specs: Vec<NewTopic<'_>> = new
            .iter()
            .map(|t| {
                if is_progress(t) {
                    NewTopic::new(t, 1, TopicReplication::Fixed(-1))
                        .set("cleanup.policy", "compact")
                } else {
                    NewTopic::new(t, -1, TopicReplication::Fixed(-1))
                }
            })
            .collect();
        let options = AdminOptions::new().operation_timeout(Some(TIMEOUT));
        let results = self
            .admin
            .create_topics(&specs, &options)
            .await
            .map_err(|e| broker("creating topics", &e))?;
        for result in results {
            match result {
                Ok(t) => {
                    tracing::info!(topic = %t, "created the topic");
                    self.known_topics.insert(t);
                }
                Err((t, RDKafkaErrorCode::TopicAlreadyExists)) => {
                    self.known_topics.insert(t);
                }
                // What waiting will not change; anything else (a node restarting, too few
                // live nodes for the replication factor, throttling) is retried.
                Err((
                    t,
                    code @ (RDKafkaErrorCode::InvalidTopic
                    | RDKafkaErrorCode::PolicyViolation
                    | RDKafkaErrorCode::TopicAuthorizationFailed
                    | RDKafkaErrorCode::ClusterAuthorizationFailed
                    | RDKafkaErrorCode::InvalidConfig
                    | RDKafkaErrorCode::InvalidPartitions),
                )) => {
                    return Err(OutboxError::Row(format!(
                        "topic {t} cannot be created ({code}): create it yourself, or route \
                         its rows elsewhere; the relay stops before its first row"
                    )))
                }
                Err((t, code)) => {
                    return Err(OutboxError::Broker(format!("creating topic {t}: {code}")))
                }
            }
        }
        Ok(())
    }

    /// The relay's last committed position, read with read_committed. Blocking.
    pub fn read_progress(&self) -> Result<Option<Progress>, OutboxError> {
        let consumer: BaseConsumer<Quiet> = client_config(&self.brokers, &self.client)
            .set("group.id", format!("sluice-outbox-reader-{}", self.key))
            .set("enable.auto.commit", "false")
            .set("enable.partition.eof", "true")
            .set("auto.offset.reset", "earliest")
            .set("isolation.level", "read_committed")
            .create_with_context(Quiet)
            .map_err(|e| broker("creating the progress reader", &e))?;
        let mut assignment = TopicPartitionList::new();
        assignment
            .add_partition_offset(&self.progress_topic, 0, Offset::Beginning)
            .map_err(|e| broker("assigning the progress topic", &e))?;
        consumer
            .assign(&assignment)
            .map_err(|e| broker("assigning the progress topic", &e))?;
        // Read to the end as it is now: this relay's own transactions are finished (the
        // transactional id was just taken), so nothing of its own lies beyond it.
        let (low, high) = consumer
            .fetch_watermarks(&self.progress_topic, 0, Duration::from_secs(10))
            .map_err(|e| broker("reading the progress topic's end", &e))?;
        let deadline = crate::clock::now() + TIMEOUT;
        let mut last = None;
        loop {
            if crate::clock::now() > deadline {
                return Err(OutboxError::Broker(format!(
                    "reading {} did not reach its end in {} s",
                    self.progress_topic,
                    TIMEOUT.as_secs()
                )));
            }
            match consumer.poll(Duration::from_millis(200)) {
                None => {}
                // The end read_committed reaches is the last stable offset: if someone else's
                // transaction is open there (a shared progress topic), this relay's later
                // positions may lie beyond it, so read on until the high watermark.
                Some(Err(KafkaError::PartitionEOF(_))) => {
                    let at = consumer
                        .position()
                        .ok()
                        .and_then(|p| {
                            p.find_partition(&self.progress_topic, 0)
                                .and_then(|e| e.offset().to_raw())
                        })
                        .unwrap_or(-1);
                    // No position (an empty topic, or only aborted records and markers):
                    // nothing committed lies before the end read_committed reached.
                    if at < 0 || at >= high || high <= low {
                        break;
                    }
                    std::thread::sleep(Duration::from_millis(100));
                }
                Some(Err(e)) => return Err(broker("reading the progress topic", &e)),
                Some(Ok(m)) if m.key() == Some(self.key.as_bytes()) => {
                    last = match m.payload() {
                        Some(v) => Some(serde_json::from_slice::<Progress>(v).map_err(|e| {
                            OutboxError::Setup(format!(
                                "{} offset {} holds no relay position ({e}): was the topic \
                                 written by something else?",
                                self.progress_topic,
                                m.offset()
                            ))
                        })?),
                        None => None, // a tombstone: start from the slot's position
                    };
                }
                Some(Ok(_)) => {} // another relay's position
            }
        }
        if let Some(p) = &last {
            if !p.source.is_empty() && p.source != self.source {
                return Err(OutboxError::Setup(format!(
                    "{} holds relay {}'s position in {}, not in {}: two relays (or a restored \
                     database) share the slot name {}; give this one its own --slot or \
                     --progress-topic",
                    self.progress_topic, self.key, p.source, self.source, self.key
                )));
            }
        }
        Ok(last)
    }

    /// Publishes `txns`' rows and `progress` in one transaction. Blocking.
    pub fn publish(&mut self, txns: &[SourceTxn], progress: &Progress) -> Result<(), OutboxError> {
        self.begin()?;
        for txn in txns {
            self.send_rows(&txn.rows)?;
        }
        self.commit(progress)
    }

    /// Begins a transaction. Blocking.
    pub fn begin(&mut self) -> Result<(), OutboxError> {
        self.producer.poll(Duration::ZERO);
        if let Ok(mut first) = self.producer.context().first_failure.lock() {
            *first = None; // a failure belongs to the transaction it happened in
        }
        if self.began.is_some() {
            return Err(OutboxError::Broker(
                "a transaction began while one was open (a bug of the relay's)".into(),
            ));
        }
        if self.unusable {
            return Err(OutboxError::Broker(
                "the last transaction could not be aborted: starting a new session".into(),
            ));
        }
        self.producer
            .begin_transaction()
            .map_err(|e| broker("beginning a transaction", &e))?;
        self.began = Some(crate::clock::now());
        Ok(())
    }

    /// Sends `rows` in the open transaction (it is aborted if one cannot be sent). Blocking.
    pub fn send_rows(&mut self, rows: &[OutboxRow]) -> Result<(), OutboxError> {
        // A refusal of rows sent before (a large transaction's earlier parts) ends it now.
        self.producer.poll(Duration::ZERO);
        self.fail_if_refused()?;
        for row in rows {
            if let Err(e) = self.send_row(row) {
                return Err(self.failed(e));
            }
        }
        Ok(())
    }

    fn refusal_reported(&self) -> bool {
        self.producer
            .context()
            .first_failure
            .lock()
            .is_ok_and(|f| f.is_some())
    }

    /// Once a row's refusal is reported the transaction cannot commit: it is aborted, and the
    /// error names the row.
    fn fail_if_refused(&mut self) -> Result<(), OutboxError> {
        if self.refusal_reported() {
            return Err(self.failed(OutboxError::Broker("a row was refused".into())));
        }
        Ok(())
    }

    /// Sends `progress` and commits the open transaction (aborted if that fails). Blocking.
    pub fn commit(&mut self, progress: &Progress) -> Result<(), OutboxError> {
        if let Err(e) = self.send_progress(progress) {
            return Err(self.failed(e));
        }
        // The crate's commit flushes first, polling in 100 ms steps while records are in
        // flight; polling here in 1 ms steps gets them answered without those waits. After a
        // refusal the records behind it stay queued (seen: 10 of them, for the whole timeout).
        let deadline = crate::clock::now() + TIMEOUT;
        while self.producer.in_flight_count() > 0
            && !self.refusal_reported()
            && crate::clock::now() < deadline
        {
            self.producer.poll(Duration::from_millis(1));
        }
        // Committing would first wait for those records, then fail.
        self.fail_if_refused()?;
        if let Err(e) = self.producer.commit_transaction(TIMEOUT) {
            return Err(self.failed(broker("committing", &e)));
        }
        self.began = None;
        Ok(())
    }

    /// Aborts the open transaction, which failed with `cause`, and says why it failed: the
    /// row a delivery report says Sluice refused (librdkafka fails every send and the commit
    /// after a refusal, so the report, not the call that failed, names it), a transaction open
    /// longer than its timeout (the broker aborts it), or else `cause`.
    fn failed(&mut self, cause: OutboxError) -> OutboxError {
        // The report may not have been served yet, also when nothing counts as in flight any
        // more (seen: the commit failed at once with the refused row's report still queued).
        let deadline = crate::clock::now() + Duration::from_secs(1);
        let refused = loop {
            let refused = self
                .producer
                .context()
                .first_failure
                .lock()
                .ok()
                .and_then(|mut f| f.take());
            if refused.is_some() || crate::clock::now() >= deadline {
                break refused;
            }
            self.producer.poll(Duration::from_millis(10));
        };
        let open_for = self
            .began
            .map(|b| crate::clock::now().saturating_duration_since(b));
        self.abort();
        match refused {
            Some((Some(row), failure))
                if failure.rdkafka_error_code() == Some(RDKafkaErrorCode::MessageSizeTooLarge) =>
            {
                self.refused_as_too_large(&row)
            }
            Some((Some(row), failure)) => OutboxError::Broker(format!(
                "Sluice refused {} for topic {}: {failure}",
                row.describe(),
                row.topic
            )),
            Some((None, failure)) => OutboxError::Broker(format!(
                "Sluice refused the position record for topic {}: {failure}",
                self.progress_topic
            )),
            // Not fatal: a broker outage during a long transaction looks the same. Said at
            // every try, naming the setting.
            None if open_for.is_some_and(|d| d >= self.transaction_timeout) => {
                OutboxError::Broker(format!(
                    "a Sluice transaction failed after {} s open, past the relay's transaction \
                     timeout ({} s; the broker aborts a transaction open longer): {cause}; if \
                     one database transaction's rows take that long to read and send, raise \
                     transaction_timeout_ms (--transaction-timeout-ms, at most the broker's \
                     transaction.max.timeout.ms)",
                    open_for.map_or(0, |d| d.as_secs()),
                    self.transaction_timeout.as_secs()
                ))
            }
            None => cause,
        }
    }

    fn send_row(&self, row: &OutboxRow) -> Result<(), OutboxError> {
        let mut headers = OwnedHeaders::new_with_capacity(row.headers.len());
        for (name, value) in &row.headers {
            headers = headers.insert(Header {
                key: name,
                value: Some(value),
            });
        }
        let mut record: BaseRecord<'_, [u8], [u8], Box<Option<RowTag>>> =
            BaseRecord::with_opaque_to(&row.topic, Box::new(Some(row.tag()))).headers(headers);
        if let Some(k) = &row.key {
            record = record.key(k.as_slice());
        }
        if let Some(p) = &row.payload {
            record = record.payload(p.as_slice());
        }
        self.send_record(record, Some(row))
    }

    fn send_progress(&self, progress: &Progress) -> Result<(), OutboxError> {
        let value = serde_json::to_vec(progress)
            .map_err(|e| OutboxError::Broker(format!("encoding the position: {e}")))?;
        let record = BaseRecord::with_opaque_to(&self.progress_topic, Box::new(None))
            .partition(0)
            .key(self.key.as_bytes())
            .payload(value.as_slice());
        self.send_record(record, None)
    }

    fn send_record<'a>(
        &self,
        mut record: BaseRecord<'a, [u8], [u8], Box<Option<RowTag>>>,
        row: Option<&OutboxRow>,
    ) -> Result<(), OutboxError> {
        let deadline = crate::clock::now() + TIMEOUT;
        loop {
            match self.producer.send(record) {
                Ok(()) => return Ok(()),
                Err((KafkaError::MessageProduction(RDKafkaErrorCode::QueueFull), back))
                    if crate::clock::now() < deadline =>
                {
                    record = back;
                    self.producer.poll(Duration::from_millis(1));
                }
                Err((KafkaError::MessageProduction(RDKafkaErrorCode::MessageSizeTooLarge), _)) => {
                    return Err(match row {
                        Some(row) => too_large(&row.tag(), self.batch_bytes, None),
                        None => OutboxError::Broker("the position record is too large".into()),
                    })
                }
                Err((e, _)) => return Err(broker("sending", &e)),
            }
        }
    }

    /// A row the broker refused as too large (MESSAGE_TOO_LARGE). Kafka checks whole batches:
    /// when the row is smaller than the batches the relay sends, the topic's limit is asked
    /// for; if the row fits it but the batches do not, the relay is to send batches the topic
    /// takes ([`OutboxError::BatchTooLarge`]). Otherwise the row itself is too large.
    fn refused_as_too_large(&self, row: &RowTag) -> OutboxError {
        if row.bytes + BATCH_FRAMING >= self.batch_bytes {
            return too_large(row, self.batch_bytes, None);
        }
        let Some(limit) = self.topic_limit(&row.topic) else {
            return too_large(row, self.batch_bytes, None);
        };
        if row.bytes > limit {
            return too_large(row, self.batch_bytes, Some(limit));
        }
        // A row within the limit but less than the framing below it goes alone in batches of
        // this size (librdkafka sends a record larger than `batch.size` on its own).
        let fitting = limit.saturating_sub(BATCH_FRAMING).max(1);
        if fitting < self.batch_bytes {
            return OutboxError::BatchTooLarge {
                topic: row.topic.clone(),
                limit,
                batch_bytes: fitting,
            };
        }
        OutboxError::Row(format!(
            "outbox {} ({} bytes) was refused by topic {} as too large, though the relay's \
             batches ({} bytes at most) fit the topic's max.message.bytes ({limit} bytes) as the \
             broker describes it now: the limit may have been raised just now (start the relay \
             again), or the broker's message.max.bytes is lower; the relay stops before it (it \
             was not published, and nothing after it is)",
            row.describe(),
            row.bytes,
            row.topic,
            self.batch_bytes
        ))
    }

    /// The topic's `max.message.bytes` as the broker describes it (its own or the broker's
    /// default); None when it cannot be asked. Blocking.
    fn topic_limit(&self, topic: &str) -> Option<usize> {
        let options = AdminOptions::new().request_timeout(Some(Duration::from_secs(10)));
        let resource = ResourceSpecifier::Topic(topic);
        let described =
            futures::executor::block_on(self.admin.describe_configs([&resource], &options));
        match described {
            Ok(results) => results.into_iter().find_map(|r| {
                r.ok()?
                    .get(MAX_MESSAGE_BYTES)?
                    .value
                    .as_deref()?
                    .parse::<usize>()
                    .ok()
            }),
            Err(e) => {
                tracing::warn!(topic, error = %e, "cannot ask the topic's max.message.bytes");
                None
            }
        }
    }

    /// Aborts the open transaction, if one is.
    pub fn abort(&mut self) {
        if self.began.take().is_none() {
            return;
        }
        // librdkafka's abort waits until every record's delivery report has been polled, and
        // polls none itself (seen: an abort timing out after 30 s): short tries, polling the
        // reports between them (a timed-out abort may be called again).
        let deadline = crate::clock::now() + TIMEOUT;
        loop {
            for _ in 0..100 {
                self.producer.poll(Duration::ZERO);
            }
            match self.producer.abort_transaction(Duration::from_millis(100)) {
                Ok(()) => return,
                // Only a timed-out abort is worth trying again (a fenced producer's is not).
                Err(KafkaError::Transaction(e))
                    if e.is_retriable() && crate::clock::now() < deadline =>
                {
                    self.producer.poll(Duration::from_millis(10));
                }
                Err(e) => {
                    tracing::warn!(error = %e, "aborting the transaction");
                    self.unusable = true;
                    return;
                }
            }
        }
    }
}

/// The most one produce request's batch for a partition holds (librdkafka's `batch.size`),
/// unless a topic takes less.
const PRODUCER_BATCH_BYTES: usize = 1_000_000;

/// What a batch holds beside its rows' keys, values and headers (the batch's and each record's
/// framing), as far as the relay allows for it: a row this much smaller than a limit fits it.
const BATCH_FRAMING: usize = 256;

const MAX_MESSAGE_BYTES: &str = "max.message.bytes";

/// The largest record the relay's producer sends (librdkafka's `message.max.bytes`).
const LARGEST_RECORD_BYTES: usize = 64 << 20;

/// `limit`: the topic's `max.message.bytes` when the broker was asked for it.
fn too_large(row: &RowTag, batch_bytes: usize, limit: Option<usize>) -> OutboxError {
    // Kafka checks whole batches: a row within the topic's limit is still refused when the
    // batch holding it (rows of the same partition, sent together) is larger than the limit.
    // A row near a batch's size travels alone: then it is the row. With the topic's limit
    // known the relay sends batches that fit it (`BatchTooLarge`); this is for the rest.
    let cause = if row.bytes + BATCH_FRAMING >= batch_bytes || limit.is_some() {
        String::new()
    } else {
        format!(
            ", or the batch it was sent in is (Kafka checks whole batches; the relay sends a \
             partition's rows in batches of up to {batch_bytes} bytes)"
        )
    };
    let limit_text = match limit {
        Some(limit) => format!(" ({limit} bytes)"),
        None => String::new(),
    };
    OutboxError::Row(format!(
        "outbox {} ({} bytes) is larger than topic {} takes{cause} (its max.message.bytes\
         {limit_text}, or the broker's message.max.bytes); the relay stops before it (it was \
         not published, and nothing after it is): raise the topic's limit{} or make the row \
         smaller",
        row.describe(),
        row.bytes,
        row.topic,
        if cause.is_empty() {
            String::new()
        } else {
            format!(" (to {batch_bytes} bytes or more)")
        },
    ))
}

#[cfg(test)]
mod tests {
    use super::{too_large, Progress, PRODUCER_BATCH_BYTES};
    use crate::row::RowTag;

    fn row(bytes: usize) -> RowTag {
        RowTag {
            id: Some("r1".into()),
            topic: "shop.order".into(),
            bytes,
        }
    }

    /// A row smaller than a batch may have been refused for its batch: the message says so and
    /// how far to raise the limit; one larger than any batch was refused for itself.
    #[test]
    fn a_refusal_names_the_batch_when_the_row_is_smaller_than_one() {
        let small = too_large(&row(1_000), PRODUCER_BATCH_BYTES, None).to_string();
        assert!(small.contains("row id r1 (1000 bytes) is larger than topic shop.order takes, or the batch it was sent in is"), "{small}");
        assert!(
            small.contains(&format!("to {PRODUCER_BATCH_BYTES} bytes or more")),
            "{small}"
        );
        let big = too_large(&row(PRODUCER_BATCH_BYTES), PRODUCER_BATCH_BYTES, None).to_string();
        assert!(
            big.contains("is larger than topic shop.order takes (its max.message.bytes"),
            "{big}"
        );
        assert!(!big.contains("batch"), "{big}");
        // The topic's limit asked for: the row alone is larger than it.
        let known = too_large(&row(10_000), PRODUCER_BATCH_BYTES, Some(2_000)).to_string();
        assert!(
            known.contains("(10000 bytes) is larger than topic shop.order takes (its max.message.bytes (2000 bytes)"),
            "{known}"
        );
        assert!(!known.contains("batch"), "{known}");
    }

    /// A position a relay wrote before `batch_start` existed still reads (none: nothing to
    /// read again), and one with it survives the round trip.
    #[test]
    fn progress_records_with_and_without_the_batch_start_read() {
        let old: Progress =
            serde_json::from_str(r#"{"end":42,"position":"0/2A","rows":7,"source":"pg"}"#)
                .expect("an older record");
        assert_eq!(old.batch_start, None);
        let new = Progress {
            batch_start: Some((40, "0/28".into())),
            ..old
        };
        let text = serde_json::to_string(&new).expect("encodes");
        assert_eq!(serde_json::from_str::<Progress>(&text).ok(), Some(new));
    }
}
