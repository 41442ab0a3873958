//! The aborted-transaction index of a partition: for each aborted transaction, its producer
//! and the offsets of its first batch and its abort marker. A `read_committed` fetch returns
//! the entries overlapping what it read, so that the client drops those producers' records.
//!
//! Kept in memory and appended to `aborted.txnindex` (28-byte entries, each with its own
//! CRC-32C) when the marker is written. The file is fsynced before a producer snapshot is
//! written; anything after the snapshot is re-derived by replaying the log at start-up, so an
//! entry lost in a crash comes back, and one whose marker was cut off is dropped.

use std::fs;
use std::io::Write;
use std::path::{Path, PathBuf};

use crate::error::LogError;
use crate::offset::Offset;

const FILE: &str = "aborted.txnindex";
const ENTRY_BYTES: usize = 28;

/// One aborted transaction on this partition.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AbortedTxn {
    pub producer_id: i64,
    pub first_offset: Offset,
    /// The offset of its abort marker.
    pub last_offset: Offset,
}

impl AbortedTxn {
    fn encode(&self) -> [u8; ENTRY_BYTES] {
        let mut out = [0u8; ENTRY_BYTES];
        out[0..8].copy_from_slice(&self.producer_id.to_be_bytes());
        out[8..16].copy_from_slice(&self.first_offset.0.to_be_bytes());
        out[16..24].copy_from_slice(&self.last_offset.0.to_be_bytes());
        let crc = crc32c::crc32c(&out[0..24]);
        out[24..28].copy_from_slice(&crc.to_be_bytes());
        out
    }

    fn decode(bytes: &[u8]) -> Option<AbortedTxn> {
        let body = bytes.get(0..24)?;
        let crc = u32::from_be_bytes(bytes.get(24..28)?.try_into().ok()?);
        if crc32c::crc32c(body) != crc {
            return None;
        }
        let at = |i: usize| {
            body.get(i..i + 8)
                .and_then(|b| b.try_into().ok())
                .map(i64::from_be_bytes)
        };
        Some(AbortedTxn {
            producer_id: at(0)?,
            first_offset: Offset(at(8)?),
            last_offset: Offset(at(16)?),
        })
    }
}

#[derive(Debug)]
pub struct AbortedIndex {
    path: PathBuf,
    entries: Vec<AbortedTxn>,
    file: Option<fs::File>,
    /// An append to the file failed: later entries stay in memory only, so that the file
    /// never holds an entry past one it lacks (a restart's replay, which adds only entries
    /// past the file's last, would then never bring the missing one back).
    append_failed: bool,
}

impl AbortedIndex {
    /// Loads the index of the log in `dir`, keeping only entries whose marker is below
    /// `log_end` (the rest were cut off with the log's tail) and rewriting the file if any
    /// entry was dropped or damaged.
    pub fn open(dir: &Path, log_end: Offset) -> Result<AbortedIndex, LogError> {
        let path = dir.join(FILE);
        let bytes = match fs::read(&path) {
            Ok(b) => b,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Vec::new(),
            Err(e) => return Err(LogError::io("read", &path, e)),
        };
        let mut entries = Vec::with_capacity(bytes.len() / ENTRY_BYTES);
        let mut clean = bytes.len() % ENTRY_BYTES == 0;
        for chunk in bytes.chunks(ENTRY_BYTES) {
            match AbortedTxn::decode(chunk) {
                Some(e) if e.last_offset < log_end => entries.push(e),
                _ => {
                    clean = false;
                    break;
                }
            }
        }
        let mut index = AbortedIndex {
            path,
            entries,
            file: None,
            append_failed: false,
        };
        if !clean {
            index.rewrite()?;
        }
        Ok(index)
    }

    fn rewrite(&mut self) -> Result<(), LogError> {
        let tmp = self.path.with_extension("txnindex.tmp");
        let mut bytes = Vec::with_capacity(self.entries.len() * ENTRY_BYTES);
        for e in &self.entries {
            bytes.extend_from_slice(&e.encode());
        }
        let mut file = fs::File::create(&tmp).map_err(|e| LogError::io("create", &tmp, e))?;
        file.write_all(&bytes)
            .and_then(|()| file.sync_all())
            .map_err(|e| LogError::io("write", &tmp, e))?;
        fs::rename(&tmp, &self.path).map_err(|e| LogError::io("rename", &self.path, e))?;
        self.file = None;
        self.append_failed = false; // the file holds every entry again
        match self.path.parent() {
            Some(dir) => crate::checkpoint::sync_dir(dir),
            None => Ok(()),
        }
    }

    /// The newest entry's marker offset.
    pub fn last_marker(&self) -> Option<Offset> {
        self.entries.last().map(|e| e.last_offset)
    }

    /// Adds an entry (markers arrive in offset order; one already present is ignored).
    pub fn push(&mut self, entry: AbortedTxn) -> Result<(), LogError> {
        if self.last_marker().is_some_and(|l| l >= entry.last_offset) {
            return Ok(());
        }
        // In memory even when the file cannot take it: readers must see the transaction
        // aborted (the caller takes the log offline, and a restart re-derives the entry).
        self.entries.push(entry);
        if self.append_failed {
            return Err(LogError::io(
                "append to",
                &self.path,
                std::io::Error::other("an earlier append to this file failed"),
            ));
        }
        let written = self.append_to_file(entry);
        self.append_failed = written.is_err();
        written
    }

    fn append_to_file(&mut self, entry: AbortedTxn) -> Result<(), LogError> {
        if self.file.is_none() {
            let f = fs::OpenOptions::new()
                .create(true)
                .append(true)
                .open(&self.path)
                .map_err(|e| LogError::io("open", &self.path, e))?;
            self.file = Some(f);
        }
        if let Some(f) = self.file.as_mut() {
            f.write_all(&entry.encode())
                .map_err(|e| LogError::io("append to", &self.path, e))?;
        }
        Ok(())
    }

    pub fn sync(&mut self) -> Result<(), LogError> {
        if let Some(f) = &self.file {
            f.sync_data()
                .map_err(|e| LogError::io("fsync", &self.path, e))?;
        }
        Ok(())
    }

    /// Aborted transactions that may have records in `[from, to)`: those whose marker is at
    /// or after `from` and whose first batch is before `to`.
    pub fn overlapping(&self, from: Offset, to: Offset) -> Vec<AbortedTxn> {
        let start = self.entries.partition_point(|e| e.last_offset < from);
        self.entries[start..]
            .iter()
            .filter(|e| e.first_offset < to)
            .copied()
            .collect()
    }

    /// Forgets entries wholly below the log start (after retention).
    pub fn trim(&mut self, log_start: Offset) -> Result<(), LogError> {
        let keep = self.entries.partition_point(|e| e.last_offset < log_start);
        if keep > 0 {
            self.entries.drain(..keep);
            self.rewrite()?;
        }
        Ok(())
    }

    /// Drops the entries whose marker lies in `[from, to)` but is not among `markers` (in
    /// offset order: those the cleaned segment there still holds).
    pub fn keep_markers_in(
        &mut self,
        from: Offset,
        to: Offset,
        markers: &[Offset],
    ) -> Result<(), LogError> {
        let gone = |e: &AbortedTxn| {
            (from..to).contains(&e.last_offset) && markers.binary_search(&e.last_offset).is_err()
        };
        if !self.entries.iter().any(gone) {
            return Ok(());
        }
        let kept: Vec<AbortedTxn> = self.entries.iter().filter(|e| !gone(e)).copied().collect();
        let previous = std::mem::replace(&mut self.entries, kept);
        if let Err(e) = self.rewrite() {
            // The file still holds them: so does memory, and the next cleaning tries again.
            self.entries = previous;
            return Err(e);
        }
        Ok(())
    }

    /// Drops entries whose marker is at or past `end` (the log was truncated).
    pub fn truncate(&mut self, end: Offset) -> Result<(), LogError> {
        let keep = self.entries.partition_point(|e| e.last_offset < end);
        if keep < self.entries.len() {
            self.entries.truncate(keep);
            self.rewrite()?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn txn(pid: i64, first: i64, last: i64) -> AbortedTxn {
        AbortedTxn {
            producer_id: pid,
            first_offset: Offset(first),
            last_offset: Offset(last),
        }
    }

    #[test]
    fn after_a_failed_append_the_file_takes_no_later_entry() {
        let dir = tempfile::tempdir().unwrap();
        let mut index = AbortedIndex::open(dir.path(), Offset(100)).unwrap();
        // The file cannot be created: a directory stands in its place.
        fs::create_dir(dir.path().join(FILE)).unwrap();
        assert!(index.push(txn(1, 0, 5)).is_err());
        fs::remove_dir(dir.path().join(FILE)).unwrap();
        // The file could take the next one now, but must not hold it without the first.
        assert!(index.push(txn(2, 6, 9)).is_err());
        assert!(!dir.path().join(FILE).exists());
        assert_eq!(
            index.overlapping(Offset(0), Offset(100)),
            vec![txn(1, 0, 5), txn(2, 6, 9)],
            "readers see both"
        );
        // A rewrite (here: the cleaner removed the first marker) puts every entry in the
        // file again, and appends go on.
        index.keep_markers_in(Offset(0), Offset(6), &[]).unwrap();
        index.push(txn(3, 10, 12)).unwrap();
        let reopened = AbortedIndex::open(dir.path(), Offset(100)).unwrap();
        assert_eq!(
            reopened.overlapping(Offset(0), Offset(100)),
            vec![txn(2, 6, 9), txn(3, 10, 12)]
        );
    }

    #[test]
    fn persists_overlaps_and_trims() {
        let dir = tempfile::tempdir().unwrap();
        let mut index = AbortedIndex::open(dir.path(), Offset(100)).unwrap();
        index.push(txn(1, 0, 5)).unwrap();
        index.push(txn(2, 3, 9)).unwrap();
        index.push(txn(2, 3, 9)).unwrap();
        index.push(txn(3, 20, 30)).unwrap();
        assert_eq!(
            index.overlapping(Offset(6), Offset(25)),
            vec![txn(2, 3, 9), txn(3, 20, 30)]
        );
        assert_eq!(index.overlapping(Offset(0), Offset(3)), vec![txn(1, 0, 5)]);
        drop(index);
        // Reopened with a log cut at 25: the entry whose marker was cut off goes.
        let mut index = AbortedIndex::open(dir.path(), Offset(25)).unwrap();
        assert_eq!(index.overlapping(Offset(0), Offset(100)).len(), 2);
        index.trim(Offset(6)).unwrap();
        assert_eq!(
            index.overlapping(Offset(0), Offset(100)),
            vec![txn(2, 3, 9)]
        );
        drop(index);
        let index = AbortedIndex::open(dir.path(), Offset(100)).unwrap();
        assert_eq!(index.last_marker(), Some(Offset(9)));
    }

    #[test]
    fn a_torn_entry_is_dropped() {
        let dir = tempfile::tempdir().unwrap();
        let mut index = AbortedIndex::open(dir.path(), Offset(100)).unwrap();
        index.push(txn(1, 0, 5)).unwrap();
        index.push(txn(1, 6, 8)).unwrap();
        drop(index);
        let path = dir.path().join(FILE);
        let bytes = fs::read(&path).unwrap();
        fs::write(&path, &bytes[..bytes.len() - 3]).unwrap();
        let index = AbortedIndex::open(dir.path(), Offset(100)).unwrap();
        assert_eq!(index.last_marker(), Some(Offset(5)));
        assert_eq!(fs::read(&path).unwrap().len(), ENTRY_BYTES);
    }
}
