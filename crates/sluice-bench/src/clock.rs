//! The benchmark's one clock: nanoseconds since the run began, monotonic. Producers and
//! consumers share it (they run in one process), so a latency is a difference of two readings.

use std::time::Instant;

#[derive(Debug, Clone, Copy)]
pub struct RunClock {
    start: Instant,
}

impl RunClock {
    #[allow(clippy::disallowed_methods)] // measuring time is what a benchmark does
    pub fn start() -> RunClock {
        RunClock {
            start: Instant::now(),
        }
    }

    pub fn now_ns(&self) -> u64 {
        self.start.elapsed().as_nanos() as u64
    }

    /// The instant `ns` after the start, for sleeping until it.
    pub fn instant_at(&self, ns: u64) -> tokio::time::Instant {
        tokio::time::Instant::from_std(self.start + std::time::Duration::from_nanos(ns))
    }
}

/// Wall-clock milliseconds, for record timestamps.
#[allow(clippy::disallowed_methods)]
pub fn wall_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as i64)
        .unwrap_or(0)
}
