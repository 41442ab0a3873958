//! `sluice bench …`: the fixed-rate latency benchmark and its relatives. They speak only the
//! Kafka protocol, so `--brokers` may point at any Kafka-compatible broker.

use std::path::PathBuf;

use anyhow::{bail, Context};
use clap::{Args, Subcommand};
use sluice_bench::report::{e2e_table, floor_table, Report, Series};
use sluice_bench::{machine, E2eConfig};

#[derive(Debug, Subcommand)]
pub enum BenchCommand {
    /// End-to-end latency at a fixed offered rate (open loop, no coordinated omission)
    E2e(E2eArgs),
}

#[derive(Debug, Args)]
pub struct E2eArgs {
    /// Broker to bootstrap from
    #[arg(long, default_value = "127.0.0.1:9092")]
    pub brokers: String,
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
    /// 0, 1 or all
    #[arg(long, default_value = "1")]
    pub acks: String,
    /// Wait this long for more records before sending a batch
    #[arg(long, default_value_t = 0.0)]
    pub linger_ms: f64,
    /// Largest batch
    #[arg(long, default_value_t = 1 << 20)]
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
    /// Also measure the machine's floor (loopback round trip, append+fdatasync) in this dir
    #[arg(long)]
    pub floor_dir: Option<PathBuf>,
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

pub fn write_json(path: &std::path::Path, report: &Report) -> anyhow::Result<()> {
    let text = serde_json::to_string_pretty(report)?;
    std::fs::write(path, text + "\n").with_context(|| format!("writing {}", path.display()))
}

pub fn run(command: BenchCommand) -> anyhow::Result<()> {
    match command {
        BenchCommand::E2e(args) => {
            let config = args.config()?;
            sluice_bench::e2e::validate(&config)?;
            let floor = match &args.floor_dir {
                Some(dir) => Some(machine::floor(dir, 20_000, 2_000)?),
                None => None,
            };
            let mut report = Report::new(machine::machine(), floor);
            if let Some(f) = &report.floor {
                print!("{}", floor_table(f));
            }
            let result = sluice_bench::e2e::run(&config, !args.quiet)?;
            print!("{}", e2e_table(&result));
            report.series.push(Series {
                broker: args.label.clone(),
                runs: vec![result],
            });
            if let Some(path) = &args.json {
                write_json(path, &report)?;
            }
        }
    }
    Ok(())
}
