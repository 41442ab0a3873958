//! Per-log settings; the broker builds them from topic configs over broker defaults.

use crate::error::LogError;

/// When appended data is forced to disk.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FlushMode {
    /// Acknowledge only after fsync; concurrent appends share one fsync (group commit).
    Sync,
    /// fsync in the background every `interval_ms`; acknowledge once in the page cache.
    Interval { interval_ms: u64 },
}

/// Which time a stored batch carries (`message.timestamp.type`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TimestampType {
    CreateTime,
    LogAppendTime,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LogConfig {
    /// Roll to a new segment before the active one would exceed this (`segment.bytes`).
    pub segment_bytes: u64,
    /// Roll a segment this old, counted from its first append (`segment.ms`).
    pub segment_ms: i64,
    /// Bytes of log between sparse index entries (`index.interval.bytes`).
    pub index_interval_bytes: u64,
    /// Delete segments whose newest record is older than this; negative keeps forever.
    pub retention_ms: i64,
    /// Delete the oldest segments while the log is bigger than this; negative keeps all.
    pub retention_bytes: i64,
    /// Largest accepted batch (`max.message.bytes`).
    pub max_message_bytes: usize,
    pub flush: FlushMode,
    pub timestamp_type: TimestampType,
    /// `cleanup.policy` has `delete`: retention deletes old segments.
    pub delete_policy: bool,
    /// `cleanup.policy` has `compact`: the cleaner keeps the newest record per key.
    pub compact: bool,
    /// Tombstones older than this are removed by compaction (`delete.retention.ms`).
    pub delete_retention_ms: i64,
}

pub const MIN_SEGMENT_BYTES: u64 = 1024;
pub const MAX_SEGMENT_BYTES: u64 = i32::MAX as u64;

impl Default for LogConfig {
    fn default() -> Self {
        LogConfig {
            segment_bytes: 1 << 30,
            segment_ms: 7 * 24 * 3600 * 1000,
            index_interval_bytes: 4096,
            retention_ms: 7 * 24 * 3600 * 1000,
            retention_bytes: -1,
            max_message_bytes: 1024 * 1024 + 12,
            flush: FlushMode::Interval { interval_ms: 100 },
            timestamp_type: TimestampType::CreateTime,
            delete_policy: true,
            compact: false,
            delete_retention_ms: 24 * 3600 * 1000,
        }
    }
}

impl LogConfig {
    pub fn validate(&self) -> Result<(), LogError> {
        if !(MIN_SEGMENT_BYTES..=MAX_SEGMENT_BYTES).contains(&self.segment_bytes) {
            return Err(LogError::Config(format!(
                "segment.bytes {} must be in [{MIN_SEGMENT_BYTES}, {MAX_SEGMENT_BYTES}]",
                self.segment_bytes
            )));
        }
        if self.segment_ms < 1 {
            return Err(LogError::Config("segment.ms must be at least 1".into()));
        }
        if self.max_message_bytes == 0 || self.max_message_bytes > i32::MAX as usize {
            return Err(LogError::Config(
                "max.message.bytes must be in [1, 2147483647]".into(),
            ));
        }
        if let FlushMode::Interval { interval_ms: 0 } = self.flush {
            return Err(LogError::Config(
                "flush.interval.ms must be at least 1".into(),
            ));
        }
        Ok(())
    }
}
