//! The sparse time index of one segment, for ListOffsets by timestamp and retention.
//!
//! An entry `(max_timestamp_before, relative_offset)` says: every batch of this segment before
//! `relative_offset` has a max timestamp of at most `max_timestamp_before`. Entries are taken
//! at the offset index's points whenever the running maximum has grown, so timestamps in the
//! index only increase. To find the first batch with a timestamp ≥ T, start walking at the
//! last entry whose timestamp is < T.
//!
//! On disk (`<base>.timeindex`): 12-byte entries, big-endian `timestamp: i64, relative_offset: u32`.

use crate::error::LogError;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TimeEntry {
    pub max_timestamp_before: i64,
    pub relative_offset: u32,
}

#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct TimeIndex {
    entries: Vec<TimeEntry>,
}

const TIME_ENTRY_BYTES: usize = 12;

impl TimeIndex {
    /// Records the running maximum at an index point, if it grew since the last entry.
    pub fn maybe_push(&mut self, entry: TimeEntry) {
        let grew = self.entries.last().is_none_or(|last| {
            entry.max_timestamp_before > last.max_timestamp_before
                && entry.relative_offset > last.relative_offset
        });
        if grew {
            self.entries.push(entry);
        }
    }

    /// Where to start walking to find the first batch with a timestamp ≥ `timestamp`:
    /// the last entry whose running maximum is still below it.
    pub fn start_for(&self, timestamp: i64) -> Option<TimeEntry> {
        let after = self
            .entries
            .partition_point(|e| e.max_timestamp_before < timestamp);
        after.checked_sub(1).map(|i| self.entries[i])
    }

    pub fn last(&self) -> Option<TimeEntry> {
        self.entries.last().copied()
    }

    /// Drops entries at or after `relative_offset` (the log was truncated there).
    pub fn truncate_to_offset(&mut self, relative_offset: u32) {
        let keep = self
            .entries
            .partition_point(|e| e.relative_offset < relative_offset);
        self.entries.truncate(keep);
    }

    pub fn encode(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(self.entries.len() * TIME_ENTRY_BYTES);
        for e in &self.entries {
            out.extend_from_slice(&e.max_timestamp_before.to_be_bytes());
            out.extend_from_slice(&e.relative_offset.to_be_bytes());
        }
        out
    }

    /// Decodes a time index file whose segment holds offsets below `relative_end`.
    pub fn decode(bytes: &[u8], relative_end: u64) -> Result<TimeIndex, LogError> {
        if !bytes.len().is_multiple_of(TIME_ENTRY_BYTES) {
            return Err(LogError::Config(
                "time index is not a whole number of entries".into(),
            ));
        }
        let mut index = TimeIndex::default();
        for c in bytes.chunks_exact(TIME_ENTRY_BYTES) {
            let entry = TimeEntry {
                max_timestamp_before: i64::from_be_bytes([
                    c[0], c[1], c[2], c[3], c[4], c[5], c[6], c[7],
                ]),
                relative_offset: u32::from_be_bytes([c[8], c[9], c[10], c[11]]),
            };
            let ordered = index.entries.last().is_none_or(|last| {
                last.max_timestamp_before < entry.max_timestamp_before
                    && last.relative_offset < entry.relative_offset
            });
            if !ordered || u64::from(entry.relative_offset) >= relative_end {
                return Err(LogError::Config(
                    "time index entries are inconsistent".into(),
                ));
            }
            index.entries.push(entry);
        }
        Ok(index)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keeps_only_growing_maxima_and_finds_the_start() {
        let mut t = TimeIndex::default();
        for (ts, off) in [(100, 10), (90, 20), (200, 30), (300, 40)] {
            t.maybe_push(TimeEntry {
                max_timestamp_before: ts,
                relative_offset: off,
            });
        }
        assert_eq!(t.encode().len(), 3 * TIME_ENTRY_BYTES);
        assert!(t.start_for(50).is_none());
        assert_eq!(t.start_for(150).unwrap().relative_offset, 10);
        assert_eq!(t.start_for(200).unwrap().relative_offset, 10);
        assert_eq!(t.start_for(201).unwrap().relative_offset, 30);
        let decoded = TimeIndex::decode(&t.encode(), 41).unwrap();
        assert_eq!(decoded, t);
        assert!(TimeIndex::decode(&t.encode(), 40).is_err());
        t.truncate_to_offset(30);
        assert_eq!(t.last().unwrap().relative_offset, 10);
    }
}
