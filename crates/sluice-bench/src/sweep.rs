//! `sluice bench sweep`: offered rates × record sizes. Each size's series climbs through the
//! rates and stops after the first rate the broker does not sustain (BENCHMARKS.md: achieved
//! ≥ 95% of offered, nothing lost).

use serde::{Deserialize, Serialize};

use crate::e2e::{self, E2eConfig, E2eResult};
use crate::error::BenchError;

/// The W1 rates of BENCHMARKS.md.
pub const DEFAULT_RATES: &[f64] = &[
    5_000.0, 10_000.0, 50_000.0, 100_000.0, 200_000.0, 300_000.0, 450_000.0,
];
/// The W2 sizes of BENCHMARKS.md.
pub const DEFAULT_SIZES: &[usize] = &[128, 512, 1024, 2048];

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct SweepConfig {
    /// Everything but the rate and size; its topic is a prefix.
    pub base: E2eConfig,
    pub rates: Vec<f64>,
    pub sizes: Vec<usize>,
}

/// Runs the sweep; `on_run` sees each result as it lands (for live output).
pub fn run(
    config: &SweepConfig,
    mut on_run: impl FnMut(&E2eResult),
) -> Result<Vec<E2eResult>, BenchError> {
    if config.rates.is_empty() || config.sizes.is_empty() {
        return Err(BenchError::Setup(
            "a sweep needs at least one rate and one size".into(),
        ));
    }
    let mut rates = config.rates.clone();
    rates.sort_by(f64::total_cmp);
    let mut results = Vec::new();
    for &size in &config.sizes {
        for &rate in &rates {
            let run = E2eConfig {
                topic: format!("{}-{size}", config.base.topic),
                rate_per_s: rate,
                record_bytes: size,
                ..config.base.clone()
            };
            let result = e2e::run(&run, false)?;
            on_run(&result);
            let sustained = result.sustained();
            results.push(result);
            if !sustained {
                break;
            }
        }
    }
    Ok(results)
}

/// The highest offered rate sustained with P99 under `p99_us`, per size.
pub fn best_rate_under(results: &[E2eResult], size: usize, p99_us: f64) -> Option<f64> {
    results
        .iter()
        .filter(|r| r.config.record_bytes == size && r.sustained() && r.latency.p99_us < p99_us)
        .map(|r| r.offered_rate_per_s)
        .max_by(f64::total_cmp)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::latency::LatencySummary;

    fn result(size: usize, rate: f64, p99: f64, lost: u64) -> E2eResult {
        E2eResult {
            config: E2eConfig {
                record_bytes: size,
                rate_per_s: rate,
                ..E2eConfig::default()
            },
            sent: 1,
            acked: 1,
            failed: 0,
            errors: vec![],
            fetch_errors: vec![],
            received: 1,
            lost,
            duplicated: 0,
            offered_rate_per_s: rate,
            send_rate_per_s: rate,
            receive_rate_per_s: rate,
            latency: LatencySummary {
                count: 1,
                avg_us: p99,
                p50_us: p99,
                p90_us: p99,
                p95_us: p99,
                p99_us: p99,
                p999_us: p99,
                max_us: p99,
            },
        }
    }

    #[test]
    fn best_rate_ignores_slow_and_lossy_runs() {
        let rs = vec![
            result(128, 5_000.0, 100.0, 0),
            result(128, 50_000.0, 900.0, 0),
            result(128, 100_000.0, 1_500.0, 0),
            result(128, 200_000.0, 300.0, 3),
            result(512, 5_000.0, 10.0, 0),
        ];
        assert_eq!(best_rate_under(&rs, 128, 1_000.0), Some(50_000.0));
        assert_eq!(best_rate_under(&rs, 128, 50.0), None);
        assert_eq!(best_rate_under(&rs, 512, 1_000.0), Some(5_000.0));
    }
}
