//! Time, passed in (STYLE.md §7) so that roll-by-age, retention and LogAppendTime can be
//! tested without sleeping: wall-clock time for what is stamped or compared with stamps, and a
//! monotonic clock for how long something took (liveness must not follow a stepped clock).

use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::Arc;

/// A source of Unix time in milliseconds.
pub trait Clock: Send + Sync + std::fmt::Debug {
    fn now_ms(&self) -> i64;
}

/// The system's real clock.
#[derive(Debug, Default, Clone, Copy)]
pub struct SystemClock;

impl Clock for SystemClock {
    #[allow(clippy::disallowed_methods)] // the one place real time enters the log
    fn now_ms(&self) -> i64 {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
            .unwrap_or(0)
    }
}

/// A clock that never jumps: the wall-clock time when it was made, advanced by the monotonic
/// clock since. Durations measured with it (sessions, replica lag, rate limits) are real
/// durations even when the system clock is stepped (NTP, a hand-set clock); its readings drift
/// from the wall clock by as much as the wall clock jumped, so it never stamps a record.
#[derive(Debug, Clone, Copy)]
pub struct MonotonicClock {
    origin_ms: i64,
    origin: std::time::Instant,
}

impl MonotonicClock {
    #[allow(clippy::disallowed_methods)] // real time enters here, as in SystemClock
    pub fn new() -> Self {
        Self {
            origin_ms: SystemClock.now_ms(),
            origin: std::time::Instant::now(),
        }
    }
}

impl Default for MonotonicClock {
    fn default() -> Self {
        Self::new()
    }
}

impl Clock for MonotonicClock {
    fn now_ms(&self) -> i64 {
        let elapsed = i64::try_from(self.origin.elapsed().as_millis()).unwrap_or(i64::MAX);
        self.origin_ms.saturating_add(elapsed)
    }
}

/// How long a piece of work held a thread, in nanoseconds: the monotonic clock read around
/// it. For accounting (the request-time quota), where a millisecond clock is far too coarse;
/// nothing that a test must control depends on it.
#[derive(Debug, Clone, Copy)]
pub struct Stopwatch(std::time::Instant);

impl Stopwatch {
    #[allow(clippy::disallowed_methods)] // real time enters here, as in SystemClock
    pub fn start() -> Self {
        Stopwatch(std::time::Instant::now())
    }

    pub fn elapsed_ns(&self) -> u64 {
        u64::try_from(self.0.elapsed().as_nanos()).unwrap_or(u64::MAX)
    }
}

/// A clock that only moves when told to; for tests.
#[derive(Debug, Default)]
pub struct ManualClock(AtomicI64);

impl ManualClock {
    pub fn new(start_ms: i64) -> Arc<Self> {
        Arc::new(Self(AtomicI64::new(start_ms)))
    }

    pub fn advance_ms(&self, delta_ms: i64) {
        self.0.fetch_add(delta_ms, Ordering::SeqCst);
    }

    pub fn set_ms(&self, now_ms: i64) {
        self.0.store(now_ms, Ordering::SeqCst);
    }
}

impl Clock for ManualClock {
    fn now_ms(&self) -> i64 {
        self.0.load(Ordering::SeqCst)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_monotonic_clock_starts_at_the_wall_clock_and_never_goes_back() {
        let wall = SystemClock.now_ms();
        let clock = MonotonicClock::new();
        let first = clock.now_ms();
        assert!((first - wall).abs() < 1_000, "{first} vs {wall}");
        let mut last = first;
        for _ in 0..1_000 {
            let now = clock.now_ms();
            assert!(now >= last, "went back from {last} to {now}");
            last = now;
        }
    }
}
