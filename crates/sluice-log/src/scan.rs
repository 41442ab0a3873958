//! Sequential reading of the batches in a segment file, in large chunks, for recovery,
//! index rebuilds and the short walks from an index entry to a wanted offset.

use std::fs::File;
use std::io;
use std::os::unix::fs::FileExt;

use crate::batch::{peek_extent, BatchExtent, LOG_OVERHEAD, OFFSET_RANGE_BYTES};

const CHUNK_BYTES: usize = 256 * 1024;

/// What the scanner found at its position.
#[derive(Debug)]
pub(crate) enum Scanned<'a> {
    /// A complete batch (by its length field; the CRC is the caller's to check).
    Batch {
        position: u64,
        extent: BatchExtent,
        bytes: &'a [u8],
    },
    /// The remaining bytes do not hold a whole batch: a torn or garbage tail.
    Torn,
    /// Exactly at the end.
    End,
}

pub(crate) struct BatchScanner<'f> {
    file: &'f File,
    position: u64,
    end: u64,
    buf: Vec<u8>,
    buf_start: u64,
    chunk_bytes: usize,
}

impl<'f> BatchScanner<'f> {
    /// Scans `file` from `position` up to (not including) byte `end`.
    pub(crate) fn new(file: &'f File, position: u64, end: u64) -> Self {
        Self::with_chunk(file, position, end, CHUNK_BYTES)
    }

    /// A scanner for short walks: reads `chunk_bytes` at a time.
    pub(crate) fn with_chunk(file: &'f File, position: u64, end: u64, chunk_bytes: usize) -> Self {
        BatchScanner {
            file,
            position,
            end,
            buf: Vec::new(),
            buf_start: position,
            chunk_bytes: chunk_bytes.max(OFFSET_RANGE_BYTES),
        }
    }

    /// Makes `[position, position + want)` available in `buf`, reading ahead a chunk;
    /// returns false if the file ends before that.
    fn fill(&mut self, want: usize) -> io::Result<bool> {
        let want_end = self.position + want as u64;
        if want_end > self.end {
            return Ok(false);
        }
        let buf_end = self.buf_start + self.buf.len() as u64;
        if self.position >= self.buf_start && want_end <= buf_end {
            return Ok(true);
        }
        let read_len = (want.max(self.chunk_bytes) as u64).min(self.end - self.position) as usize;
        self.buf.resize(read_len, 0);
        self.file.read_exact_at(&mut self.buf, self.position)?;
        self.buf_start = self.position;
        Ok(true)
    }

    /// The next batch's position and extent, reading only its header: for walks that need
    /// where batches are, not their bytes (a fetch used to read a whole megabyte batch just to
    /// find where it starts). `None` at the end or before a torn tail.
    pub(crate) fn next_extent(&mut self) -> io::Result<Option<(u64, BatchExtent)>> {
        if self.position == self.end || !self.fill(OFFSET_RANGE_BYTES)? {
            return Ok(None);
        }
        let at = (self.position - self.buf_start) as usize;
        let Some(extent) = peek_extent(&self.buf[at..]) else {
            return Ok(None);
        };
        let position = self.position;
        if position + extent.total_bytes as u64 > self.end {
            return Ok(None);
        }
        self.position += extent.total_bytes as u64;
        Ok(Some((position, extent)))
    }

    pub(crate) fn next_batch(&mut self) -> io::Result<Scanned<'_>> {
        if self.position == self.end {
            return Ok(Scanned::End);
        }
        if !self.fill(OFFSET_RANGE_BYTES)? {
            return Ok(Scanned::Torn);
        }
        let at = (self.position - self.buf_start) as usize;
        let Some(extent) = peek_extent(&self.buf[at..]) else {
            return Ok(Scanned::Torn);
        };
        debug_assert!(extent.total_bytes >= LOG_OVERHEAD);
        if !self.fill(extent.total_bytes)? {
            return Ok(Scanned::Torn);
        }
        let position = self.position;
        let at = (position - self.buf_start) as usize;
        self.position += extent.total_bytes as u64;
        Ok(Scanned::Batch {
            position,
            extent,
            bytes: &self.buf[at..at + extent.total_bytes],
        })
    }
}
