//! The log's `recovery-point` file: every segment wholly below the recovery point was fsynced
//! with its index files, so start-up trusts it and scans only the rest. A clean shutdown also
//! records the active segment's size, letting the next start skip its scan too. It also keeps a
//! log start offset that DeleteRecords moved into the middle of a segment.
//!
//! Text, one `key=value` per line, replaced atomically (write, fsync, rename, fsync dir).

use std::fs::{self, File};
use std::path::Path;

use crate::error::LogError;
use crate::offset::Offset;

pub(crate) const FILE_NAME: &str = "recovery-point";

#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(crate) struct Checkpoint {
    pub recovery_point: Offset,
    /// Set only by a clean shutdown: the active segment's base and size at that moment.
    pub clean_active: Option<(Offset, u64)>,
    /// The log start offset as DeleteRecords last set it (the first segment's base may be
    /// lower); 0 when never set.
    pub log_start: Offset,
}

impl Checkpoint {
    pub(crate) fn read(dir: &Path) -> Checkpoint {
        let Ok(text) = fs::read_to_string(dir.join(FILE_NAME)) else {
            return Checkpoint::default();
        };
        let mut checkpoint = Checkpoint::default();
        let (mut clean_base, mut clean_size) = (None, None);
        for line in text.lines() {
            let Some((key, value)) = line.split_once('=') else {
                continue;
            };
            match (key, value.parse::<i64>()) {
                ("recovery_point", Ok(v)) if v >= 0 => checkpoint.recovery_point = Offset(v),
                ("log_start_offset", Ok(v)) if v >= 0 => checkpoint.log_start = Offset(v),
                ("clean_active_base", Ok(v)) if v >= 0 => clean_base = Some(Offset(v)),
                ("clean_active_bytes", Ok(v)) if v >= 0 => clean_size = Some(v as u64),
                _ => {}
            }
        }
        if let (Some(base), Some(size)) = (clean_base, clean_size) {
            checkpoint.clean_active = Some((base, size));
        }
        checkpoint
    }

    pub(crate) fn write(&self, dir: &Path) -> Result<(), LogError> {
        let mut text = format!(
            "recovery_point={}\nlog_start_offset={}\n",
            self.recovery_point.0, self.log_start.0
        );
        if let Some((base, size)) = self.clean_active {
            text.push_str(&format!(
                "clean_active_base={}\nclean_active_bytes={size}\n",
                base.0
            ));
        }
        crate::replace_file(dir, FILE_NAME, text.as_bytes())
            .map_err(|e| LogError::io("replace", dir.join(FILE_NAME), e))
    }
}

pub(crate) fn sync_dir(dir: &Path) -> Result<(), LogError> {
    File::open(dir)
        .and_then(|d| d.sync_all())
        .map_err(|e| LogError::io("fsync directory", dir, e))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trips_and_tolerates_garbage() {
        let dir = tempfile::tempdir().unwrap();
        assert_eq!(Checkpoint::read(dir.path()), Checkpoint::default());
        let c = Checkpoint {
            recovery_point: Offset(42),
            clean_active: Some((Offset(40), 1234)),
            log_start: Offset(7),
        };
        c.write(dir.path()).unwrap();
        assert_eq!(Checkpoint::read(dir.path()), c);
        fs::write(dir.path().join(FILE_NAME), "recovery_point=x\nnonsense\n").unwrap();
        assert_eq!(Checkpoint::read(dir.path()), Checkpoint::default());
    }
}
