//! At most so many log lines of one kind per window. A client looping on a request it may not
//! make would otherwise write a line per request: the log becomes the flood's target (disk,
//! the operator's attention) while the metric and the audit log already count every one.

use parking_lot::Mutex;

/// What to do with one more line.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Admit {
    /// Log it; `skipped` lines were left out since the last one logged.
    Log { skipped: u64 },
    /// Log it (`skipped` as above), and say that the rest of this window's lines are left out.
    Last { skipped: u64 },
    /// Leave it out.
    Skip,
}

#[derive(Debug)]
pub struct LogBudget {
    per_window: u32,
    window_ms: i64,
    /// The window's start, the lines logged in it, the lines left out since the last logged.
    state: Mutex<(i64, u32, u64)>,
}

impl LogBudget {
    pub fn new(per_window: u32, window_ms: i64) -> LogBudget {
        LogBudget {
            per_window: per_window.max(1),
            window_ms,
            state: Mutex::new((i64::MIN, 0, 0)),
        }
    }

    /// Takes one line's place at `now_ms` (a clock set back starts a new window).
    pub fn take(&self, now_ms: i64) -> Admit {
        let mut state = self.state.lock();
        let (start, used, skipped) = &mut *state;
        let elapsed = now_ms.saturating_sub(*start);
        if !(0..self.window_ms).contains(&elapsed) {
            *start = now_ms;
            *used = 0;
        }
        *used = used.saturating_add(1);
        if *used < self.per_window {
            Admit::Log {
                skipped: std::mem::take(skipped),
            }
        } else if *used == self.per_window {
            Admit::Last {
                skipped: std::mem::take(skipped),
            }
        } else {
            *skipped += 1;
            Admit::Skip
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn logs_a_window_s_budget_then_counts_what_it_leaves_out() {
        let budget = LogBudget::new(3, 1_000);
        assert_eq!(budget.take(0), Admit::Log { skipped: 0 });
        assert_eq!(budget.take(10), Admit::Log { skipped: 0 });
        assert_eq!(budget.take(20), Admit::Last { skipped: 0 });
        assert_eq!(budget.take(30), Admit::Skip);
        assert_eq!(budget.take(999), Admit::Skip);
        // The next window logs again and reports the two left out.
        assert_eq!(budget.take(1_000), Admit::Log { skipped: 2 });
        assert_eq!(budget.take(1_001), Admit::Log { skipped: 0 });
        // A clock set back starts a window too.
        assert_eq!(budget.take(1_002), Admit::Last { skipped: 0 });
        assert_eq!(budget.take(1_003), Admit::Skip);
        assert_eq!(budget.take(500), Admit::Log { skipped: 1 });
    }

    #[test]
    fn a_budget_of_one_line_still_reports_what_it_left_out() {
        let budget = LogBudget::new(1, 1_000);
        assert_eq!(budget.take(0), Admit::Last { skipped: 0 });
        assert_eq!(budget.take(1), Admit::Skip);
        assert_eq!(budget.take(2), Admit::Skip);
        assert_eq!(budget.take(1_000), Admit::Last { skipped: 2 });
    }
}
