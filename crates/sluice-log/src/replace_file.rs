//! Replacing a small file so that a crash leaves the old or the new one, whole.

use std::fs::{self, File};
use std::io::Write;
use std::path::Path;

/// Writes `bytes` as `dir/name`: to a temporary file first, fsynced, renamed over the old one,
/// then the directory fsynced so that the rename itself is durable.
pub fn replace_file(dir: &Path, name: &str, bytes: &[u8]) -> std::io::Result<()> {
    let tmp = dir.join(format!("{name}.tmp"));
    let mut file = File::create(&tmp)?;
    file.write_all(bytes)?;
    file.sync_all()?;
    fs::rename(&tmp, dir.join(name))?;
    File::open(dir)?.sync_all()
}
