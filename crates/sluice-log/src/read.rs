//! A read decided under the log's lock and performed outside it: which file, from which
//! byte, up to which offset. Loading copies whole stored batches, unchanged.

use std::fs::File;
use std::io;
use std::os::unix::fs::FileExt;
use std::sync::Arc;

use bytes::Bytes;

use crate::batch::{peek_extent, OFFSET_RANGE_BYTES};
use crate::offset::Offset;
use crate::pread::read_exact_at;

#[derive(Debug, Clone)]
pub struct ReadPlan {
    pub(crate) file: Option<Arc<File>>,
    pub(crate) position: u64,
    /// Bytes of whole batches in the segment when the plan was made.
    pub(crate) end_position: u64,
    /// Batches starting at or after this offset are not visible to this reader.
    pub(crate) upper: Offset,
    pub(crate) max_bytes: usize,
    /// Return the first batch even if it is larger than `max_bytes` (KIP-74), so that a
    /// consumer always makes progress.
    pub(crate) min_one: bool,
}

impl ReadPlan {
    pub(crate) fn empty() -> Self {
        ReadPlan {
            file: None,
            position: 0,
            end_position: 0,
            upper: Offset(0),
            max_bytes: 0,
            min_one: false,
        }
    }

    /// Copies the visible whole batches into memory; empty if there are none.
    pub fn load(&self) -> io::Result<Bytes> {
        let Some(file) = &self.file else {
            return Ok(Bytes::new());
        };
        let available = self.end_position.saturating_sub(self.position);
        let want = (self.max_bytes as u64).min(available) as usize;
        let mut buf = read_exact_at(file, want, self.position)?;
        let keep = self.visible_prefix(&buf);
        if keep > 0 {
            buf.truncate(keep);
            return Ok(Bytes::from(buf));
        }
        if !self.min_one || available < OFFSET_RANGE_BYTES as u64 {
            return Ok(Bytes::new());
        }
        // The first batch alone is bigger than max_bytes: read just that batch.
        let mut head = [0u8; OFFSET_RANGE_BYTES];
        file.read_exact_at(&mut head, self.position)?;
        match peek_extent(&head) {
            Some(extent)
                if extent.base_offset < self.upper && extent.total_bytes as u64 <= available =>
            {
                Ok(Bytes::from(read_exact_at(
                    file,
                    extent.total_bytes,
                    self.position,
                )?))
            }
            _ => Ok(Bytes::new()),
        }
    }

    /// Length of the longest prefix of `buf` made of whole batches below `upper`.
    fn visible_prefix(&self, buf: &[u8]) -> usize {
        let mut at = 0;
        while let Some(extent) = peek_extent(&buf[at..]) {
            if extent.base_offset >= self.upper || at + extent.total_bytes > buf.len() {
                break;
            }
            at += extent.total_bytes;
        }
        at
    }
}
