//! The admin token: when set, every API call and `/metrics` needs
//! `Authorization: Bearer <token>`. The console's static files and `/health` stay open (they
//! hold no data). Tokens are compared as SHA-256 digests in constant time, so neither the
//! content nor the length of the configured token leaks through timing.

use axum::extract::{Request, State};
use axum::http::{header, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use sha2::{Digest, Sha256};
use subtle::ConstantTimeEq;

use crate::error::ApiError;
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

/// Paths that answer without a token.
fn is_open(path: &str) -> bool {
    path == "/" || path == "/health" || path.starts_with("/assets/")
}

pub async fn require_token(
    State(state): State<AppState>,
    request: Request,
    next: Next,
) -> Response {
    let Some(token) = &state.token else {
        return next.run(request).await;
    };
    if is_open(request.uri().path()) {
        return next.run(request).await;
    }
    let presented = request
        .headers()
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "));
    match presented {
        Some(p) if token.matches(p.trim()) => next.run(request).await,
        Some(_) => unauthorized("the admin token is wrong"),
        None => unauthorized("this admin port needs a token: send 'Authorization: Bearer <token>'"),
    }
}

fn unauthorized(message: &str) -> Response {
    let mut response = ApiError::new(StatusCode::UNAUTHORIZED, message).into_response();
    response.headers_mut().insert(
        header::WWW_AUTHENTICATE,
        header::HeaderValue::from_static("Bearer"),
    );
    response
}

#[cfg(test)]
mod tests {
    use super::*;

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
