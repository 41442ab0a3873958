//! Which new connections are let in, besides the broker-wide limit: at most so many open
//! connections per client address (Kafka's `max.connections.per.ip` and its per-address
//! overrides; over it the new connection is closed at once), and at most so many new
//! connections per second across the broker (`max.connection.creation.rate`; over it
//! accepting waits, as Kafka's acceptor does, so a reconnect storm is spread out instead of
//! refused); and, where the service sets one for an address (an `ip` quota, KIP-612), at most
//! so many new connections per second from that address: over it the connection is accepted
//! and closed after the time the address owes, as Kafka does, so that a client looping on
//! reconnects is slowed, not spun.

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use parking_lot::Mutex;

/// The per-address and rate limits.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ConnectionQuotas {
    /// Open connections per client address; `None`: no limit.
    pub max_per_ip: Option<usize>,
    /// Per-address limits that replace `max_per_ip` (0 refuses the address).
    pub per_ip_overrides: HashMap<IpAddr, usize>,
    /// New connections per second, all listeners together; `None`: no limit.
    pub max_creation_rate: Option<f64>,
}

/// Counts connections per address and paces their creation.
#[derive(Debug)]
pub struct Admission {
    quotas: ConnectionQuotas,
    open: Mutex<HashMap<IpAddr, usize>>,
    pace: Mutex<Pace>,
    /// One bucket per address that has an ip quota and connected lately.
    per_ip_pace: Mutex<HashMap<IpAddr, Pace>>,
}

/// At most this many addresses' buckets are kept; past it, the full ones are dropped (a
/// full bucket is what a new one would be), else the one idle longest.
const MAX_IP_BUCKETS: usize = 10_000;

/// A token bucket of one second's worth of connections.
#[derive(Debug)]
struct Pace {
    tokens: f64,
    last: Option<Instant>,
    /// The rate it was last taken at (per-address buckets: judged by it when swept).
    rate_per_s: f64,
}

impl Pace {
    /// Refills at `rate_per_s` (at most one second's worth saved up: the burst Kafka's rates
    /// allow) and takes a token: zero, or how long until one is there.
    fn take(&mut self, rate_per_s: f64, now: Instant) -> Duration {
        self.rate_per_s = rate_per_s;
        let elapsed = self.last.map_or(0.0, |last| {
            now.saturating_duration_since(last).as_secs_f64()
        });
        self.tokens = (self.tokens + elapsed * rate_per_s).min(rate_per_s.max(1.0));
        self.last = Some(now);
        if self.tokens >= 1.0 {
            self.tokens -= 1.0;
            Duration::ZERO
        } else {
            wait((1.0 - self.tokens) / rate_per_s)
        }
    }
}

/// The longest wait a bucket answers: a rate near zero would otherwise ask for more seconds
/// than a `Duration` holds.
const MAX_WAIT: Duration = Duration::from_secs(3600);

/// `seconds` as a wait, at most [`MAX_WAIT`].
fn wait(seconds: f64) -> Duration {
    Duration::try_from_secs_f64(seconds.min(MAX_WAIT.as_secs_f64())).unwrap_or(MAX_WAIT)
}

/// An admitted connection's place in its address's count, given back on drop.
#[derive(Debug)]
pub struct Admitted {
    admission: Arc<Admission>,
    ip: IpAddr,
}

impl Drop for Admitted {
    fn drop(&mut self) {
        let mut open = self.admission.open.lock();
        if let Some(n) = open.get_mut(&self.ip) {
            *n = n.saturating_sub(1);
            if *n == 0 {
                open.remove(&self.ip);
            }
        }
    }
}

impl Admission {
    pub fn new(quotas: ConnectionQuotas) -> Arc<Admission> {
        Arc::new(Admission {
            open: Mutex::new(HashMap::new()),
            pace: Mutex::new(Pace {
                tokens: quotas.max_creation_rate.unwrap_or(0.0),
                last: None,
                rate_per_s: quotas.max_creation_rate.unwrap_or(0.0),
            }),
            per_ip_pace: Mutex::new(HashMap::new()),
            quotas,
        })
    }

    /// How long to wait before accepting the next connection (zero when a token is there,
    /// which this takes).
    pub fn wait_for_creation(&self, now: Instant) -> Duration {
        let Some(rate) = self.quotas.max_creation_rate.filter(|r| *r > 0.0) else {
            return Duration::ZERO;
        };
        self.pace.lock().take(rate, now)
    }

    /// How long a new connection from `ip`, whose address may open `rate` connections per
    /// second, must be held before it is closed: zero when a token is there (which this takes)
    /// and the connection goes ahead.
    pub fn throttle_ip(&self, ip: IpAddr, rate: f64, now: Instant) -> Duration {
        if !rate.is_finite() || rate <= 0.0 {
            return Duration::ZERO;
        }
        let ip = ip.to_canonical();
        let burst = rate.max(1.0);
        let mut buckets = self.per_ip_pace.lock();
        if buckets.len() >= MAX_IP_BUCKETS && !buckets.contains_key(&ip) {
            // Each bucket judged at its own address's rate.
            buckets.retain(|_, pace| {
                let idle = pace.last.map_or(f64::MAX, |last| {
                    now.saturating_duration_since(last).as_secs_f64()
                });
                pace.tokens + idle * pace.rate_per_s < pace.rate_per_s.max(1.0)
            });
            // All still owing: the one idle longest goes.
            let oldest = buckets
                .iter()
                .min_by_key(|(_, pace)| pace.last)
                .map(|(ip, _)| *ip);
            if let Some(oldest) = oldest.filter(|_| buckets.len() >= MAX_IP_BUCKETS) {
                buckets.remove(&oldest);
            }
        }
        let pace = buckets.entry(ip).or_insert(Pace {
            tokens: burst,
            last: None,
            rate_per_s: rate,
        });
        pace.take(rate, now)
    }

    /// Counts a connection from `ip`, or refuses it (with the limit it would exceed).
    pub fn admit(self: &Arc<Self>, ip: IpAddr) -> Result<Admitted, usize> {
        // `::ffff:10.0.0.7` on a dual-stack listener is 10.0.0.7.
        let ip = ip.to_canonical();
        let limit = self
            .quotas
            .per_ip_overrides
            .get(&ip)
            .copied()
            .or(self.quotas.max_per_ip);
        let mut open = self.open.lock();
        let n = open.entry(ip).or_insert(0);
        if let Some(limit) = limit {
            if *n >= limit {
                if *n == 0 {
                    open.remove(&ip);
                }
                return Err(limit);
            }
        }
        *n += 1;
        Ok(Admitted {
            admission: Arc::clone(self),
            ip,
        })
    }

    /// Open connections from `ip` (for tests and metrics).
    pub fn open_from(&self, ip: IpAddr) -> usize {
        self.open.lock().get(&ip).copied().unwrap_or(0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap_or(IpAddr::from([0, 0, 0, 0]))
    }

    #[test]
    fn per_address_limit_and_overrides() {
        let admission = Admission::new(ConnectionQuotas {
            max_per_ip: Some(2),
            per_ip_overrides: [(ip("10.0.0.9"), 0), (ip("10.0.0.8"), 3)].into(),
            max_creation_rate: None,
        });
        let a = admission.admit(ip("10.0.0.1"));
        let b = admission.admit(ip("10.0.0.1"));
        assert!(a.is_ok() && b.is_ok());
        assert_eq!(admission.admit(ip("10.0.0.1")).err(), Some(2));
        assert!(
            admission.admit(ip("10.0.0.2")).is_ok(),
            "other addresses unaffected"
        );
        drop(a);
        assert_eq!(admission.open_from(ip("10.0.0.1")), 1);
        assert!(
            admission.admit(ip("10.0.0.1")).is_ok(),
            "a closed one frees its place"
        );
        assert_eq!(admission.admit(ip("10.0.0.9")).err(), Some(0));
        let held: Vec<_> = (0..3).map(|_| admission.admit(ip("10.0.0.8"))).collect();
        assert!(held.iter().all(Result::is_ok));
        assert_eq!(admission.admit(ip("10.0.0.8")).err(), Some(3));
    }

    #[test]
    fn an_address_over_its_rate_owes_time_and_others_do_not() {
        let a = Admission::new(ConnectionQuotas::default());
        let t0 = Instant::now();
        let (one, two) = (ip("10.0.0.1"), ip("10.0.0.2"));
        // A second's worth (2) at once, then the third owes half a second.
        assert!(a.throttle_ip(one, 2.0, t0).is_zero());
        assert!(a.throttle_ip(one, 2.0, t0).is_zero());
        let owed = a.throttle_ip(one, 2.0, t0);
        assert!(owed > Duration::from_millis(400) && owed <= Duration::from_millis(500));
        assert!(
            a.throttle_ip(two, 2.0, t0).is_zero(),
            "another address has its own"
        );
        // `::ffff:10.0.0.1` is the same address.
        assert!(!a.throttle_ip(ip("::ffff:10.0.0.1"), 2.0, t0).is_zero());
        assert!(a
            .throttle_ip(one, 2.0, t0 + Duration::from_secs(1))
            .is_zero());
        for i in 0..MAX_IP_BUCKETS + 10 {
            let addr = IpAddr::from([10, 1, (i / 256) as u8, (i % 256) as u8]);
            a.throttle_ip(addr, 2.0, t0 + Duration::from_secs(10));
        }
        assert_eq!(a.per_ip_pace.lock().len(), MAX_IP_BUCKETS, "bounded");
        // A rate near zero owes a bounded wait, not a panic.
        a.throttle_ip(ip("10.9.9.9"), 1e-20, t0);
        assert_eq!(a.throttle_ip(ip("10.9.9.9"), 1e-20, t0), MAX_WAIT);
    }

    #[test]
    fn creation_rate_paces() {
        let admission = Admission::new(ConnectionQuotas {
            max_creation_rate: Some(10.0),
            ..ConnectionQuotas::default()
        });
        let t0 = Instant::now();
        // A second's worth at once, then one per 100 ms.
        for _ in 0..10 {
            assert_eq!(admission.wait_for_creation(t0), Duration::ZERO);
        }
        let wait = admission.wait_for_creation(t0);
        assert!(wait > Duration::from_millis(90) && wait <= Duration::from_millis(100));
        assert_eq!(
            admission.wait_for_creation(t0 + Duration::from_millis(100)),
            Duration::ZERO
        );
        let unlimited = Admission::new(ConnectionQuotas::default());
        assert_eq!(unlimited.wait_for_creation(t0), Duration::ZERO);
    }
}
