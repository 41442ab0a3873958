//! The relay's clocks: deadlines, rates and the lag behind the database's commit times.

use std::time::{Instant, SystemTime, UNIX_EPOCH};

#[allow(clippy::disallowed_methods)] // the one place the relay reads the clock
pub fn now() -> Instant {
    Instant::now()
}

/// Microseconds since the Unix epoch, to compare with the database's commit times.
#[allow(clippy::disallowed_methods)]
pub fn now_us() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| i64::try_from(d.as_micros()).unwrap_or(i64::MAX))
        .unwrap_or(0)
}
