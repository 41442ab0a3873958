//! What a benchmark writes: a table for people, JSON for tools and for `bench/results/`.

use serde::{Deserialize, Serialize};

use crate::e2e::E2eResult;
use crate::machine::{Floor, Machine};

/// One broker's runs in a report.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Series {
    /// A label such as "sluice" or "kafka 4.3.1".
    pub broker: String,
    pub runs: Vec<E2eResult>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Report {
    pub tool: String,
    pub client: String,
    pub date_unix_ms: i64,
    pub machine: Machine,
    pub floor: Option<Floor>,
    pub series: Vec<Series>,
}

impl Report {
    pub fn new(machine: Machine, floor: Option<Floor>) -> Report {
        Report {
            tool: format!("sluice bench {}", env!("CARGO_PKG_VERSION")),
            client: crate::CLIENT_NAME.to_string(),
            date_unix_ms: crate::clock::wall_ms(),
            machine,
            floor,
            series: Vec::new(),
        }
    }
}

fn us(v: f64) -> String {
    if v >= 10_000.0 {
        format!("{:.1} ms", v / 1000.0)
    } else {
        format!("{v:.1} µs")
    }
}

/// The human table of one run.
pub fn e2e_table(r: &E2eResult) -> String {
    let l = &r.latency;
    let mut out = String::new();
    out.push_str(&format!(
        "offered {:.0} msg/s of {} B for {:.0} s, acks={}, {} producer(s), {} consumer(s), {} partition(s)\n",
        r.offered_rate_per_s, r.config.record_bytes, r.config.duration_s, r.config.acks, r.config.producers, r.config.consumers, r.config.partitions
    ));
    out.push_str(&format!(
        "  sent {} ({:.0} msg/s)  received {} ({:.0} msg/s)  lost {}  duplicated {}  failed {}\n",
        r.sent, r.send_rate_per_s, r.received, r.receive_rate_per_s, r.lost, r.duplicated, r.failed
    ));
    for (e, n) in &r.errors {
        out.push_str(&format!("  produce errors: {n} × {e}\n"));
    }
    for (code, n) in &r.fetch_errors {
        out.push_str(&format!("  fetch errors: {n} × code {code}\n"));
    }
    out.push_str(&format!(
        "  latency ({} samples after warm-up): AVG {}  P50 {}  P90 {}  P95 {}  P99 {}  P99.9 {}  MAX {}\n",
        l.count,
        us(l.avg_us),
        us(l.p50_us),
        us(l.p90_us),
        us(l.p95_us),
        us(l.p99_us),
        us(l.p999_us),
        us(l.max_us)
    ));
    out.push_str(&format!(
        "  {}\n",
        if r.sustained() {
            "sustained"
        } else {
            "NOT sustained"
        }
    ));
    out
}

/// The floor, in the same words.
pub fn floor_table(f: &Floor) -> String {
    format!(
        "floor: loopback TCP round trip AVG {} P99 {}; append 1 KiB + fdatasync AVG {} P99 {}\n",
        us(f.loopback_rtt.avg_us),
        us(f.loopback_rtt.p99_us),
        us(f.append_fdatasync.avg_us),
        us(f.append_fdatasync.p99_us)
    )
}
