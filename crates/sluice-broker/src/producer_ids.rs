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
}

impl ProducerIds {
    pub fn open(store: Arc<MetadataStore>) -> Result<ProducerIds, BrokerError> {
        let start = store.load_next_producer_id_block()?;
        Ok(ProducerIds {
            store,
            range: Mutex::new((start, start)),
        })
    }

    pub fn next(&self) -> Result<i64, BrokerError> {
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
