//! `sluice outbox`: the transactional outbox relay (crates/sluice-outbox), run on its own.
//! Settings come from the command line, or from a TOML file's `[outbox]` table with the
//! command line's options over it.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use clap::Args;
use sluice_outbox::{OutboxConfig, Stats};

#[derive(Debug, Args)]
pub struct OutboxArgs {
    /// The database: postgres://USER[:PASSWORD]@HOST:PORT/DB
    #[arg(long)]
    source: Option<String>,
    /// The outbox table, TABLE or SCHEMA.TABLE
    #[arg(long)]
    table: Option<String>,
    /// Sluice's bootstrap address, HOST:PORT
    #[arg(long)]
    brokers: Option<String>,
    /// A properties file of how to log in to Sluice (security.protocol, sasl.*, ssl.*,
    /// client.id; librdkafka's names), as Kafka's tools take --command-config
    #[arg(long, value_name = "FILE")]
    client_config: Option<PathBuf>,
    /// One such property, KEY=VALUE (repeat for more; wins over --client-config). Keep
    /// passwords in the file, not on the command line
    #[arg(long = "client-property", value_name = "KEY=VALUE")]
    client_properties: Vec<String>,
    /// The logical replication slot (made if missing); instances with the same slot are one
    /// relay, one of them active [default: sluice_outbox]
    #[arg(long)]
    slot: Option<String>,
    /// The publication (made if missing) [default: the slot's name]
    #[arg(long)]
    publication: Option<String>,
    /// Put before aggregatetype to name the topic
    #[arg(long)]
    topic_prefix: Option<String>,
    /// Delete each row from the table once it is published
    #[arg(long)]
    delete_published: bool,
    /// The compacted topic holding the relay's position [default: sluice.outbox.SLOT]
    #[arg(long)]
    progress_topic: Option<String>,
    /// Column names, where the table's differ from Debezium's outbox layout
    #[arg(long, value_name = "NAME")]
    column_id: Option<String>,
    #[arg(long, value_name = "NAME")]
    column_aggregatetype: Option<String>,
    #[arg(long, value_name = "NAME")]
    column_aggregateid: Option<String>,
    #[arg(long, value_name = "NAME")]
    column_type: Option<String>,
    #[arg(long, value_name = "NAME")]
    column_payload: Option<String>,
    /// A further column sent as a header of its name (repeat for more)
    #[arg(long = "header-column", value_name = "NAME")]
    header_columns: Vec<String>,
    /// Rows in one Sluice transaction at most [default: 5000]
    #[arg(long)]
    max_batch_rows: Option<usize>,
    /// The relay's Sluice transactions' timeout in ms: a large database transaction must be
    /// read and sent within it [default: 60000]
    #[arg(long, value_name = "MS")]
    transaction_timeout_ms: Option<u64>,
    /// Seconds between progress lines on stderr, 0 for none [default: 5]
    #[arg(long)]
    report_secs: Option<u64>,
    /// A TOML file whose [outbox] table holds the settings (options given here win)
    #[arg(long)]
    config: Option<PathBuf>,
    /// Serve /metrics (Prometheus) and /status (JSON) on this address
    #[arg(long, value_name = "HOST:PORT")]
    metrics_listen: Option<SocketAddr>,
}

#[derive(serde::Deserialize)]
struct File {
    outbox: Option<toml::Value>,
}

impl OutboxArgs {
    fn config(self) -> anyhow::Result<(OutboxConfig, Option<SocketAddr>)> {
        let mut cfg = match &self.config {
            Some(path) => {
                let text = std::fs::read_to_string(path)
                    .with_context(|| format!("reading {}", path.display()))?;
                let file: File =
                    toml::from_str(&text).with_context(|| format!("{}", path.display()))?;
                let table = file
                    .outbox
                    .with_context(|| format!("{} has no [outbox] table", path.display()))?;
                table
                    .try_into::<OutboxConfig>()
                    .with_context(|| format!("{}: [outbox]", path.display()))?
            }
            None => {
                let missing = |what: &str| anyhow::anyhow!("give {what} (or --config FILE)");
                OutboxConfig::new(
                    self.source.as_deref().ok_or_else(|| missing("--source"))?,
                    self.table.as_deref().ok_or_else(|| missing("--table"))?,
                    self.brokers
                        .as_deref()
                        .ok_or_else(|| missing("--brokers"))?,
                )
            }
        };
        let set = |slot: &mut String, value: Option<String>| {
            if let Some(v) = value {
                *slot = v;
            }
        };
        set(&mut cfg.source, self.source);
        set(&mut cfg.table, self.table);
        set(&mut cfg.brokers, self.brokers);
        set(&mut cfg.slot, self.slot);
        set(&mut cfg.topic_prefix, self.topic_prefix);
        set(&mut cfg.columns.id, self.column_id);
        set(&mut cfg.columns.aggregatetype, self.column_aggregatetype);
        set(&mut cfg.columns.aggregateid, self.column_aggregateid);
        set(&mut cfg.columns.kind, self.column_type);
        set(&mut cfg.columns.payload, self.column_payload);
        if self.publication.is_some() {
            cfg.publication = self.publication;
        }
        if self.progress_topic.is_some() {
            cfg.progress_topic = self.progress_topic;
        }
        if !self.header_columns.is_empty() {
            cfg.columns.headers = self.header_columns;
        }
        if let Some(path) = &self.client_config {
            let text = std::fs::read_to_string(path)
                .with_context(|| format!("--client-config {}", path.display()))?;
            cfg.client
                .read_properties(&text, &format!("--client-config {}", path.display()))?;
        }
        for assignment in &self.client_properties {
            cfg.client.set_assignment(assignment)?;
        }
        cfg.delete_published |= self.delete_published;
        if let Some(n) = self.max_batch_rows {
            cfg.max_batch_rows = n;
        }
        if let Some(ms) = self.transaction_timeout_ms {
            cfg.transaction_timeout_ms = ms;
        }
        if let Some(s) = self.report_secs {
            cfg.report_secs = s;
        }
        cfg.validate()?;
        Ok((cfg, self.metrics_listen))
    }
}

pub fn run(args: OutboxArgs) -> anyhow::Result<()> {
    let (cfg, metrics_listen) = args.config()?;
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .or_else(|_| tracing_subscriber::EnvFilter::try_new("info"))
        .context("bad log level")?;
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .init();
    // Multi-threaded: the producer's blocking calls run in place on a worker.
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .context("starting the runtime")?;
    rt.block_on(async move {
        let stats = Arc::new(Stats::default());
        let (stop_tx, stop) = tokio::sync::watch::channel(false);
        if let Some(addr) = metrics_listen {
            let listener = tokio::net::TcpListener::bind(addr)
                .await
                .with_context(|| format!("--metrics-listen {addr}"))?;
            tokio::spawn(serve_metrics(listener, stats.clone(), cfg.slot.clone()));
        }
        tokio::spawn(sluice_outbox::report(
            stats.clone(),
            Duration::from_secs(cfg.report_secs),
            stop.clone(),
        ));
        tokio::spawn(async move {
            wait_for_signal().await;
            let _ = stop_tx.send(true);
        });
        let reports = sluice_outbox::StatusReports::start(&cfg, stats.clone());
        let outcome = sluice_outbox::run(cfg, stats, stop).await;
        reports.finish().await;
        outcome?;
        Ok(())
    })
}

async fn wait_for_signal() {
    let mut term = match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
        Ok(s) => s,
        Err(_) => {
            let _ = tokio::signal::ctrl_c().await;
            return;
        }
    };
    tokio::select! {
        _ = term.recv() => {}
        _ = tokio::signal::ctrl_c() => {}
    }
}

async fn serve_metrics(listener: tokio::net::TcpListener, stats: Arc<Stats>, slot: String) {
    use axum::routing::get;
    let for_metrics = stats.clone();
    let app = axum::Router::new()
        .route(
            "/metrics",
            get(move || {
                let stats = for_metrics.clone();
                let slot = slot.clone();
                async move {
                    let mut text = String::new();
                    stats.prometheus(&slot, &mut text);
                    text.push_str("# EOF\n");
                    (
                        [(
                            axum::http::header::CONTENT_TYPE,
                            "application/openmetrics-text; version=1.0.0; charset=utf-8",
                        )],
                        text,
                    )
                }
            }),
        )
        .route(
            "/status",
            get(move || {
                let stats = stats.clone();
                async move { axum::Json(stats.snapshot()) }
            }),
        );
    if let Err(e) = axum::serve(listener, app).await {
        tracing::warn!(error = %e, "the metrics listener stopped");
    }
}
