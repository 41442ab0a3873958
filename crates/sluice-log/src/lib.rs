//! `sluice-log`: a partition's segmented, append-only commit log.
//!
//! Batches are stored byte-for-byte in Kafka's RecordBatch v2 format with their base offset
//! patched in ([`batch`]); a log is a directory of segments named by base offset, each with a
//! sparse offset index and time index ([`segment`]); start-up recovery truncates a torn tail;
//! retention deletes whole segments. The crate knows nothing of the network, Kafka requests or
//! replication — it offers `append`, `append_assigned` and `truncate_to` for the layers above.

pub mod batch;
mod checkpoint;
pub mod clock;
pub mod compaction;
pub mod config;
pub mod control;
pub mod decompress;
mod epoch_cache;
pub mod error;
mod flush;
pub mod index;
mod log;
pub mod offset;
mod pread;
pub mod producer_state;
mod read;
mod replace_file;
mod scan;
mod segment;
pub mod time_index;
pub mod txn_index;
pub mod writeback;

#[doc(hidden)]
pub mod testing;

pub use batch::{validate_produce, BatchHeader, ValidatedBatch};
pub use clock::{Clock, ManualClock, MonotonicClock, Stopwatch, SystemClock};
pub use config::{FlushMode, LogConfig, TimestampType};
pub use control::Marker;
pub use epoch_cache::EpochCache;
pub use error::{BatchError, BatchErrorKind, LogError};
pub use flush::FlushJob;
pub use log::{AppendInfo, Log, RecoveryReport};
pub use offset::{LeaderEpoch, Offset};
pub use producer_state::{ActiveProducer, OpenTxn, ProducerError};
pub use read::ReadPlan;
pub use replace_file::replace_file;
pub use txn_index::AbortedTxn;
pub use writeback::WritebackJob;
