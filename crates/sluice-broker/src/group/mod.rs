//! Consumer groups: the coordinator's state machine ([`coordinator`]) and the service around
//! it that persists what it decides in the compacted `__consumer_offsets` topic, replays that
//! topic on start, and ticks the coordinator's clock.

pub mod consumer;
pub mod coordinator;
pub mod records;
pub mod state;

use std::sync::Arc;

use kafka_protocol::error::ResponseError;
use parking_lot::{Mutex, MutexGuard};
use sluice_log::{validate_produce, Clock, LogError};

use crate::commit::{coordinator_error, Waits};
use crate::error::BrokerError;
use crate::partition::Partition;
use crate::shards::Shards;
use crate::topics::{Topic, Topics};
use coordinator::{Coordinator, GroupConfig};
use records::Record;

pub const OFFSETS_TOPIC: &str = "__consumer_offsets";

pub use crate::shards::partition_for;

pub struct GroupService {
    pub coordinator: Mutex<Coordinator>,
    /// The offsets topic's partitions this node coordinates.
    pub shards: Shards,
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
        let mut replayed = 0usize;
        for partition in topic.partitions() {
            let records = read_all(&partition)?;
            // Sessions restored by the replay start now, not when the read began (as `load`).
            let now = clock.now_ms();
            for record in &records {
                coordinator.replay(record, now);
            }
            replayed += records.len();
        }
        if replayed > 0 {
            tracing::info!(
                records = replayed,
                groups = coordinator.group_ids().len(),
                "loaded consumer groups"
            );
        }
        let shards = Shards::standalone(OFFSETS_TOPIC);
        shards.set_topic(topic);
        Ok(GroupService {
            coordinator: Mutex::new(coordinator),
            shards,
            clock,
        })
    }

    /// A cluster node's service: no group until this node leads a partition of the offsets
    /// topic, which the cluster creates ([`GroupService::load`]).
    pub fn clustered(config: GroupConfig, clock: Arc<dyn Clock>) -> GroupService {
        GroupService {
            coordinator: Mutex::new(Coordinator::new(config)),
            shards: Shards::clustered(OFFSETS_TOPIC, Arc::clone(&clock)),
            clock,
        }
    }

    /// The coordinator, if this node coordinates `group`; `NOT_COORDINATOR` otherwise (in a
    /// cluster: another node leads the group's partition), `COORDINATOR_LOAD_IN_PROGRESS`
    /// while this node reads the partition to take it over.
    pub fn lock_for(&self, group: &str) -> Result<MutexGuard<'_, Coordinator>, ResponseError> {
        self.check(group)?;
        Ok(self.coordinator.lock())
    }

    /// Whether this node coordinates `group` (`NOT_COORDINATOR` if not); takes no lock.
    pub fn check(&self, group: &str) -> Result<(), ResponseError> {
        self.shards.check(group).map(drop)
    }

    /// Takes over partition `index` of the offsets topic (this node now leads it in `epoch`),
    /// after [`Shards::begin_load`]: blocking, for a blocking thread ([`Shards::load`]).
    pub fn load(&self, topic: &Arc<Topic>, index: i32, epoch: i32) -> Result<(), BrokerError> {
        let read = |partition: &Partition, from| {
            let (records, end) =
                crate::internal_log::read_to_log_end(partition, OFFSETS_TOPIC, from)?;
            let records: Vec<Record> = records
                .into_iter()
                .filter_map(|(key, value)| Record::decode(&key, value.as_deref()))
                .collect();
            Ok((records, end))
        };
        self.shards.load(
            topic,
            index,
            epoch,
            &self.coordinator,
            read,
            |coordinator, owns, records| {
                // Sessions restored by the replay start now, not when the read began.
                let now = self.clock.now_ms();
                coordinator.unload(owns);
                for record in &records {
                    coordinator.replay(record, now);
                }
            },
        )?;
        Ok(())
    }

    /// Gives up partition `index` of the offsets topic (another node leads it now).
    pub fn unload(&self, index: i32) {
        let mut coordinator = self.coordinator.lock();
        self.shards.unload(index, |owns| coordinator.unload(owns));
    }

    pub fn now_ms(&self) -> i64 {
        self.clock.now_ms()
    }

    /// Writes `records` and applies them to the coordinator (locked by the caller, so that
    /// the log's order is the order they are applied in); returns what to wait on with
    /// [`crate::commit::committed`] before answering. A write refused answers its error and
    /// applies nothing.
    pub fn record(
        &self,
        coordinator: &mut Coordinator,
        records: &[Record],
    ) -> Result<Waits, ResponseError> {
        if records.is_empty() {
            return Ok(Vec::new());
        }
        let waits = self.write(records).map_err(|e| coordinator_error(&e))?;
        let now = self.clock.now_ms();
        for r in records {
            coordinator.apply(r, now);
        }
        Ok(waits)
    }

    /// Appends `records` to the offsets topic (one batch per partition) and returns, per
    /// partition, the end offset to wait for. Called with the coordinator locked, so that the
    /// log's order is the order the coordinator applied them in.
    fn write(&self, records: &[Record]) -> Result<Waits, BrokerError> {
        let mut by_partition: Vec<(Arc<Partition>, Vec<&Record>)> = Vec::new();
        for r in records {
            let p = self.shards.partition(r.group())?;
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
            // Like Kafka's acks=all: refused when too few replicas are in sync.
            let info = partition.append(validated, true)?;
            waits.push(crate::commit::Written::now(
                &partition,
                info.last_offset.plus(1),
            ));
        }
        Ok(waits)
    }

    /// Forgets every group's committed offsets of a deleted topic.
    pub fn forget_topic(&self, topic: &str) {
        let mut coordinator = self.coordinator.lock();
        let records = coordinator.forget_topic(topic);
        if records.is_empty() {
            return;
        }
        if let Err(e) = self.record(&mut coordinator, &records) {
            tracing::warn!(error = ?e, %topic, "cannot drop offsets of a deleted topic");
        }
    }

    /// One tick of the coordinator's clock; writes what it decided.
    pub fn tick(&self) {
        let mut coordinator = self.coordinator.lock();
        let records = coordinator.tick(self.clock.now_ms());
        if records.is_empty() {
            return;
        }
        if let Err(e) = self.record(&mut coordinator, &records) {
            tracing::warn!(error = ?e, "cannot write group changes");
        }
    }
}

/// What a reply read from `group`'s state waits on before it is sent, in a cluster
/// ([`Shards::read_fence`]): call with the coordinator's lock held, while this node coordinates
/// the group. The wait is sampled once the reply is known ([`crate::commit::fence`]: a replica
/// that stepped down in between answers NOT_COORDINATOR), under the coordinator's lock: the
/// request that moved the group on (a static member's rejoin writes the group's record) has
/// appended its write by then, and the reply waits until that write is committed. (A
/// SyncGroup's assignment is handed out only once its record is committed:
/// `Coordinator::stored`.)
/// Nothing on a single node.
pub(crate) fn fence_later(
    broker: &crate::broker::Broker,
    group: &str,
) -> impl FnOnce() -> Waits + Send + 'static {
    let fenced = broker
        .groups
        .shards
        .read_fence(group)
        .and_then(|partition| Some((broker.arc()?, partition)));
    move || match fenced {
        Some((b, partition)) => {
            let _written = b.groups.coordinator.lock();
            crate::commit::fence(&partition).into_iter().collect()
        }
        None => Waits::new(),
    }
}

/// The answer to a JoinGroup or SyncGroup: once the group's writes are committed, the
/// coordinator's reply (now, or when the phase completes); `failed(error)` if the writes were
/// refused or not committed, `failed(let_go)` if the coordinator let the member go unanswered
/// (the group moved to another coordinator, or was removed). The reply is read from the
/// group's state, which another member's request may have moved: it is sent once what
/// `fence` ([`fence_later`]) returns then is committed.
pub(crate) fn answer_when_committed<T: Send + 'static>(
    written: Result<Waits, ResponseError>,
    reply: coordinator::Reply<T>,
    fence: impl FnOnce() -> Waits + Send + 'static,
    failed: impl Fn(ResponseError) -> T + Send + 'static,
    let_go: ResponseError,
    respond: impl Fn(T) -> kafka_protocol::messages::ResponseKind + Send + 'static,
) -> sluice_wire::Reply {
    use sluice_wire::Reply;
    let waits = match written {
        Ok(waits) => waits,
        Err(e) => return Reply::Ready(Box::new(respond(failed(e)))),
    };
    let (reply, fence) = match reply {
        coordinator::Reply::Now(r) if waits.is_empty() => {
            let pending = fence();
            if pending.is_empty() {
                return Reply::Ready(Box::new(respond(r)));
            }
            let fence: Box<dyn FnOnce() -> Waits + Send> = Box::new(move || pending);
            (coordinator::Reply::Now(r), fence)
        }
        reply => {
            let fence: Box<dyn FnOnce() -> Waits + Send> = Box::new(fence);
            (reply, fence)
        }
    };
    Reply::Later(Box::pin(async move {
        if let Err(e) = crate::commit::committed(waits).await {
            return Some(respond(failed(e)));
        }
        let r = match reply {
            coordinator::Reply::Now(r) => r,
            coordinator::Reply::Later(rx) => match rx.await {
                Ok(r) => r,
                // Let go: an error, which tells nothing of the group's state.
                Err(_) => return Some(respond(failed(let_go))),
            },
        };
        if let Err(e) = crate::commit::committed(fence()).await {
            return Some(respond(failed(e)));
        }
        Some(respond(r))
    }))
}

/// Why an offset commit (plain or transactional) of `topic`-`partition` cannot be taken: the
/// partition does not exist, or its metadata is longer than `max_metadata` bytes.
pub(crate) fn offset_commit_error(
    broker: &crate::broker::Broker,
    topic: &str,
    partition: i32,
    metadata: Option<&str>,
    max_metadata: usize,
) -> Option<ResponseError> {
    if !broker.partition_exists(topic, partition) {
        Some(ResponseError::UnknownTopicOrPartition)
    } else if metadata.is_some_and(|m| m.len() > max_metadata) {
        Some(ResponseError::OffsetMetadataTooLarge)
    } else {
        None
    }
}

/// Every group record in a partition of the offsets topic up to the high watermark, in order.
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
