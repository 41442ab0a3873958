//! Which partitions of an internal topic (`__consumer_offsets`, `__transaction_state`) this
//! node coordinates. A single node coordinates all of them. In a cluster a coordinator runs
//! for exactly the partitions this node leads: loaded (the partition's records replayed) when
//! leadership arrives, unloaded when it leaves, and its writes carry the leader epoch it was
//! loaded in (Kafka's coordinator epoch). A key (group, transactional id) lives in partition
//! `abs(javaHash(key)) % partitions`, as in Kafka.

use std::collections::HashMap;
use std::sync::Arc;

use kafka_protocol::error::ResponseError;
use parking_lot::RwLock;

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
    /// `None` on a single node (every partition, epoch 0); otherwise partition → the leader
    /// epoch it was loaded in.
    loaded: Option<RwLock<HashMap<i32, i32>>>,
}

impl Shards {
    /// A single node's: every partition of `topic`, once [`Shards::set_topic`] names it.
    pub fn standalone(name: &'static str) -> Shards {
        Shards {
            name,
            topic: RwLock::new(None),
            loaded: None,
        }
    }

    pub fn clustered(name: &'static str) -> Shards {
        Shards {
            name,
            topic: RwLock::new(None),
            loaded: Some(RwLock::new(HashMap::new())),
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

    /// The coordinator epoch of `key` if this node coordinates it; `NOT_COORDINATOR`
    /// otherwise (the client looks the coordinator up again).
    pub fn check(&self, key: &str) -> Result<i32, ResponseError> {
        let partition = self
            .partition_of(key)
            .ok_or(ResponseError::NotCoordinator)?;
        self.epoch(partition)
    }

    /// The coordinator epoch of `partition` if this node coordinates it; `NOT_COORDINATOR`
    /// otherwise.
    pub fn epoch(&self, partition: i32) -> Result<i32, ResponseError> {
        match &self.loaded {
            None => Ok(0),
            Some(loaded) => loaded
                .read()
                .get(&partition)
                .copied()
                .ok_or(ResponseError::NotCoordinator),
        }
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

    /// Everything written so far to the log partition holding `key`, when some of it is not
    /// committed (durable, on a single node) yet.
    pub fn written_so_far(&self, key: &str) -> Waits {
        self.partition(key)
            .ok()
            .and_then(|p| crate::commit::unsettled(&p))
            .into_iter()
            .collect()
    }

    /// The partitions loaded here, with their epochs (empty on a single node).
    pub fn loaded(&self) -> HashMap<i32, i32> {
        self.loaded
            .as_ref()
            .map(|l| l.read().clone())
            .unwrap_or_default()
    }

    /// Takes over partition `index` of `topic` in `epoch`. Call with the coordinator's lock
    /// held, so that no write of the partition's keys slips in between the replay and the
    /// take-over: `replay` forgets the keys the predicate picks, replays the partition's whole
    /// log (a new leader holds it up to its end) and returns how many records it applied.
    pub fn load(
        &self,
        topic: &Arc<Topic>,
        index: i32,
        epoch: i32,
        replay: impl FnOnce(&Partition, &dyn Fn(&str) -> bool) -> Result<usize, BrokerError>,
    ) -> Result<(), BrokerError> {
        let partition = topic
            .partition(index)
            .ok_or_else(|| BrokerError::UnknownTopic(format!("{}-{index}", self.name)))?;
        let count = topic.partition_count();
        self.remove(index);
        self.set_topic(Arc::clone(topic));
        let records = replay(&partition, &|key| partition_for(key, count) == index)?;
        self.insert(index, epoch);
        tracing::info!(
            topic = self.name,
            partition = index,
            epoch,
            records,
            "coordinating an internal partition"
        );
        Ok(())
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

    fn insert(&self, partition: i32, epoch: i32) {
        if let Some(loaded) = &self.loaded {
            loaded.write().insert(partition, epoch);
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
        assert_eq!(single.epoch(7), Ok(0));
        let node = Shards::clustered("t");
        assert_eq!(node.epoch(7), Err(ResponseError::NotCoordinator));
        node.insert(7, 3);
        assert_eq!(node.epoch(7), Ok(3));
        node.remove(7);
        assert_eq!(node.epoch(7), Err(ResponseError::NotCoordinator));
    }
}
