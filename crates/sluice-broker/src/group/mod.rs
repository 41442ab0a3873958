//! Consumer groups: the coordinator's state machine ([`coordinator`]) and the service around
//! it that persists what it decides in the compacted `__consumer_offsets` topic, replays that
//! topic on start, and ticks the coordinator's clock.

pub mod consumer;
pub mod coordinator;
pub mod records;
pub mod state;

use std::sync::Arc;

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
        let topic = crate::internal_log::ensure_topic(topics, OFFSETS_TOPIC, partitions)?;
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
            let pairs: Vec<_> = list.iter().map(|r| (r.key(), r.value())).collect();
            let batch = crate::internal_log::encode(&pairs, now)?;
            let validated = validate_produce(&batch, usize::MAX).map_err(LogError::from)?;
            let info = partition.append(validated, false)?;
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

/// Why an offset commit (plain or transactional) of `topic`-`partition` cannot be taken: the
/// partition does not exist, or its metadata is longer than `max_metadata` bytes.
pub(crate) fn offset_commit_error(
    topics: &Topics,
    topic: &str,
    partition: i32,
    metadata: Option<&str>,
    max_metadata: usize,
) -> Option<kafka_protocol::error::ResponseError> {
    use kafka_protocol::error::ResponseError;
    if topics
        .get(topic)
        .and_then(|t| t.partition(partition))
        .is_none()
    {
        Some(ResponseError::UnknownTopicOrPartition)
    } else if metadata.is_some_and(|m| m.len() > max_metadata) {
        Some(ResponseError::OffsetMetadataTooLarge)
    } else {
        None
    }
}

/// Every group record in a partition of the offsets topic, in order.
fn read_all(partition: &Partition) -> Result<Vec<Record>, BrokerError> {
    Ok(crate::internal_log::read_all(partition, OFFSETS_TOPIC)?
        .into_iter()
        .filter_map(|(key, value)| Record::decode(&key, value.as_deref()))
        .collect())
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
