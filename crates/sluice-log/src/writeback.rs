//! Starting the disk write of appended data early, so that the fsync that makes it durable
//! finds most of it already written. Without this, a burst of appends sits dirty in the page
//! cache and one fsync then writes all of it while the caller waits; with it, the disk works
//! in parallel with the appends (measured: a durable 1 GiB of 16 KiB appends went from ~1.6 to
//! ~2.5 GB/s on this machine's disk, see bench/log_vs_dd.py).

use std::fs::File;
use std::os::fd::AsRawFd;

/// Appended bytes between two writeback starts.
pub(crate) const WRITEBACK_CHUNK_BYTES: u64 = 4 << 20;

/// Asks the kernel to begin writing `[offset, offset + len)` of `file` to disk, without waiting
/// (`sync_file_range(SYNC_FILE_RANGE_WRITE)`). A hint: errors are ignored here and surface, if
/// real, at the fsync that follows.
pub(crate) fn start_writeback(file: &File, offset: u64, len: u64) {
    let (Ok(offset), Ok(len)) = (i64::try_from(offset), i64::try_from(len)) else {
        return;
    };
    #[allow(unsafe_code)]
    // SAFETY: the descriptor is open for the lifetime of `file`, which we borrow; the call only
    // schedules I/O on it and touches no memory of ours.
    unsafe {
        libc::sync_file_range(file.as_raw_fd(), offset, len, libc::SYNC_FILE_RANGE_WRITE);
    }
}
