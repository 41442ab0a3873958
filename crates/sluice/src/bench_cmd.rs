//! `sluice bench …`: the fixed-rate latency benchmark and its relatives. They speak only the
//! Kafka protocol, so `--brokers` may point at any Kafka-compatible broker.

use std::io::Write;
use std::path::PathBuf;

use anyhow::{bail, Context};
use clap::{Args, Subcommand};
use sluice_bench::report::{e2e_table, floor_table, Report, Series};
use sluice_bench::{machine, E2eConfig};

use crate::security_args::SecurityArgs;
use crate::stdout::say;

#[derive(Debug, Subcommand)]
pub enum BenchCommand {
    /// End-to-end latency at a fixed offered rate (open loop, no coordinated omission)
    E2e(E2eArgs),
    /// Maximum produce throughput (closed loop)
    Produce(ProduceArgs),
    /// Maximum consume throughput: read a topic from its start to its end
    Consume(ConsumeArgs),
    /// Latency at each offered rate × record size, with a JSON and an HTML report
    Sweep(SweepArgs),
    /// Install and start Apache Kafka, run the same sweep against it and against Sluice, report both
    Compare(CompareArgs),
    /// Event-sourced bank transfers, exactly once, with a checker (runs `sluice-bank bench`, which
    /// is built beside this binary; `sluice bench bank --help` for its flags; docs/bank.md)
    #[command(disable_help_flag = true)]
    Bank {
        #[arg(trailing_var_arg = true, allow_hyphen_values = true)]
        args: Vec<String>,
    },
}

#[derive(Debug, Args)]
pub struct ProduceArgs {
    #[arg(long, default_value = "127.0.0.1:9092")]
    pub brokers: String,
    #[command(flatten)]
    pub security: SecurityArgs,
    #[arg(long, default_value = "sluice-bench-max")]
    pub topic: String,
    #[arg(long, default_value_t = 1024)]
    pub size: usize,
    #[arg(long, default_value_t = 10.0)]
    pub duration: f64,
    #[arg(long, default_value_t = 1)]
    pub producers: usize,
    #[arg(long, default_value_t = 1)]
    pub partitions: i32,
    /// Replicas per partition if the topic has to be created (-1: the broker's default)
    #[arg(long, default_value_t = 1, allow_negative_numbers = true)]
    pub replication_factor: i16,
    #[arg(long, default_value = "1")]
    pub acks: String,
    #[arg(long, default_value_t = 1_000_000)]
    pub batch_bytes: usize,
    #[arg(long, default_value_t = 5)]
    pub max_in_flight: usize,
    #[arg(long, default_value = "none")]
    pub compression: String,
    #[arg(long = "topic-config", value_parser = crate::topic_cmd::parse_pair)]
    pub topic_configs: Vec<(String, String)>,
}

#[derive(Debug, Args)]
pub struct ConsumeArgs {
    #[arg(long, default_value = "127.0.0.1:9092")]
    pub brokers: String,
    #[command(flatten)]
    pub security: SecurityArgs,
    #[arg(long, default_value = "sluice-bench-max")]
    pub topic: String,
    #[arg(long, default_value_t = 1)]
    pub consumers: usize,
}

#[derive(Debug, Args)]
pub struct SweepArgs {
    #[command(flatten)]
    pub e2e: E2eArgs,
    /// Offered rates, msg/s [default: 5000,10000,50000,100000,200000,300000,450000]
    #[arg(long, value_delimiter = ',')]
    pub rates: Vec<f64>,
    /// Record sizes, bytes [default: 128,512,1024,2048]
    #[arg(long, value_delimiter = ',')]
    pub sizes: Vec<usize>,
    /// Write the HTML report here
    #[arg(long)]
    pub html: Option<PathBuf>,
}

#[derive(Debug, Args)]
pub struct CompareArgs {
    #[command(flatten)]
    pub sweep: SweepArgs,
    /// Apache Kafka version to fetch from Maven Central
    #[arg(long, default_value = sluice_bench::compare::DEFAULT_KAFKA_VERSION)]
    pub kafka_version: String,
    /// Where Kafka is installed (and cached between runs) [default: ~/.cache/sluice/kafka-VERSION]
    #[arg(long)]
    pub kafka_dir: Option<PathBuf>,
    /// Scratch directory for both brokers' data and logs [default: a new temporary directory]
    #[arg(long)]
    pub work_dir: Option<PathBuf>,
    /// Where to write compare.json and compare.html [default: the work directory]
    #[arg(long)]
    pub out_dir: Option<PathBuf>,
    /// interval (fsync every 100 ms on both), sync (fsync before acknowledging, both) or defaults
    #[arg(long, default_value = "interval")]
    pub durability: String,
    /// Record sizes for the maximum-throughput runs
    #[arg(long, value_delimiter = ',', default_value = "128,1024")]
    pub throughput_sizes: Vec<usize>,
    #[arg(long, default_value_t = 10.0)]
    pub throughput_seconds: f64,
    /// Seconds of load before measuring each broker (lets the JVM compile its hot paths)
    #[arg(long, default_value_t = 10.0)]
    pub warmup_run: f64,
    /// Nodes per broker: 1, or 3 or 5 as that many processes (a KRaft Kafka cluster, a Sluice
    /// `--cluster`); with more than one, topics get that many replicas unless
    /// --replication-factor says otherwise, min.insync.replicas a majority of them, and a single
    /// Sluice node's throughput is measured too, to compare the cluster's with
    #[arg(long, default_value_t = 1)]
    pub nodes: usize,
    /// Show the plan and stop: nothing is downloaded or started
    #[arg(long)]
    pub dry_run: bool,
    /// Install Kafka (if not yet in --kafka-dir), print where its jars are, and stop
    #[arg(long)]
    pub install_only: bool,
}

#[derive(Debug, Args)]
pub struct E2eArgs {
    /// Broker to bootstrap from
    #[arg(long, default_value = "127.0.0.1:9092")]
    pub brokers: String,
    /// How the load connections reach it (not with `compare`, which starts its own brokers)
    #[command(flatten)]
    pub security: SecurityArgs,
    #[arg(long, default_value = "sluice-bench")]
    pub topic: String,
    /// Offered rate, messages per second (all producers together)
    #[arg(long, default_value_t = 10_000.0)]
    pub rate: f64,
    /// Record value size in bytes (at least 24)
    #[arg(long, default_value_t = 128)]
    pub size: usize,
    /// Seconds of sending
    #[arg(long, default_value_t = 10.0)]
    pub duration: f64,
    /// Seconds at the start left out of the latencies (still checked for loss)
    #[arg(long, default_value_t = 1.0)]
    pub warmup: f64,
    #[arg(long, default_value_t = 1)]
    pub producers: usize,
    #[arg(long, default_value_t = 1)]
    pub consumers: usize,
    /// Partitions of the topic if it has to be created
    #[arg(long, default_value_t = 1)]
    pub partitions: i32,
    /// Replicas per partition if the topic has to be created (-1: the broker's default)
    #[arg(long, default_value_t = 1, allow_negative_numbers = true)]
    pub replication_factor: i16,
    /// 0, 1 or all
    #[arg(long, default_value = "1")]
    pub acks: String,
    /// Wait this long for more records before sending a batch
    #[arg(long, default_value_t = 0.0)]
    pub linger_ms: f64,
    /// Largest batch in bytes (keep it under the broker's max.message.bytes)
    #[arg(long, default_value_t = 1_000_000)]
    pub batch_bytes: usize,
    /// Produce requests awaiting a response, per connection
    #[arg(long, default_value_t = 5)]
    pub max_in_flight: usize,
    /// none, gzip, snappy, lz4 or zstd
    #[arg(long, default_value = "none")]
    pub compression: String,
    /// A config for the topic if it has to be created, name=value (repeatable)
    #[arg(long = "topic-config", value_parser = crate::topic_cmd::parse_pair)]
    pub topic_configs: Vec<(String, String)>,
    /// Where to measure the machine's floor (loopback round trip, append+fdatasync) before
    /// the run; put it on the broker's disk [default: the temporary directory]
    #[arg(long)]
    pub floor_dir: Option<PathBuf>,
    /// Skip measuring the floor
    #[arg(long)]
    pub no_floor: bool,
    /// Write the report as JSON here
    #[arg(long)]
    pub json: Option<PathBuf>,
    /// Label for the broker in the report
    #[arg(long, default_value = "broker")]
    pub label: String,
    /// No live progress line
    #[arg(long)]
    pub quiet: bool,
}

pub fn parse_acks(s: &str) -> anyhow::Result<i16> {
    Ok(match s {
        "all" | "-1" => -1,
        "1" => 1,
        "0" => 0,
        other => bail!("--acks must be 0, 1 or all, not '{other}'"),
    })
}

impl E2eArgs {
    pub fn config(&self) -> anyhow::Result<E2eConfig> {
        Ok(E2eConfig {
            bootstrap: self.brokers.clone(),
            topic: self.topic.clone(),
            rate_per_s: self.rate,
            record_bytes: self.size,
            duration_s: self.duration,
            warmup_s: self.warmup,
            producers: self.producers,
            consumers: self.consumers,
            partitions: self.partitions,
            replication_factor: self.replication_factor,
            acks: parse_acks(&self.acks)?,
            linger_ms: self.linger_ms,
            batch_bytes: self.batch_bytes,
            max_in_flight: self.max_in_flight,
            compression: self.compression.clone(),
            drain_s: 5.0,
            topic_configs: self.topic_configs.clone(),
        })
    }
}

fn measure_floor(args: &E2eArgs) -> anyhow::Result<Option<machine::Floor>> {
    if args.no_floor {
        return Ok(None);
    }
    let dir = args.floor_dir.clone().unwrap_or_else(std::env::temp_dir);
    Ok(Some(machine::floor(&dir, 20_000, 2_000)?))
}

pub fn write_json(path: &std::path::Path, report: &Report) -> anyhow::Result<()> {
    let text = serde_json::to_string_pretty(report)?;
    std::fs::write(path, text + "\n").with_context(|| format!("writing {}", path.display()))
}

fn print_throughput(r: &sluice_bench::throughput::ThroughputResult) -> std::io::Result<()> {
    say!(
        "{}: {} records in {:.2} s = {:.0} msg/s, {:.1} MB/s",
        r.what,
        r.records,
        r.seconds,
        r.msg_per_s,
        r.mb_per_s
    )?;
    for (e, n) in &r.errors {
        say!("  errors: {n} × {e}")?;
    }
    Ok(())
}

fn sweep_config(args: &SweepArgs) -> anyhow::Result<sluice_bench::sweep::SweepConfig> {
    let mut base = args.e2e.config()?;
    base.rate_per_s = 1.0;
    base.record_bytes = 128;
    sluice_bench::e2e::validate(&base)?;
    Ok(sluice_bench::sweep::SweepConfig {
        base,
        rates: if args.rates.is_empty() {
            sluice_bench::sweep::DEFAULT_RATES.to_vec()
        } else {
            args.rates.clone()
        },
        sizes: if args.sizes.is_empty() {
            sluice_bench::sweep::DEFAULT_SIZES.to_vec()
        } else {
            args.sizes.clone()
        },
    })
}

fn one_line(broker: &str, r: &sluice_bench::E2eResult) -> std::io::Result<()> {
    let l = &r.latency;
    say!(
        "{broker:>8} {:>5} B {:>8.0}/s -> {:>8.0}/s  AVG {:>8.1}  P50 {:>8.1}  P99 {:>8.1}  P99.9 {:>8.1} µs  lost {} {}",
        r.config.record_bytes,
        r.offered_rate_per_s,
        r.receive_rate_per_s,
        l.avg_us,
        l.p50_us,
        l.p99_us,
        l.p999_us,
        r.lost,
        if r.sustained() { "" } else { "NOT sustained" }
    )
}

pub fn run(command: BenchCommand) -> anyhow::Result<()> {
    match command {
        BenchCommand::Bank { args } => bank(&args)?,
        BenchCommand::Produce(a) => {
            a.security.configure()?;
            let r = sluice_bench::throughput::produce(&sluice_bench::throughput::ProduceConfig {
                bootstrap: a.brokers,
                topic: a.topic,
                record_bytes: a.size,
                duration_s: a.duration,
                producers: a.producers,
                partitions: a.partitions,
                replication_factor: a.replication_factor,
                acks: parse_acks(&a.acks)?,
                batch_bytes: a.batch_bytes,
                max_in_flight: a.max_in_flight,
                compression: a.compression,
                topic_configs: a.topic_configs,
            })?;
            print_throughput(&r)?;
        }
        BenchCommand::Consume(a) => {
            a.security.configure()?;
            print_throughput(&sluice_bench::throughput::consume(
                &a.brokers,
                &a.topic,
                a.consumers,
            )?)?
        }
        BenchCommand::Sweep(a) => {
            a.e2e.security.configure()?;
            let config = sweep_config(&a)?;
            let floor = measure_floor(&a.e2e)?;
            let mut report = Report::new(machine::machine(), floor);
            if let Some(f) = &report.floor {
                write!(crate::stdout::lock(), "{}", floor_table(f))?;
            }
            let mut printed = Ok(());
            let runs = sluice_bench::sweep::run(&config, |r| {
                keep_first(&mut printed, one_line(&a.e2e.label, r))
            })?;
            report.series.push(Series {
                broker: a.e2e.label.clone(),
                runs,
            });
            // The files asked for are written even when standard output's reader left.
            if let Some(path) = &a.e2e.json {
                write_json(path, &report)?;
            }
            if let Some(path) = &a.html {
                let html = sluice_bench::html::render(&report, "sluice bench sweep", "");
                std::fs::write(path, html)
                    .with_context(|| format!("writing {}", path.display()))?;
            }
            printed?;
        }
        BenchCommand::Compare(a) => compare(a)?,
        BenchCommand::E2e(args) => {
            args.security.configure()?;
            let config = args.config()?;
            sluice_bench::e2e::validate(&config)?;
            let floor = measure_floor(&args)?;
            let mut report = Report::new(machine::machine(), floor);
            if let Some(f) = &report.floor {
                write!(crate::stdout::lock(), "{}", floor_table(f))?;
            }
            let result = sluice_bench::e2e::run(&config, !args.quiet)?;
            let shown = write!(crate::stdout::lock(), "{}", e2e_table(&result));
            report.series.push(Series {
                broker: args.label.clone(),
                runs: vec![result],
            });
            if let Some(path) = &args.json {
                write_json(path, &report)?;
            }
            shown?;
            if let Some(run) = report.series.last().and_then(|s| s.runs.last()) {
                measured_something(run)?;
            }
        }
    }
    Ok(())
}

/// A run in which no record was acknowledged measured nothing: its report is printed, and the
/// command fails saying why (the first errors the producers got). Records acknowledged and
/// never received are not this: the report counts them as lost.
fn measured_something(run: &sluice_bench::E2eResult) -> anyhow::Result<()> {
    if run.acked > 0 {
        return Ok(());
    }
    let errors: Vec<String> = run
        .errors
        .iter()
        .take(3)
        .map(|(error, count)| format!("{error} ({count}x)"))
        .collect();
    anyhow::bail!(
        "no record was acknowledged, so the run measured nothing: {} sent, {} failed{}",
        run.sent,
        run.failed,
        if errors.is_empty() {
            String::new()
        } else {
            format!("; errors: {}", errors.join(", "))
        }
    )
}

/// Keeps the first error of printing in `first` (a reader that left); later ones are the
/// same error again.
fn keep_first(first: &mut std::io::Result<()>, printed: std::io::Result<()>) {
    if first.is_ok() {
        *first = printed;
    }
}

#[derive(serde::Serialize)]
struct CompareReport<'a> {
    report: &'a Report,
    kafka_version: &'a str,
    durability: &'a str,
    throughput: Vec<&'a sluice_bench::throughput::ThroughputResult>,
    nodes: usize,
    /// With a cluster: one Sluice node's throughput (RF=1), measured in the same run.
    single_node_throughput: &'a [sluice_bench::throughput::ThroughputResult],
    ratios: &'a str,
}

fn compare(a: CompareArgs) -> anyhow::Result<()> {
    use sluice_bench::compare::{self, CompareConfig, Durability};
    let durability = Durability::parse(&a.durability)?;
    let kafka_dir = match &a.kafka_dir {
        Some(d) => d.clone(),
        None => {
            let home = std::env::var_os("HOME")
                .map(PathBuf::from)
                .unwrap_or_else(|| PathBuf::from("."));
            home.join(".cache")
                .join("sluice")
                .join(format!("kafka-{}", a.kafka_version))
        }
    };
    let work_dir = match &a.work_dir {
        Some(d) => d.clone(),
        None => std::env::temp_dir().join(format!("sluice-compare-{}", std::process::id())),
    };
    if !matches!(a.nodes, 1 | 3 | 5) {
        bail!("--nodes must be 1, 3 or 5, not {}", a.nodes);
    }
    if !a.sweep.e2e.security.is_plaintext() {
        bail!(
            "compare starts both brokers with PLAINTEXT listeners and cannot take \
             --security-protocol; bench/tls_compare.py compares them over SASL_SSL"
        );
    }
    let mut sweep = sweep_config(&a.sweep)?;
    sweep.base.topic = "compare".into();
    if a.nodes > 1 {
        if sweep.base.replication_factor == 1 {
            sweep.base.replication_factor = a.nodes as i16;
        }
        if sweep.base.replication_factor > a.nodes as i16 {
            bail!(
                "--replication-factor {} is more than --nodes {}",
                sweep.base.replication_factor,
                a.nodes
            );
        }
        if !sweep
            .base
            .topic_configs
            .iter()
            .any(|(k, _)| k == "min.insync.replicas")
        {
            let majority = sweep.base.replication_factor.max(1) / 2 + 1;
            sweep
                .base
                .topic_configs
                .push(("min.insync.replicas".into(), majority.to_string()));
        }
    }
    let config = CompareConfig {
        kafka_version: a.kafka_version.clone(),
        kafka_dir,
        sluice_exe: std::env::current_exe().context("finding the sluice executable")?,
        work_dir: work_dir.clone(),
        sweep,
        durability,
        throughput_sizes: a.throughput_sizes.clone(),
        throughput_seconds: a.throughput_seconds,
        warmup_run_s: a.warmup_run,
        nodes: a.nodes,
    };
    if a.install_only {
        let libs = compare::install_kafka(&config.kafka_version, &config.kafka_dir)?;
        say!("{}", libs.display())?;
        return Ok(());
    }
    say!("plan:")?;
    for (i, step) in compare::plan(&config).iter().enumerate() {
        say!("  {}. {step}", i + 1)?;
    }
    if a.dry_run {
        return Ok(());
    }
    std::fs::create_dir_all(&work_dir)
        .with_context(|| format!("creating {}", work_dir.display()))?;
    let libs = compare::install_kafka(&config.kafka_version, &config.kafka_dir)?;
    // Leftovers of an earlier run (and their discards) would disturb the first measurements.
    compare::discard_data(&work_dir.join("kafka-data"));
    compare::discard_data(&work_dir.join("sluice-data"));
    let floor = machine::floor(&work_dir, 20_000, 2_000)?;
    write!(crate::stdout::lock(), "{}", floor_table(&floor))?;
    // From here on a reader that leaves does not stop the run: the files are written first.
    let mut shown = Ok(());
    let kafka_label = format!("kafka {}", config.kafka_version);
    // Each broker's data is deleted as soon as it is stopped: a sweep writes tens of GB.
    let kafka = {
        let (kafka, addr) = compare::start_kafka(&libs, &work_dir, durability, config.nodes)?;
        keep_first(&mut shown, say!("Kafka is up on {addr}"));
        let measured = compare::measure(&kafka_label, &addr, &config, |b, r| {
            keep_first(&mut shown, one_line(b, r))
        });
        drop(kafka);
        compare::discard_data(&work_dir.join("kafka-data"));
        measured?
    };
    let sluice = {
        let (sluice, addr) =
            compare::start_sluice(&config.sluice_exe, &work_dir, durability, config.nodes)?;
        keep_first(&mut shown, say!("Sluice is up on {addr}"));
        let measured = compare::measure("sluice", &addr, &config, |b, r| {
            keep_first(&mut shown, one_line(b, r))
        });
        drop(sluice);
        compare::discard_data(&work_dir.join("sluice-data"));
        measured?
    };
    // The cluster's throughput is judged against one node's, measured here in the same run.
    let single_node = if config.nodes > 1 {
        let (single, addr) = compare::start_sluice(&config.sluice_exe, &work_dir, durability, 1)?;
        keep_first(&mut shown, say!("one Sluice node is up on {addr}"));
        let base = sluice_bench::E2eConfig {
            topic: "compare-single".into(),
            replication_factor: 1,
            topic_configs: Vec::new(),
            ..config.sweep.base.clone()
        };
        let measured = compare::measure_throughput(&addr, &config, &base);
        drop(single);
        compare::discard_data(&work_dir.join("sluice-data"));
        measured?
    } else {
        Vec::new()
    };
    let mut ratios = compare::ratio_table(&kafka, &sluice);
    for s in &sluice.throughput {
        if let Some(one) = single_node.iter().find(|o| o.what == s.what) {
            ratios.push_str(&format!(
                "max throughput, {}: Sluice {} nodes ÷ one Sluice node ({:.0} msg/s, RF=1) = {:.2}\n",
                s.what,
                config.nodes,
                one.msg_per_s,
                s.msg_per_s / one.msg_per_s
            ));
        }
    }
    keep_first(&mut shown, say!("\n{ratios}"));
    let mut report = Report::new(machine::machine(), Some(floor));
    report.series.push(Series {
        broker: kafka_label,
        runs: kafka.sweep.clone(),
    });
    report.series.push(Series {
        broker: "sluice".into(),
        runs: sluice.sweep.clone(),
    });
    let out_dir = a.out_dir.clone().unwrap_or(work_dir);
    std::fs::create_dir_all(&out_dir)?;
    let json = serde_json::to_string_pretty(&CompareReport {
        report: &report,
        kafka_version: &config.kafka_version,
        durability: &a.durability,
        throughput: kafka
            .throughput
            .iter()
            .chain(sluice.throughput.iter())
            .collect(),
        nodes: config.nodes,
        single_node_throughput: &single_node,
        ratios: &ratios,
    })?;
    std::fs::write(out_dir.join("compare.json"), json + "\n")?;
    let title = format!(
        "Sluice vs Apache Kafka {} ({} durability, {})",
        config.kafka_version,
        a.durability,
        if config.nodes == 1 {
            "one node".to_string()
        } else {
            format!(
                "{} nodes, RF={}",
                config.nodes, config.sweep.base.replication_factor
            )
        }
    );
    std::fs::write(
        out_dir.join("compare.html"),
        sluice_bench::html::render(&report, &title, &ratios),
    )?;
    shown?;
    say!(
        "wrote {} and compare.html",
        out_dir.join("compare.json").display()
    )?;
    Ok(())
}

/// Runs `sluice-bank bench ARGS` from beside this executable; its exit status becomes ours.
fn bank(args: &[String]) -> anyhow::Result<()> {
    let me = std::env::current_exe()?;
    let exe = me.with_file_name("sluice-bank");
    if !exe.is_file() {
        bail!(
            "`sluice bench bank` needs the sluice-bank executable beside {} (build it: cargo build --release -p sluice-bank)",
            me.display()
        );
    }
    let status = std::process::Command::new(&exe)
        .arg("bench")
        .args(args)
        .status()
        .map_err(|e| anyhow::anyhow!("running {}: {e}", exe.display()))?;
    if !status.success() {
        std::process::exit(status.code().unwrap_or(1));
    }
    Ok(())
}
