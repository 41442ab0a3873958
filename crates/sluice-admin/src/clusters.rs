//! Other Sluice clusters the console manages: a registry of their admin addresses (kept in
//! `<data dir>/console/clusters.json`) and a proxy, `/api/clusters/{name}/proxy/...`, that
//! forwards an API call to that cluster's admin port with its token. The browser talks only
//! to this broker, so the console needs no cross-origin access and never sees the tokens.

use std::path::PathBuf;
use std::time::Duration;

use axum::body::Body;
use axum::extract::{Path, Request, State};
use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;
use parking_lot::Mutex;
use serde::{Deserialize, Serialize};

use crate::error::{ApiError, ApiJson};
use crate::AppState;

/// The name of this broker's own cluster in the console.
pub const LOCAL: &str = "local";
const PROXY_TIMEOUT: Duration = Duration::from_secs(10);
/// Largest proxied request or response body.
const MAX_BODY: usize = 16 << 20;

#[derive(Debug, Clone, Serialize, Deserialize)]
struct Stored {
    name: String,
    admin_url: String,
    #[serde(default)]
    token: Option<String>,
}

#[derive(Debug, Serialize)]
pub struct ClusterView {
    pub name: String,
    pub admin_url: Option<String>,
    pub local: bool,
    pub has_token: bool,
}

#[derive(Debug)]
pub struct Clusters {
    path: PathBuf,
    entries: Mutex<Vec<Stored>>,
    http: reqwest::Client,
}

impl Clusters {
    /// Loads the registry under `data_dir` (an unreadable file is reported and ignored).
    pub fn open(data_dir: &std::path::Path) -> Clusters {
        let path = data_dir.join("console").join("clusters.json");
        let entries = match std::fs::read(&path) {
            Ok(bytes) => serde_json::from_slice(&bytes).unwrap_or_else(|e| {
                tracing::warn!(path = %path.display(), error = %e, "ignoring unreadable cluster registry");
                Vec::new()
            }),
            Err(_) => Vec::new(),
        };
        Clusters {
            path,
            entries: Mutex::new(entries),
            http: reqwest::Client::builder()
                .timeout(PROXY_TIMEOUT)
                .redirect(reqwest::redirect::Policy::none())
                .build()
                .unwrap_or_default(),
        }
    }

    fn save(&self, entries: &[Stored]) -> Result<(), ApiError> {
        let io = |e: std::io::Error| {
            ApiError::new(
                StatusCode::INTERNAL_SERVER_ERROR,
                format!("saving {}: {e}", self.path.display()),
            )
        };
        if let Some(dir) = self.path.parent() {
            std::fs::create_dir_all(dir).map_err(io)?;
        }
        let tmp = self.path.with_extension("json.tmp");
        let bytes = serde_json::to_vec_pretty(entries)
            .map_err(|e| ApiError::new(StatusCode::INTERNAL_SERVER_ERROR, e.to_string()))?;
        std::fs::write(&tmp, bytes).map_err(io)?;
        std::fs::rename(&tmp, &self.path).map_err(io)
    }

    fn views(&self) -> Vec<ClusterView> {
        let mut out = vec![ClusterView {
            name: LOCAL.into(),
            admin_url: None,
            local: true,
            has_token: false,
        }];
        out.extend(self.entries.lock().iter().map(|e| ClusterView {
            name: e.name.clone(),
            admin_url: Some(e.admin_url.clone()),
            local: false,
            has_token: e.token.is_some(),
        }));
        out
    }
}

pub async fn list(State(state): State<AppState>) -> Json<Vec<ClusterView>> {
    Json(state.clusters.views())
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AddCluster {
    pub name: String,
    /// The other cluster's admin address, e.g. `http://10.0.0.5:8080`.
    pub admin_url: String,
    /// Its admin token, if it has one.
    pub token: Option<String>,
}

fn check_name(name: &str) -> Result<(), ApiError> {
    let legal = !name.is_empty()
        && name.len() <= 64
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-'));
    if !legal {
        return Err(ApiError::bad_request(format!(
            "cluster name '{name}' must be 1-64 of letters, digits, '.', '_' and '-'"
        )));
    }
    if name == LOCAL {
        return Err(ApiError::bad_request("'local' is this cluster's own name"));
    }
    Ok(())
}

fn check_url(url: &str) -> Result<String, ApiError> {
    let parsed = reqwest::Url::parse(url)
        .map_err(|e| ApiError::bad_request(format!("admin_url '{url}': {e}")))?;
    if parsed.scheme() != "http" || parsed.host().is_none() {
        return Err(ApiError::bad_request(format!(
            "admin_url '{url}' must be http://host:port"
        )));
    }
    if parsed.path() != "/" || parsed.query().is_some() {
        return Err(ApiError::bad_request(format!(
            "admin_url '{url}' must be only scheme, host and port"
        )));
    }
    Ok(parsed.as_str().trim_end_matches('/').to_string())
}

pub async fn add(
    State(state): State<AppState>,
    ApiJson(req): ApiJson<AddCluster>,
) -> Result<(StatusCode, Json<Vec<ClusterView>>), ApiError> {
    check_name(&req.name)?;
    let admin_url = check_url(&req.admin_url)?;
    {
        let mut entries = state.clusters.entries.lock();
        if entries.iter().any(|e| e.name == req.name) {
            return Err(ApiError::new(
                StatusCode::CONFLICT,
                format!("a cluster named '{}' is already registered", req.name),
            ));
        }
        let mut next = entries.clone();
        next.push(Stored {
            name: req.name,
            admin_url,
            token: req.token.filter(|t| !t.is_empty()),
        });
        state.clusters.save(&next)?;
        *entries = next;
    }
    Ok((StatusCode::CREATED, Json(state.clusters.views())))
}

pub async fn remove(
    State(state): State<AppState>,
    Path(name): Path<String>,
) -> Result<StatusCode, ApiError> {
    let mut entries = state.clusters.entries.lock();
    if !entries.iter().any(|e| e.name == name) {
        return Err(ApiError::not_found(format!(
            "no registered cluster '{name}'"
        )));
    }
    let next: Vec<Stored> = entries.iter().filter(|e| e.name != name).cloned().collect();
    state.clusters.save(&next)?;
    *entries = next;
    Ok(StatusCode::NO_CONTENT)
}

/// Forwards `/api/clusters/{name}/proxy/{path}` to `{admin_url}/{path}`.
/// Only for super users: it acts with the registered cluster's admin token.
pub async fn proxy(
    State(state): State<AppState>,
    access: crate::auth::Access,
    Path((name, path)): Path<(String, String)>,
    request: Request,
) -> Result<Response, ApiError> {
    access.require_super_user(&state)?;
    let Some(target) = state
        .clusters
        .entries
        .lock()
        .iter()
        .find(|e| e.name == name)
        .cloned()
    else {
        return Err(ApiError::not_found(format!(
            "no registered cluster '{name}'"
        )));
    };
    let query = request
        .uri()
        .query()
        .map(|q| format!("?{q}"))
        .unwrap_or_default();
    let url = format!("{}/{}{}", target.admin_url, path, query);
    let method = request.method().clone();
    let content_type = request.headers().get(header::CONTENT_TYPE).cloned();
    let body = axum::body::to_bytes(request.into_body(), MAX_BODY)
        .await
        .map_err(|e| ApiError::bad_request(format!("request body: {e}")))?;
    let mut call = state.clusters.http.request(method, &url).body(body);
    if let Some(ct) = content_type {
        call = call.header(header::CONTENT_TYPE, ct);
    }
    if let Some(token) = &target.token {
        call = call.bearer_auth(token);
    }
    let answer = call.send().await.map_err(|e| {
        ApiError::new(
            StatusCode::BAD_GATEWAY,
            format!(
                "cluster '{name}' at {} did not answer: {e}",
                target.admin_url
            ),
        )
    })?;
    let status = answer.status();
    if status == StatusCode::UNAUTHORIZED {
        // Passed through, a 401 would read as this broker asking for its own token.
        let why = if target.token.is_some() {
            "refused the admin token registered for it"
        } else {
            "needs an admin token and none is registered for it"
        };
        return Err(ApiError::new(
            StatusCode::BAD_GATEWAY,
            format!(
                "cluster '{name}' at {} {why}; register it again with the right token",
                target.admin_url
            ),
        ));
    }
    let content_type = answer.headers().get(header::CONTENT_TYPE).cloned();
    let bytes = answer.bytes().await.map_err(|e| {
        ApiError::new(
            StatusCode::BAD_GATEWAY,
            format!("reading the answer of cluster '{name}': {e}"),
        )
    })?;
    let mut response = Response::new(Body::from(bytes));
    *response.status_mut() = status;
    if let Some(ct) = content_type {
        response.headers_mut().insert(header::CONTENT_TYPE, ct);
    }
    Ok(response.into_response())
}
