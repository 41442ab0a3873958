//! Latency histograms (HDR, 3 significant digits, 1 ns to 10 min) and their summary.

use hdrhistogram::Histogram;
use serde::Serialize;

pub struct Latencies {
    histogram: Histogram<u64>,
}

impl std::fmt::Debug for Latencies {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Latencies({} samples)", self.histogram.len())
    }
}

/// Percentiles in microseconds.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, serde::Deserialize)]
pub struct LatencySummary {
    pub count: u64,
    pub avg_us: f64,
    pub p50_us: f64,
    pub p90_us: f64,
    pub p95_us: f64,
    pub p99_us: f64,
    pub p999_us: f64,
    pub max_us: f64,
}

const MAX_NS: u64 = 600 * 1_000_000_000;

impl Default for Latencies {
    fn default() -> Self {
        Latencies {
            histogram: Histogram::new_with_bounds(1, MAX_NS, 3).expect("valid histogram bounds"),
        }
    }
}

impl Latencies {
    pub fn record_ns(&mut self, ns: u64) {
        self.histogram.saturating_record(ns.clamp(1, MAX_NS));
    }

    pub fn add(&mut self, other: &Latencies) {
        // Same bounds, so merging cannot fail.
        let _ = self.histogram.add(&other.histogram);
    }

    pub fn len(&self) -> u64 {
        self.histogram.len()
    }

    pub fn is_empty(&self) -> bool {
        self.histogram.is_empty()
    }

    pub fn reset(&mut self) {
        self.histogram.reset();
    }

    pub fn p99_us(&self) -> f64 {
        self.histogram.value_at_quantile(0.99) as f64 / 1000.0
    }

    pub fn summary(&self) -> LatencySummary {
        let h = &self.histogram;
        let q = |x: f64| h.value_at_quantile(x) as f64 / 1000.0;
        LatencySummary {
            count: h.len(),
            avg_us: h.mean() / 1000.0,
            p50_us: q(0.50),
            p90_us: q(0.90),
            p95_us: q(0.95),
            p99_us: q(0.99),
            p999_us: q(0.999),
            max_us: h.max() as f64 / 1000.0,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn close(a: f64, b: f64) -> bool {
        (a - b).abs() <= b * 0.002 + 0.001
    }

    #[test]
    fn uniform_1_to_1000_us() {
        let mut l = Latencies::default();
        for us in 1..=1000u64 {
            l.record_ns(us * 1000);
        }
        let s = l.summary();
        assert_eq!(s.count, 1000);
        assert!(close(s.avg_us, 500.5), "{s:?}");
        assert!(close(s.p50_us, 500.0), "{s:?}");
        assert!(close(s.p90_us, 900.0), "{s:?}");
        assert!(close(s.p95_us, 950.0), "{s:?}");
        assert!(close(s.p99_us, 990.0), "{s:?}");
        assert!(close(s.p999_us, 999.0), "{s:?}");
        assert!(close(s.max_us, 1000.0), "{s:?}");
    }

    #[test]
    fn a_rare_stall_shows_in_the_tail_only() {
        let mut l = Latencies::default();
        for _ in 0..999 {
            l.record_ns(20_000);
        }
        l.record_ns(50_000_000);
        let s = l.summary();
        assert!(close(s.p50_us, 20.0) && close(s.p99_us, 20.0), "{s:?}");
        assert!(s.max_us >= 49_900.0, "{s:?}");
        let mut other = Latencies::default();
        other.record_ns(1_000);
        l.add(&other);
        assert_eq!(l.len(), 1001);
    }
}
