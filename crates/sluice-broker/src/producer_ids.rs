//! Producer ids for idempotent producers: unique for the life of the data directory. Ids are
//! reserved a block at a time, the block end made durable before any id in it is handed out,
//! so a restart never reuses one.

use std::sync::Arc;

use parking_lot::Mutex;

use crate::error::BrokerError;
use crate::metadata_store::MetadataStore;

const BLOCK: i64 = 1000;

#[derive(Debug)]
pub struct ProducerIds {
    store: Arc<MetadataStore>,
    /// (next id, end of the reserved block)
    range: Mutex<(i64, i64)>,
    /// In a cluster, blocks come from the controller (unique cluster-wide) instead of the
    /// local store: the blocks granted and not yet used up, oldest first.
    granted: Mutex<Option<std::collections::VecDeque<(i64, i64)>>>,
}

impl ProducerIds {
    pub fn open(store: Arc<MetadataStore>) -> Result<ProducerIds, BrokerError> {
        let start = store.load_next_producer_id_block()?;
        Ok(ProducerIds {
            store,
            range: Mutex::new((start, start)),
            granted: Mutex::new(None),
        })
    }

    /// From now on ids come only from blocks the controller grants ([`ProducerIds::grant`]).
    pub fn use_cluster_blocks(&self) {
        *self.granted.lock() = Some(Default::default());
    }

    /// A block `[first, first + count)` granted by the controller.
    pub fn grant(&self, first: i64, count: i64) {
        if let Some(blocks) = self.granted.lock().as_mut() {
            blocks.push_back((first, first + count));
        }
    }

    /// In a cluster, how many granted ids are left (`None` on a single node).
    pub fn granted_left(&self) -> Option<i64> {
        self.granted
            .lock()
            .as_ref()
            .map(|b| b.iter().map(|(a, z)| z - a).sum())
    }

    pub fn next(&self) -> Result<i64, BrokerError> {
        if let Some(blocks) = self.granted.lock().as_mut() {
            let Some(block) = blocks.front_mut() else {
                return Err(BrokerError::ControllerUnavailable(
                    "no producer ids granted by the controller yet; retry".into(),
                ));
            };
            let id = block.0;
            block.0 += 1;
            if block.0 == block.1 {
                blocks.pop_front();
            }
            return Ok(id);
        }
        let mut range = self.range.lock();
        if range.0 == range.1 {
            let end = range.1 + BLOCK;
            self.store.save_next_producer_id_block(end)?;
            range.1 = end;
        }
        let id = range.0;
        range.0 += 1;
        Ok(id)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_are_never_reused_across_restarts() {
        let dir = tempfile::tempdir().unwrap();
        let store = Arc::new(MetadataStore::open(dir.path()).unwrap());
        let ids = ProducerIds::open(Arc::clone(&store)).unwrap();
        let first: Vec<i64> = (0..1500).map(|_| ids.next().unwrap()).collect();
        assert_eq!(first[0], 0);
        assert_eq!(first[1499], 1499);
        let again = ProducerIds::open(store).unwrap();
        assert_eq!(
            again.next().unwrap(),
            2000,
            "the rest of the reserved block is skipped"
        );
    }
}
