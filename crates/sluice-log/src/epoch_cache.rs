//! The leader-epoch cache (Kafka's `leader-epoch-checkpoint`, KIP-101): for each leader epoch
//! that wrote to this log, the first offset it wrote. It answers OffsetForLeaderEpoch — where
//! did epoch E end in this log? — which a follower asks its new leader to find where their logs
//! diverge, and a consumer asks to detect truncation (KIP-320).
//!
//! On disk as Kafka writes it: a version line (`0`), a count, then `epoch start_offset` lines,
//! replaced atomically. An entry is written *before* the first batch of its epoch, so the file
//! never lacks an epoch that the log holds; entries past the log end (a write that failed or
//! was cut by recovery) are dropped when the log opens or is truncated. A missing or unreadable
//! file is rebuilt from the batches.

use std::fs;
use std::path::Path;

use crate::error::LogError;
use crate::offset::{LeaderEpoch, Offset};

pub(crate) const FILE_NAME: &str = "leader-epoch-checkpoint";

#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct EpochCache {
    /// (epoch, first offset), both strictly increasing.
    entries: Vec<(LeaderEpoch, Offset)>,
}

impl EpochCache {
    /// The cache in `dir`, or `None` if there is no readable one.
    pub(crate) fn read(dir: &Path) -> Option<EpochCache> {
        let text = fs::read_to_string(dir.join(FILE_NAME)).ok()?;
        let mut lines = text.lines();
        if lines.next()?.trim() != "0" {
            return None;
        }
        let count: usize = lines.next()?.trim().parse().ok()?;
        let mut cache = EpochCache::default();
        for line in lines.take(count) {
            let (epoch, offset) = line.trim().split_once(' ')?;
            let entry = (
                LeaderEpoch(epoch.parse().ok()?),
                Offset(offset.parse().ok()?),
            );
            if cache
                .entries
                .last()
                .is_some_and(|last| last.0 >= entry.0 || last.1 > entry.1)
            {
                return None;
            }
            cache.entries.push(entry);
        }
        (cache.entries.len() == count).then_some(cache)
    }

    pub(crate) fn write(&self, dir: &Path) -> Result<(), LogError> {
        let mut text = format!("0\n{}\n", self.entries.len());
        for (epoch, offset) in &self.entries {
            text.push_str(&format!("{} {}\n", epoch.0, offset.0));
        }
        crate::replace_file(dir, FILE_NAME, text.as_bytes())
            .map_err(|e| LogError::io("replace", dir.join(FILE_NAME), e))
    }

    pub fn entries(&self) -> &[(LeaderEpoch, Offset)] {
        &self.entries
    }

    pub fn latest(&self) -> Option<LeaderEpoch> {
        self.entries.last().map(|e| e.0)
    }

    /// Notes that `epoch` starts at `offset` if it is newer than the latest; returns whether
    /// the cache changed. Older or negative epochs change nothing.
    pub fn assign(&mut self, epoch: LeaderEpoch, offset: Offset) -> bool {
        if epoch.0 < 0 || self.latest().is_some_and(|latest| latest >= epoch) {
            return false;
        }
        self.entries.push((epoch, offset));
        true
    }

    /// Forgets the epochs that start at or after `end` (the log was cut there); returns whether
    /// the cache changed.
    pub fn truncate_from_end(&mut self, end: Offset) -> bool {
        let before = self.entries.len();
        self.entries.retain(|(_, start)| *start < end);
        self.entries.len() != before
    }

    /// The log now starts at `start`: epochs that ended before it go, and the one it falls in
    /// starts there. Returns whether the cache changed.
    pub fn truncate_from_start(&mut self, start: Offset) -> bool {
        let covering = self.entries.iter().rposition(|(_, s)| *s <= start);
        let Some(keep_from) = covering else {
            return false;
        };
        let changed = keep_from > 0 || self.entries[keep_from].1 != start;
        self.entries.drain(..keep_from);
        self.entries[0].1 = start;
        changed
    }

    /// The epoch that wrote `offset`: the newest one that started at or before it (what
    /// Kafka's ListOffsets answers beside an offset it found). `None` below the first epoch
    /// here or when the cache is empty.
    pub fn epoch_at(&self, offset: Offset) -> Option<LeaderEpoch> {
        self.entries
            .iter()
            .rev()
            .find(|(_, start)| *start <= offset)
            .map(|(epoch, _)| *epoch)
    }

    /// Where `epoch` ended in a log ending at `log_end`: the largest epoch at or below it that
    /// this log has, and the first offset of the next epoch (or `log_end` for the latest).
    /// `None` when `epoch` is newer than any here or the cache is empty: Kafka answers
    /// UNDEFINED_EPOCH and UNDEFINED_EPOCH_OFFSET then.
    pub fn end_offset_for(
        &self,
        epoch: LeaderEpoch,
        log_end: Offset,
    ) -> Option<(LeaderEpoch, Offset)> {
        let latest = self.latest()?;
        if epoch == latest {
            return Some((latest, log_end));
        }
        if epoch > latest {
            return None;
        }
        let next = self.entries.iter().position(|(e, _)| *e > epoch)?;
        let end = self.entries[next].1;
        // Below the first epoch here: the requested epoch, ending where this log begins.
        let found = if next == 0 {
            epoch
        } else {
            self.entries[next - 1].0
        };
        Some((found, end))
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)] // test code: a failed unwrap is a failed test

    use super::*;

    fn cache(entries: &[(i32, i64)]) -> EpochCache {
        EpochCache {
            entries: entries
                .iter()
                .map(|(e, o)| (LeaderEpoch(*e), Offset(*o)))
                .collect(),
        }
    }

    #[test]
    fn end_offsets_follow_kafkas_rules() {
        let c = cache(&[(1, 0), (3, 10), (4, 25)]);
        let end = Offset(40);
        let at = |e: i32| {
            c.end_offset_for(LeaderEpoch(e), end)
                .map(|(e, o)| (e.0, o.0))
        };
        assert_eq!(at(4), Some((4, 40)), "the latest epoch ends at the log end");
        assert_eq!(at(3), Some((3, 25)));
        assert_eq!(
            at(2),
            Some((1, 10)),
            "an epoch this log skipped: the one before it"
        );
        assert_eq!(at(1), Some((1, 10)));
        assert_eq!(at(0), Some((0, 0)), "older than everything here");
        assert_eq!(at(5), None, "newer than anything here");
        assert_eq!(
            EpochCache::default().end_offset_for(LeaderEpoch(0), end),
            None
        );
    }

    #[test]
    fn the_epoch_that_wrote_an_offset() {
        let c = cache(&[(1, 5), (3, 10), (4, 25)]);
        let at = |o: i64| c.epoch_at(Offset(o)).map(|e| e.0);
        assert_eq!(at(4), None, "before the first epoch here");
        assert_eq!(at(5), Some(1));
        assert_eq!(at(9), Some(1));
        assert_eq!(at(10), Some(3));
        assert_eq!(at(24), Some(3));
        assert_eq!(at(25), Some(4));
        assert_eq!(at(1_000), Some(4), "the latest goes on to the log end");
        assert_eq!(EpochCache::default().epoch_at(Offset(0)), None);
    }

    #[test]
    fn assigning_and_truncating() {
        let mut c = EpochCache::default();
        assert!(c.assign(LeaderEpoch(0), Offset(0)));
        assert!(
            !c.assign(LeaderEpoch(0), Offset(5)),
            "same epoch: no new entry"
        );
        assert!(!c.assign(LeaderEpoch(-1), Offset(5)));
        assert!(c.assign(LeaderEpoch(2), Offset(8)));
        assert!(c.assign(LeaderEpoch(5), Offset(20)));
        assert!(c.truncate_from_end(Offset(20)));
        assert_eq!(c, cache(&[(0, 0), (2, 8)]));
        assert!(!c.truncate_from_end(Offset(9)));
        assert!(c.truncate_from_start(Offset(12)));
        assert_eq!(c, cache(&[(2, 12)]));
        assert!(!c.truncate_from_start(Offset(12)));
    }

    #[test]
    fn round_trips_through_kafkas_file_format_and_refuses_garbage() {
        let dir = tempfile::tempdir().unwrap();
        let c = cache(&[(0, 0), (3, 17)]);
        c.write(dir.path()).unwrap();
        assert_eq!(
            fs::read_to_string(dir.path().join(FILE_NAME)).unwrap(),
            "0\n2\n0 0\n3 17\n"
        );
        assert_eq!(EpochCache::read(dir.path()), Some(c));
        for bad in [
            "1\n0\n",
            "0\n2\n0 0\n",
            "0\n2\n3 0\n1 5\n",
            "0\n1\nx y\n",
            "",
        ] {
            fs::write(dir.path().join(FILE_NAME), bad).unwrap();
            assert_eq!(EpochCache::read(dir.path()), None, "{bad:?}");
        }
    }
}
