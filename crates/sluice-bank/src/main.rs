//! `sluice-bank`: the bank workload's processor and its benchmark (`sluice bench bank` runs
//! `sluice-bank bench`).

use std::io::Write as _;
use std::path::PathBuf;
use std::time::Duration;

use anyhow::{bail, Context};
use clap::{Parser, Subcommand};
use sluice_bank::bench::{self, BenchConfig};
use sluice_bank::processor::{self, ProcessorConfig};

#[derive(Debug, Parser)]
#[command(
    name = "sluice-bank",
    about = "Event-sourced bank transfers, exactly once, on a Kafka-compatible broker"
)]
struct Cli {
    #[command(subcommand)]
    command: Cmd,
}

#[derive(Debug, Subcommand)]
enum Cmd {
    /// Runs one processor (the bench starts these).
    Processor {
        #[arg(long)]
        bootstrap: String,
        #[arg(long)]
        prefix: String,
        #[arg(long)]
        index: u32,
        #[arg(long, default_value_t = 20)]
        commit_ms: u64,
        #[arg(long, default_value_t = 2000)]
        commit_records: usize,
    },
    /// The benchmark: transfers at a fixed rate through K processors, then the checker.
    Bench(BenchArgs),
}

#[derive(Debug, clap::Args)]
struct BenchArgs {
    /// A running broker to use (HOST:PORT).
    #[arg(long, conflicts_with = "local_broker")]
    brokers: Option<String>,
    /// Runs its own Sluice broker with its data in DIR (needed for broker faults).
    #[arg(long, value_name = "DIR")]
    local_broker: Option<PathBuf>,
    /// Offered transfers per second.
    #[arg(long, default_value_t = 2000)]
    rate: u64,
    /// Seconds of load.
    #[arg(long, default_value_t = 20)]
    duration: u64,
    /// Processor counts, one run each (e.g. 1,2,4).
    #[arg(long, default_value = "2", value_delimiter = ',')]
    processors: Vec<u32>,
    #[arg(long, default_value_t = 10_000)]
    accounts: u32,
    #[arg(long, default_value_t = 1000)]
    initial_balance: i64,
    /// Partitions of each workload topic.
    #[arg(long, default_value_t = 8)]
    partitions: i32,
    /// A processor commits its transaction every this many milliseconds...
    #[arg(long, default_value_t = 20)]
    commit_ms: u64,
    /// ...or records, whichever comes first.
    #[arg(long, default_value_t = 2000)]
    commit_records: usize,
    /// SIGKILLs processors (and a --local-broker) at random moments of the run.
    #[arg(long)]
    faults: bool,
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// How long to wait after the load for every transfer to finish.
    #[arg(long, default_value_t = 120)]
    drain_timeout: u64,
    /// Where processor logs go (default: a new directory under the system's temp dir).
    #[arg(long)]
    work_dir: Option<PathBuf>,
    #[arg(long)]
    json: Option<PathBuf>,
}

fn main() -> std::process::ExitCode {
    match run() {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            let _ = writeln!(std::io::stderr().lock(), "error: {e:#}");
            std::process::ExitCode::FAILURE
        }
    }
}

fn run() -> anyhow::Result<()> {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn")),
        )
        .with_writer(std::io::stderr)
        .init();
    match Cli::parse().command {
        Cmd::Processor {
            bootstrap,
            prefix,
            index,
            commit_ms,
            commit_records,
        } => {
            let cfg = ProcessorConfig {
                bootstrap,
                prefix,
                index,
                commit_ms,
                commit_records: commit_records.max(1),
            };
            processor::run(&cfg).context("the processor stopped")?;
            Ok(())
        }
        Cmd::Bench(a) => run_bench(a),
    }
}

fn run_bench(a: BenchArgs) -> anyhow::Result<()> {
    if a.brokers.is_none() && a.local_broker.is_none() {
        bail!("give --brokers HOST:PORT or --local-broker DIR");
    }
    if a.faults && a.local_broker.is_none() {
        let _ = writeln!(
            std::io::stderr().lock(),
            "--faults without --local-broker: only processors are killed"
        );
    }
    if a.rate == 0 || a.duration == 0 {
        bail!("--rate and --duration must be above 0");
    }
    if !(2..=10_000_000).contains(&a.accounts) {
        bail!("--accounts must be between 2 and 10,000,000");
    }
    if !(0..=1_000_000_000_000).contains(&a.initial_balance) {
        bail!("--initial-balance must be between 0 and 10^12");
    }
    if a.partitions < 1 {
        bail!("--partitions must be at least 1");
    }
    if a.processors.is_empty() || a.processors.contains(&0) {
        bail!("--processors takes counts above 0, e.g. 1,2,4");
    }
    let cfg = BenchConfig {
        brokers: a.brokers,
        local_broker: a.local_broker,
        rate: a.rate,
        duration: Duration::from_secs(a.duration),
        processors: a.processors,
        accounts: a.accounts,
        initial_balance: a.initial_balance,
        partitions: a.partitions,
        commit_ms: a.commit_ms,
        commit_records: a.commit_records.max(1),
        faults: a.faults,
        seed: a.seed,
        drain_timeout: Duration::from_secs(a.drain_timeout),
    };
    let work = a.work_dir.unwrap_or_else(bench::default_work_dir);
    let reports = bench::run(&cfg, &work)?;
    let json = bench::report_json(&reports);
    let text = serde_json::to_string_pretty(&json)?;
    match &a.json {
        Some(path) => std::fs::write(path, text + "\n")
            .with_context(|| format!("writing {}", path.display()))?,
        None => println!("{text}"),
    }
    for r in &reports {
        if !r.checker.ok {
            bail!(
                "the checker failed with {} processor(s): {}",
                r.processors,
                r.checker.violations.join("; ")
            );
        }
    }
    Ok(())
}
