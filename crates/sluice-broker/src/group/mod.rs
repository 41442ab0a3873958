//! Consumer groups: the coordinator's state machine ([`coordinator`]) and the service around
//! it that persists what it decides in the compacted `__consumer_offsets` topic, replays that
//! topic on start, and ticks the coordinator's clock.

pub mod coordinator;
pub mod records;
pub mod state;

use std::sync::Arc;

use bytes::{Bytes, BytesMut};
use kafka_protocol::records::{
    Compression, Record as KafkaRecord, RecordBatchDecoder, RecordBatchEncoder,
    RecordEncodeOptions, TimestampType,
};
use parking_lot::Mutex;
use sluice_log::{validate_produce, Clock, LogError, Offset};

use crate::error::BrokerError;
use crate::partition::Partition;
use crate::topics::{Topic, Topics};
use coordinator::{Coordinator, GroupConfig};
use records::Record;

pub const OFFSETS_TOPIC: &str = "__consumer_offsets";

/// Kafka's `Utils.abs(groupId.hashCode()) % partitions`, so a group lands where Kafka would
/// put it.
pub fn partition_for(group: &str, partitions: i32) -> i32 {
    let mut h: i32 = 0;
    for unit in group.encode_utf16() {
        h = h.wrapping_mul(31).wrapping_add(i32::from(unit));
    }
    (h & 0x7fff_ffff) % partitions.max(1)
}

pub struct GroupService {
    pub coordinator: Mutex<Coordinator>,
    offsets_topic: Arc<Topic>,
    clock: Arc<dyn Clock>,
}

impl std::fmt::Debug for GroupService {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "GroupService")
    }
}

impl GroupService {
    /// Creates the offsets topic if needed and replays it into a fresh coordinator.
    pub fn open(
        topics: &Topics,
        partitions: i32,
        config: GroupConfig,
        clock: Arc<dyn Clock>,
    ) -> Result<GroupService, BrokerError> {
        let topic = match topics.get(OFFSETS_TOPIC) {
            Some(t) => t,
            None => {
                let configs = [
                    ("cleanup.policy", "compact"),
                    ("segment.bytes", "104857600"),
                    ("flush.mode", "sync"),
                    ("retention.ms", "-1"),
                ]
                .into_iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect();
                topics
                    .create(OFFSETS_TOPIC, partitions, configs, false)?
                    .ok_or_else(|| {
                        BrokerError::InvalidRequest("offsets topic not created".into())
                    })?
            }
        };
        let mut coordinator = Coordinator::new(config);
        let now = clock.now_ms();
        let mut replayed = 0usize;
        for partition in topic.partitions() {
            for record in read_all(&partition)? {
                coordinator.apply(&record, now);
                replayed += 1;
            }
        }
        if replayed > 0 {
            tracing::info!(
                records = replayed,
                groups = coordinator.group_ids().len(),
                "loaded consumer groups"
            );
        }
        Ok(GroupService {
            coordinator: Mutex::new(coordinator),
            offsets_topic: topic,
            clock,
        })
    }

    pub fn now_ms(&self) -> i64 {
        self.clock.now_ms()
    }

    fn partition(&self, group: &str) -> Result<Arc<Partition>, BrokerError> {
        let index = partition_for(group, self.offsets_topic.partition_count());
        self.offsets_topic
            .partition(index)
            .ok_or_else(|| BrokerError::UnknownTopic(format!("{OFFSETS_TOPIC}-{index}")))
    }

    /// Appends `records` to the offsets topic (one batch per partition) and returns, per
    /// partition, the end offset to wait for durability. Called with the coordinator locked,
    /// so that the log's order is the order the coordinator applied them in.
    pub fn write(&self, records: &[Record]) -> Result<Vec<(Arc<Partition>, Offset)>, BrokerError> {
        let mut by_partition: Vec<(Arc<Partition>, Vec<&Record>)> = Vec::new();
        for r in records {
            let p = self.partition(r.group())?;
            match by_partition.iter_mut().find(|(q, _)| q.index == p.index) {
                Some((_, list)) => list.push(r),
                None => by_partition.push((p, vec![r])),
            }
        }
        let now = self.clock.now_ms();
        let mut waits = Vec::new();
        for (partition, list) in by_partition {
            let batch = encode(&list, now)?;
            let validated = validate_produce(&batch, usize::MAX).map_err(LogError::from)?;
            let info = partition.append(validated)?;
            waits.push((partition, info.last_offset.plus(1)));
        }
        Ok(waits)
    }

    /// Waits until everything written is durable; false if a log failed.
    pub async fn wait_durable(waits: Vec<(Arc<Partition>, Offset)>) -> bool {
        for (partition, end) in waits {
            if !partition.wait_durable(end).await {
                return false;
            }
        }
        true
    }

    /// Forgets every group's committed offsets of a deleted topic.
    pub fn forget_topic(&self, topic: &str) {
        let mut coordinator = self.coordinator.lock();
        let records = coordinator.forget_topic(topic);
        if records.is_empty() {
            return;
        }
        match self.write(&records) {
            Ok(_) => {
                let now = self.clock.now_ms();
                for r in &records {
                    coordinator.apply(r, now);
                }
            }
            Err(e) => tracing::warn!(error = %e, %topic, "cannot drop offsets of a deleted topic"),
        }
    }

    /// One tick of the coordinator's clock; writes what it decided.
    pub fn tick(&self) {
        let mut coordinator = self.coordinator.lock();
        let records = coordinator.tick(self.clock.now_ms());
        if records.is_empty() {
            return;
        }
        match self.write(&records) {
            Ok(_) => {
                let now = self.clock.now_ms();
                for r in &records {
                    coordinator.apply(r, now);
                }
            }
            Err(e) => tracing::warn!(error = %e, "cannot write group changes"),
        }
    }
}

fn encode(records: &[&Record], now_ms: i64) -> Result<Vec<u8>, BrokerError> {
    let kafka_records: Vec<KafkaRecord> = records
        .iter()
        .enumerate()
        .map(|(i, r)| KafkaRecord {
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
            key: Some(Bytes::from(r.key())),
            value: r.value().map(Bytes::from),
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
    .map_err(|e| BrokerError::InvalidRequest(format!("encoding group records: {e:#}")))?;
    let mut bytes = buf.to_vec();
    // Not an idempotent producer: base sequence -1 (the encoder derives it from the records).
    if bytes.len() >= 61 {
        bytes[53..57].copy_from_slice(&(-1i32).to_be_bytes());
        let crc = crc32c::crc32c(&bytes[21..]);
        bytes[17..21].copy_from_slice(&crc.to_be_bytes());
    }
    Ok(bytes)
}

/// Every group record in a partition of the offsets topic, in order.
fn read_all(partition: &Partition) -> Result<Vec<Record>, BrokerError> {
    let mut out = Vec::new();
    let mut offset = partition.progress().log_start;
    let end = partition.progress().visible;
    while offset < end {
        let (plan, _) = partition.read(offset, 8 << 20, true)?;
        let bytes = plan.load().map_err(|e| BrokerError::Metadata {
            path: OFFSETS_TOPIC.into(),
            source: e,
        })?;
        if bytes.is_empty() {
            break;
        }
        let mut buf = bytes.clone();
        let sets =
            RecordBatchDecoder::decode_all(&mut buf).map_err(|e| BrokerError::CorruptMetadata {
                path: OFFSETS_TOPIC.into(),
                reason: format!("{e:#}"),
            })?;
        let mut last = offset;
        for set in sets {
            for r in set.records {
                last = last.max(Offset(r.offset));
                if r.offset < offset.0 || r.control {
                    continue;
                }
                let Some(key) = &r.key else { continue };
                if let Some(record) = Record::decode(key, r.value.as_deref()) {
                    out.push(record);
                }
            }
        }
        offset = last.plus(1).max(offset.plus(1));
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn groups_land_where_kafka_puts_them() {
        // Java: "my-group".hashCode() == -1906497762; Utils.abs masks the sign bit.
        assert_eq!(partition_for("my-group", 50), 36);
        assert_eq!(partition_for("", 50), 0);
        assert!((0..16).contains(&partition_for("ünïcode-group", 16)));
    }
}
