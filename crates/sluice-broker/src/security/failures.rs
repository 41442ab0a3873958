//! Failed logins, per client address: each is answered late (Kafka's
//! `connection.failed.authentication.delay.ms`), and later still when the same address keeps
//! failing, so that guessing passwords from one place is slow. The table is bounded: an
//! address's count is forgotten a minute after its last failure, and when the table is full
//! new addresses get the base delay without being tracked.

use std::collections::HashMap;
use std::net::IpAddr;

use parking_lot::Mutex;

/// Failures further apart than this start the count again.
const WINDOW_MS: i64 = 60_000;
/// The longest a failed login is kept waiting.
const MAX_DELAY_MS: u64 = 5_000;
const MAX_TRACKED: usize = 10_000;

#[derive(Debug, Default)]
pub struct FailedLogins {
    recent: Mutex<HashMap<IpAddr, (u32, i64)>>,
}

impl FailedLogins {
    /// Records a failure from `ip`; returns how long to wait before answering it: `base_ms`
    /// for the first failure in a minute, doubling with each further one, up to 5 s.
    pub fn failed(&self, ip: IpAddr, now_ms: i64, base_ms: u64) -> u64 {
        let mut recent = self.recent.lock();
        if recent.len() >= MAX_TRACKED {
            recent.retain(|_, (_, last)| now_ms - *last < WINDOW_MS);
        }
        let full = recent.len() >= MAX_TRACKED;
        let count = match recent.get_mut(&ip) {
            Some((count, last)) if now_ms - *last < WINDOW_MS => {
                *count = count.saturating_add(1);
                *last = now_ms;
                *count
            }
            Some(entry) => {
                *entry = (1, now_ms);
                1
            }
            None => {
                if !full {
                    recent.insert(ip, (1, now_ms));
                }
                1
            }
        };
        let factor = 1u64 << (count - 1).min(16);
        base_ms
            .saturating_mul(factor)
            .min(MAX_DELAY_MS.max(base_ms))
    }

    /// Failures counted for `ip` in the current window.
    pub fn count(&self, ip: IpAddr) -> u32 {
        self.recent.lock().get(&ip).map_or(0, |(count, _)| *count)
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    #[test]
    fn repeated_failures_from_one_address_wait_longer_up_to_a_cap() {
        let logins = FailedLogins::default();
        let a: IpAddr = "10.0.0.1".parse().unwrap();
        let b: IpAddr = "10.0.0.2".parse().unwrap();
        let delays: Vec<u64> = (0..8).map(|i| logins.failed(a, 1_000 + i, 100)).collect();
        assert_eq!(delays, [100, 200, 400, 800, 1600, 3200, 5000, 5000]);
        // Another address is not slowed by the first one's failures.
        assert_eq!(logins.failed(b, 1_010, 100), 100);
        // A minute after its last failure, an address starts again.
        assert_eq!(logins.failed(a, 1_007 + WINDOW_MS, 100), 100);
        assert_eq!(logins.count(a), 1);
    }

    #[test]
    fn the_table_stays_bounded() {
        let logins = FailedLogins::default();
        for i in 0..(MAX_TRACKED as u32 + 50) {
            let ip = IpAddr::from(i.to_be_bytes());
            logins.failed(ip, 5, 100);
        }
        assert!(logins.recent.lock().len() <= MAX_TRACKED);
        // Once the old entries age out, new addresses are tracked again.
        logins.failed("192.168.0.1".parse().unwrap(), 5 + WINDOW_MS, 100);
        assert_eq!(logins.count("192.168.0.1".parse().unwrap()), 1);
    }
}
