//! Which partitions of an internal topic (`__consumer_offsets`, `__transaction_state`) this
//! node coordinates. A single node coordinates all of them. In a cluster a coordinator runs
//! for exactly the partitions this node leads: loaded (the partition's records replayed) when
//! leadership arrives, unloaded when it leaves, and its writes carry the leader epoch it was
//! loaded in (Kafka's coordinator epoch). A key (group, transactional id) lives in partition
//! `abs(javaHash(key)) % partitions`, as in Kafka.

use std::collections::HashMap;
use std::sync::Arc;

use kafka_protocol::error::ResponseError;
use parking_lot::{Mutex, RwLock};
use sluice_log::{Clock, Offset};

use crate::commit::Waits;
use crate::error::BrokerError;
use crate::partition::Partition;
use crate::topics::Topic;

/// Kafka's `Utils.abs(key.hashCode()) % partitions`, so a key lands where Kafka would put it.
pub fn partition_for(key: &str, partitions: i32) -> i32 {
    let mut h: i32 = 0;
    for unit in key.encode_utf16() {
        h = h.wrapping_mul(31).wrapping_add(i32::from(unit));
    }
    (h & 0x7fff_ffff) % partitions.max(1)
}

#[derive(Debug)]
pub struct Shards {
    /// The internal topic's name, for errors and logs.
    name: &'static str,
    /// The topic (in a cluster: once the cluster created it and this node holds a replica).
    topic: RwLock<Option<Arc<Topic>>>,
    /// `None` on a single node (every partition, epoch 0); otherwise what this node does with
    /// each partition it leads.
    loaded: Option<RwLock<HashMap<i32, Slot>>>,
    /// Times a take-over, for its log line (a cluster's).
    clock: Option<Arc<dyn Clock>>,
}

/// A partition of the internal topic that this cluster node leads, in a leader epoch.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Slot {
    /// Its records are being read: requests for its keys answer COORDINATOR_LOAD_IN_PROGRESS.
    Loading(i32),
    /// Replayed: this node coordinates its keys.
    Loaded(i32),
}

/// Where a key's coordinator is, as this node sees it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Whereabouts {
    /// Here, in this coordinator epoch.
    Here(i32),
    /// Here soon: this node is reading the key's partition to take it over.
    Loading,
    /// On another node, or on none yet.
    Elsewhere,
}

impl Whereabouts {
    /// The coordinator epoch here, or the error a client is answered with: `NOT_COORDINATOR`
    /// (it looks the coordinator up again) or `COORDINATOR_LOAD_IN_PROGRESS` (it asks again).
    pub fn epoch(self) -> Result<i32, ResponseError> {
        match self {
            Whereabouts::Here(epoch) => Ok(epoch),
            Whereabouts::Loading => Err(ResponseError::CoordinatorLoadInProgress),
            Whereabouts::Elsewhere => Err(ResponseError::NotCoordinator),
        }
    }
}

impl Slot {
    pub fn epoch(self) -> i32 {
        match self {
            Slot::Loading(e) | Slot::Loaded(e) => e,
        }
    }
}

impl Shards {
    /// A single node's: every partition of `topic`, once [`Shards::set_topic`] names it.
    pub fn standalone(name: &'static str) -> Shards {
        Shards {
            name,
            topic: RwLock::new(None),
            loaded: None,
            clock: None,
        }
    }

    pub fn clustered(name: &'static str, clock: Arc<dyn Clock>) -> Shards {
        Shards {
            name,
            topic: RwLock::new(None),
            loaded: Some(RwLock::new(HashMap::new())),
            clock: Some(clock),
        }
    }

    /// Whether this node is one of a cluster's (coordinating only what it loaded).
    pub fn is_clustered(&self) -> bool {
        self.loaded.is_some()
    }

    pub fn set_topic(&self, topic: Arc<Topic>) {
        *self.topic.write() = Some(topic);
    }

    /// The partition that holds `key`, if the topic is here.
    pub fn partition_of(&self, key: &str) -> Option<i32> {
        self.topic
            .read()
            .as_ref()
            .map(|t| partition_for(key, t.partition_count()))
    }

    /// Where `key`'s coordinator is.
    pub fn locate(&self, key: &str) -> Whereabouts {
        match self.partition_of(key) {
            Some(partition) => self.locate_partition(partition),
            None => Whereabouts::Elsewhere,
        }
    }

    /// Where the coordinator of `partition`'s keys is.
    fn locate_partition(&self, partition: i32) -> Whereabouts {
        match &self.loaded {
            None => Whereabouts::Here(0),
            Some(loaded) => match loaded.read().get(&partition) {
                Some(Slot::Loaded(epoch)) => Whereabouts::Here(*epoch),
                Some(Slot::Loading(_)) => Whereabouts::Loading,
                None => Whereabouts::Elsewhere,
            },
        }
    }

    /// The coordinator epoch of `key` if this node coordinates it; the error to answer
    /// otherwise ([`Whereabouts::epoch`]).
    pub fn check(&self, key: &str) -> Result<i32, ResponseError> {
        self.locate(key).epoch()
    }

    /// The local partition `key`'s records are written to (`NotLeader` when it is not here).
    pub fn partition(&self, key: &str) -> Result<Arc<Partition>, BrokerError> {
        let topic = self.topic.read();
        let topic = topic
            .as_ref()
            .ok_or_else(|| BrokerError::NotLeader(format!("{} is not here", self.name)))?;
        let index = partition_for(key, topic.partition_count());
        topic
            .partition(index)
            .ok_or_else(|| BrokerError::NotLeader(format!("{}-{index} is not here", self.name)))
    }

    /// In a cluster, the log partition holding `key` (when this node coordinates it), whose
    /// records an answer read from the coordinator's state must see committed first
    /// ([`crate::commit::fence`]). The state
    /// holds records not committed yet: writes applied when appended, and at a take-over
    /// whatever the new leader's log held past the high watermark. A coordinator that fails
    /// over may lose those, and a client told of them would act on a state that never was (a
    /// consumer starting from an offset no commit holds; a partition leader appending to a
    /// transaction the next coordinator does not know of, which no marker would ever end).
    /// `None` on a single node, which answers from what it wrote (see docs/replication.md).
    pub fn read_fence(&self, key: &str) -> Option<Arc<Partition>> {
        if !self.is_clustered() || self.check(key).is_err() {
            return None;
        }
        self.partition(key).ok()
    }

    /// [`Shards::read_fence`] as waits: everything written so far to `key`'s log partition, in
    /// a cluster, when some of it is not committed yet.
    /// Call with the coordinator's lock held, right after reading the state.
    pub fn settled(&self, key: &str) -> Waits {
        self.read_fence(key)
            .and_then(|p| crate::commit::fence(&p))
            .into_iter()
            .collect()
    }

    /// [`Shards::settled`] for an answer read from several keys' state: one wait per log
    /// partition. Call with the coordinator's lock held, right after reading the state.
    pub fn settled_all<'a>(&self, keys: impl IntoIterator<Item = &'a str>) -> Waits {
        let mut waits: Waits = Vec::new();
        for key in keys {
            for wait in self.settled(key) {
                if !waits
                    .iter()
                    .any(|w| w.partition.index == wait.partition.index)
                {
                    waits.push(wait);
                }
            }
        }
        waits
    }

    /// [`Shards::settled`] for an answer read from every key coordinated here (a listing):
    /// every partition loaded here, in a cluster.
    /// Call with the coordinator's lock held, right after reading the state.
    pub fn settled_everywhere(&self) -> Waits {
        let Some(loaded) = &self.loaded else {
            return Waits::new();
        };
        let Some(topic) = self.topic.read().clone() else {
            return Waits::new();
        };
        let indexes: Vec<i32> = loaded
            .read()
            .iter()
            .filter(|(_, slot)| matches!(slot, Slot::Loaded(_)))
            .map(|(index, _)| *index)
            .collect();
        indexes
            .into_iter()
            .filter_map(|index| topic.partition(index))
            .filter_map(|p| crate::commit::fence(&p))
            .collect()
    }

    /// Everything written so far to the log partition holding `key`, when some of it is not
    /// committed (durable, on a single node) yet.
    pub fn written_so_far(&self, key: &str) -> Waits {
        self.partition(key)
            .ok()
            .and_then(|p| crate::commit::unsettled(&p))
            .into_iter()
            .collect()
    }

    /// The partitions loaded or loading here, with their epochs (empty on a single node).
    pub fn loaded(&self) -> HashMap<i32, Slot> {
        self.loaded
            .as_ref()
            .map(|l| l.read().clone())
            .unwrap_or_default()
    }

    /// Whether this node is taking any partition over (a listing of its keys is incomplete).
    pub fn any_loading(&self) -> bool {
        self.loaded.as_ref().is_some_and(|loaded| {
            loaded
                .read()
                .values()
                .any(|slot| matches!(slot, Slot::Loading(_)))
        })
    }

    /// Starts taking over partition `index` of `topic` in `epoch` (this node's replica leads
    /// it): its keys answer COORDINATOR_LOAD_IN_PROGRESS until [`Shards::load`] is done. Cheap:
    /// call it where leadership is followed, and [`Shards::load`] off that path.
    pub fn begin_load(&self, topic: &Arc<Topic>, index: i32, epoch: i32) {
        self.set_topic(Arc::clone(topic));
        if let Some(loaded) = &self.loaded {
            loaded.write().insert(index, Slot::Loading(epoch));
        }
    }

    /// Takes over partition `index` of `topic` in `epoch`, after [`Shards::begin_load`]; a
    /// blocking read of the partition, for a blocking thread. `read(partition, from)` returns
    /// the keyed records from `from` (the log start for `None`) to the log end, and that end.
    /// Most of the log is read without `coordinator`'s lock (the coordinator goes on
    /// answering for its other partitions meanwhile); then, with it, the rest (what was
    /// appended since: writes of an earlier epoch's coordinator still in flight), and
    /// `replay` forgets the keys the predicate picks and applies every record. No write of
    /// the partition's keys slips in after that: they answer COORDINATOR_LOAD_IN_PROGRESS
    /// until the lock is released. Returns how many records were replayed, or `Ok(None)`:
    /// - when the take-over was overtaken (unloaded, or begun again in a later epoch, which
    ///   does the work);
    /// - when the replica no longer leads in `epoch` (its controller session lapsed: it may
    ///   lead in the same epoch again once the session holds, and then loads anew).
    ///
    /// That case and a read that fails give the take-over up: the partition's keys are
    /// forgotten (`replay` of nothing) and answer NOT_COORDINATOR, and the take-over begins
    /// again with the next check of the metadata (`recheck_coordinators`: within a second).
    pub fn load<C, R>(
        &self,
        topic: &Arc<Topic>,
        index: i32,
        epoch: i32,
        coordinator: &Mutex<C>,
        read: impl Fn(&Partition, Option<Offset>) -> Result<(Vec<R>, Offset), BrokerError>,
        replay: impl FnOnce(&mut C, &dyn Fn(&str) -> bool, Vec<R>),
    ) -> Result<Option<usize>, BrokerError> {
        let partitions = topic.partition_count();
        let owns = |key: &str| partition_for(key, partitions) == index;
        let now = || self.clock.as_ref().map_or(0, |c| c.now_ms());
        let started = now();
        let first = topic
            .partition(index)
            .ok_or_else(|| BrokerError::UnknownTopic(format!("{}-{index}", self.name)))
            .and_then(|p| Ok((read(&p, None)?, p)));
        let mut coordinator = coordinator.lock();
        let locked = now();
        if self.slot(index) != Some(Slot::Loading(epoch)) {
            // Overtaken: the unload or the later take-over does the work.
            return first.map(|_| None);
        }
        // The records up to the end, or `None` when the replica no longer leads in `epoch`.
        let read = first.and_then(|((mut records, end), partition)| {
            if partition.leader_epoch().0 != epoch || !partition.leads() {
                return Ok(None);
            }
            let (tail, _) = read(&partition, Some(end))?;
            let tail_len = tail.len();
            records.extend(tail);
            Ok(Some((records, tail_len)))
        });
        let (records, tail_len) = match read {
            Ok(Some(read)) => read,
            given_up => {
                if self.settle(index, epoch, None) {
                    replay(&mut coordinator, &owns, Vec::new());
                    tracing::warn!(
                        topic = self.name,
                        partition = index,
                        epoch,
                        "gave up taking over an internal partition"
                    );
                }
                return given_up.map(|_| None);
            }
        };
        let count = records.len();
        replay(&mut coordinator, &owns, records);
        // `begin_load` of a later epoch does not take the coordinator's lock: that load replays
        // again.
        if !self.settle(index, epoch, Some(Slot::Loaded(epoch))) {
            return Ok(None);
        }
        tracing::info!(
            topic = self.name,
            partition = index,
            epoch,
            records = count,
            read_ms = locked - started,
            tail = tail_len,
            locked_ms = now() - locked,
            "coordinating an internal partition"
        );
        Ok(Some(count))
    }

    /// Ends the take-over of `index` begun in `epoch` (`Loaded`, or given up with `None`) if no
    /// other one began since; whether it did.
    fn settle(&self, index: i32, epoch: i32, to: Option<Slot>) -> bool {
        let Some(loaded) = &self.loaded else {
            return false;
        };
        let mut loaded = loaded.write();
        if loaded.get(&index) != Some(&Slot::Loading(epoch)) {
            return false;
        }
        match to {
            Some(slot) => loaded.insert(index, slot),
            None => loaded.remove(&index),
        };
        true
    }

    fn slot(&self, index: i32) -> Option<Slot> {
        self.loaded
            .as_ref()
            .and_then(|l| l.read().get(&index).copied())
    }

    /// Gives up partition `index` (another node leads it now); `forget` drops the keys the
    /// predicate picks. Call with the coordinator's lock held.
    pub fn unload(&self, index: i32, forget: impl FnOnce(&dyn Fn(&str) -> bool)) {
        self.remove(index);
        let count = self
            .topic
            .read()
            .as_ref()
            .map_or(1, |t| t.partition_count());
        forget(&|key| partition_for(key, count) == index);
        tracing::info!(
            topic = self.name,
            partition = index,
            "no longer coordinating an internal partition"
        );
    }

    #[cfg(test)]
    fn insert(&self, partition: i32, epoch: i32) {
        if let Some(loaded) = &self.loaded {
            loaded.write().insert(partition, Slot::Loaded(epoch));
        }
    }

    fn remove(&self, partition: i32) {
        if let Some(loaded) = &self.loaded {
            loaded.write().remove(&partition);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_single_node_coordinates_everything_and_a_cluster_node_only_what_it_loaded() {
        let single = Shards::standalone("t");
        assert_eq!(single.locate_partition(7), Whereabouts::Here(0));
        let node = Shards::clustered("t", Arc::new(sluice_log::SystemClock));
        assert_eq!(node.locate_partition(7), Whereabouts::Elsewhere);
        node.insert(7, 3);
        assert_eq!(node.locate_partition(7), Whereabouts::Here(3));
        node.remove(7);
        assert_eq!(node.locate_partition(7), Whereabouts::Elsewhere);
    }

    /// A two-partition internal topic of a cluster node whose replica of partition 0 leads in
    /// epoch 3.
    fn led_topic(dir: &std::path::Path) -> (crate::topics::Topics, Arc<Topic>) {
        let topics = crate::topics::Topics::open(
            dir,
            Arc::new(crate::metadata_store::MetadataStore::open(&dir.join("meta")).unwrap()),
            crate::topic_config::Defaults::default(),
            crate::topics::TopicLimits::default(),
            Arc::new(sluice_log::SystemClock),
            Arc::default(),
        )
        .unwrap();
        topics.set_clustered();
        let topic = topics
            .sync_from_cluster("t", uuid::Uuid::new_v4(), 2, &[0, 1], &Default::default())
            .unwrap();
        lead(&topic.partition(0).unwrap());
        (topics, topic)
    }

    fn lead(p: &Arc<Partition>) {
        use sluice_cluster::metadata::PartitionChange;
        use sluice_cluster::{LeaderEpoch, NodeId, PartitionEpoch};
        let assignment = PartitionChange {
            replicas: vec![NodeId(1)],
            leader: Some(NodeId(1)),
            leader_epoch: LeaderEpoch(3),
            isr: vec![NodeId(1)],
            partition_epoch: PartitionEpoch(0),
            adding: Vec::new(),
            removing: Vec::new(),
        };
        p.lead(NodeId(1), &assignment, 1, 10_000, 0, &Default::default());
    }

    /// A key of partition `index` of 2.
    fn key_in(index: i32) -> String {
        (0..)
            .map(|i| format!("key-{i}"))
            .find(|k| partition_for(k, 2) == index)
            .unwrap()
    }

    fn append(p: &Arc<Partition>, key: &str) {
        let pairs = vec![(key.as_bytes().to_vec(), Some(b"v".to_vec()))];
        let batch = crate::internal_log::encode(&pairs, 0).unwrap();
        p.append(
            sluice_log::validate_produce(&batch, usize::MAX).unwrap(),
            true,
        )
        .unwrap();
    }

    type Keys = Vec<crate::internal_log::KeyValue>;

    fn read(p: &Partition, from: Option<Offset>) -> Result<(Keys, Offset), BrokerError> {
        crate::internal_log::read_to_log_end(p, "t", from)
    }

    fn replay(state: &mut Keys, owns: &dyn Fn(&str) -> bool, records: Keys) {
        state.retain(|(k, _)| !owns(std::str::from_utf8(k).unwrap()));
        state.extend(records);
    }

    /// Begins and makes the take-over of partition 0 in `epoch`.
    fn take_over(
        shards: &Shards,
        topic: &Arc<Topic>,
        epoch: i32,
        coordinator: &Mutex<Keys>,
        read: impl Fn(&Partition, Option<Offset>) -> Result<(Keys, Offset), BrokerError>,
    ) -> Result<Option<usize>, BrokerError> {
        shards.begin_load(topic, 0, epoch);
        shards.load(topic, 0, epoch, coordinator, read, replay)
    }

    fn entry(key: &str) -> crate::internal_log::KeyValue {
        (key.as_bytes().to_vec(), None)
    }

    #[test]
    fn a_take_over_reads_without_the_coordinators_lock_and_replays_what_came_meanwhile() {
        let dir = tempfile::tempdir().unwrap();
        let (_topics, topic) = led_topic(dir.path());
        let p = topic.partition(0).unwrap();
        for i in 0..100 {
            append(&p, &format!("old-{i}"));
        }
        let (mine, other) = (key_in(0), key_in(1));
        let shards = Shards::clustered("t", Arc::new(sluice_log::SystemClock));
        let coordinator: Mutex<Keys> = Mutex::new(vec![entry(&mine), entry(&other)]);
        assert!(!shards.any_loading());
        shards.begin_load(&topic, 0, 3);
        assert!(shards.any_loading());
        assert_eq!(shards.locate(&mine), Whereabouts::Loading);
        assert_eq!(
            shards.check(&mine),
            Err(ResponseError::CoordinatorLoadInProgress)
        );
        assert_eq!(shards.locate(&other), Whereabouts::Elsewhere);
        assert_eq!(shards.check(&other), Err(ResponseError::NotCoordinator));
        let first = std::sync::atomic::AtomicBool::new(true);
        let loaded = shards
            .load(
                &topic,
                0,
                3,
                &coordinator,
                |p, from| {
                    let read = read(p, from)?;
                    if first.swap(false, std::sync::atomic::Ordering::SeqCst) {
                        assert_eq!(from, None);
                        // The bulk of the log is read with the coordinator free, and its keys
                        // are not answered from yet.
                        assert!(coordinator.try_lock().is_some());
                        assert_eq!(
                            shards.check(&mine),
                            Err(ResponseError::CoordinatorLoadInProgress)
                        );
                        // A write that lands after the read is taken up with the lock held.
                        append(&Arc::clone(&topic.partition(0).unwrap()), "late");
                    } else {
                        assert_eq!(from, Some(Offset(100)));
                        assert!(coordinator.try_lock().is_none());
                    }
                    Ok(read)
                },
                replay,
            )
            .unwrap();
        assert_eq!(loaded, Some(101));
        let state = coordinator.lock();
        assert_eq!(
            state.len(),
            102,
            "the partition's stale key forgotten, the other partition's kept, nothing doubled"
        );
        assert_eq!(state[0].0, other.as_bytes());
        assert_eq!(state[1].0, b"old-0");
        assert_eq!(state[101].0, b"late");
        assert_eq!(shards.locate(&mine), Whereabouts::Here(3));
        assert_eq!(shards.check(&mine), Ok(3));
        assert!(!shards.any_loading());
    }

    #[test]
    fn a_read_stops_at_the_end_it_was_given_even_inside_a_batch_read_whole() {
        let dir = tempfile::tempdir().unwrap();
        let (_topics, topic) = led_topic(dir.path());
        let p = topic.partition(0).unwrap();
        append(&p, "before");
        let end = p.fetch_position().0;
        append(&p, "after");
        let records = crate::internal_log::read_range(&p, "t", Offset(0), end, true).unwrap();
        assert_eq!(records, vec![(b"before".to_vec(), Some(b"v".to_vec()))]);
        let (tail, _) = read(&p, Some(end)).unwrap();
        assert_eq!(tail, vec![(b"after".to_vec(), Some(b"v".to_vec()))]);
    }

    #[test]
    fn a_take_over_overtaken_while_reading_replays_nothing() {
        let dir = tempfile::tempdir().unwrap();
        let (_topics, topic) = led_topic(dir.path());
        let p = topic.partition(0).unwrap();
        let g = key_in(0);
        append(&p, &g);
        let shards = Shards::clustered("t", Arc::new(sluice_log::SystemClock));
        let coordinator: Mutex<Keys> = Mutex::new(Vec::new());
        // Given up (leadership left) while reading.
        let loaded = take_over(&shards, &topic, 3, &coordinator, |p, from| {
            if from.is_none() {
                shards.unload(0, |_| {});
            }
            read(p, from)
        });
        assert_eq!(loaded.unwrap(), None);
        assert!(coordinator.lock().is_empty());
        assert_eq!(shards.check(&g), Err(ResponseError::NotCoordinator));
        // Begun again in a later epoch while reading: that load is the one that counts.
        let loaded = take_over(&shards, &topic, 3, &coordinator, |p, from| {
            if from.is_none() {
                shards.begin_load(&topic, 0, 4);
            }
            read(p, from)
        });
        assert_eq!(loaded.unwrap(), None);
        assert_eq!(
            shards.check(&g),
            Err(ResponseError::CoordinatorLoadInProgress)
        );
        // The same, the read failing: the later take-over's slot and the state are left to it.
        *coordinator.lock() = vec![entry(&g)];
        let loaded = take_over(
            &shards,
            &topic,
            3,
            &coordinator,
            |_, from| -> Result<(Keys, Offset), BrokerError> {
                assert_eq!(from, None);
                shards.begin_load(&topic, 0, 4);
                Err(BrokerError::InvalidRequest("disk".into()))
            },
        );
        assert!(loaded.is_err());
        assert_eq!(coordinator.lock().len(), 1);
        assert_eq!(
            shards.check(&g),
            Err(ResponseError::CoordinatorLoadInProgress)
        );
        // The replica stepped down while reading (its controller session lapsed), same epoch:
        // it loads nothing, forgets what it held of the partition and gives the take-over up,
        // to be begun again.
        let loaded = take_over(&shards, &topic, 3, &coordinator, |part, from| {
            let read = read(part, from);
            if from.is_none() {
                p.follow(None, sluice_cluster::LeaderEpoch(3));
            }
            read
        });
        assert_eq!(loaded.unwrap(), None);
        assert!(coordinator.lock().is_empty());
        assert_eq!(shards.check(&g), Err(ResponseError::NotCoordinator));
        lead(&p);
        // Begun in an epoch the replica does not lead in: the same.
        *coordinator.lock() = vec![entry(&g)];
        let loaded = take_over(&shards, &topic, 5, &coordinator, read);
        assert_eq!(loaded.unwrap(), None, "the replica leads in epoch 3");
        assert!(coordinator.lock().is_empty());
        assert_eq!(shards.check(&g), Err(ResponseError::NotCoordinator));
        // A first read that fails gives the take-over up and forgets the partition's keys.
        *coordinator.lock() = vec![entry(&g)];
        let loaded = take_over(
            &shards,
            &topic,
            3,
            &coordinator,
            |_, _| -> Result<(Keys, Offset), BrokerError> {
                Err(BrokerError::InvalidRequest("disk".into()))
            },
        );
        assert!(loaded.is_err());
        assert!(coordinator.lock().is_empty());
        assert_eq!(shards.check(&g), Err(ResponseError::NotCoordinator));
        // Not begun: nothing.
        assert_eq!(
            shards
                .load(&topic, 0, 3, &coordinator, read, replay)
                .unwrap(),
            None
        );
        // Loaded, then a later take-over's second read fails: its keys are forgotten too.
        assert_eq!(
            take_over(&shards, &topic, 3, &coordinator, read).unwrap(),
            Some(1)
        );
        assert_eq!(coordinator.lock().len(), 1);
        let loaded = take_over(
            &shards,
            &topic,
            3,
            &coordinator,
            |p, from| -> Result<(Keys, Offset), BrokerError> {
                match from {
                    None => read(p, from),
                    Some(_) => Err(BrokerError::InvalidRequest("disk".into())),
                }
            },
        );
        assert!(loaded.is_err());
        assert!(coordinator.lock().is_empty());
        assert_eq!(shards.check(&g), Err(ResponseError::NotCoordinator));
    }
}
