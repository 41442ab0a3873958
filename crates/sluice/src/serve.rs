//! `sluice serve`: open the data directory (recovering it), listen for Kafka clients and on
//! the admin port, and shut down cleanly on SIGINT or SIGTERM.

use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use sluice_broker::Broker;
use sluice_log::SystemClock;
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;

use crate::settings::Resolved;

pub async fn run(settings: Resolved) -> anyhow::Result<()> {
    let data_dir = settings.broker.data_dir.clone();
    tracing::info!(data_dir = %data_dir.display(), "opening data directory");
    let broker_config = settings.broker.clone();
    let broker =
        tokio::task::spawn_blocking(move || Broker::open(broker_config, Arc::new(SystemClock)))
            .await
            .context("opening the broker")?
            .with_context(|| format!("opening data directory {}", data_dir.display()))?;
    let kafka = TcpListener::bind(settings.listen)
        .await
        .with_context(|| format!("binding the Kafka listener {}", settings.listen))?;
    let admin = TcpListener::bind(settings.admin_listen)
        .await
        .with_context(|| format!("binding the admin listener {}", settings.admin_listen))?;
    let shutdown = CancellationToken::new();
    broker.start_background(shutdown.clone());
    tracing::info!(
        kafka = %kafka.local_addr()?,
        advertised = %format!("{}:{}", settings.broker.advertised_host, settings.broker.advertised_port),
        admin = %format!("http://{}", admin.local_addr()?),
        data_dir = %data_dir.display(),
        topics = broker.topics().list().len(),
        cluster_id = %broker.cluster_id(),
        "sluice is serving"
    );
    let wire = tokio::spawn(sluice_wire::serve(
        kafka,
        Arc::clone(&broker),
        settings.limits.clone(),
        shutdown.clone(),
    ));
    let admin_state = sluice_admin::AppState::new(
        Arc::clone(&broker),
        settings.admin_token.as_deref(),
        format!("http://{}", admin.local_addr()?),
    );
    let http = tokio::spawn(sluice_admin::serve(admin, admin_state, shutdown.clone()));

    wait_for_signal().await;
    tracing::info!("shutting down");
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
