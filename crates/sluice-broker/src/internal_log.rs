//! The broker's own compacted topics (`__consumer_offsets`, `__transaction_state`) as logs of
//! key/value records: a batch of them to append, and every one of a partition to replay.

use bytes::{Bytes, BytesMut};
use kafka_protocol::records::{
    Compression, Record as KafkaRecord, RecordBatchDecoder, RecordBatchEncoder,
    RecordEncodeOptions, TimestampType,
};
use sluice_log::Offset;

use std::sync::Arc;

use crate::error::BrokerError;
use crate::partition::Partition;
use crate::topics::{Topic, Topics};

/// The internal topic `name`, created (compacted, fsynced on every write, kept forever) with
/// `partitions` partitions if it does not exist.
pub fn ensure_topic(
    topics: &Topics,
    name: &str,
    partitions: i32,
) -> Result<Arc<Topic>, BrokerError> {
    if let Some(t) = topics.get(name) {
        let overrides = t.overrides();
        if let Some((key, value)) = unpinned(&overrides) {
            tracing::warn!(topic = name, key, expected = value, found = ?overrides.get(key),
                "an internal topic's config is not the one its coordinator relies on (changed \
                 by an older version?): set it back with an AlterConfigs that keeps the pinned \
                 values");
        }
        return Ok(t);
    }
    topics
        .create(name, partitions, topic_configs(), false)?
        .ok_or_else(|| BrokerError::InvalidRequest(format!("internal topic {name} not created")))
}

/// The configs of an internal topic that no AlterConfigs may change: its coordinator answers
/// "durable" from `flush.mode=sync` and rebuilds its state from the whole compacted partition.
pub const PINNED: [(&str, &str); 3] = [
    ("cleanup.policy", "compact"),
    ("flush.mode", "sync"),
    ("retention.ms", "-1"),
];

/// The first pinned config that `configs` drops or changes, with the value it must have.
pub fn unpinned(
    configs: &std::collections::BTreeMap<String, String>,
) -> Option<(&'static str, &'static str)> {
    PINNED
        .into_iter()
        .find(|(key, value)| configs.get(*key).map(String::as_str) != Some(*value))
}

/// An internal topic's configs: compacted, fsynced on every write, kept forever.
pub fn topic_configs() -> std::collections::BTreeMap<String, String> {
    PINNED
        .into_iter()
        .chain([("segment.bytes", "104857600")])
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

/// One record: a key and a value (`None` for a tombstone).
pub type KeyValue = (Vec<u8>, Option<Vec<u8>>);

/// The records as one uncompressed batch from no producer (base sequence -1).
pub fn encode(records: &[KeyValue], now_ms: i64) -> Result<Vec<u8>, BrokerError> {
    let kafka_records: Vec<KafkaRecord> = records
        .iter()
        .enumerate()
        .map(|(i, (key, value))| KafkaRecord {
            transactional: false,
            control: false,
            delete_horizon: false,
            partition_leader_epoch: -1,
            producer_id: -1,
            producer_epoch: -1,
            timestamp_type: TimestampType::Creation,
            offset: i as i64,
            sequence: i as i32,
            timestamp: now_ms,
            key: Some(Bytes::from(key.clone())),
            value: value.clone().map(Bytes::from),
            headers: Default::default(),
        })
        .collect();
    let mut buf = BytesMut::new();
    RecordBatchEncoder::encode(
        &mut buf,
        &kafka_records,
        &RecordEncodeOptions {
            version: 2,
            compression: Compression::None,
        },
    )
    .map_err(|e| BrokerError::InvalidRequest(format!("encoding internal records: {e:#}")))?;
    let mut bytes = buf.to_vec();
    // Not an idempotent producer: base sequence -1 (the encoder derives it from the records).
    if bytes.len() >= 61 {
        bytes[53..57].copy_from_slice(&(-1i32).to_be_bytes());
        let crc = crc32c::crc32c(&bytes[21..]);
        bytes[17..21].copy_from_slice(&crc.to_be_bytes());
    }
    Ok(bytes)
}

/// Every keyed record of `partition` (of topic `topic`, for errors) up to the high watermark,
/// in order: what a single node replays at start (a cluster node taking a partition over reads
/// to the log end, [`read_to_log_end`]).
pub fn read_all(partition: &Partition, topic: &str) -> Result<Vec<KeyValue>, BrokerError> {
    let progress = partition.progress();
    read_range(
        partition,
        topic,
        progress.log_start,
        progress.visible,
        false,
    )
}

/// The keyed records a leader holds from `from` (its log start when `None`) to its log end,
/// and where that end was: a coordinator taking over reads most of its partition this way
/// without its lock, then the rest from that end with it.
pub fn read_to_log_end(
    partition: &Partition,
    topic: &str,
    from: Option<Offset>,
) -> Result<(Vec<KeyValue>, Offset), BrokerError> {
    let end = partition.fetch_position().0;
    let from = from.unwrap_or(partition.progress().log_start);
    Ok((read_range(partition, topic, from, end, true)?, end))
}

/// The keyed records of `partition` from `from` to `end` (not past it, even inside a batch
/// read whole).
pub(crate) fn read_range(
    partition: &Partition,
    topic: &str,
    from: Offset,
    end: Offset,
    to_log_end: bool,
) -> Result<Vec<KeyValue>, BrokerError> {
    let mut out = Vec::new();
    let mut offset = from;
    while offset < end {
        let (plan, _) = if to_log_end {
            partition.read_for_follower(offset, 8 << 20)?
        } else {
            partition.read(offset, 8 << 20, true)?
        };
        let bytes = plan.load().map_err(|e| BrokerError::Metadata {
            path: topic.into(),
            source: e,
        })?;
        if bytes.is_empty() {
            break;
        }
        let mut buf = bytes.clone();
        let sets =
            RecordBatchDecoder::decode_all(&mut buf).map_err(|e| BrokerError::CorruptMetadata {
                path: topic.into(),
                reason: format!("{e:#}"),
            })?;
        let mut last = offset;
        for set in sets {
            for r in set.records {
                last = last.max(Offset(r.offset));
                // A batch read whole may start before `offset` or end past `end` (appended
                // since `end` was taken): those records are another read's.
                if r.offset < offset.0 || r.offset >= end.0 || r.control {
                    continue;
                }
                let Some(key) = r.key else { continue };
                out.push((key.to_vec(), r.value.map(|v| v.to_vec())));
            }
        }
        offset = last.plus(1).max(offset.plus(1));
    }
    Ok(out)
}
