//! `sluice-admin`: the broker's HTTP admin port.
//!
//! - the web console (`/`, `/assets/*`): static files compiled into the binary ([`console`]);
//! - the JSON admin API behind it (`/api/*`), described by `/api/openapi.json` ([`openapi`]):
//!   overview and 15-minute history ([`overview`], [`history`]), topics ([`topics`]), the
//!   message browser ([`messages`]), consumer groups ([`groups`]), other clusters
//!   ([`clusters`]), outbox relays ([`outbox`]); every error is JSON ([`error`]);
//! - Prometheus `/metrics` and `/health`;
//! - an optional admin token guarding all but the static files and `/health` ([`auth`]);
//!   requests a web page made a browser send (DNS rebinding, cross-site changes) are refused
//!   ([`origin`]).

pub mod auth;
pub mod clusters;
pub mod console;
pub mod error;
pub mod groups;
pub mod history;
pub mod messages;
pub mod openapi;
pub mod origin;
pub mod outbox;
pub mod overview;
pub mod security;
pub mod tls_listener;
pub mod topics;

use std::sync::Arc;

use axum::extract::State;
use axum::http::StatusCode;
use axum::response::IntoResponse;
use axum::routing::{any, delete, get, post, put};
use axum::{Json, Router};
use serde_json::json;
use sluice_broker::Broker;
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;

use crate::auth::AdminToken;
use crate::clusters::Clusters;
use crate::error::ApiError;
use crate::history::History;

/// What every handler can reach.
#[derive(Clone, Debug)]
pub struct AppState {
    pub broker: Arc<Broker>,
    pub history: Arc<History>,
    pub clusters: Arc<Clusters>,
    pub token: Option<AdminToken>,
    /// Where this admin port listens, as shown on the overview.
    pub admin_address: String,
    /// The port speaks HTTPS (a SCRAM user's password may then be sent with HTTP basic).
    pub tls: bool,
    /// The names an open port answers to ([`origin`]).
    pub local_names: origin::LocalNames,
}

impl AppState {
    pub fn new(broker: Arc<Broker>, token: Option<&str>, admin_address: String) -> AppState {
        broker.set_admin_address(admin_address.clone());
        AppState {
            clusters: Arc::new(Clusters::open(&broker.config().data_dir)),
            broker,
            history: Arc::new(History::default()),
            token: token.map(AdminToken::new),
            admin_address,
            tls: false,
            local_names: origin::LocalNames::of_this_machine(),
        }
    }

    pub fn with_tls(mut self, tls: bool) -> AppState {
        self.tls = tls;
        self
    }
}

pub fn router(state: AppState) -> Router {
    Router::new()
        .route("/", get(console::index))
        .route("/assets/{file}", get(console::asset))
        .route("/health", get(health))
        .route("/metrics", get(metrics))
        .route("/api/openapi.json", get(openapi::document))
        .route("/api/status", get(status))
        .route("/api/overview", get(overview::overview))
        .route("/api/overview/history", get(overview::history))
        .route("/api/outbox", get(outbox::list))
        .route("/api/topics", get(topics::list).post(topics::create))
        .route(
            "/api/topics/{topic}",
            get(topics::get).delete(topics::delete),
        )
        .route("/api/topics/{topic}/configs", put(topics::set_configs))
        .route(
            "/api/topics/{topic}/partitions",
            post(topics::add_partitions),
        )
        .route(
            "/api/topics/{topic}/partitions/{partition}/messages",
            get(messages::browse),
        )
        .route("/api/topics/{topic}/messages", post(messages::produce))
        .route(
            "/api/topics/{topic}/delete-records",
            post(topics::delete_records),
        )
        .route("/api/groups", get(groups::list))
        .route("/api/groups/{group}", get(groups::get))
        .route("/api/groups/{group}/lag-history", get(groups::lag_history))
        .route(
            "/api/groups/{group}/reset-offsets",
            post(groups::reset_offsets),
        )
        .route(
            "/api/users",
            get(security::list_users).post(security::create_user),
        )
        .route("/api/users/{name}", delete(security::delete_user))
        .route(
            "/api/acls",
            get(security::list_acls)
                .post(security::create_acl)
                .delete(security::delete_acl),
        )
        .route("/api/clusters", get(clusters::list).post(clusters::add))
        .route("/api/clusters/{name}", delete(clusters::remove))
        .route("/api/clusters/{name}/proxy/{*path}", any(clusters::proxy))
        .fallback(not_found)
        .method_not_allowed_fallback(method_not_allowed)
        .layer(axum::middleware::from_fn_with_state(
            state.clone(),
            auth::require_token,
        ))
        .with_state(state)
}

async fn health() -> impl IntoResponse {
    Json(json!({ "status": "ok" }))
}

async fn status(State(state): State<AppState>) -> impl IntoResponse {
    Json(state.broker.status())
}

async fn metrics(State(state): State<AppState>) -> impl IntoResponse {
    (
        [(
            axum::http::header::CONTENT_TYPE,
            "application/openmetrics-text; version=1.0.0; charset=utf-8",
        )],
        state.broker.metrics_text(),
    )
}

async fn not_found(uri: axum::http::Uri) -> ApiError {
    ApiError::not_found(format!("no such endpoint: {}", uri.path()))
}

async fn method_not_allowed(method: axum::http::Method, uri: axum::http::Uri) -> ApiError {
    ApiError::new(
        StatusCode::METHOD_NOT_ALLOWED,
        format!("{method} is not allowed on {}", uri.path()),
    )
}

/// Serves the admin port (HTTPS with `tls`) until `shutdown` fires; samples the console's
/// history meanwhile.
pub async fn serve(
    listener: TcpListener,
    state: AppState,
    tls: Option<Arc<tls_listener::AdminTls>>,
    shutdown: CancellationToken,
) -> std::io::Result<()> {
    state
        .history
        .spawn(Arc::clone(&state.broker), shutdown.clone());
    let app = router(state).into_make_service_with_connect_info::<tls_listener::PeerAddr>();
    let stop = shutdown.clone();
    match tls {
        None => {
            axum::serve(listener, app)
                .with_graceful_shutdown(async move { stop.cancelled().await })
                .await
        }
        Some(tls) => {
            let listener = tls_listener::TlsListener::new(listener, tls, shutdown.clone())?;
            axum::serve(listener, app)
                .with_graceful_shutdown(async move { stop.cancelled().await })
                .await
        }
    }
}
