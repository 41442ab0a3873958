//! KIP-890's verification guard: a partition leader that asks a transaction's coordinator
//! whether a first transactional write may open the transaction here (a peer call that takes
//! milliseconds) must not append it if the transaction ended meanwhile. The guard is taken
//! before the question and dropped by the producer's next transaction marker on the partition;
//! the append checks, under the partition's lock, that the guard it took is still there. So a
//! transaction aborted between the coordinator's "yes" and the append (its abort marker is
//! written first) cannot be reopened by a late write that nobody would end.
//!
//! ```text
//!   produce (first write here) ─ take guard g ─▶ ask coordinator ─ yes ─▶ append if guard = g
//!   EndTxn markers on this partition ─────────────▶ drop the producer's guard
//! ```
//! Pipelined first writes of one transaction share the guard (the second finds it and takes
//! the same one), and it stays until the marker: a later write of the same transaction finds
//! the transaction open and is not checked.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};

/// Tokens, unique in the process.
static NEXT: AtomicU64 = AtomicU64::new(1);

/// The guards of one partition, by producer id.
#[derive(Debug, Default)]
pub struct VerificationGuards {
    by_producer: HashMap<i64, u64>,
}

impl VerificationGuards {
    /// The producer's guard, taken now if it has none.
    pub fn take(&mut self, producer_id: i64) -> u64 {
        *self
            .by_producer
            .entry(producer_id)
            .or_insert_with(|| NEXT.fetch_add(1, Ordering::Relaxed))
    }

    /// Whether `guard` is still the producer's (no marker since it was taken).
    pub fn holds(&self, producer_id: i64, guard: u64) -> bool {
        self.by_producer.get(&producer_id) == Some(&guard)
    }

    /// A transaction marker of the producer was written: its transaction ended here.
    pub fn drop_for(&mut self, producer_id: i64) {
        self.by_producer.remove(&producer_id);
    }

    pub fn len(&self) -> usize {
        self.by_producer.len()
    }

    pub fn is_empty(&self) -> bool {
        self.by_producer.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_marker_between_the_question_and_the_append_voids_the_guard() {
        let mut guards = VerificationGuards::default();
        let g = guards.take(7);
        assert_eq!(guards.take(7), g, "pipelined first writes share the guard");
        assert!(guards.holds(7, g));
        guards.drop_for(7);
        assert!(!guards.holds(7, g));
        // The producer's next transaction takes a new guard; the old one stays void.
        let next = guards.take(7);
        assert_ne!(next, g);
        assert!(!guards.holds(7, g));
        assert!(guards.holds(7, next));
        assert!(!guards.holds(8, next));
        assert_eq!(guards.len(), 1);
    }
}
