//! Enforcement of the quotas: one token bucket per quota and entity as the request's client
//! sees it (a default entity's limit applies to each user or client id on its own, as in
//! Kafka), refilled at the quota and holding at most one second's worth. A request takes what
//! it used (bytes, or nanoseconds of a thread for `request_percentage`); when that leaves the
//! bucket in debt, the client is throttled for as long as the refill needs to pay the debt
//! back (at most `MAX_THROTTLE_MS`, the debt stays), so over any stretch longer than a second
//! a client gets its quota and no more.

use std::collections::HashMap;

use parking_lot::Mutex;
use sluice_cluster::metadata::{EntityName, QuotaEntity};

use std::sync::atomic::{AtomicI64, Ordering};

use crate::broker::Broker;

/// The longest a client is told to wait at once (Kafka bounds it by its quota window).
pub const MAX_THROTTLE_MS: i64 = 10_000;

/// Buckets not touched for this long are forgotten.
const IDLE_MS: i64 = 60_000;
/// Buckets kept at most (client ids are the client's choice); past it, idle ones are dropped,
/// at most once a second, and clients without a bucket share one.
const MAX_BUCKETS: usize = 10_000;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum QuotaKind {
    /// Bytes produced per second.
    Produce,
    /// Bytes fetched per second.
    Fetch,
    /// Time on the broker's threads, as a percentage of one thread (KIP-124).
    Request,
}

impl QuotaKind {
    pub fn key(self) -> &'static str {
        match self {
            QuotaKind::Produce => "producer_byte_rate",
            QuotaKind::Fetch => "consumer_byte_rate",
            QuotaKind::Request => "request_percentage",
        }
    }

    /// The bucket's refill per second for a quota of `value`: bytes, or nanoseconds of
    /// thread time (100% = one thread all the time).
    pub fn per_second(self, value: f64) -> f64 {
        match self {
            QuotaKind::Produce | QuotaKind::Fetch => value,
            QuotaKind::Request => value / 100.0 * 1e9,
        }
    }
}

#[derive(Debug)]
struct Bucket {
    tokens: f64,
    rate: f64,
    last_ms: i64,
}

#[derive(Debug, Default)]
pub struct Buckets {
    buckets: Mutex<HashMap<(QuotaKind, QuotaEntity), Bucket>>,
    /// When idle buckets were last dropped (ms).
    swept_ms: std::sync::atomic::AtomicI64,
}

impl Buckets {
    /// Takes `bytes` (or nanoseconds) from the bucket of `entity` (limit `rate` per second) at
    /// `now_ms`; how long
    /// the debt takes to pay back, in ms (0: within the quota). Not capped: the caller mutes
    /// the connection for all of it and reports at most [`MAX_THROTTLE_MS`].
    pub fn take(
        &self,
        kind: QuotaKind,
        entity: QuotaEntity,
        rate: f64,
        bytes: u64,
        now_ms: i64,
    ) -> i64 {
        let mut buckets = self.buckets.lock();
        let key = if buckets.len() < MAX_BUCKETS || buckets.contains_key(&(kind, entity.clone())) {
            (kind, entity)
        } else {
            let swept = self.swept_ms.load(std::sync::atomic::Ordering::Relaxed);
            if now_ms - swept >= 1_000 {
                self.swept_ms
                    .store(now_ms, std::sync::atomic::Ordering::Relaxed);
                buckets.retain(|_, b| now_ms - b.last_ms < IDLE_MS);
            }
            if buckets.len() < MAX_BUCKETS {
                (kind, entity)
            } else {
                // Full of live buckets: this client shares the overflow bucket.
                (
                    kind,
                    QuotaEntity {
                        user: None,
                        client_id: None,
                        ip: None,
                    },
                )
            }
        };
        let bucket = buckets.entry(key).or_insert(Bucket {
            tokens: rate,
            rate,
            last_ms: now_ms,
        });
        if bucket.rate != rate {
            // The quota changed: start from a full bucket at the new rate.
            bucket.rate = rate;
            bucket.tokens = rate;
        }
        let elapsed = (now_ms - bucket.last_ms).max(0) as f64 / 1000.0;
        bucket.tokens = (bucket.tokens + elapsed * rate).min(rate);
        bucket.last_ms = now_ms;
        bucket.tokens -= bytes as f64;
        if bucket.tokens >= 0.0 {
            0
        } else {
            (-bucket.tokens / rate * 1000.0).ceil() as i64
        }
    }
}

impl Broker {
    /// Whether any user or client id quota is set (else nothing is counted; ip quotas are
    /// the listeners').
    pub fn has_client_quotas(&self) -> bool {
        self.client_quotas().has_client_entities()
    }

    /// [`Broker::throttle`] for the request `call` carries; `bytes` is counted only when a
    /// quota is set (one look at the quotas per request).
    pub fn throttle_call(
        &self,
        call: &crate::handlers::Call,
        kind: QuotaKind,
        bytes: impl FnOnce() -> u64,
    ) -> i32 {
        if !self.has_client_quotas() {
            return 0;
        }
        let user = call.session.principal().map(|p| p.name).unwrap_or_default();
        self.throttle(
            &user,
            call.client_id,
            &call.session.mute_handle(),
            kind,
            bytes(),
        )
    }

    /// Counts `bytes` of a produce or fetch (or nanoseconds of a request's thread time)
    /// against the quota of `user` and `client_id`; returns the throttle time to answer (0
    /// without a quota or within it) and mutes the connection (`mute`, the session's) for that
    /// long.
    pub fn throttle(
        &self,
        user: &str,
        client_id: &str,
        mute: &AtomicI64,
        kind: QuotaKind,
        bytes: u64,
    ) -> i32 {
        let Some((ms, now)) = self.take_quota(user, client_id, kind, bytes) else {
            return 0;
        };
        if ms > 0 {
            // Muted for the whole debt, so that large requests cannot outrun the quota; the
            // client is told at most MAX_THROTTLE_MS (Kafka's bound) and finds the rest when
            // its next request is read.
            mute.fetch_max(now.saturating_add(ms), Ordering::Relaxed);
            self.metrics.throttled(kind.key());
        }
        i32::try_from(ms.min(MAX_THROTTLE_MS)).unwrap_or(i32::MAX)
    }

    /// Counts `amount` against the quota without throttling or muting (Kafka's
    /// `recordNoThrottle`): use known only after the answer went out, whose debt the next
    /// requests' throttle carries.
    pub fn record_quota_use(&self, user: &str, client_id: &str, kind: QuotaKind, amount: u64) {
        self.take_quota(user, client_id, kind, amount);
    }

    /// Takes `bytes` from the bucket of the quota that applies to `user` and `client_id`;
    /// the throttle it owes in ms and the time it was reckoned at, or `None` without such a
    /// quota.
    fn take_quota(
        &self,
        user: &str,
        client_id: &str,
        kind: QuotaKind,
        bytes: u64,
    ) -> Option<(i64, i64)> {
        let quotas = self.client_quotas();
        if quotas.is_empty() || bytes == 0 {
            return None;
        }
        let (entity, value) = quotas.lookup(user, client_id, kind.key())?;
        let rate = kind.per_second(value);
        // The bucket is the matched entity with its defaults named: each user (or client id)
        // under a default quota has a bucket of its own.
        let named = |n: Option<EntityName>, actual: &str| {
            n.map(|n| match n {
                EntityName::Default => EntityName::Named(actual.to_string()),
                named => named,
            })
        };
        let bucket = QuotaEntity {
            user: named(entity.user, user),
            client_id: named(entity.client_id, client_id),
            ip: None,
        };
        let now = self.clock.now_ms();
        Some((self.quota_buckets.take(kind, bucket, rate, bytes, now), now))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn alice() -> QuotaEntity {
        QuotaEntity {
            user: Some(EntityName::Named("alice".into())),
            client_id: None,
            ip: None,
        }
    }

    #[test]
    fn a_second_of_burst_then_the_rate() {
        let b = Buckets::default();
        let rate = 1_000_000.0;
        assert_eq!(b.take(QuotaKind::Produce, alice(), rate, 600_000, 0), 0);
        assert_eq!(b.take(QuotaKind::Produce, alice(), rate, 400_000, 0), 0);
        // 500 KB over: half a second to pay back.
        assert_eq!(b.take(QuotaKind::Produce, alice(), rate, 500_000, 0), 500);
        // After the half second the debt is paid; 100 ms later 100 KB are available.
        assert_eq!(b.take(QuotaKind::Produce, alice(), rate, 100_000, 600), 0);
        // Fetch has its own bucket.
        assert_eq!(b.take(QuotaKind::Fetch, alice(), rate, 900_000, 600), 0);
    }

    #[test]
    fn a_huge_request_owes_all_of_its_debt() {
        let b = Buckets::default();
        let rate = 1_000.0;
        // 999 s of debt (a second of burst was there).
        assert_eq!(
            b.take(QuotaKind::Produce, alice(), rate, 1_000_000, 0),
            999_000
        );
        assert!(b.take(QuotaKind::Produce, alice(), rate, 1, MAX_THROTTLE_MS) > 0);
    }

    #[test]
    fn buckets_are_bounded() {
        let b = Buckets::default();
        for i in 0..MAX_BUCKETS + 50 {
            let e = QuotaEntity {
                user: None,
                client_id: Some(EntityName::Named(format!("c{i}"))),
                ip: None,
            };
            b.take(QuotaKind::Produce, e, 1e6, 1, 0);
        }
        assert!(b.buckets.lock().len() <= MAX_BUCKETS + 1);
    }
}
