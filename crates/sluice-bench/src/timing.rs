//! Precise waits on a load-generating thread: the kernel's default timer slack (50 µs) would
//! add that much to every scheduled send, so the thread asks for 1 µs.

use std::time::Duration;

use crate::clock::RunClock;

/// Lowers this thread's timer slack to 1 µs (`/proc/thread-self/timerslack_ns`, Linux 4.6+);
/// harmless where that file does not exist.
pub fn precise_timers_for_this_thread() {
    let _ = std::fs::write("/proc/thread-self/timerslack_ns", "1000");
}

/// Sleeps until `ns` on `clock`.
pub fn sleep_until(clock: &RunClock, ns: u64) {
    let now = clock.now_ns();
    if ns > now {
        std::thread::sleep(Duration::from_nanos(ns - now));
    }
}
