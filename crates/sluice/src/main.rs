//! The `sluice` command: the broker (`serve`) and the tools people use at a terminal.

mod acl_cmd;
mod add_node_cmd;
mod bench_cmd;
mod cluster_cmd;
mod consume_cmd;
mod every_node;
mod group_cmd;
mod inter_broker;
mod internal_tls;
mod log_limit;
mod outbox_cmd;
mod partitions;
mod produce_cmd;
mod reassign_cmd;
mod remove_node_cmd;
mod secret;
mod security_args;
mod serve;
mod settings;
mod stdout;
mod tls;
mod topic_cmd;
mod txn_cmd;
mod user_cmd;

use std::path::PathBuf;
use std::sync::Arc;

use anyhow::Context;
use clap::{Parser, Subcommand};

/// Decoders pre-size vectors from wire counts; see `sluice-alloc` for why this matters.
#[global_allocator]
static ALLOC: sluice_alloc::GuardedAlloc = sluice_alloc::GuardedAlloc;

#[derive(Debug, Parser)]
#[command(name = "sluice", version, about = "A Kafka-compatible message broker")]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, clap::Args)]
struct ServeArgs {
    /// TOML settings file; SLUICE_* environment variables and flags override it
    #[arg(long, env = "SLUICE_CONFIG")]
    config: Option<PathBuf>,
    #[command(flatten)]
    settings: settings::Settings,
}

#[derive(Debug, clap::Args)]
struct Bootstrap {
    /// A broker to talk to
    #[arg(
        long,
        short = 'b',
        env = "SLUICE_BOOTSTRAP",
        default_value = "127.0.0.1:9092",
        global = true
    )]
    bootstrap_server: String,
    #[command(flatten)]
    security: security_args::SecurityArgs,
}

impl Bootstrap {
    /// Sets how the CLI's connections reach the brokers; returns the bootstrap address.
    fn secure(&self) -> anyhow::Result<&str> {
        self.security.configure()?;
        Ok(&self.bootstrap_server)
    }
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Run the broker (single node; data under ./data unless told otherwise)
    Serve(Box<ServeArgs>),
    /// Create, list, describe, delete and configure topics
    Topic {
        #[command(flatten)]
        bootstrap: Bootstrap,
        #[command(subcommand)]
        command: topic_cmd::TopicCommand,
    },
    /// List, describe, delete consumer groups and reset their offsets
    Group {
        #[command(flatten)]
        bootstrap: Bootstrap,
        #[command(subcommand)]
        command: group_cmd::GroupCommand,
    },
    /// The cluster's nodes, controller, leaders, under-replicated and offline partitions
    Cluster {
        #[command(flatten)]
        bootstrap: Bootstrap,
        #[command(subcommand)]
        command: cluster_cmd::ClusterCommand,
    },
    /// SASL users: create (or set a password), delete, list
    User {
        #[command(flatten)]
        bootstrap: Bootstrap,
        #[command(subcommand)]
        command: user_cmd::UserCommand,
    },
    /// Kafka ACLs: add, list, remove (the broker needs an authorizer, `--authorizer acl`)
    Acl {
        #[command(flatten)]
        bootstrap: Bootstrap,
        #[command(subcommand)]
        command: acl_cmd::AclCommand,
    },
    /// List and describe transactions; abort a hanging one
    Txn {
        #[command(flatten)]
        bootstrap: Bootstrap,
        #[command(subcommand)]
        command: txn_cmd::TxnCommand,
    },
    /// Send stdin lines as records
    Produce {
        #[command(flatten)]
        bootstrap: Bootstrap,
        #[command(flatten)]
        args: produce_cmd::ProduceArgs,
    },
    /// Benchmarks that speak only the Kafka protocol (aim them at any compatible broker)
    #[command(subcommand)]
    Bench(Box<bench_cmd::BenchCommand>),
    /// Relay a database's outbox table into Sluice, exactly once (PostgreSQL logical replication)
    Outbox(Box<outbox_cmd::OutboxArgs>),
    /// Print a topic's records
    Consume {
        #[command(flatten)]
        bootstrap: Bootstrap,
        #[command(flatten)]
        args: consume_cmd::ConsumeArgs,
    },
}

fn main() {
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Serve(args) => serve_main(*args),
        Command::Topic { bootstrap, command } => cli_runtime().and_then(|rt| {
            bootstrap
                .secure()
                .and_then(|b| rt.block_on(topic_cmd::run(b, command)))
        }),
        Command::Group { bootstrap, command } => cli_runtime().and_then(|rt| {
            bootstrap
                .secure()
                .and_then(|b| rt.block_on(group_cmd::run(b, command)))
        }),
        Command::Cluster { bootstrap, command } => cli_runtime().and_then(|rt| {
            bootstrap
                .secure()
                .and_then(|b| rt.block_on(cluster_cmd::run(b, command)))
        }),
        Command::User { bootstrap, command } => cli_runtime().and_then(|rt| {
            bootstrap
                .secure()
                .and_then(|b| rt.block_on(user_cmd::run(b, command)))
        }),
        Command::Acl { bootstrap, command } => cli_runtime().and_then(|rt| {
            bootstrap
                .secure()
                .and_then(|b| rt.block_on(acl_cmd::run(b, command)))
        }),
        Command::Txn { bootstrap, command } => cli_runtime().and_then(|rt| {
            bootstrap
                .secure()
                .and_then(|b| rt.block_on(txn_cmd::run(b, command)))
        }),
        Command::Produce { bootstrap, args } => cli_runtime().and_then(|rt| {
            bootstrap
                .secure()
                .and_then(|b| rt.block_on(produce_cmd::run(b, args)))
        }),
        Command::Bench(command) => bench_cmd::run(*command),
        Command::Outbox(args) => outbox_cmd::run(*args),
        Command::Consume { bootstrap, args } => cli_runtime().and_then(|rt| {
            bootstrap
                .secure()
                .and_then(|b| rt.block_on(consume_cmd::run(b, args)))
        }),
    };
    if let Err(e) = result {
        // A reader that went away (`| head`) is not an error of ours.
        if stdout::reader_gone(&e) {
            return;
        }
        crate::stdout::tell!("error: {e:#}");
        std::process::exit(1);
    }
}

fn cli_runtime() -> anyhow::Result<tokio::runtime::Runtime> {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("starting the runtime")
}

fn serve_main(args: ServeArgs) -> anyhow::Result<()> {
    let file = match &args.config {
        Some(path) => settings::Settings::from_file(path)?,
        None => settings::Settings::default(),
    };
    let resolved = args.settings.over(file).resolve()?;
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .or_else(|_| tracing_subscriber::EnvFilter::try_new(&resolved.log_level))
        .context("bad log level")?;
    use std::io::IsTerminal;
    use tracing_subscriber::layer::SubscriberExt;
    use tracing_subscriber::util::SubscriberInitExt;
    use tracing_subscriber::Layer;
    let repeats = log_limit::RepeatLimit::new(
        Arc::new(sluice_log::MonotonicClock::new()),
        log_limit::INTERVAL_MS,
    );
    tracing_subscriber::registry()
        .with(
            tracing_subscriber::fmt::layer()
                .with_ansi(std::io::stderr().is_terminal())
                .with_writer(std::io::stderr)
                .with_filter(filter)
                .with_filter(repeats),
        )
        .init();
    // Half the cores serve requests by default: the rest is left to the kernel's network work
    // and the flush threads. Measured on 2 cores (bench/results, BENCHMARKS.md): one request
    // thread gave a P99 of ~0.4 ms at 300k msg/s against ~1.4 ms with two, at the same
    // throughput.
    let cores = std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(2);
    let mut builder = tokio::runtime::Builder::new_multi_thread();
    builder.worker_threads(resolved.worker_threads.unwrap_or((cores / 2).max(1)));
    let runtime = builder
        .enable_all()
        .thread_name("sluice")
        .build()
        .context("starting the runtime")?;
    runtime.block_on(serve::run(resolved))
}
