//! One partition's log: an ordered set of segments, the last one active.
//!
//! ```text
//!  log_start_offset                         durable_offset   next_offset (log end)
//!  │ seg 0 (sealed) │ seg 1 (sealed) │ seg 2 (active) ....│.............│
//! ```
//! Invariants, asserted where they move: `log_start ≤ durable ≤ next_offset`; segments are
//! in base-offset order and each ends at or before the next one's base.
//!
//! The log is synchronous and single-writer (the caller holds it behind a lock). Work that
//! must not happen under that lock is handed out as values: a [`ReadPlan`] copies data, a
//! [`FlushJob`] fsyncs. The caller chooses when and on which thread to run them.

use std::collections::BTreeMap;
use std::fs;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use bytes::Bytes;
use kafka_protocol::records::RecordBatchDecoder;

use crate::batch::{self, check_stored, BatchHeader, ValidatedBatch};
use crate::checkpoint::Checkpoint;
use crate::clock::Clock;
use crate::config::LogConfig;
use crate::control::Marker;
use crate::epoch_cache::EpochCache;
use crate::error::LogError;
use crate::flush::FlushJob;
use crate::offset::{LeaderEpoch, Offset};
use crate::producer_state::{self, OpenTxn, ProducerStates, SequenceCheck};
use crate::read::ReadPlan;
use crate::segment::{AppendFailure, OpenMode, Segment};
use crate::txn_index::{AbortedIndex, AbortedTxn};

/// What an append assigned.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AppendInfo {
    pub base_offset: Offset,
    pub last_offset: Offset,
    /// The broker time stamped on the batches, for LogAppendTime topics; -1 otherwise.
    pub log_append_time_ms: i64,
    /// The batch was a producer's retry of one already in the log: nothing was written and
    /// the offsets are the original ones.
    pub duplicate: bool,
}

/// What start-up recovery found and did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RecoveryReport {
    pub segments: usize,
    pub scanned_segments: usize,
    pub truncated_bytes: u64,
    pub removed_segments: usize,
}

#[derive(Debug)]
pub struct Log {
    dir: PathBuf,
    config: LogConfig,
    clock: Arc<dyn Clock>,
    segments: BTreeMap<Offset, Segment>,
    log_start_offset: Offset,
    next_offset: Offset,
    durable_offset: Offset,
    /// Files written since the last fsync other than the active segment (sealed segments and
    /// their index files).
    unsynced: Vec<Arc<fs::File>>,
    checkpoint: Checkpoint,
    producers: ProducerStates,
    aborted: AbortedIndex,
    /// Each leader epoch's first offset (`epoch_cache.rs`).
    epochs: EpochCache,
    /// Set when an I/O failure left the files in a state we could not undo.
    offline: Option<String>,
    /// How many times the log was cut back at its end (`truncate_to`, `reset_to`): a
    /// compaction planned before a cut is not swapped in after it (see `finish_compaction`).
    truncations: u64,
}

impl Log {
    /// Opens (or creates) the log in `dir`, recovering from whatever a crash left behind:
    /// segments after the recovery point are scanned batch by batch, a torn or corrupt tail is
    /// cut off (and any later segment dropped), damaged index files are rebuilt.
    pub fn open(
        dir: &Path,
        config: LogConfig,
        clock: Arc<dyn Clock>,
    ) -> Result<(Log, RecoveryReport), LogError> {
        config.validate()?;
        fs::create_dir_all(dir).map_err(|e| LogError::io("create log directory", dir, e))?;
        let bases = list_segments(dir)?;
        let checkpoint = Checkpoint::read(dir);
        let now_ms = clock.now_ms();
        let mut report = RecoveryReport::default();
        let mut segments = BTreeMap::new();
        let mut previous_end = Offset(0);
        let mut damaged = false;
        for (i, &base) in bases.iter().enumerate() {
            if damaged || base < previous_end {
                // Everything after a damaged segment (or overlapping an earlier one) follows a
                // hole in the log; serving it would skip records silently.
                tracing::warn!(dir = %dir.display(), base = base.0, "removing segment after damaged log data");
                for ext in ["log", "index", "timeindex", "compacted"] {
                    crate::segment::remove_if_exists(
                        &dir.join(format!("{}.{ext}", crate::segment::file_stem(base))),
                    )?;
                }
                report.removed_segments += 1;
                continue;
            }
            let successor = bases.get(i + 1).copied();
            let cleanly_closed = successor.is_none()
                && checkpoint
                    .clean_active
                    .is_some_and(|(clean_base, clean_bytes)| {
                        clean_base == base
                            && fs::metadata(crate::segment::log_path(dir, base))
                                .is_ok_and(|m| m.len() == clean_bytes)
                    });
            let trusted =
                cleanly_closed || successor.is_some_and(|next| next <= checkpoint.recovery_point);
            let mode = if trusted {
                OpenMode::Trusted
            } else {
                OpenMode::Recover
            };
            if mode == OpenMode::Recover {
                report.scanned_segments += 1;
            }
            let opened = Segment::open(dir, base, mode, config.index_interval_bytes, now_ms)?;
            // A scanned segment that stops short of its successor lost its tail in the crash
            // (a compacted one may legitimately end early).
            let short = mode == OpenMode::Recover
                && !opened.segment.is_compacted()
                && successor.is_some_and(|next| opened.segment.next_offset() != next);
            if opened.truncated_bytes > 0 || short {
                tracing::warn!(
                    dir = %dir.display(),
                    base = base.0,
                    bytes = opened.truncated_bytes,
                    "truncated a torn or corrupt tail"
                );
                report.truncated_bytes += opened.truncated_bytes;
                damaged = true;
            }
            if mode == OpenMode::Recover {
                opened
                    .segment
                    .file()
                    .sync_all()
                    .map_err(|e| LogError::io("fsync", crate::segment::log_path(dir, base), e))?;
            }
            previous_end = opened.segment.next_offset();
            segments.insert(base, opened.segment);
        }
        if segments.is_empty() {
            segments.insert(
                Offset(0),
                Segment::create(dir, Offset(0), config.index_interval_bytes)?,
            );
        }
        let next_offset = segments
            .values()
            .next_back()
            .map_or(Offset(0), Segment::next_offset);
        // DeleteRecords may have moved the start into the first segment (never past the end:
        // a crash may have cut the log below it).
        let log_start_offset = (*segments.keys().next().unwrap_or(&Offset(0)))
            .max(checkpoint.log_start.min(next_offset));
        let active_base = *segments.keys().next_back().unwrap_or(&Offset(0));
        // From here on a crash must scan the active segment again.
        let checkpoint = Checkpoint {
            recovery_point: active_base,
            clean_active: None,
            log_start: log_start_offset,
        };
        checkpoint.write(dir)?;
        report.segments = segments.len();
        let mut log = Log {
            dir: dir.to_path_buf(),
            config,
            clock,
            segments,
            log_start_offset,
            next_offset,
            durable_offset: next_offset,
            unsynced: Vec::new(),
            checkpoint,
            producers: ProducerStates::default(),
            aborted: AbortedIndex::open(dir, next_offset)?,
            epochs: EpochCache::default(),
            offline: None,
            truncations: 0,
        };
        log.load_epochs()?;
        log.rebuild_producer_state()?;
        log.check_invariants();
        Ok((log, report))
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    pub fn config(&self) -> &LogConfig {
        &self.config
    }

    /// Applies new settings; they take effect from the next append or retention pass.
    pub fn set_config(&mut self, config: LogConfig) -> Result<(), LogError> {
        config.validate()?;
        self.config = config;
        Ok(())
    }

    pub fn log_start_offset(&self) -> Offset {
        self.log_start_offset
    }

    /// One past the last stored offset (the log end offset).
    pub fn next_offset(&self) -> Offset {
        self.next_offset
    }

    /// Everything below this offset has been fsynced.
    pub fn durable_offset(&self) -> Offset {
        self.durable_offset
    }

    pub fn size_bytes(&self) -> u64 {
        self.segments.values().map(Segment::size_bytes).sum()
    }

    pub fn segment_count(&self) -> usize {
        self.segments.len()
    }

    pub fn is_offline(&self) -> bool {
        self.offline.is_some()
    }

    fn check_online(&self) -> Result<(), LogError> {
        match &self.offline {
            Some(reason) => Err(LogError::Offline {
                path: self.dir.clone(),
                reason: reason.clone(),
            }),
            None => Ok(()),
        }
    }

    fn check_invariants(&self) {
        debug_assert!(self.log_start_offset <= self.durable_offset);
        debug_assert!(self.durable_offset <= self.next_offset);
        debug_assert!(self
            .segments
            .values()
            .zip(self.segments.values().skip(1))
            .all(|(a, b)| a.next_offset() <= b.base_offset));
    }

    fn active(&self) -> &Segment {
        self.segments
            .values()
            .next_back()
            .expect("a log always has an active segment")
    }

    fn active_mut(&mut self) -> &mut Segment {
        self.segments
            .values_mut()
            .next_back()
            .expect("a log always has an active segment")
    }

    /// Appends a producer's validated batch, assigning it the next offsets and stamping
    /// `leader_epoch` (and the broker's time, on LogAppendTime topics). An idempotent
    /// producer's retry of a batch already here is not written again: its original offsets
    /// come back with `duplicate` set.
    pub fn append(
        &mut self,
        mut batch: ValidatedBatch,
        leader_epoch: LeaderEpoch,
    ) -> Result<AppendInfo, LogError> {
        self.check_online()?;
        if let SequenceCheck::Duplicate {
            base_offset,
            last_offset,
        } = self.producers.check(&batch.header)?
        {
            return Ok(AppendInfo {
                base_offset,
                last_offset,
                log_append_time_ms: -1,
                duplicate: true,
            });
        }
        let now_ms = self.clock.now_ms();
        let log_append_time =
            self.config.timestamp_type == crate::config::TimestampType::LogAppendTime;
        let base_offset = self.next_offset;
        batch::patch_base_offset(&mut batch.bytes, base_offset, leader_epoch);
        if log_append_time {
            batch::stamp_log_append_time(&mut batch.bytes, now_ms);
            batch.header.max_timestamp = now_ms;
        }
        batch.header.base_offset = base_offset;
        batch.header.partition_leader_epoch = leader_epoch;
        self.write(&batch.bytes, std::slice::from_ref(&batch.header), now_ms)?;
        Ok(AppendInfo {
            base_offset,
            last_offset: batch.header.last_offset(),
            log_append_time_ms: if log_append_time { now_ms } else { -1 },
            duplicate: false,
        })
    }

    /// Appends batches that already carry their offsets (a follower copying its leader):
    /// each is checked in full and must start at or after the end of what comes before it.
    /// A batch may start after it: a compacted leader no longer holds the offsets in between
    /// (Kafka's followers take such gaps too). The segments that get a gap are marked
    /// ([`Segment::mark_gaps`]) before it is written, so that recovery keeps it.
    pub fn append_assigned(&mut self, bytes: &[u8]) -> Result<AppendInfo, LogError> {
        self.check_online()?;
        let mut headers = Vec::new();
        let mut expected = self.next_offset;
        let mut gaps = false;
        let mut at = 0;
        while at < bytes.len() {
            let extent =
                batch::peek_extent(&bytes[at..]).ok_or(crate::error::BatchError::Truncated {
                    needed: batch::OFFSET_RANGE_BYTES,
                    available: bytes.len() - at,
                })?;
            let end = at + extent.total_bytes;
            let header = check_stored(bytes.get(at..end).ok_or(
                crate::error::BatchError::BadLength {
                    declared: (extent.total_bytes - batch::LOG_OVERHEAD) as i32,
                    available: bytes.len() - at,
                },
            )?)?;
            if header.base_offset < expected {
                return Err(LogError::NonContiguous {
                    expected,
                    got: header.base_offset,
                });
            }
            gaps |= header.base_offset > expected;
            expected = header.last_offset().plus(1);
            headers.push(header);
            at = end;
        }
        let Some(first) = headers.first().copied() else {
            return Err(
                crate::error::BatchError::InvalidRecords("no batch to append".into()).into(),
            );
        };
        let now_ms = self.clock.now_ms();
        if gaps {
            // The gap may fall inside the active segment or at its end (when these batches go
            // to a new segment, the active one stops short of its successor's base), or
            // inside the new segment: the active segment is marked, the roll made here (the
            // write then finds no roll to make), and the segment written to marked, all
            // before a byte of the batches is written.
            self.active_mut().mark_gaps()?;
            let written = self
                .maybe_roll(
                    bytes.len() as u64,
                    first.base_offset,
                    expected.plus(-1),
                    now_ms,
                )
                .and_then(|()| self.active_mut().mark_gaps())
                .and_then(|()| self.write(bytes, &headers, now_ms));
            if written.is_err() {
                self.drop_empty_segment_above_end();
            }
            written?;
        } else {
            self.write(bytes, &headers, now_ms)?;
        }
        Ok(AppendInfo {
            base_offset: first.base_offset,
            last_offset: expected.plus(-1),
            log_append_time_ms: -1,
            duplicate: false,
        })
    }

    fn write(
        &mut self,
        bytes: &[u8],
        headers: &[BatchHeader],
        now_ms: i64,
    ) -> Result<(), LogError> {
        let (Some(first), Some(last)) = (headers.first(), headers.last()) else {
            return Ok(());
        };
        // A new leader epoch is on disk before its first batch is.
        let mut new_epoch = false;
        for header in headers {
            new_epoch |= self
                .epochs
                .assign(header.partition_leader_epoch, header.base_offset);
        }
        if new_epoch {
            if let Err(e) = self.epochs.write(&self.dir) {
                // Not on disk, so not in memory either: the next append in this epoch writes
                // it again instead of finding it already known.
                self.epochs.truncate_from_end(self.next_offset);
                return Err(e);
            }
        }
        let written = self.write_batches(bytes, headers, first, last, now_ms);
        if written.is_err() && self.epochs.truncate_from_end(self.next_offset) {
            if let Err(e) = self.epochs.write(&self.dir) {
                tracing::warn!(dir = %self.dir.display(), error = %e, "could not drop a failed append's epoch; the next start will");
            }
        }
        written
    }

    fn write_batches(
        &mut self,
        bytes: &[u8],
        headers: &[BatchHeader],
        first: &BatchHeader,
        last: &BatchHeader,
        now_ms: i64,
    ) -> Result<(), LogError> {
        self.maybe_roll(
            bytes.len() as u64,
            first.base_offset,
            last.last_offset(),
            now_ms,
        )?;
        let dir = self.dir.clone();
        match self.active_mut().append(bytes, headers, now_ms) {
            Ok(()) => {}
            Err(AppendFailure::Undone(e)) => return Err(LogError::io("append to", dir, e)),
            Err(AppendFailure::Stuck { write, truncate }) => {
                let reason = format!("append failed ({write}) and the partial write could not be removed ({truncate})");
                tracing::error!(dir = %dir.display(), %reason, "taking log offline");
                self.offline = Some(reason.clone());
                return Err(LogError::Offline { path: dir, reason });
            }
        }
        self.next_offset = last.last_offset().plus(1);
        let mut at = 0usize;
        let mut failed = None;
        for header in headers {
            let end = (at + header.total_bytes()).min(bytes.len());
            if let Some(aborted) = self.producers.record(header, &bytes[at..end]) {
                if let Err(e) = self.aborted.push(aborted) {
                    failed.get_or_insert(e);
                }
            }
            at = end;
        }
        if let Some(e) = failed {
            // The markers are in the log and their transactions closed; the entries are in
            // memory (reads go on, and see the transactions aborted) but not in the file: no
            // more writes, so no snapshot passes them, and a restart re-derives them.
            let reason = format!("could not index an aborted transaction: {e}");
            tracing::error!(dir = %dir.display(), %reason, "taking log offline");
            self.offline = Some(reason);
            return Err(e);
        }
        self.check_invariants();
        Ok(())
    }

    fn maybe_roll(
        &mut self,
        incoming_bytes: u64,
        first: Offset,
        last: Offset,
        now_ms: i64,
    ) -> Result<(), LogError> {
        let active = self.active();
        let offsets_overflow = last.relative_to(active.base_offset).is_none();
        if active.is_empty() && !offsets_overflow {
            return Ok(());
        }
        let too_big = active.size_bytes() + incoming_bytes > self.config.segment_bytes;
        let too_old = active
            .first_append_ms()
            .is_some_and(|t| now_ms.saturating_sub(t) >= self.config.segment_ms);
        if too_big || too_old || offsets_overflow {
            self.roll(first)?;
        }
        Ok(())
    }

    /// Undoes a roll made for batches that were then not written (a failed mark or write
    /// after `append_assigned`'s own roll): an empty active segment whose base is above the
    /// log's end would otherwise take the next batches below its base. Its files and the
    /// producer snapshot written at its base go too; a failure to remove them leaves what a
    /// crash right after the roll leaves (an empty segment that the next start reads as the
    /// log's end).
    fn drop_empty_segment_above_end(&mut self) {
        let active = self.active();
        if !active.is_empty() || active.base_offset <= self.next_offset || self.segments.len() < 2 {
            return;
        }
        let base = active.base_offset;
        if let Some(segment) = self.segments.remove(&base) {
            let removed = segment
                .delete_files()
                .and_then(|()| producer_state::remove_snapshots_above(&self.dir, self.next_offset));
            if let Err(e) = removed {
                tracing::warn!(dir = %self.dir.display(), base = base.0, error = %e, "could not remove an unused segment");
            }
        }
    }

    /// Seals the active segment and starts a new one at `base`.
    fn roll(&mut self, base: Offset) -> Result<(), LogError> {
        debug_assert!(base >= self.next_offset);
        let sealed = self.active();
        let mut to_sync = sealed.write_indexes()?;
        if sealed.is_compacted() {
            // Recovery cannot tell a lost tail of a segment whose offsets may have gaps from a
            // gap (its end need not meet its successor's base), so its bytes are made durable
            // before its successor gets any, instead of with the next flush.
            let path = crate::segment::log_path(&self.dir, sealed.base_offset);
            sealed
                .file()
                .sync_all()
                .map_err(|e| LogError::io("fsync", path, e))?;
        } else {
            to_sync.push(Arc::clone(sealed.file()));
        }
        let segment = Segment::create(&self.dir, base, self.config.index_interval_bytes)?;
        self.segments.insert(base, segment);
        self.unsynced.extend(to_sync);
        // Start-up then replays producer state from here instead of from the log start; the
        // aborted transactions before here must be on disk first.
        self.aborted.sync()?;
        producer_state::write_snapshot(&self.dir, base, &self.producers)?;
        tracing::debug!(dir = %self.dir.display(), base = base.0, "rolled segment");
        Ok(())
    }

    /// Plans a read of up to `max_bytes` of whole batches starting with the one that holds
    /// `offset`, showing nothing at or past `upper` (the high watermark of the reader).
    pub fn read(
        &self,
        offset: Offset,
        max_bytes: usize,
        upper: Offset,
        min_one: bool,
    ) -> Result<ReadPlan, LogError> {
        if offset < self.log_start_offset || offset > self.next_offset {
            return Err(LogError::OffsetOutOfRange {
                requested: offset,
                start: self.log_start_offset,
                end: self.next_offset,
            });
        }
        let upper = upper.min(self.next_offset);
        if offset >= upper {
            return Ok(ReadPlan::empty());
        }
        for segment in self
            .segments
            .range(..=offset)
            .next_back()
            .into_iter()
            .map(|(_, s)| s)
            .chain(
                self.segments
                    .range((
                        std::ops::Bound::Excluded(offset),
                        std::ops::Bound::Unbounded,
                    ))
                    .map(|(_, s)| s),
            )
        {
            if let Some(position) = segment.position_of(offset)? {
                return Ok(ReadPlan {
                    file: Some(Arc::clone(segment.file())),
                    position,
                    end_position: segment.size_bytes(),
                    upper,
                    max_bytes,
                    min_one,
                });
            }
        }
        Ok(ReadPlan::empty())
    }

    /// The first record with a timestamp ≥ `timestamp` below `upper`: its offset and time.
    /// A record below the log start (DeleteRecords cut into its batch) answers the log start.
    pub fn offset_for_timestamp(
        &self,
        timestamp: i64,
        upper: Offset,
    ) -> Result<Option<(Offset, i64)>, LogError> {
        for segment in self.segments.values() {
            let Some((header, bytes)) = segment.first_batch_at_or_after_time(timestamp, upper)?
            else {
                continue;
            };
            let (offset, time) = if header.is_log_append_time() {
                (header.base_offset, header.max_timestamp)
            } else {
                first_record_at_or_after(&header, bytes, timestamp)?
            };
            return Ok(Some((offset.max(self.log_start_offset), time)));
        }
        Ok(None)
    }

    /// The record with the largest timestamp (ListOffsets' MAX_TIMESTAMP, KIP-734).
    pub fn offset_of_max_timestamp(
        &self,
        upper: Offset,
    ) -> Result<Option<(Offset, i64)>, LogError> {
        let Some(segment) = self
            .segments
            .values()
            .filter(|s| !s.is_empty() && s.base_offset < upper)
            .max_by_key(|s| s.max_timestamp())
        else {
            return Ok(None);
        };
        let mut best: Option<(BatchHeader, Vec<u8>)> = None;
        segment.for_each_batch(|header, bytes| {
            if header.base_offset < upper
                && best
                    .as_ref()
                    .is_none_or(|(b, _)| header.max_timestamp > b.max_timestamp)
            {
                best = Some((*header, bytes.to_vec()));
            }
        })?;
        let Some((header, bytes)) = best else {
            return Ok(None);
        };
        let (offset, time) = if header.is_log_append_time() {
            (header.base_offset, header.max_timestamp)
        } else {
            first_record_at_or_after(&header, bytes, header.max_timestamp)?
        };
        Ok(Some((offset.max(self.log_start_offset), time)))
    }

    /// Removes every batch whose last offset is ≥ `offset` (a follower whose log diverged
    /// from its leader's). Returns the new log end offset.
    pub fn truncate_to(&mut self, offset: Offset) -> Result<Offset, LogError> {
        self.check_online()?;
        if offset >= self.next_offset {
            return Ok(self.next_offset);
        }
        let cut = self.cut_tail(offset);
        if let Err(e) = &cut {
            // Part of the cut may be done: the log's end, files, indexes and producer state
            // no longer agree. No more writes; a restart recovers from the files.
            let reason = format!("truncation failed: {e}");
            tracing::error!(dir = %self.dir.display(), %reason, "taking log offline");
            self.offline = Some(reason);
        }
        cut
    }

    fn cut_tail(&mut self, offset: Offset) -> Result<Offset, LogError> {
        self.truncations += 1;
        let keep_from = if offset < self.log_start_offset {
            // Nothing survives: every segment goes, and with them every producer the log
            // knew (as in `reset_to`; removed before the new start is written).
            producer_state::remove_snapshots_above(&self.dir, Offset(-1))?;
            Offset(i64::MIN)
        } else {
            offset
        };
        let doomed: Vec<Offset> = self
            .segments
            .range((
                std::ops::Bound::Excluded(keep_from),
                std::ops::Bound::Unbounded,
            ))
            .map(|(b, _)| *b)
            .collect();
        // Newest first: a crash part-way leaves a shorter log, never one with a hole.
        for base in doomed.into_iter().rev() {
            if let Some(segment) = self.segments.remove(&base) {
                segment.delete_files()?;
            }
        }
        if self.segments.is_empty() {
            self.segments.insert(
                offset,
                Segment::create(&self.dir, offset, self.config.index_interval_bytes)?,
            );
            self.log_start_offset = offset;
        }
        let new_end = self.active_mut().truncate_to(offset)?;
        self.next_offset = new_end;
        self.durable_offset = self.durable_offset.min(new_end).max(self.log_start_offset);
        // The active segment may now be an old one whose sealed index files are stale.
        let active_base = self.active().base_offset;
        self.checkpoint.recovery_point = self.checkpoint.recovery_point.min(active_base);
        self.checkpoint.log_start = self.log_start_offset;
        self.checkpoint.write(&self.dir)?;
        self.aborted.truncate(new_end)?;
        if self.epochs.truncate_from_end(new_end)
            | self.epochs.truncate_from_start(self.log_start_offset)
        {
            self.epochs.write(&self.dir)?;
        }
        self.rebuild_producer_state()?;
        self.check_invariants();
        Ok(new_end)
    }

    /// Empties the log and starts it at `start`, which may lie beyond its end: a follower
    /// whose leader no longer holds the records it would fetch next (retention or
    /// DeleteRecords removed them) starts its copy where the leader's log starts, as Kafka's
    /// followers do. The new start is on disk before this returns.
    pub fn reset_to(&mut self, start: Offset) -> Result<(), LogError> {
        self.check_online()?;
        if start < Offset(0) {
            return Err(LogError::OffsetOutOfRange {
                requested: start,
                start: self.log_start_offset,
                end: self.next_offset,
            });
        }
        let reset = self.restart_empty(start);
        if let Err(e) = &reset {
            let reason = format!("restarting the log at {} failed: {e}", start.0);
            tracing::error!(dir = %self.dir.display(), %reason, "taking log offline");
            self.offline = Some(reason);
        }
        reset
    }

    fn restart_empty(&mut self, start: Offset) -> Result<(), LogError> {
        self.truncations += 1;
        // Nothing of the old log is left, so neither is any producer it knew: a snapshot of it
        // would bring back producers and open transactions whose later batches and markers
        // this log never gets (an open transaction would hold the last stable offset forever).
        // Removed first: a crash before the new start is on disk leaves the old log, which
        // rebuilds them from its batches.
        producer_state::remove_snapshots_above(&self.dir, Offset(-1))?;
        // The old segments leave the map only once the new one exists: a log always has an
        // active segment, even one left offline by a failure here. Their producers go with
        // them, not before: an offline log still serves reads, and its open transactions
        // must keep holding the stable offset back.
        for segment in self.segments.values() {
            segment.delete_files()?;
        }
        let fresh = Segment::create(&self.dir, start, self.config.index_interval_bytes)?;
        self.segments = BTreeMap::from([(start, fresh)]);
        self.producers = ProducerStates::default();
        self.log_start_offset = start;
        self.next_offset = start;
        self.durable_offset = start;
        self.checkpoint.recovery_point = start;
        self.checkpoint.log_start = start;
        self.checkpoint.write(&self.dir)?;
        self.aborted.truncate(Offset(0))?;
        self.aborted.trim(start)?;
        if self.epochs.truncate_from_end(Offset(0)) | self.epochs.truncate_from_start(start) {
            self.epochs.write(&self.dir)?;
        }
        tracing::info!(dir = %self.dir.display(), log_start = start.0, "log emptied and restarted");
        self.check_invariants();
        Ok(())
    }

    /// DeleteRecords: moves the log start up to `offset` (records below it can no longer be
    /// read), deleting the segments wholly below it. The new start is fsynced before this
    /// returns, so it survives a crash. Returns the log start offset (never lowered).
    pub fn delete_records_before(&mut self, offset: Offset) -> Result<Offset, LogError> {
        self.check_online()?;
        if offset < Offset(0) || offset > self.next_offset {
            return Err(LogError::OffsetOutOfRange {
                requested: offset,
                start: self.log_start_offset,
                end: self.next_offset,
            });
        }
        if offset <= self.log_start_offset {
            return Ok(self.log_start_offset);
        }
        while self
            .segments
            .keys()
            .nth(1)
            .is_some_and(|next| *next <= offset)
        {
            self.delete_oldest()?;
        }
        self.log_start_offset = offset;
        self.durable_offset = self.durable_offset.max(offset);
        self.aborted.trim(offset)?;
        if self.epochs.truncate_from_start(offset) {
            self.epochs.write(&self.dir)?;
        }
        self.checkpoint.log_start = offset;
        self.checkpoint.write(&self.dir)?;
        tracing::info!(dir = %self.dir.display(), log_start = offset.0, "records deleted");
        self.check_invariants();
        Ok(offset)
    }

    /// Deletes whole segments past `retention.ms` (by their newest timestamp) or beyond
    /// `retention.bytes` (oldest first); returns how many. The active segment is rolled first
    /// when it has expired too, so that a quiet topic is emptied as Kafka empties it. Only
    /// segments wholly below `upto` go (the high watermark: as in Kafka, a replica deletes
    /// only committed records, so its log start never passes what a quorum holds).
    pub fn apply_retention(&mut self, upto: Offset) -> Result<usize, LogError> {
        if !self.config.delete_policy {
            return Ok(0);
        }
        let now_ms = self.clock.now_ms();
        let mut deleted = 0;
        // The oldest segment ends where the next begins.
        let oldest_below = |log: &Log| log.segments.keys().nth(1).is_some_and(|n| *n <= upto);
        if self.config.retention_ms >= 0 {
            let retention_ms = self.config.retention_ms;
            let expired = move |s: &Segment| {
                !s.is_empty() && now_ms.saturating_sub(s.max_timestamp()) > retention_ms
            };
            if self.segments.values().all(expired)
                && self.offline.is_none()
                && self.next_offset <= upto
            {
                let next = self.next_offset;
                self.roll(next)?;
            }
            while oldest_below(self) && self.segments.values().next().is_some_and(expired) {
                self.delete_oldest()?;
                deleted += 1;
            }
        }
        if self.config.retention_bytes >= 0 {
            let limit = self.config.retention_bytes as u64;
            while oldest_below(self) {
                let total = self.size_bytes();
                let oldest = self.segments.values().next().map_or(0, Segment::size_bytes);
                if total.saturating_sub(oldest) < limit || total <= limit {
                    break;
                }
                self.delete_oldest()?;
                deleted += 1;
            }
        }
        Ok(deleted)
    }

    fn delete_oldest(&mut self) -> Result<(), LogError> {
        let Some((base, segment)) = self.segments.pop_first() else {
            return Ok(());
        };
        debug_assert!(!self.segments.is_empty(), "never delete the active segment");
        segment.delete_files()?;
        let new_start = *self.segments.keys().next().unwrap_or(&self.next_offset);
        tracing::info!(dir = %self.dir.display(), base = base.0, new_start = new_start.0, "retention deleted segment");
        self.log_start_offset = self.log_start_offset.max(new_start);
        self.durable_offset = self.durable_offset.max(self.log_start_offset);
        self.aborted.trim(self.log_start_offset)?;
        if self.epochs.truncate_from_start(self.log_start_offset) {
            self.epochs.write(&self.dir)?;
        }
        self.check_invariants();
        Ok(())
    }

    /// Phase 1 of compaction: the sealed segments to clean, or `None` when the topic is not
    /// compacted or nothing new was sealed since the last clean.
    ///
    /// Only segments wholly below the first open transaction are cleanable (as in Kafka): a
    /// record of a transaction that may still abort must not make an older value go.
    pub fn compaction_plan(&self) -> Option<crate::compaction::CompactionPlan> {
        if !self.config.compact || self.offline.is_some() {
            return None;
        }
        let unstable = self.first_unstable_offset();
        // Each sealed segment with the base of the one after it (its end); the active
        // segment has no successor and is never cleaned.
        let (sealed, ends): (Vec<&Segment>, Vec<Offset>) = self
            .segments
            .values()
            .zip(self.segments.keys().skip(1).copied())
            .take_while(|(_, end)| unstable.is_none_or(|u| *end <= u))
            .unzip();
        if sealed.iter().all(|s| s.is_compacted() || s.is_empty()) {
            return None;
        }
        let from = sealed
            .first()
            .map_or(self.log_start_offset, |s| s.base_offset);
        let to = ends.last().copied().unwrap_or(from);
        Some(crate::compaction::CompactionPlan {
            dir: self.dir.clone(),
            aborted: self.aborted.overlapping(from, to),
            producers_last_batches: self.producers.last_batches(),
            truncations: self.truncations,
            segments: sealed
                .iter()
                .filter(|s| !s.is_empty())
                .map(|s| crate::compaction::SealedSegment {
                    base: s.base_offset,
                    file: Arc::clone(s.file()),
                    size_bytes: s.size_bytes(),
                })
                .collect(),
            tombstone_cutoff_ms: self
                .clock
                .now_ms()
                .saturating_sub(self.config.delete_retention_ms),
        })
    }

    /// Phase 3 of compaction: swaps the cleaned segments in, skipping any that changed while
    /// they were being cleaned, and all of them if the log was cut back at its end meanwhile:
    /// the producers the cleaning kept batches for may then have lost their newest batches,
    /// and older ones (which the cleaning may have dropped) become their last.
    pub fn finish_compaction(
        &mut self,
        cleaned: Vec<crate::compaction::Cleaned>,
    ) -> Result<crate::compaction::CompactionReport, LogError> {
        let mut report = crate::compaction::CompactionReport::default();
        let now_ms = self.clock.now_ms();
        let active = self
            .segments
            .keys()
            .next_back()
            .copied()
            .unwrap_or(Offset(i64::MAX));
        for c in cleaned {
            let unchanged = c.base != active
                && c.truncations == self.truncations
                && self
                    .segments
                    .get(&c.base)
                    .is_some_and(|s| s.size_bytes() == c.old_size_bytes);
            if !unchanged || self.offline.is_some() {
                crate::segment::remove_if_exists(&c.path)?;
                continue;
            }
            crate::compaction::swap_in(&self.dir, &c)?;
            let opened = Segment::open(
                &self.dir,
                c.base,
                OpenMode::Recover,
                self.config.index_interval_bytes,
                now_ms,
            )?;
            debug_assert_eq!(opened.truncated_bytes, 0, "a cleaned segment is whole");
            let to_sync = opened.segment.write_indexes()?;
            self.unsynced.extend(to_sync);
            self.segments.insert(c.base, opened.segment);
            let end = self
                .segments
                .range((
                    std::ops::Bound::Excluded(c.base),
                    std::ops::Bound::Unbounded,
                ))
                .next()
                .map_or(self.next_offset, |(b, _)| *b);
            self.aborted.keep_markers_in(c.base, end, &c.kept_markers)?;
            report.segments += 1;
            report.records_removed += c.records_removed;
            report.bytes_before += c.old_size_bytes;
            report.bytes_after += c.new_size_bytes;
        }
        self.check_invariants();
        Ok(report)
    }

    /// Starting the disk write of the last few MiB appended, when due (see `writeback.rs`):
    /// run it off the append path.
    pub fn take_writeback(&mut self) -> Option<crate::writeback::WritebackJob> {
        if self.offline.is_some() {
            return None;
        }
        self.active_mut().take_writeback()
    }

    /// The fsync that would make everything appended so far durable, or `None` if it is.
    pub fn flush_job(&mut self) -> Option<FlushJob> {
        if self.offline.is_some()
            || (self.durable_offset == self.next_offset && self.unsynced.is_empty())
        {
            return None;
        }
        let mut files = std::mem::take(&mut self.unsynced);
        files.push(Arc::clone(self.active().file()));
        Some(FlushJob {
            files,
            upto: self.next_offset,
            recovery_point: self.active().base_offset,
            truncations: self.truncations,
        })
    }

    /// Records the outcome of a [`FlushJob`]. A failed fsync takes the log offline: after a
    /// failed fsync the kernel may have dropped the dirty pages, so a retry proves nothing.
    pub fn complete_flush(
        &mut self,
        job: &FlushJob,
        outcome: std::io::Result<()>,
    ) -> Result<(), LogError> {
        if let Err(e) = outcome {
            let reason = format!("fsync failed: {e}");
            tracing::error!(dir = %self.dir.display(), %reason, "taking log offline");
            self.offline = Some(reason.clone());
            return Err(LogError::Offline {
                path: self.dir.clone(),
                reason,
            });
        }
        // A log cut back while the job ran may have been written again below `upto` with
        // bytes the job did not sync: nothing it covered can be told apart, so it counts for
        // nothing (the next job syncs the files again).
        if job.truncations != self.truncations {
            return Ok(());
        }
        // The checkpoint's write is also what makes a rolled segment's name durable (it
        // fsyncs the directory): only once it is written does the job count.
        if job.recovery_point > self.checkpoint.recovery_point
            && self.segments.contains_key(&job.recovery_point)
        {
            let checkpoint = Checkpoint {
                recovery_point: job.recovery_point,
                ..self.checkpoint
            };
            if let Err(e) = checkpoint.write(&self.dir) {
                // As a failed fsync: the rolled segment's name may not be durable, and
                // trying again at once would only spin.
                let reason = format!("recovery point not written: {e}");
                tracing::error!(dir = %self.dir.display(), %reason, "taking log offline");
                self.offline = Some(reason);
                return Err(e);
            }
            self.checkpoint = checkpoint;
        }
        self.durable_offset = self.durable_offset.max(job.upto.min(self.next_offset));
        self.check_invariants();
        Ok(())
    }

    /// Fsyncs everything and records a clean shutdown so that the next start need not scan.
    /// The log accepts no writes afterwards.
    pub fn close(&mut self) -> Result<(), LogError> {
        if self.offline.is_some() {
            return Ok(());
        }
        if let Some(job) = self.flush_job() {
            let outcome = job.run();
            self.complete_flush(&job, outcome)?;
        }
        let active = self.active();
        for file in active.write_indexes()? {
            file.sync_all()
                .map_err(|e| LogError::io("fsync index", &self.dir, e))?;
        }
        let checkpoint = Checkpoint {
            recovery_point: active.base_offset,
            clean_active: Some((active.base_offset, active.size_bytes())),
            log_start: self.log_start_offset,
        };
        checkpoint.write(&self.dir)?;
        self.aborted.sync()?;
        producer_state::write_snapshot(&self.dir, self.next_offset, &self.producers)?;
        self.offline = Some("closed".into());
        Ok(())
    }

    /// Rebuilds the idempotent producers' state: the newest snapshot at or below the log end,
    /// then every batch after it.
    /// Loads the leader-epoch cache, or rebuilds it from the batches when it is missing or
    /// unreadable, and drops what lies outside the log (a cut tail, a moved start).
    fn load_epochs(&mut self) -> Result<(), LogError> {
        let (mut epochs, mut changed) = match EpochCache::read(&self.dir) {
            Some(epochs) => (epochs, false),
            None => {
                let mut epochs = EpochCache::default();
                for segment in self.segments.values() {
                    segment.for_each_batch(|header, _| {
                        epochs.assign(header.partition_leader_epoch, header.base_offset);
                    })?;
                }
                (epochs, self.next_offset > self.log_start_offset)
            }
        };
        changed |= epochs.truncate_from_end(self.next_offset);
        changed |= epochs.truncate_from_start(self.log_start_offset);
        if changed {
            epochs.write(&self.dir)?;
        }
        self.epochs = epochs;
        Ok(())
    }

    /// The newest leader epoch that wrote to this log.
    pub fn latest_epoch(&self) -> Option<LeaderEpoch> {
        self.epochs.latest()
    }

    /// Each leader epoch that wrote here and its first offset, oldest first.
    pub fn epoch_starts(&self) -> &[(LeaderEpoch, Offset)] {
        self.epochs.entries()
    }

    /// The leader epoch that wrote `offset` (`None` below the first epoch known here).
    pub fn epoch_at(&self, offset: Offset) -> Option<LeaderEpoch> {
        self.epochs.epoch_at(offset)
    }

    /// OffsetForLeaderEpoch: where `epoch` ended in this log — the largest epoch at or below it
    /// that wrote here and the first offset after it (the log end for the newest epoch).
    /// `None` if `epoch` is newer than any here (Kafka's UNDEFINED_EPOCH_OFFSET).
    pub fn end_offset_for_epoch(&self, epoch: LeaderEpoch) -> Option<(LeaderEpoch, Offset)> {
        self.epochs.end_offset_for(epoch, self.next_offset)
    }

    fn rebuild_producer_state(&mut self) -> Result<(), LogError> {
        let first_base = self.segments.keys().next().copied().unwrap_or(Offset(0));
        // A snapshot below the log start still holds when the log's first segment reaches
        // back to it (DeleteRecords moves the start inside a segment, whose batches below the
        // start stay on disk): the replay starts at the snapshot, or producers whose last
        // batch lies below the start would come back with an older sequence. One older than
        // the first segment misses what the deleted segments held: it is not used, and the
        // replay starts at the first segment's base (producers only in deleted segments
        // start unknown, as on Kafka).
        let (from, mut states) = producer_state::load_snapshot(&self.dir, self.next_offset)?
            .filter(|(at, _)| *at >= first_base)
            .unwrap_or((first_base, ProducerStates::default()));
        let mut replayed = 0usize;
        for segment in self.segments.values().filter(|s| s.next_offset() > from) {
            let mut found = Vec::new();
            segment.for_each_batch_from(from.max(segment.base_offset), |header, bytes| {
                if header.base_offset >= from {
                    found.extend(states.record(header, bytes));
                    replayed += 1;
                }
            })?;
            for aborted in found
                .into_iter()
                .filter(|a| a.last_offset >= self.log_start_offset)
            {
                self.aborted.push(aborted)?;
            }
        }
        if replayed > 0 {
            tracing::debug!(dir = %self.dir.display(), from = from.0, batches = replayed, "replayed producer state");
        }
        self.producers = states;
        Ok(())
    }

    /// Forgets idempotent producers whose newest batch is older than `cutoff_ms`
    /// (`producer.id.expiration.ms`); returns how many.
    pub fn expire_producers(&mut self, cutoff_ms: i64) -> usize {
        self.producers.expire(cutoff_ms)
    }

    pub fn producer_count(&self) -> usize {
        self.producers.len()
    }

    /// Writes a transaction marker for `producer_id` (the coordinator's decision reaching this
    /// partition). A marker from an epoch older than the producer's is refused.
    pub fn append_marker(
        &mut self,
        marker: Marker,
        producer_id: i64,
        producer_epoch: i16,
        coordinator_epoch: i32,
        leader_epoch: LeaderEpoch,
    ) -> Result<AppendInfo, LogError> {
        self.check_online()?;
        self.producers.check_marker(producer_id, producer_epoch)?;
        let now_ms = self.clock.now_ms();
        let mut bytes = crate::control::marker_batch(
            marker,
            producer_id,
            producer_epoch,
            coordinator_epoch,
            now_ms,
        )?;
        let mut header = BatchHeader::parse(&bytes)?;
        let base_offset = self.next_offset;
        batch::patch_base_offset(&mut bytes, base_offset, leader_epoch);
        header.base_offset = base_offset;
        header.partition_leader_epoch = leader_epoch;
        self.write(&bytes, std::slice::from_ref(&header), now_ms)?;
        Ok(AppendInfo {
            base_offset,
            last_offset: base_offset,
            log_append_time_ms: -1,
            duplicate: false,
        })
    }

    /// The first offset of the earliest open transaction, if any, but never below the log
    /// start: retention may delete the first batches of a transaction that is still open (as
    /// in Kafka), and the last stable offset must stay an offset the log has.
    pub fn first_unstable_offset(&self) -> Option<Offset> {
        self.producers
            .first_unstable_offset()
            .map(|f| f.max(self.log_start_offset))
    }

    /// The open transactions on this partition, oldest first.
    pub fn open_transactions(&self) -> Vec<OpenTxn> {
        self.producers.open_transactions()
    }

    pub fn active_producers(&self) -> Vec<crate::ActiveProducer> {
        self.producers.active_producers()
    }

    /// Aborted transactions that may have records in `[from, to)`.
    pub fn aborted_between(&self, from: Offset, to: Offset) -> Vec<AbortedTxn> {
        self.aborted.overlapping(from, to)
    }
}

/// The first record of a (possibly compressed) batch with a timestamp ≥ `timestamp`.
fn first_record_at_or_after(
    header: &BatchHeader,
    bytes: Vec<u8>,
    timestamp: i64,
) -> Result<(Offset, i64), LogError> {
    let mut buf = Bytes::from(bytes);
    let set = RecordBatchDecoder::decode(&mut buf).map_err(|e| {
        crate::error::BatchError::InvalidRecords(format!("stored batch does not decode: {e}"))
    })?;
    Ok(set
        .records
        .iter()
        .find(|r| r.timestamp >= timestamp)
        .map_or((header.base_offset, header.max_timestamp), |r| {
            (Offset(r.offset), r.timestamp)
        }))
}

/// Base offsets of the segment files in `dir`, ascending; removes leftovers of interrupted
/// operations (temporary files).
fn list_segments(dir: &Path) -> Result<Vec<Offset>, LogError> {
    let mut bases = Vec::new();
    for entry in fs::read_dir(dir).map_err(|e| LogError::io("list", dir, e))? {
        let entry = entry.map_err(|e| LogError::io("list", dir, e))?;
        let name = entry.file_name();
        let Some(name) = name.to_str() else { continue };
        if name.ends_with(".tmp") || name.ends_with(".cleaned") {
            crate::segment::remove_if_exists(&entry.path())?;
            continue;
        }
        if let Some(stem) = name.strip_suffix(".log") {
            if let Ok(base) = stem.parse::<i64>() {
                if base >= 0 {
                    bases.push(Offset(base));
                }
            }
        }
    }
    bases.sort();
    Ok(bases)
}
