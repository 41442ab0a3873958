//! Precise waits on a load-generating thread. A virtual machine's timer wakes sleepers tens of
//! microseconds late (measured here: ~35 µs at the median even with 1 µs timer slack, ~80 µs
//! with the default 50 µs); a scheduled send that leaves that late would be charged to the
//! broker. So the thread lowers its timer slack, sleeps until a little before the due time
//! (by the lateness it has observed), and spins the rest.

use std::time::Duration;

use crate::clock::RunClock;

/// Lowers this thread's timer slack to 1 µs (`/proc/<tid>/timerslack_ns`, Linux 4.6+);
/// returns whether it took (false where the file does not exist).
pub fn precise_timers_for_this_thread() -> bool {
    // `/proc/thread-self` links to `<pid>/task/<tid>`; the slack file lives at `/proc/<tid>`.
    let Ok(link) = std::fs::read_link("/proc/thread-self") else {
        return false;
    };
    let Some(tid) = link.file_name() else {
        return false;
    };
    let path = std::path::Path::new("/proc")
        .join(tid)
        .join("timerslack_ns");
    std::fs::write(&path, "1000").is_ok()
        && std::fs::read_to_string(&path).is_ok_and(|v| v.trim() == "1000")
}

const SPIN_MARGIN_NS: u64 = 10_000;
const MAX_EXPECTED_LATENESS_NS: u64 = 200_000;

/// Waits until given times, never early.
#[derive(Debug)]
pub struct Waiter {
    /// Smoothed lateness of this thread's wake-ups, ns.
    lateness_ns: u64,
}

impl Default for Waiter {
    fn default() -> Self {
        Waiter {
            lateness_ns: 50_000,
        }
    }
}

impl Waiter {
    /// Returns at `ns` on `clock`, or at once if that has passed.
    pub fn wait_until(&mut self, clock: &RunClock, ns: u64) {
        let now = clock.now_ns();
        if ns <= now {
            return;
        }
        let margin = self.lateness_ns + SPIN_MARGIN_NS;
        if ns - now > margin {
            let target = ns - margin;
            std::thread::sleep(Duration::from_nanos(target - now));
            let late = clock
                .now_ns()
                .saturating_sub(target)
                .min(MAX_EXPECTED_LATENESS_NS);
            self.lateness_ns = (self.lateness_ns * 7 + late) / 8;
        }
        while clock.now_ns() < ns {
            std::hint::spin_loop();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn timer_slack_is_lowered_for_this_thread_only() {
        let main_before = std::fs::read_to_string("/proc/self/timerslack_ns").unwrap_or_default();
        let took = std::thread::spawn(precise_timers_for_this_thread)
            .join()
            .unwrap();
        if std::path::Path::new("/proc/self/timerslack_ns").exists() {
            assert!(took);
            assert_eq!(
                std::fs::read_to_string("/proc/self/timerslack_ns").unwrap_or_default(),
                main_before
            );
        }
    }

    #[test]
    fn waits_are_never_early() {
        let clock = RunClock::start();
        let mut w = Waiter::default();
        for i in 1..=20u64 {
            let due = i * 300_000;
            w.wait_until(&clock, due);
            assert!(clock.now_ns() >= due);
        }
        w.wait_until(&clock, 0);
    }
}
