//! Log compaction (`cleanup.policy=compact`): the newest record per key survives in sealed
//! segments; tombstones (null values) go once older than `delete.retention.ms`. Offsets never
//! change (a compacted segment has gaps); the active segment is never touched.
//!
//! Transactions: only segments below the first open transaction are cleaned; records of
//! aborted transactions do not count as a key's newest value and are removed; committed
//! transactional records are compacted like any other; a transaction's marker goes once none
//! of its records is left and the marker is older than `delete.retention.ms`.
//!
//! Three phases, so that produce and fetch are not held up:
//! 1. under the log's lock: list the sealed segments ([`Log::compaction_plan`]);
//! 2. without it: read them, find each key's newest offset, write each segment's survivors to
//!    `<base>.log.cleaned` and fsync ([`CompactionPlan::run`]); a `throttle` callback between
//!    segments lets the caller bound the cleaner's I/O rate;
//! 3. under the lock again: swap the cleaned files in ([`Log::finish_compaction`]), skipping
//!    any segment that changed meanwhile (deleted by retention, truncated).
//!
//! Crash safety: until the rename, `<base>.log` is the old, valid segment and the `.cleaned`
//! file is debris (deleted on open). The segment's index files are removed and a
//! `<base>.compacted` marker written before the rename, so after a crash at any point the
//! segment is either the old one or the new one, and its indexes are rebuilt from it.

use std::borrow::Cow;
use std::collections::{HashMap, HashSet};
use std::fs::{self, File};
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use bytes::{Bytes, BytesMut};
use kafka_protocol::records::{
    Compression, RecordBatchDecoder, RecordBatchEncoder, RecordEncodeOptions,
};

use crate::batch::BatchHeader;
use crate::error::LogError;
use crate::offset::Offset;
use crate::scan::{BatchScanner, Scanned};
use crate::segment::{file_stem, log_path};
use crate::txn_index::AbortedTxn;

/// A sealed segment as the cleaner sees it.
#[derive(Debug, Clone)]
pub(crate) struct SealedSegment {
    pub base: Offset,
    pub file: Arc<File>,
    pub size_bytes: u64,
}

/// What phase 1 hands to phase 2.
#[derive(Debug)]
pub struct CompactionPlan {
    pub(crate) dir: PathBuf,
    pub(crate) segments: Vec<SealedSegment>,
    pub(crate) tombstone_cutoff_ms: i64,
    /// Aborted transactions with records in the segments.
    pub(crate) aborted: Vec<AbortedTxn>,
}

/// A cleaned segment waiting to be swapped in.
#[derive(Debug)]
pub struct Cleaned {
    pub(crate) base: Offset,
    pub(crate) old_size_bytes: u64,
    pub(crate) path: PathBuf,
    pub(crate) new_size_bytes: u64,
    pub(crate) records_removed: u64,
}

/// What a compaction did.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct CompactionReport {
    pub segments: usize,
    pub records_removed: u64,
    pub bytes_before: u64,
    pub bytes_after: u64,
}

pub(crate) fn cleaned_path(dir: &Path, base: Offset) -> PathBuf {
    dir.join(format!("{}.log.cleaned", file_stem(base)))
}

pub(crate) fn marker_path(dir: &Path, base: Offset) -> PathBuf {
    dir.join(format!("{}.compacted", file_stem(base)))
}

/// Writes the segment at `base`'s "offsets may have gaps" marker and fsyncs it (the caller
/// syncs the directory).
pub(crate) fn write_marker(dir: &Path, base: Offset) -> Result<(), LogError> {
    let marker = marker_path(dir, base);
    File::create(&marker)
        .and_then(|f| f.sync_all())
        .map_err(io("create", &marker))
}

fn compression_of(header: &BatchHeader) -> Compression {
    match header.compression() {
        1 => Compression::Gzip,
        2 => Compression::Snappy,
        3 => Compression::Lz4,
        4 => Compression::Zstd,
        _ => Compression::None,
    }
}

fn io<'a>(op: &'static str, path: &'a Path) -> impl FnOnce(std::io::Error) -> LogError + 'a {
    move |e| LogError::io(op, path, e)
}

impl CompactionPlan {
    pub fn is_empty(&self) -> bool {
        self.segments.is_empty()
    }

    /// Whether the batch belongs to an aborted transaction.
    fn is_aborted(&self, header: &BatchHeader) -> bool {
        header.is_transactional()
            && !header.is_control()
            && self.aborted.iter().any(|a| {
                a.producer_id == header.producer_id
                    && a.first_offset <= header.base_offset
                    && header.base_offset < a.last_offset
            })
    }

    /// What is left of one batch: nothing, the batch as it is, or its surviving records
    /// re-encoded (same compression, producer, leader epoch and timestamp type). A batch that
    /// does not decode or re-encode is kept as it is: the cleaner never loses what it cannot
    /// read.
    fn clean_batch<'a>(
        &self,
        header: &BatchHeader,
        bytes: &'a [u8],
        newest: &HashMap<Bytes, i64>,
        live_txn_data: &mut HashSet<i64>,
        removed: &mut u64,
    ) -> Option<Cow<'a, [u8]>> {
        if self.is_aborted(header) {
            *removed += u64::try_from(header.record_count).unwrap_or(0);
            return None;
        }
        if header.is_control() {
            let data_left = live_txn_data.remove(&header.producer_id);
            if !data_left && header.max_timestamp < self.tombstone_cutoff_ms {
                *removed += 1;
                return None;
            }
            return Some(Cow::Borrowed(bytes));
        }
        let mut buf = Bytes::copy_from_slice(bytes);
        let Ok(set) = RecordBatchDecoder::decode(&mut buf) else {
            if header.is_transactional() {
                live_txn_data.insert(header.producer_id);
            }
            return Some(Cow::Borrowed(bytes));
        };
        let total = set.records.len();
        let keep: Vec<_> = set
            .records
            .into_iter()
            .filter(|r| {
                let Some(key) = &r.key else { return false };
                let newest_here = newest.get(key) == Some(&r.offset);
                let expired_tombstone =
                    r.value.is_none() && header.max_timestamp < self.tombstone_cutoff_ms;
                newest_here && !expired_tombstone
            })
            .collect();
        if keep.is_empty() {
            *removed += total as u64;
            return None;
        }
        if header.is_transactional() {
            live_txn_data.insert(header.producer_id);
        }
        if keep.len() == total {
            return Some(Cow::Borrowed(bytes));
        }
        let mut encoded = BytesMut::new();
        let options = RecordEncodeOptions {
            version: 2,
            compression: compression_of(header),
        };
        if RecordBatchEncoder::encode(&mut encoded, &keep, &options).is_err() || encoded.len() < 16
        {
            return Some(Cow::Borrowed(bytes));
        }
        // The encoder sets the epoch from the records; keep the stored one.
        encoded[12..16].copy_from_slice(&header.partition_leader_epoch.0.to_be_bytes());
        // It also writes CreateTime with the records' newest time: a LogAppendTime batch keeps
        // its flag and the broker's time (consumers, the time index and tombstone expiry read
        // the batch's time, not the producers').
        if header.is_log_append_time() {
            crate::batch::stamp_log_append_time(&mut encoded, header.max_timestamp);
        }
        *removed += (total - keep.len()) as u64;
        Some(Cow::Owned(encoded.to_vec()))
    }

    /// Phase 2: finds the newest offset of every key, then writes each segment's survivors.
    /// `throttle(bytes)` is called after each segment is read or written.
    pub fn run(&self, mut throttle: impl FnMut(u64)) -> Result<Vec<Cleaned>, LogError> {
        let mut newest: HashMap<Bytes, i64> = HashMap::new();
        for segment in &self.segments {
            for_each_record(segment, |record, header| {
                if self.is_aborted(header) {
                    return;
                }
                if let Some(key) = &record.key {
                    let e = newest.entry(key.clone()).or_insert(record.offset);
                    *e = (*e).max(record.offset);
                }
            })?;
            throttle(segment.size_bytes);
        }
        let mut cleaned = Vec::new();
        // Producers with surviving transactional records since their last marker: a marker
        // whose transaction has none left goes once past `delete.retention.ms`, as in Kafka.
        let mut live_txn_data: HashSet<i64> = HashSet::new();
        for segment in &self.segments {
            let path = cleaned_path(&self.dir, segment.base);
            let out = File::create(&path).map_err(io("create", &path))?;
            let mut written = 0u64;
            let mut removed = 0u64;
            let mut failure = None;
            let scan = for_each_batch(segment, |header, bytes| {
                if failure.is_some() {
                    return;
                }
                let Some(survivor) =
                    self.clean_batch(header, bytes, &newest, &mut live_txn_data, &mut removed)
                else {
                    return;
                };
                if let Err(e) = out.write_all_at(&survivor, written) {
                    failure = Some(e);
                }
                written += survivor.len() as u64;
            });
            scan?;
            if let Some(e) = failure {
                let _ = fs::remove_file(&path);
                return Err(LogError::io("write", &path, e));
            }
            out.sync_all().map_err(io("fsync", &path))?;
            throttle(written);
            cleaned.push(Cleaned {
                base: segment.base,
                old_size_bytes: segment.size_bytes,
                path,
                new_size_bytes: written,
                records_removed: removed,
            });
        }
        Ok(cleaned)
    }
}

fn for_each_batch(
    segment: &SealedSegment,
    mut f: impl FnMut(&BatchHeader, &[u8]),
) -> Result<(), LogError> {
    let mut scanner = BatchScanner::new(&segment.file, 0, segment.size_bytes);
    loop {
        match scanner
            .next_batch()
            .map_err(|e| LogError::io("read", format!("segment {}", segment.base), e))?
        {
            Scanned::Batch { bytes, .. } => f(&BatchHeader::parse(bytes)?, bytes),
            Scanned::End | Scanned::Torn => return Ok(()),
        }
    }
}

fn for_each_record(
    segment: &SealedSegment,
    mut f: impl FnMut(&kafka_protocol::records::Record, &BatchHeader),
) -> Result<(), LogError> {
    let mut decode_error = None;
    for_each_batch(segment, |header, bytes| {
        if header.is_control() {
            return;
        }
        let mut buf = Bytes::copy_from_slice(bytes);
        match RecordBatchDecoder::decode(&mut buf) {
            Ok(set) => set.records.iter().for_each(|r| f(r, header)),
            Err(e) => decode_error = Some(format!("{e:#}")),
        }
    })?;
    if let Some(e) = decode_error {
        tracing::warn!(base = segment.base.0, error = %e, "compaction skipped a batch it could not decode");
    }
    Ok(())
}

/// Makes a cleaned file the segment (phase 3, called under the log's lock).
pub(crate) fn swap_in(dir: &Path, cleaned: &Cleaned) -> Result<(), LogError> {
    write_marker(dir, cleaned.base)?;
    for ext in ["index", "timeindex"] {
        crate::segment::remove_if_exists(&dir.join(format!("{}.{ext}", file_stem(cleaned.base))))?;
    }
    let target = log_path(dir, cleaned.base);
    fs::rename(&cleaned.path, &target).map_err(io("rename", &target))?;
    crate::checkpoint::sync_dir(dir)
}
