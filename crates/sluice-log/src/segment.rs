//! One segment: a file of whole record batches named by its base offset, and its two sparse
//! indexes. Appends go to the end with positioned writes; readers share the file handle and
//! read with positioned reads, so they never hold the log's lock while copying data.

use std::fs::{self, File, OpenOptions};
use std::io;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use crate::batch::{check_stored, BatchHeader};
use crate::error::LogError;
use crate::index::{IndexEntry, OffsetIndex};
use crate::offset::Offset;
use crate::scan::{BatchScanner, Scanned};
use crate::time_index::{TimeEntry, TimeIndex};

pub(crate) fn file_stem(base: Offset) -> String {
    format!("{:020}", base.0)
}

pub(crate) fn log_path(dir: &Path, base: Offset) -> PathBuf {
    dir.join(format!("{}.log", file_stem(base)))
}
fn index_path(dir: &Path, base: Offset) -> PathBuf {
    dir.join(format!("{}.index", file_stem(base)))
}
fn time_index_path(dir: &Path, base: Offset) -> PathBuf {
    dir.join(format!("{}.timeindex", file_stem(base)))
}

/// How much to trust a segment's files when opening it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum OpenMode {
    /// Written before the last fsync: load the index files, rebuild them only if damaged.
    Trusted,
    /// May hold a torn or corrupt tail: check every batch, truncate at the first bad one.
    Recover,
}

/// What opening a segment found.
#[derive(Debug)]
pub(crate) struct Opened {
    pub segment: Segment,
    /// Bytes cut from the end because they were not whole, valid batches.
    pub truncated_bytes: u64,
}

/// A failed append: whether the file was put back as it was.
#[derive(Debug)]
pub(crate) enum AppendFailure {
    /// The write failed and the partial bytes were cut off again.
    Undone(io::Error),
    /// The write failed and so did cutting the partial bytes off.
    Stuck {
        write: io::Error,
        truncate: io::Error,
    },
}

#[derive(Debug)]
pub(crate) struct Segment {
    pub base_offset: Offset,
    dir: PathBuf,
    file: Arc<File>,
    /// Bytes of whole batches in the file; nothing past this is ever read.
    size_bytes: u64,
    /// One past the last offset stored here (the base offset when empty).
    next_offset: Offset,
    index: OffsetIndex,
    time_index: TimeIndex,
    index_interval_bytes: u64,
    bytes_since_index: u64,
    /// Largest batch max-timestamp here; -1 when empty.
    max_timestamp: i64,
    /// Wall-clock time of the first append (or of opening, for a recovered segment).
    first_append_ms: Option<i64>,
    /// Bytes before this position have had their writeback started.
    writeback_started: u64,
    /// Offsets may have gaps (`<base>.compacted` marks it on disk): rewritten by compaction,
    /// or holding batches a follower copied from a compacted leader ([`Segment::mark_gaps`]).
    compacted: bool,
}

impl Segment {
    pub(crate) fn create(
        dir: &Path,
        base: Offset,
        index_interval_bytes: u64,
    ) -> Result<Segment, LogError> {
        let path = log_path(dir, base);
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(true)
            .open(&path)
            .map_err(|e| LogError::io("create segment", &path, e))?;
        // A marker left by an earlier segment at this base (removed by a crash's recovery,
        // or by a crash in the middle of deleting it) is not this segment's.
        for stale in [
            index_path(dir, base),
            time_index_path(dir, base),
            crate::compaction::marker_path(dir, base),
        ] {
            remove_if_exists(&stale)?;
        }
        Ok(Segment {
            base_offset: base,
            dir: dir.to_path_buf(),
            file: Arc::new(file),
            size_bytes: 0,
            next_offset: base,
            index: OffsetIndex::default(),
            time_index: TimeIndex::default(),
            index_interval_bytes,
            bytes_since_index: 0,
            max_timestamp: -1,
            first_append_ms: None,
            writeback_started: 0,
            compacted: false,
        })
    }

    pub(crate) fn open(
        dir: &Path,
        base: Offset,
        mode: OpenMode,
        index_interval_bytes: u64,
        now_ms: i64,
    ) -> Result<Opened, LogError> {
        let path = log_path(dir, base);
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .open(&path)
            .map_err(|e| LogError::io("open segment", &path, e))?;
        let file_bytes = file
            .metadata()
            .map_err(|e| LogError::io("stat segment", &path, e))?
            .len();
        let mut segment = Segment {
            base_offset: base,
            dir: dir.to_path_buf(),
            file: Arc::new(file),
            size_bytes: 0,
            next_offset: base,
            index: OffsetIndex::default(),
            time_index: TimeIndex::default(),
            index_interval_bytes,
            bytes_since_index: 0,
            max_timestamp: -1,
            first_append_ms: Some(now_ms),
            writeback_started: file_bytes,
            compacted: crate::compaction::marker_path(dir, base).exists(),
        };
        if mode == OpenMode::Trusted && segment.load_indexes(file_bytes)? {
            return Ok(Opened {
                segment,
                truncated_bytes: 0,
            });
        }
        let valid_bytes = segment.rebuild(file_bytes)?;
        if valid_bytes < file_bytes {
            segment
                .file
                .set_len(valid_bytes)
                .map_err(|e| LogError::io("truncate torn tail of", &path, e))?;
        }
        Ok(Opened {
            segment,
            truncated_bytes: file_bytes - valid_bytes,
        })
    }

    /// Loads both index files and walks the tail past the last entry; false if anything is
    /// missing or inconsistent, in which case the caller rebuilds from the log.
    fn load_indexes(&mut self, file_bytes: u64) -> Result<bool, LogError> {
        let (Ok(index_bytes), Ok(time_bytes)) = (
            fs::read(index_path(&self.dir, self.base_offset)),
            fs::read(time_index_path(&self.dir, self.base_offset)),
        ) else {
            return Ok(false);
        };
        let Ok(index) = OffsetIndex::decode(&index_bytes, file_bytes.max(1)) else {
            return Ok(false);
        };
        let start = index.last().map_or(0, |e| u64::from(e.position));
        let start_offset = self
            .base_offset
            .plus(index.last().map_or(0, |e| i64::from(e.relative_offset)));
        let mut max_timestamp = -1;
        let mut next_offset = self.base_offset;
        let mut scanner = BatchScanner::new(&self.file, start, file_bytes);
        let mut first = true;
        loop {
            match scanner.next_batch().map_err(|e| self.io_error("read", e))? {
                Scanned::Batch { extent, bytes, .. } => {
                    if first && extent.base_offset != start_offset {
                        return Ok(false);
                    }
                    first = false;
                    let Ok(header) = BatchHeader::parse(bytes) else {
                        return Ok(false);
                    };
                    max_timestamp = max_timestamp.max(header.max_timestamp);
                    next_offset = extent.last_offset.plus(1);
                }
                Scanned::End => break,
                Scanned::Torn => return Ok(false),
            }
        }
        let relative_end = u64::try_from(next_offset.0 - self.base_offset.0).unwrap_or(0);
        let Ok(time_index) = TimeIndex::decode(&time_bytes, relative_end.max(1)) else {
            return Ok(false);
        };
        if let Some(last) = time_index.last() {
            max_timestamp = max_timestamp.max(last.max_timestamp_before);
        }
        self.index = index;
        self.time_index = time_index;
        self.size_bytes = file_bytes;
        self.next_offset = next_offset;
        self.max_timestamp = max_timestamp;
        Ok(true)
    }

    /// Scans every batch from the start, checking each fully, and rebuilds the indexes from
    /// the valid prefix; returns that prefix's length in bytes.
    fn rebuild(&mut self, file_bytes: u64) -> Result<u64, LogError> {
        self.index = OffsetIndex::default();
        self.time_index = TimeIndex::default();
        self.size_bytes = 0;
        self.bytes_since_index = 0;
        self.max_timestamp = -1;
        self.next_offset = self.base_offset;
        let file = Arc::clone(&self.file);
        let mut scanner = BatchScanner::new(&file, 0, file_bytes);
        loop {
            let scanned = scanner.next_batch().map_err(|e| self.io_error("read", e))?;
            let Scanned::Batch {
                position, bytes, ..
            } = scanned
            else {
                break;
            };
            let Ok(header) = check_stored(bytes) else {
                break;
            };
            // Offsets continue exactly from the segment base: a batch that does not (a damaged
            // offset field, which the CRC does not cover) is not ours to serve. A compacted
            // segment has gaps, so there offsets need only increase.
            let in_order = if self.compacted {
                header.base_offset >= self.next_offset
            } else {
                header.base_offset == self.next_offset
            };
            if !in_order || header.last_offset().relative_to(self.base_offset).is_none() {
                break;
            }
            debug_assert_eq!(position, self.size_bytes);
            self.note_batch(position, &header);
            self.size_bytes += bytes.len() as u64;
        }
        Ok(self.size_bytes)
    }

    /// Updates the indexes and counters for a batch written at `position`.
    fn note_batch(&mut self, position: u64, header: &BatchHeader) {
        if self.size_bytes > 0 && self.bytes_since_index >= self.index_interval_bytes {
            let relative_offset = header
                .base_offset
                .relative_to(self.base_offset)
                .unwrap_or(u32::MAX);
            self.index.push(IndexEntry {
                relative_offset,
                position: u32::try_from(position).unwrap_or(u32::MAX),
            });
            self.time_index.maybe_push(TimeEntry {
                max_timestamp_before: self.max_timestamp,
                relative_offset,
            });
            self.bytes_since_index = 0;
        }
        self.bytes_since_index += header.total_bytes() as u64;
        self.max_timestamp = self.max_timestamp.max(header.max_timestamp);
        self.next_offset = header.last_offset().plus(1);
    }

    /// Appends whole, already-validated batches (`headers` describe `bytes` in order). On a
    /// failed write the file is cut back so that no partial batch remains.
    pub(crate) fn append(
        &mut self,
        bytes: &[u8],
        headers: &[BatchHeader],
        now_ms: i64,
    ) -> Result<(), AppendFailure> {
        if let Err(write) = self.file.write_all_at(bytes, self.size_bytes) {
            return match self.file.set_len(self.size_bytes) {
                Ok(()) => Err(AppendFailure::Undone(write)),
                Err(truncate) => Err(AppendFailure::Stuck { write, truncate }),
            };
        }
        let mut position = self.size_bytes;
        for header in headers {
            self.note_batch(position, header);
            position += header.total_bytes() as u64;
            self.size_bytes = position;
        }
        debug_assert_eq!(self.size_bytes, position);
        self.first_append_ms.get_or_insert(now_ms);
        Ok(())
    }

    /// The next chunk of appended bytes whose disk write has not been started, once there is
    /// at least [`crate::writeback::WRITEBACK_CHUNK_BYTES`] of it.
    pub(crate) fn take_writeback(&mut self) -> Option<crate::writeback::WritebackJob> {
        let pending = self.size_bytes - self.writeback_started;
        if pending < crate::writeback::WRITEBACK_CHUNK_BYTES {
            return None;
        }
        let job = crate::writeback::WritebackJob {
            file: Arc::clone(&self.file),
            offset: self.writeback_started,
            len: pending,
        };
        self.writeback_started = self.size_bytes;
        Some(job)
    }

    /// The byte position of the first batch whose last offset is ≥ `offset`, or `None` if
    /// every batch here ends before it.
    pub(crate) fn position_of(&self, offset: Offset) -> Result<Option<u64>, LogError> {
        if offset >= self.next_offset {
            return Ok(None);
        }
        let start = offset
            .relative_to(self.base_offset)
            .and_then(|rel| self.index.floor(rel))
            .map_or(0, |e| u64::from(e.position));
        let walk_chunk = (self.index_interval_bytes as usize).clamp(4096, 64 * 1024) * 2;
        let mut scanner = BatchScanner::with_chunk(&self.file, start, self.size_bytes, walk_chunk);
        while let Some((position, extent)) = scanner
            .next_extent()
            .map_err(|e| self.io_error("read", e))?
        {
            if extent.last_offset >= offset {
                return Ok(Some(position));
            }
        }
        Ok(None)
    }

    /// The first batch (from `start_position`) whose max timestamp is ≥ `timestamp`.
    pub(crate) fn first_batch_at_or_after_time(
        &self,
        timestamp: i64,
        upper: Offset,
    ) -> Result<Option<(BatchHeader, Vec<u8>)>, LogError> {
        if self.max_timestamp < timestamp {
            return Ok(None);
        }
        let start_offset = self
            .time_index
            .start_for(timestamp)
            .map_or(self.base_offset, |e| {
                self.base_offset.plus(i64::from(e.relative_offset))
            });
        let Some(start) = self.position_of(start_offset)? else {
            return Ok(None);
        };
        let mut scanner = BatchScanner::new(&self.file, start, self.size_bytes);
        loop {
            match scanner.next_batch().map_err(|e| self.io_error("read", e))? {
                Scanned::Batch { extent, .. } if extent.base_offset >= upper => return Ok(None),
                Scanned::Batch { bytes, .. } => {
                    let header = BatchHeader::parse(bytes)?;
                    if header.max_timestamp >= timestamp {
                        return Ok(Some((header, bytes.to_vec())));
                    }
                }
                Scanned::End | Scanned::Torn => return Ok(None),
            }
        }
    }

    /// Every batch from the start, for rare whole-segment queries.
    pub(crate) fn for_each_batch(
        &self,
        f: impl FnMut(&BatchHeader, &[u8]),
    ) -> Result<(), LogError> {
        self.for_each_batch_from(self.base_offset, f)
    }

    /// Every batch from the one holding `offset` on.
    pub(crate) fn for_each_batch_from(
        &self,
        offset: Offset,
        mut f: impl FnMut(&BatchHeader, &[u8]),
    ) -> Result<(), LogError> {
        let Some(start) = self.position_of(offset)? else {
            return Ok(());
        };
        let mut scanner = BatchScanner::new(&self.file, start, self.size_bytes);
        while let Scanned::Batch { bytes, .. } =
            scanner.next_batch().map_err(|e| self.io_error("read", e))?
        {
            f(&BatchHeader::parse(bytes)?, bytes);
        }
        Ok(())
    }

    /// Cuts the segment so that it ends before the first batch whose last offset is ≥
    /// `offset`; returns the new next offset.
    pub(crate) fn truncate_to(&mut self, offset: Offset) -> Result<Offset, LogError> {
        let Some(position) = self.position_of(offset)? else {
            return Ok(self.next_offset);
        };
        self.file
            .set_len(position)
            .map_err(|e| self.io_error("truncate", e))?;
        let file_bytes = position;
        self.writeback_started = self.writeback_started.min(position);
        // The cut is rare (replication divergence): rebuild the in-memory state from the file.
        let valid = self.rebuild(file_bytes)?;
        debug_assert_eq!(valid, file_bytes);
        Ok(self.next_offset)
    }

    /// Writes both index files; returns their handles for the next fsync.
    pub(crate) fn write_indexes(&self) -> Result<Vec<Arc<File>>, LogError> {
        let mut written = Vec::with_capacity(2);
        for (path, bytes) in [
            (index_path(&self.dir, self.base_offset), self.index.encode()),
            (
                time_index_path(&self.dir, self.base_offset),
                self.time_index.encode(),
            ),
        ] {
            let file = File::create(&path).map_err(|e| LogError::io("create index", &path, e))?;
            file.write_all_at(&bytes, 0)
                .map_err(|e| LogError::io("write index", &path, e))?;
            written.push(Arc::new(file));
        }
        Ok(written)
    }

    pub(crate) fn delete_files(&self) -> Result<(), LogError> {
        for path in [
            log_path(&self.dir, self.base_offset),
            index_path(&self.dir, self.base_offset),
            time_index_path(&self.dir, self.base_offset),
            crate::compaction::marker_path(&self.dir, self.base_offset),
        ] {
            remove_if_exists(&path)?;
        }
        Ok(())
    }

    pub(crate) fn file(&self) -> &Arc<File> {
        &self.file
    }

    pub(crate) fn size_bytes(&self) -> u64 {
        self.size_bytes
    }

    pub(crate) fn next_offset(&self) -> Offset {
        self.next_offset
    }

    pub(crate) fn max_timestamp(&self) -> i64 {
        self.max_timestamp
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.size_bytes == 0
    }

    pub(crate) fn is_compacted(&self) -> bool {
        self.compacted
    }

    /// Marks this segment, durably and before the batches that need it are written, as one
    /// whose offsets may have gaps: a follower copying a compacted leader's log receives
    /// batches that do not continue its log exactly, and recovery after a crash must not take
    /// such a gap for damage (and cut the log there). Recovery then cannot tell a lost tail
    /// from a gap either, so a marked segment is fsynced when it is sealed (`Log::roll`).
    /// The segment counts as compacted: the cleaner takes it up with the next segment sealed
    /// uncleaned.
    pub(crate) fn mark_gaps(&mut self) -> Result<(), LogError> {
        if self.compacted {
            return Ok(());
        }
        crate::compaction::write_marker(&self.dir, self.base_offset)?;
        crate::checkpoint::sync_dir(&self.dir)?;
        self.compacted = true;
        Ok(())
    }

    pub(crate) fn first_append_ms(&self) -> Option<i64> {
        self.first_append_ms
    }

    fn io_error(&self, op: &'static str, e: io::Error) -> LogError {
        LogError::io(op, log_path(&self.dir, self.base_offset), e)
    }
}

pub(crate) fn remove_if_exists(path: &Path) -> Result<(), LogError> {
    match fs::remove_file(path) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(LogError::io("remove", path, e)),
    }
}
