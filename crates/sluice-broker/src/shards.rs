//! Which partitions of an internal topic (`__consumer_offsets`, `__transaction_state`) this
//! node coordinates. A single node coordinates all of them. In a cluster a coordinator runs
//! for exactly the partitions this node leads: loaded (the partition's records replayed) when
//! leadership arrives, unloaded when it leaves, and its writes carry the leader epoch it was
//! loaded in (Kafka's coordinator epoch).

use std::collections::HashMap;

use kafka_protocol::error::ResponseError;
use parking_lot::RwLock;

#[derive(Debug)]
pub struct Shards {
    /// `None` on a single node (every partition, epoch 0); otherwise partition → the leader
    /// epoch it was loaded in.
    loaded: Option<RwLock<HashMap<i32, i32>>>,
}

impl Shards {
    pub fn standalone() -> Shards {
        Shards { loaded: None }
    }

    pub fn clustered() -> Shards {
        Shards {
            loaded: Some(RwLock::new(HashMap::new())),
        }
    }

    /// The coordinator epoch of `partition` if this node coordinates it; `NOT_COORDINATOR`
    /// otherwise (the client looks the coordinator up again).
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

    /// The partitions loaded here, with their epochs (empty on a single node).
    pub fn loaded(&self) -> HashMap<i32, i32> {
        self.loaded
            .as_ref()
            .map(|l| l.read().clone())
            .unwrap_or_default()
    }

    pub(crate) fn insert(&self, partition: i32, epoch: i32) {
        if let Some(loaded) = &self.loaded {
            loaded.write().insert(partition, epoch);
        }
    }

    pub(crate) fn remove(&self, partition: i32) {
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
        let single = Shards::standalone();
        assert_eq!(single.epoch(7), Ok(0));
        let node = Shards::clustered();
        assert_eq!(node.epoch(7), Err(ResponseError::NotCoordinator));
        node.insert(7, 3);
        assert_eq!(node.epoch(7), Ok(3));
        node.remove(7);
        assert_eq!(node.epoch(7), Err(ResponseError::NotCoordinator));
    }
}
