//! The open-loop send schedule: message `i` of a producer offering `rate` msg/s is due at
//! `i / rate` seconds after the start, whether or not the broker kept up. Latency is measured
//! from that intended time, so a stalled broker cannot hide its stall by slowing the sender
//! (no coordinated omission).

#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Schedule {
    rate_per_s: f64,
    /// Messages the producer sends in all.
    total: u64,
}

impl Schedule {
    /// `rate_per_s` messages per second for `duration_s` seconds.
    pub fn new(rate_per_s: f64, duration_s: f64) -> Schedule {
        assert!(rate_per_s > 0.0 && duration_s > 0.0);
        Schedule {
            rate_per_s,
            total: (rate_per_s * duration_s).round().max(1.0) as u64,
        }
    }

    pub fn total(&self) -> u64 {
        self.total
    }

    /// When message `i` is due, in ns from the start.
    pub fn due_ns(&self, i: u64) -> u64 {
        (i as f64 * 1e9 / self.rate_per_s) as u64
    }

    /// How many messages are due by `elapsed_ns` (message i is due when `due_ns(i) <= elapsed`).
    pub fn due_by(&self, elapsed_ns: u64) -> u64 {
        let n = (elapsed_ns as f64 * self.rate_per_s / 1e9).floor() as u64 + 1;
        // Floating point may land one off near the boundary; settle it exactly.
        let mut n = n.min(self.total);
        while n > 0 && self.due_ns(n - 1) > elapsed_ns {
            n -= 1;
        }
        while n < self.total && self.due_ns(n) <= elapsed_ns {
            n += 1;
        }
        n
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn known_schedules() {
        let s = Schedule::new(1000.0, 2.0);
        assert_eq!(s.total(), 2000);
        assert_eq!(s.due_ns(0), 0);
        assert_eq!(s.due_ns(1), 1_000_000);
        assert_eq!(s.due_ns(1500), 1_500_000_000);
        assert_eq!(s.due_by(0), 1);
        assert_eq!(s.due_by(999_999), 1);
        assert_eq!(s.due_by(1_000_000), 2);
        assert_eq!(s.due_by(10_000_000_000), 2000, "never more than the total");
        let fast = Schedule::new(450_000.0, 1.0);
        assert_eq!(fast.total(), 450_000);
        assert_eq!(fast.due_by(500_000_000), 225_001);
    }

    #[test]
    fn due_by_agrees_with_due_ns_everywhere() {
        for rate in [3.0, 7_919.0, 100_000.0, 333_333.0] {
            let s = Schedule::new(rate, 0.5);
            for i in (0..s.total()).step_by(97) {
                let t = s.due_ns(i);
                assert_eq!(s.due_by(t), i + 1, "rate {rate} i {i}");
                if t > 0 && s.due_ns(i - 1) < t - 1 {
                    assert_eq!(s.due_by(t - 1), i, "rate {rate} i {i}");
                }
            }
        }
    }
}
