//! The metadata group's Raft log on disk: `<dir>/raft.log`, an append-only file of operations
//! (append entries, truncate after, purge up to), each framed `len:u32 crc32c:u32 json`, and
//! `<dir>/vote.json`. The whole log is also kept in memory (metadata is small); start-up replays
//! the file, cutting a torn or corrupt tail (an operation is acknowledged only after fsync, so a
//! torn one was never acknowledged). When purged entries make up most of the file it is
//! rewritten with only what is left.

// openraft's `StorageError` is the error type its storage traits require; helpers return it too.
#![allow(clippy::result_large_err)]

use std::collections::BTreeMap;
use std::fmt::Debug;
use std::fs::{File, OpenOptions};
use std::io::{Read, Write};
use std::ops::RangeBounds;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use openraft::storage::{LogFlushed, LogState, RaftLogStorage};
use openraft::{Entry, LogId, OptionalSend, RaftLogReader, StorageIOError, Vote};
use parking_lot::Mutex;
use serde::{Deserialize, Serialize};

use super::{MetaTypes, StorageError};

#[derive(Debug, Serialize, Deserialize)]
enum LogOp {
    Append(Vec<Entry<MetaTypes>>),
    /// Remove every entry at or after this index.
    TruncateFrom(u64),
    /// Entries up to and including this one are no longer needed (a snapshot has them).
    PurgeTo(LogId<u64>),
}

#[derive(Debug, Default)]
struct Inner {
    entries: BTreeMap<u64, Entry<MetaTypes>>,
    last_purged: Option<LogId<u64>>,
    vote: Option<Vote<u64>>,
    committed: Option<LogId<u64>>,
    /// Operations in the file, and how many of them a rewrite would drop.
    ops_in_file: usize,
    file: Option<File>,
}

/// The log store; clones share it (openraft takes one for writing and readers).
#[derive(Debug, Clone)]
pub struct LogStore {
    dir: PathBuf,
    inner: Arc<Mutex<Inner>>,
}

fn io_error(e: impl std::error::Error + 'static) -> StorageError {
    StorageIOError::write_logs(openraft::AnyError::new(&e)).into()
}

impl LogStore {
    /// Opens (or creates) the log in `dir`, replaying it.
    pub fn open(dir: &Path) -> std::io::Result<LogStore> {
        std::fs::create_dir_all(dir)?;
        let mut inner = Inner::default();
        let path = dir.join("raft.log");
        let mut bytes = Vec::new();
        if let Ok(mut f) = File::open(&path) {
            f.read_to_end(&mut bytes)?;
        }
        let mut at = 0;
        while let Some((op, len)) = decode_frame(&bytes[at..]) {
            apply_op(&mut inner, op);
            inner.ops_in_file += 1;
            at += len;
        }
        let file = OpenOptions::new()
            .create(true)
            .append(true)
            .read(true)
            .open(&path)?;
        if at < bytes.len() {
            tracing::warn!(
                kept = at,
                dropped = bytes.len() - at,
                "metadata log: cut a torn tail"
            );
            file.set_len(at as u64)?;
            file.sync_all()?;
        }
        inner.file = Some(file);
        inner.vote = match std::fs::read(dir.join("vote.json")) {
            Ok(b) => serde_json::from_slice(&b).ok(),
            Err(_) => None,
        };
        Ok(LogStore {
            dir: dir.to_path_buf(),
            inner: Arc::new(Mutex::new(inner)),
        })
    }

    fn write_op(&self, inner: &mut Inner, op: &LogOp) -> Result<(), StorageError> {
        let frame = encode_frame(op)?;
        let file = inner
            .file
            .as_mut()
            .ok_or_else(|| io_error(std::io::Error::other("log closed")))?;
        file.write_all(&frame).map_err(io_error)?;
        file.sync_data().map_err(io_error)?;
        inner.ops_in_file += 1;
        Ok(())
    }

    /// Rewrites the file with only the live entries once it holds mostly dead operations.
    fn maybe_rewrite(&self, inner: &mut Inner) -> Result<(), StorageError> {
        if inner.ops_in_file < 256 || inner.ops_in_file < 4 * inner.entries.len().max(1) {
            return Ok(());
        }
        let mut ops = Vec::new();
        if let Some(purged) = inner.last_purged {
            ops.push(LogOp::PurgeTo(purged));
        }
        ops.push(LogOp::Append(inner.entries.values().cloned().collect()));
        let mut out = Vec::new();
        for op in &ops {
            out.extend(encode_frame(op)?);
        }
        sluice_log::replace_file(&self.dir, "raft.log", &out).map_err(io_error)?;
        inner.file = Some(
            OpenOptions::new()
                .append(true)
                .read(true)
                .open(self.dir.join("raft.log"))
                .map_err(io_error)?,
        );
        inner.ops_in_file = ops.len();
        Ok(())
    }
}

/// `len:u32 crc32c:u32 json` of one operation.
fn encode_frame(op: &LogOp) -> Result<Vec<u8>, StorageError> {
    let json = serde_json::to_vec(op).map_err(io_error)?;
    let mut frame = Vec::with_capacity(json.len() + 8);
    frame.extend_from_slice(&(json.len() as u32).to_be_bytes());
    frame.extend_from_slice(&crc32c::crc32c(&json).to_be_bytes());
    frame.extend_from_slice(&json);
    Ok(frame)
}

fn decode_frame(bytes: &[u8]) -> Option<(LogOp, usize)> {
    let len = u32::from_be_bytes(bytes.get(0..4)?.try_into().ok()?) as usize;
    let crc = u32::from_be_bytes(bytes.get(4..8)?.try_into().ok()?);
    let json = bytes.get(8..8 + len)?;
    if crc32c::crc32c(json) != crc {
        return None;
    }
    Some((serde_json::from_slice(json).ok()?, 8 + len))
}

fn apply_op(inner: &mut Inner, op: LogOp) {
    match op {
        LogOp::Append(entries) => {
            for e in entries {
                inner.entries.insert(e.log_id.index, e);
            }
        }
        LogOp::TruncateFrom(index) => {
            inner.entries.split_off(&index);
        }
        LogOp::PurgeTo(log_id) => {
            inner.entries = inner.entries.split_off(&(log_id.index + 1));
            inner.last_purged = Some(log_id);
        }
    }
}

impl RaftLogReader<MetaTypes> for LogStore {
    async fn try_get_log_entries<RB: RangeBounds<u64> + Clone + Debug + OptionalSend>(
        &mut self,
        range: RB,
    ) -> Result<Vec<Entry<MetaTypes>>, StorageError> {
        let inner = self.inner.lock();
        Ok(inner.entries.range(range).map(|(_, e)| e.clone()).collect())
    }
}

impl RaftLogStorage<MetaTypes> for LogStore {
    type LogReader = LogStore;

    async fn get_log_state(&mut self) -> Result<LogState<MetaTypes>, StorageError> {
        let inner = self.inner.lock();
        let last = inner
            .entries
            .values()
            .next_back()
            .map(|e| e.log_id)
            .or(inner.last_purged);
        Ok(LogState {
            last_purged_log_id: inner.last_purged,
            last_log_id: last,
        })
    }

    async fn get_log_reader(&mut self) -> Self::LogReader {
        self.clone()
    }

    async fn save_vote(&mut self, vote: &Vote<u64>) -> Result<(), StorageError> {
        let json = serde_json::to_vec(vote).map_err(io_error)?;
        sluice_log::replace_file(&self.dir, "vote.json", &json).map_err(io_error)?;
        self.inner.lock().vote = Some(*vote);
        Ok(())
    }

    async fn read_vote(&mut self) -> Result<Option<Vote<u64>>, StorageError> {
        Ok(self.inner.lock().vote)
    }

    async fn save_committed(&mut self, committed: Option<LogId<u64>>) -> Result<(), StorageError> {
        self.inner.lock().committed = committed;
        Ok(())
    }

    async fn read_committed(&mut self) -> Result<Option<LogId<u64>>, StorageError> {
        Ok(self.inner.lock().committed)
    }

    async fn append<I>(
        &mut self,
        entries: I,
        callback: LogFlushed<MetaTypes>,
    ) -> Result<(), StorageError>
    where
        I: IntoIterator<Item = Entry<MetaTypes>> + OptionalSend,
        I::IntoIter: OptionalSend,
    {
        let entries: Vec<Entry<MetaTypes>> = entries.into_iter().collect();
        let mut inner = self.inner.lock();
        let op = LogOp::Append(entries);
        let written = self.write_op(&mut inner, &op);
        if written.is_ok() {
            apply_op(&mut inner, op);
        }
        drop(inner);
        callback.log_io_completed(
            written
                .as_ref()
                .map(|_| ())
                .map_err(|e| std::io::Error::other(e.to_string())),
        );
        written
    }

    async fn truncate(&mut self, log_id: LogId<u64>) -> Result<(), StorageError> {
        let mut inner = self.inner.lock();
        let op = LogOp::TruncateFrom(log_id.index);
        self.write_op(&mut inner, &op)?;
        apply_op(&mut inner, op);
        Ok(())
    }

    async fn purge(&mut self, log_id: LogId<u64>) -> Result<(), StorageError> {
        let mut inner = self.inner.lock();
        let op = LogOp::PurgeTo(log_id);
        self.write_op(&mut inner, &op)?;
        apply_op(&mut inner, op);
        self.maybe_rewrite(&mut inner)
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)] // test code: a failed unwrap is a failed test

    use openraft::{CommittedLeaderId, EntryPayload};

    use super::*;

    fn entry(index: u64) -> Entry<MetaTypes> {
        Entry {
            log_id: LogId::new(CommittedLeaderId::new(1, 1), index),
            payload: EntryPayload::Blank,
        }
    }

    fn indexes(store: &LogStore) -> Vec<u64> {
        store.inner.lock().entries.keys().copied().collect()
    }

    fn write(store: &LogStore, op: LogOp) {
        let mut inner = store.inner.lock();
        store.write_op(&mut inner, &op).unwrap();
        apply_op(&mut inner, op);
    }

    #[test]
    fn replay_keeps_whole_operations_and_cuts_a_torn_tail() {
        let dir = tempfile::tempdir().unwrap();
        let store = LogStore::open(dir.path()).unwrap();
        write(&store, LogOp::Append((0..5).map(entry).collect()));
        write(&store, LogOp::TruncateFrom(3));
        write(&store, LogOp::Append(vec![entry(3)]));
        write(&store, LogOp::PurgeTo(entry(0).log_id));
        assert_eq!(indexes(&store), [1, 2, 3]);
        drop(store);
        // A crash in the middle of the next write leaves half a frame.
        let path = dir.path().join("raft.log");
        let whole = std::fs::read(&path).unwrap().len();
        let mut f = OpenOptions::new().append(true).open(&path).unwrap();
        f.write_all(&[0, 0, 1, 0, 7, 7, 7]).unwrap();
        drop(f);
        let store = LogStore::open(dir.path()).unwrap();
        assert_eq!(indexes(&store), [1, 2, 3]);
        assert_eq!(store.inner.lock().last_purged, Some(entry(0).log_id));
        assert_eq!(
            std::fs::read(&path).unwrap().len(),
            whole,
            "the torn tail is cut"
        );
        // And the log goes on from there.
        write(&store, LogOp::Append(vec![entry(4)]));
        drop(store);
        assert_eq!(indexes(&LogStore::open(dir.path()).unwrap()), [1, 2, 3, 4]);
    }

    #[test]
    fn a_flipped_bit_ends_the_replay_there() {
        let dir = tempfile::tempdir().unwrap();
        let store = LogStore::open(dir.path()).unwrap();
        write(&store, LogOp::Append(vec![entry(0)]));
        write(&store, LogOp::Append(vec![entry(1)]));
        drop(store);
        let path = dir.path().join("raft.log");
        let mut bytes = std::fs::read(&path).unwrap();
        let last = bytes.len() - 2;
        bytes[last] ^= 0x40;
        std::fs::write(&path, &bytes).unwrap();
        assert_eq!(indexes(&LogStore::open(dir.path()).unwrap()), [0]);
    }
}
