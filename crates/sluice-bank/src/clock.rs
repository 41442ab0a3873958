//! The workload's clocks. The bank bench measures real time across processes (a transfer's
//! send and its credit are read by different processes on one machine), so it reads the
//! system's clocks here and nowhere else.

use std::time::{Instant, SystemTime, UNIX_EPOCH};

/// The monotonic clock, for deadlines and rates.
#[allow(clippy::disallowed_methods)] // measuring time is what a benchmark does
pub fn now() -> Instant {
    Instant::now()
}

/// Microseconds since the epoch: the clock every process of a run shares, for latencies
/// from one process to another.
#[allow(clippy::disallowed_methods)]
pub fn now_us() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| i64::try_from(d.as_micros()).unwrap_or(i64::MAX))
        .unwrap_or(0)
}
