//! Append order for transactional produces that wait for their coordinator (KIP-890).
//!
//! In a cluster, a partition's first write of a transaction is checked with the coordinator
//! before the append. A producer pipelines: the next batch to the same partition arrives
//! while the first still waits, asks too, and its answer may come first (the partition is
//! already in the transaction by then). Appended first, it fails the sequence check and the
//! producer gets OUT_OF_ORDER_SEQUENCE for a batch it will not retry (reproduced with the Java
//! client at 1 KiB batches). So produces that ask take a turn on each partition they ask
//! about, in the order they arrive, and append only after the produce before them on that
//! partition has appended (or given up).
//!
//! Turns of one request are taken together under one lock, so two requests touching the same
//! partitions always queue in the same order on all of them: no cycle, no deadlock.

use std::collections::HashMap;
use std::sync::Arc;

use parking_lot::Mutex;
use tokio::sync::oneshot;

type Key = (String, i32);
type Tails = Arc<Mutex<(u64, HashMap<Key, (u64, oneshot::Receiver<()>)>)>>;

#[derive(Default)]
pub struct AppendTurns {
    /// Per partition: the id of the last produce that took a turn, and what it signals when
    /// it has appended.
    tails: Tails,
}

/// One produce's turns: wait for the produces before it, append, then drop (which lets the
/// next ones go).
pub struct Turn {
    tails: Tails,
    id: u64,
    keys: Vec<Key>,
    before: Vec<oneshot::Receiver<()>>,
    _done: Vec<oneshot::Sender<()>>,
}

impl AppendTurns {
    /// No produce holds a turn anywhere.
    pub fn is_idle(&self) -> bool {
        self.tails.lock().1.is_empty()
    }

    /// Takes a turn on every partition of `asked` and on those of `open` where an earlier
    /// produce still has its turn (synchronously, in arrival order); `None` if that is no
    /// partition at all.
    pub fn take(
        &self,
        asked: impl IntoIterator<Item = Key>,
        open: impl IntoIterator<Item = Key>,
    ) -> Option<Turn> {
        let mut guard = self.tails.lock();
        let (next_id, tails) = &mut *guard;
        let mut keys: Vec<Key> = asked.into_iter().collect();
        keys.extend(open.into_iter().filter(|key| tails.contains_key(key)));
        if keys.is_empty() {
            return None;
        }
        *next_id += 1;
        let id = *next_id;
        keys.sort();
        keys.dedup();
        let mut before = Vec::new();
        let mut done = Vec::new();
        for key in &keys {
            let (tx, rx) = oneshot::channel();
            if let Some((_, previous)) = tails.insert(key.clone(), (id, rx)) {
                before.push(previous);
            }
            done.push(tx);
        }
        Some(Turn {
            tails: Arc::clone(&self.tails),
            id,
            keys,
            before,
            _done: done,
        })
    }
}

impl Turn {
    /// Waits until the produces that took a turn before this one on its partitions have
    /// appended, or were dropped.
    pub async fn wait(&mut self) {
        for previous in self.before.drain(..) {
            // An error means the sender was dropped: that produce is done either way.
            let _ = previous.await;
        }
    }
}

impl Drop for Turn {
    fn drop(&mut self) {
        // Forget the partitions whose last turn is this one, so idle partitions hold nothing.
        let mut guard = self.tails.lock();
        let (_, tails) = &mut *guard;
        for key in &self.keys {
            if tails.get(key).is_some_and(|(id, _)| *id == self.id) {
                tails.remove(key);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(p: i32) -> Key {
        ("t".to_string(), p)
    }

    #[tokio::test]
    async fn a_turn_waits_for_the_turns_taken_before_it_on_the_same_partitions() {
        let turns = AppendTurns::default();
        let first = turns.take([key(0)], []).expect("asked: a turn");
        let mut second = turns.take([key(1)], [key(0), key(3)]).expect("a turn");
        assert_eq!(
            second.keys,
            [key(0), key(1)],
            "no turn on an idle open partition"
        );
        assert!(turns.take([], [key(4)]).is_none(), "nothing to wait for");
        let mut other = turns.take([key(2)], []).expect("asked: a turn");
        other.wait().await; // another partition: no wait
        let waiting = tokio::time::timeout(std::time::Duration::from_millis(50), second.wait());
        assert!(
            waiting.await.is_err(),
            "the second turn went before the first appended"
        );
        drop(first);
        tokio::time::timeout(std::time::Duration::from_secs(5), second.wait())
            .await
            .expect("the second turn goes once the first is done");
        drop(second);
        drop(other);
        assert!(
            turns.tails.lock().1.is_empty(),
            "finished turns leave nothing behind"
        );
    }
}
