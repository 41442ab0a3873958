//! Log compaction (`cleanup.policy=compact`): the newest record per key survives in sealed
//! segments; tombstones (null values) go once older than `delete.retention.ms`. Offsets never
//! change (a compacted segment has gaps); the active segment is never touched.
//!
//! Transactions: only segments below the first open transaction are cleaned; records of
//! aborted transactions do not count as a key's newest value and are removed; committed
//! transactional records are compacted like any other; a transaction's marker goes once none
//! of its records is left and the marker is older than `delete.retention.ms`.
//!
//! Idempotent producers: the log's newest data batch of each producer it still knows is kept,
//! emptied of its records if none survives (as Kafka's cleaner does), and a batch that loses
//! records keeps its last offset and last sequence. A follower that copies the cleaned log, or
//! a recovery that reads it, then knows every producer's next sequence as the leader does; a
//! producer that carries on after a failover is neither refused as unknown nor as out of order.
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

use crate::batch::{BatchHeader, ATTR_COMPRESSION_MASK, HEADER_BYTES, LOG_OVERHEAD};
use crate::error::LogError;
use crate::offset::Offset;
use crate::producer_state::sequence_after;
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
    /// The last offset of each known producer's newest data batch (from the log's producer
    /// state): those batches are kept.
    pub(crate) producers_last_batches: HashMap<i64, Offset>,
    /// The log's count of cuts at its end when this was planned.
    pub(crate) truncations: u64,
}

/// A cleaned segment waiting to be swapped in.
#[derive(Debug)]
pub struct Cleaned {
    pub(crate) base: Offset,
    pub(crate) old_size_bytes: u64,
    pub(crate) path: PathBuf,
    pub(crate) new_size_bytes: u64,
    pub(crate) records_removed: u64,
    /// The transaction markers the cleaned segment holds, in offset order: an aborted
    /// transaction's index entry whose marker lay in the segment and is not among them goes
    /// (a `read_committed` client told of an aborted transaction skips its producer's records
    /// until it meets the marker). Entries left by a crash between a swap and the index's
    /// rewrite, or by an earlier version, go at the next cleaning of their segment.
    pub(crate) kept_markers: Vec<Offset>,
    /// The plan's [`CompactionPlan::truncations`].
    pub(crate) truncations: u64,
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
        let producers_last = !header.is_control()
            && header.producer_id >= 0
            && self.producers_last_batches.get(&header.producer_id) == Some(&header.last_offset());
        // A kept transactional batch keeps its transaction's marker (a replica that reads the
        // batch must see its transaction end).
        let keep_empty = |live_txn_data: &mut HashSet<i64>| {
            if header.is_transactional() {
                live_txn_data.insert(header.producer_id);
            }
            Some(Cow::Owned(emptied(bytes)))
        };
        if self.is_aborted(header) {
            *removed += u64::try_from(header.record_count).unwrap_or(0);
            return producers_last.then(|| keep_empty(live_txn_data)).flatten();
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
            return producers_last.then(|| keep_empty(live_txn_data)).flatten();
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
        let new_base = RecordBatchEncoder::encode(&mut encoded, &keep, &options)
            .ok()
            .and_then(|()| BatchHeader::parse(&encoded).ok())
            .filter(|h| h.total_bytes() == encoded.len())
            .map(|h| h.base_offset);
        let Some(new_base) = new_base else {
            return Some(Cow::Borrowed(bytes));
        };
        restore_header(&mut encoded, new_base, header);
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
            let mut kept_markers = Vec::new();
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
                if header.is_control() {
                    kept_markers.push(header.base_offset);
                }
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
                kept_markers,
                truncations: self.truncations,
            });
        }
        Ok(cleaned)
    }
}

/// Gives a re-encoded batch back what the encoder cannot know: the stored leader epoch (it
/// takes the records'), the original last offset and last sequence (it ends at the last
/// surviving record; a producer's next sequence follows the original), the base sequence of
/// a batch without one, and a LogAppendTime batch's flag and time (it writes CreateTime with
/// the records' newest; consumers, the time index and tombstone expiry read the batch's).
fn restore_header(encoded: &mut [u8], new_base: Offset, original: &BatchHeader) {
    let new_base = new_base.0;
    encoded[12..16].copy_from_slice(&original.partition_leader_epoch.0.to_be_bytes());
    let shift = new_base - original.base_offset.0;
    // Both deltas fit: the new base lies inside the original batch's offset range.
    let last_delta = i32::try_from(original.last_offset().0 - new_base).unwrap_or(i32::MAX);
    encoded[23..27].copy_from_slice(&last_delta.to_be_bytes());
    let base_sequence = if original.base_sequence < 0 {
        original.base_sequence
    } else {
        sequence_after(
            original.base_sequence,
            i32::try_from(shift).unwrap_or_default(),
        )
    };
    encoded[53..57].copy_from_slice(&base_sequence.to_be_bytes());
    if original.is_log_append_time() {
        crate::batch::stamp_log_append_time(encoded, original.max_timestamp);
    } else {
        crate::batch::reseal(encoded);
    }
}

/// A batch's header alone, with no records (Kafka's "empty batch" that keeps a producer's
/// newest offsets and sequences): uncompressed, record count 0, its CRC recomputed.
fn emptied(batch: &[u8]) -> Vec<u8> {
    let mut out = batch[..HEADER_BYTES].to_vec();
    let length = (HEADER_BYTES - LOG_OVERHEAD) as i32;
    out[8..12].copy_from_slice(&length.to_be_bytes());
    let attributes = i16::from_be_bytes([out[21], out[22]]) & !ATTR_COMPRESSION_MASK;
    out[21..23].copy_from_slice(&attributes.to_be_bytes());
    out[57..61].copy_from_slice(&0i32.to_be_bytes());
    crate::batch::reseal(&mut out);
    out
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
    // The marker's name is durable before the rename can be: a cleaned segment found without
    // it would be read as gap-free and cut at its first gap.
    crate::checkpoint::sync_dir(dir)?;
    let target = log_path(dir, cleaned.base);
    fs::rename(&cleaned.path, &target).map_err(io("rename", &target))?;
    crate::checkpoint::sync_dir(dir)
}
