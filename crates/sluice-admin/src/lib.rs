//! `sluice-admin`: the broker's HTTP admin port: a liveness check (`/health`), a JSON status
//! of the node and its topics (`/api/status`), and consumer groups (`/api/groups`,
//! `/api/groups/{group}` with members, assignments and lag). The web console and Prometheus
//! metrics are added here.

use std::sync::Arc;

use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::IntoResponse;
use axum::routing::get;
use axum::{Json, Router};
use serde_json::json;
use sluice_broker::Broker;
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;

pub fn router(broker: Arc<Broker>) -> Router {
    Router::new()
        .route("/health", get(health))
        .route("/api/status", get(status))
        .route("/metrics", get(metrics))
        .route("/api/groups", get(groups))
        .route("/api/groups/{group}", get(group))
        .fallback(not_found)
        .with_state(broker)
}

async fn health() -> impl IntoResponse {
    Json(json!({ "status": "ok" }))
}

async fn status(State(broker): State<Arc<Broker>>) -> impl IntoResponse {
    Json(broker.status())
}

async fn metrics(State(broker): State<Arc<Broker>>) -> impl IntoResponse {
    (
        [(
            axum::http::header::CONTENT_TYPE,
            "application/openmetrics-text; version=1.0.0; charset=utf-8",
        )],
        broker.metrics_text(),
    )
}

async fn groups(State(broker): State<Arc<Broker>>) -> impl IntoResponse {
    Json(broker.groups_summary())
}

async fn group(
    State(broker): State<Arc<Broker>>,
    Path(id): Path<String>,
) -> axum::response::Response {
    match broker.group_status(&id) {
        Some(g) => Json(g).into_response(),
        None => (
            StatusCode::NOT_FOUND,
            Json(json!({ "error": format!("no consumer group '{id}'") })),
        )
            .into_response(),
    }
}

async fn not_found(uri: axum::http::Uri) -> impl IntoResponse {
    (
        StatusCode::NOT_FOUND,
        Json(json!({ "error": format!("no such endpoint: {}", uri.path()) })),
    )
}

/// Serves the admin API until `shutdown` fires.
pub async fn serve(
    listener: TcpListener,
    broker: Arc<Broker>,
    shutdown: CancellationToken,
) -> std::io::Result<()> {
    axum::serve(listener, router(broker))
        .with_graceful_shutdown(async move { shutdown.cancelled().await })
        .await
}
