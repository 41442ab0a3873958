//! How fast one replica fetcher copies for its recovering replicas (those out of the ISR: a
//! node back from a crash, a replica a reassignment added). A token bucket at
//! `replica.recovery.max.bytes.per.sec` keeps the catch-up from starving client traffic on
//! the leader and on this node. A cap alone could keep a replica out of the ISR for good: if
//! its partitions grow faster than the cap, the copy never reaches their end. So the pace is
//! the cap times a boost, judged every [`WINDOW_MS`]: a window in which the cap held the copy
//! back and the partitions grew by more than half of what was copied doubles the boost; the
//! boost stays until this fetcher has no recovering replica left. "Held back" means that the
//! bucket was empty (partitions left out of a fetch), or that an answer under a limit the cap
//! set (and not a smaller KIP-73 one) left the partition still behind the leader's high
//! watermark; a copy slow for any other reason raises nothing.
//!
//! ```text
//!   copied (records gained)   grown (leader's high watermarks moved)
//!   held back and grown * 2 > copied  ──▶  boost × 2 (at most MAX_BOOST)
//!   no recovering replica              ──▶  boost = 1
//! ```

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use super::throttle::Throttle;

/// How long a window is judged over.
pub const WINDOW_MS: i64 = 5_000;
/// The boost stops doubling here: far past any disk (even a cap of 1 byte/s reaches 1 GiB/s),
/// so no cap keeps a replica out of the ISR for good.
pub const MAX_BOOST: u64 = 1 << 30;

#[derive(Debug)]
pub struct RecoveryPace {
    bucket: Throttle,
    boost: u64,
    window_start_ms: Option<i64>,
    /// Records the recovering replicas gained in this window.
    copied: i64,
    /// Records their leader's high watermarks moved by in this window.
    grown: i64,
    /// Whether the bucket held a fetch back (or cut it short) in this window.
    held_back: bool,
    /// The high watermark last seen per recovering partition.
    last_hw: HashMap<(Arc<str>, i32), i64>,
}

/// The bucket saves up this much of its rate: a copy in small steps through each second, not
/// a second's worth at full speed and then a pause (clients felt the bursts). More than the
/// fetcher waits while the cap holds its partitions out (`HELD_WAIT_MS`, its retry pause), so
/// no refill is lost meanwhile.
pub const BURST_MS: u64 = 200;
/// How long the leader may hold a fetch while recovering partitions are held out of it (the
/// others' long poll would otherwise outlast the bucket's depth).
pub const HELD_WAIT_MS: i32 = 50;

impl Default for RecoveryPace {
    fn default() -> Self {
        RecoveryPace {
            bucket: Throttle::with_burst_ms(BURST_MS),
            boost: 1,
            window_start_ms: None,
            copied: 0,
            grown: 0,
            held_back: false,
            last_hw: HashMap::new(),
        }
    }
}

impl RecoveryPace {
    /// Bytes the recovering replicas may fetch now at `rate` (the cap; `None`: no cap, and
    /// the pace starts over). 0 holds them back (counted as such).
    pub fn allowance(&mut self, rate: Option<u64>, now_ms: i64) -> Option<usize> {
        let Some(rate) = rate else {
            self.reset();
            return None;
        };
        let pace = rate.saturating_mul(self.boost);
        if self.bucket.rate() != Some(pace) {
            self.bucket.set_rate(Some(pace));
        }
        let allowed = self.bucket.allowance(now_ms);
        if allowed == Some(0) {
            self.held_back = true;
        }
        allowed
    }

    /// The cap cut a fetch short: an answer filled a limit the cap set below the usual one.
    pub fn cut_short(&mut self) {
        self.held_back = true;
    }

    /// `bytes` fetched for recovering replicas.
    pub fn spend(&self, bytes: usize) {
        self.bucket.spend(bytes);
    }

    /// One recovering partition's answer without error: it `gained` records (appended), and
    /// the leader's high watermark is `high_watermark`.
    pub fn observe(&mut self, partition: (Arc<str>, i32), gained: i64, high_watermark: i64) {
        if high_watermark < 0 {
            return;
        }
        self.copied += gained.max(0);
        if let Some(before) = self.last_hw.insert(partition, high_watermark) {
            self.grown += (high_watermark - before).max(0);
        }
    }

    /// Forgets the high watermarks of partitions that no longer recover here (their growth
    /// meanwhile is not this recovery's).
    pub fn keep_only(&mut self, recovering: &HashSet<(Arc<str>, i32)>) {
        if self.last_hw.keys().any(|k| !recovering.contains(k)) {
            self.last_hw.retain(|k, _| recovering.contains(k));
        }
    }

    /// Judges the window when it is over; the new boost when it was raised.
    pub fn tick(&mut self, now_ms: i64) -> Option<u64> {
        let start = *self.window_start_ms.get_or_insert(now_ms);
        if now_ms - start < WINDOW_MS {
            return None;
        }
        let raise = self.held_back && self.grown.saturating_mul(2) > self.copied;
        self.window_start_ms = Some(now_ms);
        self.copied = 0;
        self.grown = 0;
        self.held_back = false;
        if raise && self.boost < MAX_BOOST {
            self.boost *= 2;
            return Some(self.boost);
        }
        None
    }

    pub fn boost(&self) -> u64 {
        self.boost
    }

    /// No recovering replica (or no cap): the next recovery starts at the cap.
    pub fn reset(&mut self) {
        self.boost = 1;
        self.window_start_ms = None;
        self.copied = 0;
        self.grown = 0;
        self.held_back = false;
        self.last_hw.clear();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The broker's clock is never near 0 (a fresh bucket is full at its first use).
    const BASE: i64 = 1_000_000;

    fn key() -> (Arc<str>, i32) {
        (Arc::from("t"), 0)
    }

    /// One window of a recovering partition: the bucket asked for `wanted` bytes at 100 ms
    /// steps, `gained` records copied and the high watermark moved by `grew` in all.
    fn window(
        pace: &mut RecoveryPace,
        start: i64,
        wanted: usize,
        gained: i64,
        grew: i64,
        hw: &mut i64,
    ) {
        for step in 0..50 {
            let now = BASE + start + step * 100;
            pace.tick(now);
            let allowed = pace.allowance(Some(1000), now).expect("capped");
            if allowed > 0 && allowed < wanted {
                pace.cut_short();
            }
            pace.spend(allowed.min(wanted));
        }
        pace.observe(key(), gained, *hw);
        *hw += grew;
        pace.observe(key(), 0, *hw);
    }

    #[test]
    fn a_cap_that_keeps_up_is_kept() {
        let mut pace = RecoveryPace::default();
        let mut hw = 0;
        // Held back, but the partition grew by less than half of what was copied.
        for w in 0..4 {
            window(&mut pace, w * WINDOW_MS, 1 << 20, 5_000, 1_000, &mut hw);
        }
        pace.tick(BASE + 4 * WINDOW_MS);
        assert_eq!(pace.boost(), 1);
    }

    #[test]
    fn a_partition_growing_faster_than_the_cap_doubles_the_pace_until_it_is_caught() {
        let mut pace = RecoveryPace::default();
        let mut hw = 0;
        window(&mut pace, 0, 1 << 20, 5_000, 8_000, &mut hw);
        assert_eq!(pace.tick(BASE + WINDOW_MS), Some(2));
        window(&mut pace, WINDOW_MS, 1 << 20, 10_000, 8_000, &mut hw);
        assert_eq!(pace.tick(BASE + 2 * WINDOW_MS), Some(4));
        // Now it gains on the partition: no more doubling.
        window(&mut pace, 2 * WINDOW_MS, 1 << 20, 20_000, 8_000, &mut hw);
        assert_eq!(pace.tick(BASE + 3 * WINDOW_MS), None);
        assert_eq!(pace.boost(), 4);
        // The bucket runs at the cap times the boost (and holds a fifth of a second of it).
        let now = BASE + 3 * WINDOW_MS + 10_000;
        assert_eq!(pace.allowance(Some(1000), now), Some(800));
        pace.reset();
        assert_eq!(pace.boost(), 1);
    }

    #[test]
    fn growth_without_the_cap_holding_back_does_not_raise_the_pace() {
        let mut pace = RecoveryPace::default();
        let mut hw = 0;
        // Each fetch wants less than the bucket holds: the cap is not what limits the copy.
        window(&mut pace, 0, 10, 500, 8_000, &mut hw);
        assert_eq!(pace.tick(BASE + WINDOW_MS), None);
        assert_eq!(pace.allowance(None, BASE + WINDOW_MS), None, "no cap");
    }

    #[test]
    fn the_boost_stops_at_its_maximum() {
        let mut pace = RecoveryPace::default();
        let mut hw = 0;
        for w in 0..40 {
            window(&mut pace, w * WINDOW_MS, usize::MAX, 1, 1_000, &mut hw);
        }
        pace.tick(BASE + 40 * WINDOW_MS);
        assert_eq!(pace.boost(), MAX_BOOST);
    }

    #[test]
    fn an_error_answer_or_a_partition_gone_and_back_adds_no_growth() {
        let mut pace = RecoveryPace::default();
        pace.observe(key(), 10, 1_000);
        pace.observe(key(), 0, -1); // an error answer's high watermark
        pace.observe(key(), 10, 1_010);
        assert_eq!(pace.grown, 10);
        pace.keep_only(&HashSet::new());
        pace.observe(key(), 0, 90_000); // back after a while: a new start, not growth
        assert_eq!(pace.grown, 10);
        assert_eq!(pace.copied, 20);
    }
}
