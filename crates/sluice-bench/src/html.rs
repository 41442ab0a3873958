//! A self-contained HTML report: per record size, latency against achieved throughput on log
//! scales (one line per percentile, one colour per broker), then every number in tables. No
//! scripts, no external fetches.

use std::fmt::Write;

use crate::e2e::E2eResult;
use crate::report::Report;

const COLOURS: &[&str] = &["#d95f02", "#1b9e77", "#7570b3", "#e7298a"];
const PERCENTILES: &[(&str, &str)] = &[
    ("AVG", "1 3"),
    ("P50", ""),
    ("P99", "6 3"),
    ("P99.9", "10 3 2 3"),
];

fn esc(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

fn pick(r: &E2eResult, name: &str) -> f64 {
    match name {
        "AVG" => r.latency.avg_us,
        "P50" => r.latency.p50_us,
        "P99" => r.latency.p99_us,
        _ => r.latency.p999_us,
    }
}

/// Log-scale axis from `lo` to `hi` onto `[a, b]` pixels.
struct Axis {
    lo: f64,
    hi: f64,
    a: f64,
    b: f64,
}

impl Axis {
    fn new(values: impl Iterator<Item = f64>, a: f64, b: f64) -> Axis {
        let (mut lo, mut hi) = (f64::MAX, f64::MIN);
        for v in values.filter(|v| *v > 0.0) {
            lo = lo.min(v);
            hi = hi.max(v);
        }
        if lo > hi {
            (lo, hi) = (1.0, 10.0);
        }
        let lo = 10f64.powf(lo.log10().floor());
        let hi = 10f64.powf(hi.log10().ceil().max(lo.log10() + 1.0));
        Axis { lo, hi, a, b }
    }

    fn map(&self, v: f64) -> f64 {
        let t = (v.max(self.lo).log10() - self.lo.log10()) / (self.hi.log10() - self.lo.log10());
        self.a + t * (self.b - self.a)
    }

    fn decades(&self) -> Vec<f64> {
        let mut out = Vec::new();
        let mut v = self.lo;
        while v <= self.hi * 1.0001 {
            out.push(v);
            v *= 10.0;
        }
        out
    }
}

fn label(v: f64) -> String {
    if v >= 1e6 {
        format!("{}M", v / 1e6)
    } else if v >= 1e3 {
        format!("{}k", v / 1e3)
    } else {
        format!("{v}")
    }
}

fn chart(report: &Report, size: usize) -> String {
    let (w, h, left, right, top, bottom) = (720.0, 420.0, 70.0, 170.0, 20.0, 50.0);
    let runs: Vec<(usize, &E2eResult)> = report
        .series
        .iter()
        .enumerate()
        .flat_map(|(i, s)| {
            s.runs
                .iter()
                .filter(move |r| r.config.record_bytes == size)
                .map(move |r| (i, r))
        })
        .collect();
    let x = Axis::new(
        runs.iter().map(|(_, r)| r.receive_rate_per_s),
        left,
        w - right,
    );
    let y = Axis::new(
        runs.iter()
            .flat_map(|(_, r)| [r.latency.p50_us, r.latency.p999_us, r.latency.avg_us]),
        h - bottom,
        top,
    );
    let mut svg = String::new();
    let _ = write!(
        svg,
        r#"<svg viewBox="0 0 {w} {h}" role="img" aria-label="latency against throughput, {size} byte records"><rect width="{w}" height="{h}" fill="white"/>"#
    );
    for v in x.decades() {
        let px = x.map(v);
        let _ = write!(
            svg,
            r##"<line x1="{px}" x2="{px}" y1="{top}" y2="{}" stroke="#ddd"/><text x="{px}" y="{}" text-anchor="middle" font-size="12">{}</text>"##,
            h - bottom,
            h - bottom + 16.0,
            label(v)
        );
    }
    for v in y.decades() {
        let py = y.map(v);
        let _ = write!(
            svg,
            r##"<line x1="{left}" x2="{}" y1="{py}" y2="{py}" stroke="#ddd"/><text x="{}" y="{}" text-anchor="end" font-size="12">{} µs</text>"##,
            w - right,
            left - 6.0,
            py + 4.0,
            label(v)
        );
    }
    let _ = write!(
        svg,
        r#"<text x="{}" y="{}" text-anchor="middle" font-size="13">achieved throughput (msg/s, log scale)</text>"#,
        (left + w - right) / 2.0,
        h - 10.0
    );
    for (i, series) in report.series.iter().enumerate() {
        let colour = COLOURS[i % COLOURS.len()];
        let mut points: Vec<&E2eResult> = series
            .runs
            .iter()
            .filter(|r| r.config.record_bytes == size)
            .collect();
        points.sort_by(|a, b| a.offered_rate_per_s.total_cmp(&b.offered_rate_per_s));
        for (name, dash) in PERCENTILES {
            let path: Vec<String> = points
                .iter()
                .map(|r| {
                    format!(
                        "{:.1},{:.1}",
                        x.map(r.receive_rate_per_s),
                        y.map(pick(r, name))
                    )
                })
                .collect();
            if path.is_empty() {
                continue;
            }
            let _ = write!(
                svg,
                r#"<polyline fill="none" stroke="{colour}" stroke-width="2" stroke-dasharray="{dash}" points="{}"><title>{} {name}</title></polyline>"#,
                path.join(" "),
                esc(&series.broker)
            );
            for r in &points {
                let _ = write!(
                    svg,
                    r#"<circle cx="{:.1}" cy="{:.1}" r="2.5" fill="{colour}"><title>{}: offered {} msg/s, {name} {:.1} µs</title></circle>"#,
                    x.map(r.receive_rate_per_s),
                    y.map(pick(r, name)),
                    esc(&series.broker),
                    r.offered_rate_per_s,
                    pick(r, name)
                );
            }
        }
        let ly = top + 10.0 + i as f64 * 18.0;
        let _ = write!(
            svg,
            r#"<rect x="{}" y="{}" width="14" height="4" fill="{colour}"/><text x="{}" y="{}" font-size="12">{}</text>"#,
            w - right + 12.0,
            ly - 4.0,
            w - right + 32.0,
            ly + 1.0,
            esc(&series.broker)
        );
    }
    for (j, (name, dash)) in PERCENTILES.iter().enumerate() {
        let ly = top + 20.0 + (report.series.len() + j) as f64 * 18.0;
        let _ = write!(
            svg,
            r##"<line x1="{}" x2="{}" y1="{ly}" y2="{ly}" stroke="#333" stroke-width="2" stroke-dasharray="{dash}"/><text x="{}" y="{}" font-size="12">{name}</text>"##,
            w - right + 12.0,
            w - right + 40.0,
            w - right + 46.0,
            ly + 4.0
        );
    }
    svg.push_str("</svg>");
    svg
}

fn table(report: &Report, size: usize) -> String {
    let mut t = String::from(
        "<table><thead><tr><th>broker</th><th>offered</th><th>sent/s</th><th>received/s</th><th>lost</th><th>dup</th>\
         <th>AVG</th><th>P50</th><th>P90</th><th>P95</th><th>P99</th><th>P99.9</th><th>MAX</th><th>sustained</th></tr></thead><tbody>",
    );
    for s in &report.series {
        for r in s.runs.iter().filter(|r| r.config.record_bytes == size) {
            let l = &r.latency;
            let _ = write!(
                t,
                "<tr><td>{}</td><td>{:.0}</td><td>{:.0}</td><td>{:.0}</td><td>{}</td><td>{}</td><td>{:.1}</td><td>{:.1}</td><td>{:.1}</td><td>{:.1}</td><td>{:.1}</td><td>{:.1}</td><td>{:.1}</td><td>{}</td></tr>",
                esc(&s.broker),
                r.offered_rate_per_s,
                r.send_rate_per_s,
                r.receive_rate_per_s,
                r.lost,
                r.duplicated,
                l.avg_us,
                l.p50_us,
                l.p90_us,
                l.p95_us,
                l.p99_us,
                l.p999_us,
                l.max_us,
                if r.sustained() { "yes" } else { "<b>no</b>" }
            );
        }
    }
    t.push_str("</tbody></table>");
    t
}

/// The whole page. `extra` is preformatted text (e.g. ratios, throughput) shown above the charts.
pub fn render(report: &Report, title: &str, extra: &str) -> String {
    let mut sizes: Vec<usize> = report
        .series
        .iter()
        .flat_map(|s| s.runs.iter().map(|r| r.config.record_bytes))
        .collect();
    sizes.sort_unstable();
    sizes.dedup();
    let mut body = String::new();
    let m = &report.machine;
    let _ = write!(
        body,
        "<h1>{}</h1><p>{} · client: {} · machine: {} cores, {:.1} GiB, kernel {}, {}</p>",
        esc(title),
        esc(&report.tool),
        esc(&report.client),
        m.cores,
        m.memory_bytes as f64 / (1u64 << 30) as f64,
        esc(&m.kernel),
        esc(&m.cpu)
    );
    if let Some(f) = &report.floor {
        let _ = write!(
            body,
            "<p>Floor measured in this run: loopback TCP round trip AVG {:.1} µs, P99 {:.1} µs; append 1 KiB + fdatasync AVG {:.1} µs, P99 {:.1} µs.</p>",
            f.loopback_rtt.avg_us, f.loopback_rtt.p99_us, f.append_fdatasync.avg_us, f.append_fdatasync.p99_us
        );
    }
    if !extra.is_empty() {
        let _ = write!(body, "<pre>{}</pre>", esc(extra));
    }
    for size in sizes {
        let _ = write!(
            body,
            "<h2>{size} B records</h2>{}{}",
            chart(report, size),
            table(report, size)
        );
    }
    format!(
        "<!doctype html><html lang=\"en\"><head><meta charset=\"utf-8\"><meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\
         <title>{}</title><style>body{{font-family:system-ui,sans-serif;max-width:1100px;margin:1em auto;padding:0 1em}}\
         svg{{width:100%;height:auto;border:1px solid #ccc}}table{{border-collapse:collapse;font-size:13px;margin:1em 0}}\
         td,th{{border:1px solid #ccc;padding:2px 6px;text-align:right}}pre{{background:#f6f6f6;padding:.5em}}</style></head><body>{body}</body></html>\n",
        esc(title)
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::machine::Machine;
    use crate::report::Series;

    #[test]
    fn renders_both_brokers_and_every_size() {
        let mut report = Report::new(
            Machine {
                cores: 2,
                memory_bytes: 1 << 30,
                kernel: "k".into(),
                cpu: "c".into(),
            },
            None,
        );
        let run = |size: usize, rate: f64| {
            let mut r: E2eResult =
                serde_json::from_str(include_str!("testdata/e2e_result.json")).unwrap();
            r.config.record_bytes = size;
            r.offered_rate_per_s = rate;
            r.receive_rate_per_s = rate;
            r
        };
        report.series.push(Series {
            broker: "kafka <4>".into(),
            runs: vec![run(128, 5_000.0), run(128, 50_000.0), run(1024, 5_000.0)],
        });
        report.series.push(Series {
            broker: "sluice".into(),
            runs: vec![run(128, 5_000.0), run(128, 450_000.0)],
        });
        let html = render(&report, "t", "ratios");
        assert!(
            html.contains("<h2>128 B records</h2>") && html.contains("<h2>1024 B records</h2>")
        );
        assert!(html.contains("kafka &lt;4&gt;"), "labels are escaped");
        assert_eq!(
            html.matches("<polyline").count(),
            4 * 2 + 4,
            "one line per percentile per broker per size"
        );
        assert!(
            !html.contains("http://") && !html.contains("https://") && !html.contains("<script")
        );
    }
}
