//! Errors of the log crate. The broker maps them to Kafka error codes in one place.

use std::path::PathBuf;

use crate::offset::Offset;

/// Why an incoming or stored record batch is not acceptable.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum BatchError {
    #[error("batch truncated: needs {needed} bytes, {available} available")]
    Truncated { needed: usize, available: usize },
    #[error("batch length {declared} does not fit the {available} bytes given")]
    BadLength { declared: i32, available: usize },
    #[error("record format magic {0} is not supported (only v2)")]
    UnsupportedMagic(i8),
    #[error("CRC mismatch: stored {stored:#010x}, computed {computed:#010x}")]
    CrcMismatch { stored: u32, computed: u32 },
    #[error("batch of {bytes} bytes exceeds max.message.bytes {max}")]
    TooLarge { bytes: usize, max: usize },
    #[error("invalid records: {0}")]
    InvalidRecords(String),
}

/// How a [`BatchError`] should be reported to a producer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BatchErrorKind {
    /// The bytes are damaged (CORRUPT_MESSAGE).
    Corrupt,
    /// The bytes are intact but break a rule (INVALID_RECORD).
    Invalid,
    /// Bigger than the topic allows (MESSAGE_TOO_LARGE).
    TooLarge,
}

impl BatchError {
    pub fn kind(&self) -> BatchErrorKind {
        match self {
            BatchError::Truncated { .. }
            | BatchError::BadLength { .. }
            | BatchError::CrcMismatch { .. } => BatchErrorKind::Corrupt,
            BatchError::UnsupportedMagic(_) | BatchError::InvalidRecords(_) => {
                BatchErrorKind::Invalid
            }
            BatchError::TooLarge { .. } => BatchErrorKind::TooLarge,
        }
    }
}

/// Errors of log operations.
#[derive(Debug, thiserror::Error)]
pub enum LogError {
    #[error("{op} {path}: {source}")]
    Io {
        op: &'static str,
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error(transparent)]
    Batch(#[from] BatchError),
    #[error("offset {requested} is out of range [{start}, {end}]")]
    OffsetOutOfRange {
        requested: Offset,
        start: Offset,
        end: Offset,
    },
    #[error("log {path} is offline after an unrecoverable I/O error: {reason}")]
    Offline { path: PathBuf, reason: String },
    #[error("replicated batch starts at {got}, before the log's end at {expected}")]
    NonContiguous { expected: Offset, got: Offset },
    #[error("invalid log config: {0}")]
    Config(String),
    #[error(transparent)]
    Producer(#[from] crate::producer_state::ProducerError),
}

impl LogError {
    pub(crate) fn io(op: &'static str, path: impl Into<PathBuf>, source: std::io::Error) -> Self {
        LogError::Io {
            op,
            path: path.into(),
            source,
        }
    }

    /// True when the error is the storage's fault (KAFKA_STORAGE_ERROR), not the request's.
    pub fn is_storage(&self) -> bool {
        matches!(self, LogError::Io { .. } | LogError::Offline { .. })
    }
}
