//! The file system under the data directory, as operators and DescribeLogDirs see it.

use std::path::Path;

/// Free (usable by this process) and total bytes of the file system holding `path`.
pub fn disk_space(path: &Path) -> Option<(u64, u64)> {
    let s = rustix::fs::statvfs(path).ok()?;
    Some((
        s.f_bavail.saturating_mul(s.f_frsize),
        s.f_blocks.saturating_mul(s.f_frsize),
    ))
}
