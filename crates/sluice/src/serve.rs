//! `sluice serve`: open the data directory (recovering it), listen for Kafka clients and on
//! the admin port, and shut down cleanly on SIGINT or SIGTERM.

use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use sluice_broker::Broker;
use sluice_log::{MonotonicClock, SystemClock};
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;

use crate::settings::Resolved;

pub async fn run(settings: Resolved) -> anyhow::Result<()> {
    let data_dir = settings.broker.data_dir.clone();
    tracing::info!(data_dir = %data_dir.display(), "opening data directory");
    let broker_config = settings.broker.clone();
    // Sessions and transaction timeouts are durations: a clock that is never stepped.
    let broker = tokio::task::spawn_blocking(move || {
        Broker::open_with_timer(
            broker_config,
            Arc::new(SystemClock),
            Arc::new(MonotonicClock::new()),
        )
    })
    .await
    .context("opening the broker")?
    .with_context(|| format!("opening data directory {}", data_dir.display()))?;
    // TLS files are checked before anything binds: a bad key or an expired certificate stops
    // the start with a message naming it.
    let tls = match &settings.tls {
        Some(tls) => Some(tls.load()?),
        None => None,
    };
    let mut endpoints = Vec::new();
    let mut cells = Vec::new();
    for l in &settings.listeners {
        let listener = TcpListener::bind(l.bind)
            .await
            .with_context(|| format!("binding the Kafka listener {} ({})", l.name, l.bind))?;
        let cell = match (&tls, l.protocol.uses_tls()) {
            (Some(config), true) => {
                let cell = Arc::new(sluice_wire::TlsAcceptorCell::new(Arc::clone(config)));
                cells.push(Arc::clone(&cell));
                Some(cell)
            }
            _ => None,
        };
        tracing::info!(
            listener = %l.name,
            protocol = l.protocol.name(),
            address = %listener.local_addr()?,
            advertised = %format!("{}:{}", l.advertised_host, l.advertised_port),
            "Kafka listener"
        );
        endpoints.push(sluice_wire::Endpoint {
            listener,
            name: Arc::from(l.name.as_str()),
            tls: cell,
        });
    }
    let admin = TcpListener::bind(settings.admin_listen)
        .await
        .with_context(|| format!("binding the admin listener {}", settings.admin_listen))?;
    let shutdown = CancellationToken::new();
    if let Some(voters) = &settings.cluster {
        join_cluster(&broker, &settings, voters, shutdown.clone()).await?;
    }
    broker.start_background(shutdown.clone());
    if let Some(tls) = settings.tls.clone() {
        tls.watch(cells, shutdown.clone());
    }
    tracing::info!(
        listeners = settings.listeners.len(),
        advertised = %format!("{}:{}", settings.broker.advertised_host, settings.broker.advertised_port),
        admin = %format!("http://{}", admin.local_addr()?),
        data_dir = %data_dir.display(),
        topics = broker.topics().list().len(),
        cluster_id = %broker.cluster_id(),
        "sluice is serving"
    );
    let serving = Arc::clone(&broker);
    let (limits, stop) = (settings.limits.clone(), shutdown.clone());
    let wire = tokio::spawn(async move {
        // A cluster node answers Kafka clients once its metadata is current: before, it would
        // name the leaders it knew before it went down. Clients that connect meanwhile wait in
        // the listen backlog.
        if let Some(replication) = serving.replication().cloned() {
            tokio::select! {
                () = stop.cancelled() => return,
                () = replication.wait_following() => {}
            }
            tracing::info!("metadata current: answering Kafka clients");
        }
        sluice_wire::serve(endpoints, serving, limits, stop).await
    });
    let admin_tls = match &settings.admin_tls {
        Some(t) => {
            let cell = Arc::new(sluice_admin::tls_listener::AdminTls::new(
                t.load().context("the admin port's TLS")?,
            ));
            let installed = Arc::clone(&cell);
            t.clone()
                .watch_with(shutdown.clone(), move |config| installed.replace(config));
            Some(cell)
        }
        None => None,
    };
    let scheme = if admin_tls.is_some() { "https" } else { "http" };
    let admin_state = sluice_admin::AppState::new(
        Arc::clone(&broker),
        settings
            .admin_token
            .as_ref()
            .map(crate::secret::Secret::expose),
        format!("{scheme}://{}", admin.local_addr()?),
    )
    .with_tls(admin_tls.is_some());
    let http = tokio::spawn(sluice_admin::serve(
        admin,
        admin_state,
        admin_tls,
        shutdown.clone(),
    ));

    let outbox = match settings.outbox.clone() {
        Some(cfg) => Some(start_outbox(&broker, cfg)?),
        None => None,
    };

    wait_for_signal().await;
    tracing::info!("shutting down");
    if let Some((stop, relay)) = outbox {
        // The relay stops between batches; one blocked in a broker call (up to 30 s) is
        // left behind (its open transaction aborts, as after a crash).
        let _ = stop.send(true);
        let joined = tokio::task::spawn_blocking(move || relay.join());
        // Up to 5 s for the relay, and 8 for its last status report.
        if tokio::time::timeout(Duration::from_secs(13), joined)
            .await
            .is_err()
        {
            tracing::warn!("the outbox relay did not stop within 13 s");
        }
    }
    shutdown.cancel();
    if tokio::time::timeout(Duration::from_secs(10), wire)
        .await
        .is_err()
    {
        tracing::warn!("connections did not finish within 10 s");
    }
    let _ = tokio::time::timeout(Duration::from_secs(2), http).await;
    tokio::task::spawn_blocking(move || broker.close()).await?;
    tracing::info!("stopped cleanly");
    Ok(())
}

/// Runs the `[outbox]` relay beside the broker, on its own threads (its producer's calls
/// block), publishing through the listener the settings chose (`outbox_via_listener`); its
/// metrics join `/metrics`. A relay that stops on an error leaves the broker serving (its
/// state says failed).
fn start_outbox(
    broker: &Arc<Broker>,
    mut cfg: sluice_outbox::OutboxConfig,
) -> anyhow::Result<(
    tokio::sync::watch::Sender<bool>,
    std::thread::JoinHandle<()>,
)> {
    cfg.validate().context("[outbox]")?;
    cfg.retry_unreachable = true;
    let stats = Arc::new(sluice_outbox::Stats::default());
    let (metrics, slot) = (Arc::clone(&stats), cfg.slot.clone());
    broker.add_metrics(Arc::new(move |out: &mut String| {
        metrics.prometheus(&slot, out)
    }));
    let (status, slot, source) = (Arc::clone(&stats), cfg.slot.clone(), cfg.source_identity());
    broker.add_outbox_relay(Arc::new(move || {
        let report = sluice_outbox::status_report::StatusReport::now(&slot, &source, &status);
        serde_json::to_value(report).unwrap_or_default()
    }));
    let (stop_tx, stop) = tokio::sync::watch::channel(false);
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .thread_name("outbox")
        .enable_all()
        .build()
        .context("starting the outbox relay's runtime")?;
    let relay = std::thread::Builder::new()
        .name("outbox".into())
        .spawn(move || {
            runtime.block_on(async move {
                tokio::spawn(sluice_outbox::report(
                    Arc::clone(&stats),
                    Duration::from_secs(cfg.report_secs),
                    stop.clone(),
                ));
                let reports = sluice_outbox::StatusReports::start(&cfg, Arc::clone(&stats));
                if let Err(e) = sluice_outbox::run(cfg, stats, stop).await {
                    tracing::error!(error = %e, "the outbox relay stopped");
                }
                reports.finish().await;
            });
        })
        .context("starting the outbox relay")?;
    tracing::info!("outbox relay started");
    Ok((stop_tx, relay))
}

/// Starts this node's member of the metadata group and its internal listener, and makes the
/// broker follow the cluster's metadata.
async fn join_cluster(
    broker: &Arc<Broker>,
    settings: &Resolved,
    voters: &std::collections::BTreeMap<i32, String>,
    shutdown: CancellationToken,
) -> anyhow::Result<()> {
    use sluice_cluster::metadata::NodeRegistration;
    use sluice_cluster::raft::node::MetadataConfig;
    use sluice_cluster::runtime::{ClusterConfig, ClusterNode};

    let me = settings.broker.node_id;
    let learner = !voters.contains_key(&me);
    let internal = voters
        .get(&me)
        .or(settings.internal_listen.as_ref())
        .context("the cluster does not name this node and it has no internal_listen")?;
    let listener = TcpListener::bind(internal)
        .await
        .with_context(|| format!("binding the internal listener {internal}"))?;
    let mut metadata = MetadataConfig::new(
        me as u64,
        voters
            .iter()
            .map(|(id, a)| (*id as u64, a.clone()))
            .collect(),
        settings.broker.data_dir.join("cluster"),
    );
    metadata.learner_addr = learner.then(|| internal.clone());
    if let Some(tls) = &settings.internal_tls {
        let configs = tls.load()?;
        metadata.transport = Arc::new(sluice_cluster::raft::transport::Transport::tls(configs));
        tls.clone()
            .watch(Arc::clone(&metadata.transport), shutdown.clone());
    }
    let config = ClusterConfig {
        registration: NodeRegistration {
            node: sluice_cluster::NodeId(me),
            incarnation: uuid::Uuid::new_v4(),
            kafka_host: settings.broker.advertised_host.clone(),
            kafka_port: settings.broker.advertised_port,
            listeners: settings
                .listeners
                .iter()
                .map(|l| sluice_cluster::metadata::ListenerEndpoint {
                    name: l.name.clone(),
                    host: l.advertised_host.clone(),
                    port: l.advertised_port,
                })
                .collect(),
            internal_addr: internal.clone(),
            rack: settings.rack.clone(),
            directory: Some(broker.directory_id()),
        },
        metadata,
        controller: sluice_cluster::controller::ControllerConfig {
            session_timeout_ms: settings.cluster_session_timeout_ms,
            leader_balance_interval_ms: settings.leader_balance_interval_ms,
            ..Default::default()
        },
        heartbeat_interval: Duration::from_millis(100),
        tick_interval: Duration::from_millis(100),
    };
    // Sessions, fencing and replica lag are durations: a clock that is never stepped.
    let node = ClusterNode::start(
        config,
        listener,
        Arc::new(MonotonicClock::new()),
        shutdown.clone(),
    )
    .await
    .context("starting the cluster node")?;
    let inter_broker = match settings.inter_broker.clone() {
        Some(inter_broker) => inter_broker.start(shutdown.clone())?,
        None => Arc::default(),
    };
    broker.join_cluster(node, inter_broker, shutdown)?;
    let internal_tls = settings.internal_tls.is_some();
    tracing::info!(node = me, voters = voters.len(), %internal, internal_tls, learner, "joined the cluster");
    Ok(())
}

async fn wait_for_signal() {
    let mut term = match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
        Ok(s) => s,
        Err(e) => {
            tracing::warn!(error = %e, "cannot listen for SIGTERM");
            let _ = tokio::signal::ctrl_c().await;
            return;
        }
    };
    tokio::select! {
        _ = tokio::signal::ctrl_c() => {}
        _ = term.recv() => {}
    }
}
