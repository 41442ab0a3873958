//! The sparse offset index of one segment: every `index.interval.bytes` of log, an entry
//! mapping a batch's offset (relative to the segment base) to its byte position. A lookup
//! returns the closest entry at or before an offset; the reader then walks batch headers.
//!
//! On disk (`<base>.index`): 8-byte entries, big-endian `relative_offset: u32, position: u32`.
//! The index of the active segment lives in memory and is written when the segment is sealed
//! or the log is closed; a missing or inconsistent file is rebuilt from the log.

use crate::error::LogError;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct IndexEntry {
    pub relative_offset: u32,
    pub position: u32,
}

#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct OffsetIndex {
    entries: Vec<IndexEntry>,
}

pub(crate) const OFFSET_ENTRY_BYTES: usize = 8;

impl OffsetIndex {
    pub fn push(&mut self, entry: IndexEntry) {
        debug_assert!(self.entries.last().is_none_or(|last| {
            last.relative_offset < entry.relative_offset && last.position < entry.position
        }));
        self.entries.push(entry);
    }

    /// The last entry whose offset is at or before `relative_offset`.
    pub fn floor(&self, relative_offset: u32) -> Option<IndexEntry> {
        let after = self
            .entries
            .partition_point(|e| e.relative_offset <= relative_offset);
        after.checked_sub(1).map(|i| self.entries[i])
    }

    pub fn last(&self) -> Option<IndexEntry> {
        self.entries.last().copied()
    }

    pub fn len(&self) -> usize {
        self.entries.len()
    }

    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// Drops entries at or after `position` (the log was truncated there).
    pub fn truncate_to_position(&mut self, position: u32) {
        let keep = self.entries.partition_point(|e| e.position < position);
        self.entries.truncate(keep);
    }

    pub fn encode(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(self.entries.len() * OFFSET_ENTRY_BYTES);
        for e in &self.entries {
            out.extend_from_slice(&e.relative_offset.to_be_bytes());
            out.extend_from_slice(&e.position.to_be_bytes());
        }
        out
    }

    /// Decodes an index file, refusing anything that cannot be right for a log of
    /// `log_bytes`: a partial entry, entries out of order, or a position past the end.
    pub fn decode(bytes: &[u8], log_bytes: u64) -> Result<OffsetIndex, LogError> {
        if !bytes.len().is_multiple_of(OFFSET_ENTRY_BYTES) {
            return Err(LogError::Config(format!(
                "offset index of {} bytes is not a whole number of entries",
                bytes.len()
            )));
        }
        let mut index = OffsetIndex::default();
        for chunk in bytes.chunks_exact(OFFSET_ENTRY_BYTES) {
            let entry = IndexEntry {
                relative_offset: u32::from_be_bytes([chunk[0], chunk[1], chunk[2], chunk[3]]),
                position: u32::from_be_bytes([chunk[4], chunk[5], chunk[6], chunk[7]]),
            };
            let ordered = index.entries.last().is_none_or(|last| {
                last.relative_offset < entry.relative_offset && last.position < entry.position
            });
            if !ordered || u64::from(entry.position) >= log_bytes {
                return Err(LogError::Config(
                    "offset index entries are inconsistent".into(),
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

    fn index(pairs: &[(u32, u32)]) -> OffsetIndex {
        let mut i = OffsetIndex::default();
        for &(relative_offset, position) in pairs {
            i.push(IndexEntry {
                relative_offset,
                position,
            });
        }
        i
    }

    #[test]
    fn floor_finds_the_entry_at_or_before() {
        let i = index(&[(0, 0), (10, 4096), (25, 8200)]);
        assert_eq!(i.floor(0).unwrap().position, 0);
        assert_eq!(i.floor(9).unwrap().position, 0);
        assert_eq!(i.floor(10).unwrap().position, 4096);
        assert_eq!(i.floor(1000).unwrap().position, 8200);
        assert!(index(&[(5, 100)]).floor(4).is_none());
    }

    #[test]
    fn round_trips_and_rejects_damage() {
        let i = index(&[(0, 0), (10, 4096), (25, 8200)]);
        let bytes = i.encode();
        assert_eq!(OffsetIndex::decode(&bytes, 9000).unwrap(), i);
        assert!(OffsetIndex::decode(&bytes[..bytes.len() - 1], 9000).is_err());
        assert!(
            OffsetIndex::decode(&bytes, 8000).is_err(),
            "position past the log end"
        );
        let mut swapped = bytes.clone();
        swapped.swap(3, 11);
        assert!(OffsetIndex::decode(&swapped, 9000).is_err());
    }

    #[test]
    fn truncation_drops_entries_past_the_cut() {
        let mut i = index(&[(0, 0), (10, 4096), (25, 8200)]);
        i.truncate_to_position(8200);
        assert_eq!(i.len(), 2);
        i.truncate_to_position(1);
        assert_eq!(i.len(), 1);
    }
}
