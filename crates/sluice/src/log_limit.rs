//! Keeps the Raft library's repeated warnings from flooding the log.
//!
//! While a metadata voter is down, openraft logs the same warnings and errors several times a
//! second (each heartbeat, each read-index confirmation, each replication retry: ~18 lines a
//! second, ~1 MB every 5 minutes, measured on a 3-node cluster with one node SIGKILLed). Each
//! such line names the unreachable node and the reason, so the first one says everything: this
//! filter lets one event per openraft call site through per interval and drops the repeats.
//! Events of every other target, and openraft's info and debug events (already subject to the
//! level filter), pass untouched.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use sluice_log::Clock;
use tracing::callsite::Identifier;
use tracing::subscriber::Interest;
use tracing::{Level, Metadata};
use tracing_subscriber::layer::{Context, Filter};

/// The library whose repeats are limited.
const TARGET: &str = "openraft";

/// One line per call site per this many ms.
pub const INTERVAL_MS: i64 = 30_000;

#[derive(Debug)]
pub struct RepeatLimit {
    clock: Arc<dyn Clock>,
    interval_ms: i64,
    /// When each call site last let an event through.
    last: Mutex<HashMap<Identifier, i64>>,
}

impl RepeatLimit {
    pub fn new(clock: Arc<dyn Clock>, interval_ms: i64) -> Self {
        Self {
            clock,
            interval_ms,
            last: Mutex::new(HashMap::new()),
        }
    }

    fn limited(meta: &Metadata<'_>) -> bool {
        meta.is_event() && *meta.level() <= Level::WARN && meta.target().starts_with(TARGET)
    }
}

impl<S> Filter<S> for RepeatLimit {
    fn enabled(&self, meta: &Metadata<'_>, _: &Context<'_, S>) -> bool {
        if !Self::limited(meta) {
            return true;
        }
        let now = self.clock.now_ms();
        let Ok(mut last) = self.last.lock() else {
            return true;
        };
        let id = meta.callsite();
        match last.get(&id) {
            Some(&at) if now.saturating_sub(at) < self.interval_ms => false,
            _ => {
                last.insert(id, now);
                true
            }
        }
    }

    fn callsite_enabled(&self, meta: &'static Metadata<'static>) -> Interest {
        // Limited call sites are asked about every event; the rest are always on.
        if Self::limited(meta) {
            Interest::sometimes()
        } else {
            Interest::always()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use sluice_log::ManualClock;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use tracing_subscriber::layer::SubscriberExt;
    use tracing_subscriber::Layer;

    /// Counts the events that reach it.
    struct Count(Arc<AtomicUsize>);

    impl<S: tracing::Subscriber> Layer<S> for Count {
        fn on_event(&self, _: &tracing::Event<'_>, _: Context<'_, S>) {
            self.0.fetch_add(1, Ordering::SeqCst);
        }
    }

    #[test]
    fn one_openraft_warning_per_call_site_per_interval_and_everything_else() {
        let clock = ManualClock::new(1_000_000);
        let seen = Arc::new(AtomicUsize::new(0));
        let limit = RepeatLimit::new(clock.clone(), INTERVAL_MS);
        let subscriber =
            tracing_subscriber::registry().with(Count(seen.clone()).with_filter(limit));
        tracing::subscriber::with_default(subscriber, || {
            let raft_error = || tracing::error!(target: "openraft::core", node = 1, "unreachable");
            let raft_warn = || tracing::warn!(target: "openraft::replication", "backoff");
            let ours = || tracing::error!(target: "sluice_broker::x", "ours");
            let raft_info = || tracing::info!(target: "openraft::core", "info");
            for _ in 0..10 {
                raft_error();
                raft_warn();
                ours();
                raft_info();
            }
            // 1 + 1 repeated call sites, 10 + 10 untouched.
            assert_eq!(seen.load(Ordering::SeqCst), 22);
            clock.advance_ms(INTERVAL_MS - 1);
            raft_error();
            assert_eq!(seen.load(Ordering::SeqCst), 22, "still within the interval");
            clock.advance_ms(1);
            raft_error();
            raft_error();
            assert_eq!(
                seen.load(Ordering::SeqCst),
                23,
                "one more after the interval"
            );
        });
    }
}
