//! Who may use the admin port. The admin token (`Authorization: Bearer <token>`) is a super
//! user's key; a SASL/SCRAM user logs in with HTTP basic (`Authorization: Basic`, only over
//! HTTPS or from loopback, so a password never crosses a network in clear) and is then
//! subject to the ACLs as a Kafka client would be: topics and groups are checked per resource
//! with the operation the matching Kafka API needs (reading a topic's records needs Read on
//! it, producing Write, deleting Delete, listing shows only what one may Describe; see
//! [`Access`]), everything else on the cluster (reading needs Describe, changing Alter). When a
//! token is set or the authorizer is on, every API call and `/metrics` needs one of the two;
//! otherwise the port is open (it then listens on loopback only). The console's
//! static files and `/health` stay open (they hold no data). Tokens are compared as SHA-256
//! digests in constant time, so neither the content nor the length of the configured token
//! leaks through timing.

use std::sync::Arc;

use axum::extract::{Request, State};
use axum::http::{header, Method, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use sha2::{Digest, Sha256};
use subtle::ConstantTimeEq;

use sluice_auth::acl::{Operation, ResourceType};

use crate::error::ApiError;
use crate::tls_listener::PeerAddr;
use crate::AppState;

/// A configured admin token, kept only as its digest.
#[derive(Clone)]
pub struct AdminToken([u8; 32]);

impl std::fmt::Debug for AdminToken {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("AdminToken(…)")
    }
}

impl AdminToken {
    pub fn new(token: &str) -> AdminToken {
        AdminToken(Sha256::digest(token.as_bytes()).into())
    }

    pub fn matches(&self, presented: &str) -> bool {
        let digest: [u8; 32] = Sha256::digest(presented.as_bytes()).into();
        bool::from(self.0.ct_eq(&digest))
    }
}

/// Who made an admin request (for the audit log): `User:NAME` for a SCRAM login,
/// `admin-token`, or `admin-http` on a port without a token.
#[derive(Debug, Clone)]
pub struct AdminPrincipal(pub String);

/// Paths that answer without a token.
fn is_open(path: &str) -> bool {
    path == "/" || path == "/health" || path.starts_with("/assets/")
}

/// Paths whose handlers check the ACLs per topic or group ([`Access`]); every other API
/// path is checked on the cluster here.
fn checked_per_resource(path: &str) -> bool {
    ["/api/topics", "/api/groups"]
        .iter()
        .any(|p| path == *p || path.starts_with(&format!("{p}/")))
}

/// A SCRAM user's login (the admin token and an open port have none: [`Access`] is then
/// unrestricted).
#[derive(Debug, Clone)]
pub struct AdminLogin {
    pub principal: String,
    pub peer: std::net::SocketAddr,
}

/// What the request's user may do to topics and groups, as the Kafka API would check it.
/// Unrestricted for the admin token, an open port, the authorizer off, or a super user. The
/// login layer decides it for every request it lets through; a handler reached without that
/// decision (a route outside the layer) answers 500 rather than run unchecked.
#[derive(Debug, Clone)]
pub struct Access(Option<AdminLogin>);

impl<S: Send + Sync> axum::extract::FromRequestParts<S> for Access {
    type Rejection = ApiError;

    async fn from_request_parts(
        parts: &mut axum::http::request::Parts,
        _state: &S,
    ) -> Result<Self, Self::Rejection> {
        parts.extensions.get::<Access>().cloned().ok_or_else(|| {
            ApiError::new(
                StatusCode::INTERNAL_SERVER_ERROR,
                "this request reached a handler without a login decision",
            )
        })
    }
}

impl Access {
    /// Everything allowed (no login to check).
    pub fn unrestricted() -> Access {
        Access(None)
    }

    /// `Ok` when the user may `operation` the resource; else 403 naming what is needed (a
    /// denial is logged, audited and counted as the Kafka API's are, under `api="admin-http"`).
    pub fn require(
        &self,
        state: &AppState,
        operation: Operation,
        resource: ResourceType,
        name: &str,
    ) -> Result<(), ApiError> {
        let Some(login) = &self.0 else {
            return Ok(());
        };
        if state
            .broker
            .authz_admin(&login.principal, login.peer)
            .allows(operation, resource, name)
        {
            return Ok(());
        }
        Err(forbidden(
            &login.principal,
            &format!(
                "{} on {} '{name}'",
                operation.name(),
                resource_name(resource)
            ),
        ))
    }

    /// Whether a listing shows the resource (Describe, as Metadata and ListGroups filter).
    pub fn shows(&self, state: &AppState, resource: ResourceType, name: &str) -> bool {
        self.allows_quietly(state, Operation::Describe, resource, name)
    }

    /// Whether the operation is allowed, without counting or auditing a refusal (for what
    /// is left out of an answer rather than refused).
    pub fn allows_quietly(
        &self,
        state: &AppState,
        operation: Operation,
        resource: ResourceType,
        name: &str,
    ) -> bool {
        self.0.as_ref().is_none_or(|login| {
            state
                .broker
                .authz_admin(&login.principal, login.peer)
                .shows(operation, resource, name)
        })
    }

    /// `Ok` for the admin token, an open port and super users only (what acts with another
    /// cluster's admin token must not be open to less).
    pub fn require_super_user(&self, state: &AppState) -> Result<(), ApiError> {
        let Some(login) = &self.0 else {
            return Ok(());
        };
        if state
            .broker
            .authz_admin(&login.principal, login.peer)
            .is_unrestricted()
        {
            return Ok(());
        }
        Err(forbidden(
            &login.principal,
            "to be a super user (the proxy acts with the other cluster's admin token)",
        ))
    }

    /// CreateTopics' check: Create on the cluster or on the topic.
    pub fn may_create_topic(&self, state: &AppState, name: &str) -> Result<(), ApiError> {
        let Some(login) = &self.0 else {
            return Ok(());
        };
        if state
            .broker
            .authz_admin(&login.principal, login.peer)
            .may_create_topic(name)
        {
            return Ok(());
        }
        Err(forbidden(
            &login.principal,
            &format!("Create on the cluster or on topic '{name}'"),
        ))
    }
}

fn resource_name(resource: ResourceType) -> &'static str {
    match resource {
        ResourceType::Topic => "topic",
        ResourceType::Group => "group",
        ResourceType::TransactionalId => "transactional id",
        _ => "the cluster",
    }
}

fn forbidden(principal: &str, needed: &str) -> ApiError {
    ApiError::new(
        StatusCode::FORBIDDEN,
        format!("{principal} may not do this: it needs {needed}"),
    )
}

pub async fn require_token(
    State(state): State<AppState>,
    request: Request,
    next: Next,
) -> Response {
    if is_open(request.uri().path()) {
        return next.run(request).await;
    }
    let peer = request
        .extensions()
        .get::<axum::extract::ConnectInfo<PeerAddr>>()
        .map(|c| c.0 .0);
    let header = request
        .headers()
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .map(str::to_string);
    let basic_allowed = state.tls || peer.is_some_and(|p| p.ip().is_loopback());
    // The challenge a refusal carries: with a token set, Bearer (the console shows its own
    // login form); otherwise Basic, so that a browser asks for a SCRAM user's password.
    let challenge_basic = basic_allowed && state.token.is_none();
    // With the authorizer on, a port without a token still needs a login (a SCRAM user):
    // otherwise every local process would be a super user.
    let open = state.token.is_none() && !state.broker.config().security.authorizer.enabled;
    if let Some(refused) = crate::origin::refusal(
        request.method(),
        request.headers(),
        open,
        state.tls,
        &state.local_names,
    ) {
        tracing::warn!(peer = ?peer, method = %request.method(), path = request.uri().path(), reason = %refused.message, "admin request refused");
        return refused.into_response();
    }
    let mut request = request;
    match header.as_deref() {
        Some(h) if h.starts_with("Bearer ") => match &state.token {
            Some(token) if token.matches(h["Bearer ".len()..].trim()) => {
                request
                    .extensions_mut()
                    .insert(AdminPrincipal("admin-token".into()));
                request.extensions_mut().insert(Access::unrestricted());
                next.run(request).await
            }
            Some(_) => unauthorized("the admin token is wrong", challenge_basic),
            None if open => {
                request.extensions_mut().insert(Access::unrestricted());
                next.run(request).await
            }
            None => unauthorized(
                "no admin token is set: log in as a SCRAM user (HTTP basic)",
                challenge_basic,
            ),
        },
        Some(h) if h.starts_with("Basic ") => {
            if !basic_allowed {
                return unauthorized(
                    "a password is taken only over HTTPS (admin_tls) or from loopback",
                    false,
                );
            }
            let Some((user, password)) = basic_credentials(&h["Basic ".len()..]) else {
                return unauthorized("malformed HTTP basic credentials", challenge_basic);
            };
            let broker = Arc::clone(&state.broker);
            let checked_user = user.clone();
            let valid = tokio::task::spawn_blocking(move || {
                broker.verify_password(&checked_user, &password)
            })
            .await
            .unwrap_or(false);
            let Some(peer) = peer.filter(|_| valid) else {
                tracing::warn!(%user, peer = ?peer, "admin login failed");
                // Paced as a failed SASL login is.
                tokio::time::sleep(std::time::Duration::from_millis(100)).await;
                return unauthorized("wrong user name or password", challenge_basic);
            };
            let principal = format!("User:{user}");
            let operation = if matches!(*request.method(), Method::GET | Method::HEAD) {
                Operation::Describe
            } else {
                Operation::Alter
            };
            if !checked_per_resource(request.uri().path())
                && !state
                    .broker
                    .authz_admin(&principal, peer)
                    .cluster(operation)
            {
                return forbidden(&principal, &format!("{} on the cluster", operation.name()))
                    .into_response();
            }
            request.extensions_mut().insert(Access(Some(AdminLogin {
                principal: principal.clone(),
                peer,
            })));
            request.extensions_mut().insert(AdminPrincipal(principal));
            next.run(request).await
        }
        _ if open => {
            request.extensions_mut().insert(Access::unrestricted());
            next.run(request).await
        }
        _ => unauthorized(
            "this admin port needs a login: 'Authorization: Bearer <token>' or HTTP basic with \
             a SCRAM user",
            challenge_basic,
        ),
    }
}

/// `user:password` from HTTP basic's base64.
fn basic_credentials(encoded: &str) -> Option<(String, String)> {
    use base64::Engine;
    let bytes = base64::engine::general_purpose::STANDARD
        .decode(encoded.trim())
        .ok()?;
    let text = String::from_utf8(bytes).ok()?;
    let (user, password) = text.split_once(':')?;
    (!user.is_empty()).then(|| (user.to_string(), password.to_string()))
}

fn unauthorized(message: &str, offer_basic: bool) -> Response {
    let mut response = ApiError::new(StatusCode::UNAUTHORIZED, message).into_response();
    response.headers_mut().insert(
        header::WWW_AUTHENTICATE,
        header::HeaderValue::from_static(if offer_basic {
            "Basic realm=\"sluice\", charset=\"UTF-8\""
        } else {
            "Bearer"
        }),
    );
    response
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn topics_and_groups_are_checked_per_resource() {
        assert!(checked_per_resource("/api/topics"));
        assert!(checked_per_resource("/api/topics/a/partitions/0/messages"));
        assert!(checked_per_resource("/api/groups/g/reset-offsets"));
        assert!(!checked_per_resource("/api/topicsx"));
        assert!(!checked_per_resource("/api/overview"));
        assert!(!checked_per_resource("/api/acls"));
    }

    #[test]
    fn matches_only_the_token() {
        let t = AdminToken::new("s3cret");
        assert!(t.matches("s3cret"));
        assert!(!t.matches("s3cre"));
        assert!(!t.matches("s3cret "));
        assert!(!t.matches(""));
        assert!(!format!("{t:?}").contains("s3cret"));
    }
}
