//! SaslAuthenticate (KIP-152): one step of the SASL exchange chosen by SaslHandshake v1. PLAIN
//! takes one step; SCRAM two (RFC 5802: client-first → server-first, client-final →
//! server-final). From v1 a successful login answers the session lifetime
//! (`connections.max.reauth.ms`, KIP-368): the client re-authenticates before it runs out,
//! or the connection is closed at its next request. After a SaslHandshake v0 the same steps
//! come as bare tokens ([`bare_token`]).
//!
//! A failed login is answered SASL_AUTHENTICATION_FAILED after a pause that grows while the
//! same address keeps failing (`security::failures`), is logged (the user claimed, peer,
//! mechanism: never a password) and counted; nothing more is served on the connection (it
//! closes at the next request; Kafka closes it at once).

use std::time::Duration;

use bytes::Bytes;
use kafka_protocol::messages::{ResponseKind, SaslAuthenticateRequest, SaslAuthenticateResponse};
use kafka_protocol::ResponseError;
use sluice_wire::{Peer, PendingToken, Reply};

use super::str_bytes;
use crate::broker::Broker;
use crate::handlers::{Call, Versions};
use crate::security::audit::AuditEvent;
use crate::security::session::AuthOutcome;
use crate::security::Session;

pub const VERSIONS: Versions = Versions::new(0, 2);

/// What one step came to, with its bookkeeping (metrics, log, failure pause) done.
enum Step {
    Answer {
        bytes: Vec<u8>,
        session_lifetime_ms: i64,
    },
    Failed {
        mechanism: &'static str,
        delay: Duration,
    },
    IllegalState(String),
}

fn step(broker: &Broker, token: &[u8], peer: &Peer, session: &Session) -> Step {
    let now_ms = broker.now_ms();
    let security = &broker.config().security;
    let outcome = session.authenticate(
        token,
        &broker.user_lookup(),
        server_nonce,
        &broker.unknown_user_secret,
        now_ms,
        security.max_reauth_ms,
    );
    match outcome {
        AuthOutcome::Challenge(bytes) => Step::Answer {
            bytes,
            session_lifetime_ms: 0,
        },
        AuthOutcome::Done {
            bytes,
            principal,
            mechanism,
            session_lifetime_ms,
            reauthentication,
        } => {
            broker.metrics().authentication(true);
            tracing::debug!(peer = %peer.addr, %principal, reauthentication, "SASL login");
            broker.audit.record(AuditEvent::Authentication {
                time_ms: now_ms,
                outcome: "success",
                principal: principal.to_string(),
                mechanism,
                peer: peer.addr.to_string(),
                listener: peer.listener.to_string(),
                reason: None,
            });
            Step::Answer {
                bytes,
                session_lifetime_ms,
            }
        }
        AuthOutcome::Failed {
            mechanism,
            user,
            reason,
        } => {
            broker.metrics().authentication(false);
            let delay_ms =
                broker
                    .failed_logins
                    .failed(peer.addr.ip(), now_ms, security.failed_auth_delay_ms);
            tracing::warn!(
                peer = %peer.addr,
                listener = %peer.listener,
                mechanism,
                user = user.as_deref().unwrap_or("?"),
                %reason,
                delay_ms,
                "SASL authentication failed"
            );
            broker.audit.record(AuditEvent::Authentication {
                time_ms: now_ms,
                outcome: "failure",
                principal: format!("User:{}", user.as_deref().unwrap_or("?")),
                mechanism,
                peer: peer.addr.to_string(),
                listener: peer.listener.to_string(),
                reason: Some(reason),
            });
            Step::Failed {
                mechanism,
                delay: Duration::from_millis(delay_ms),
            }
        }
        AuthOutcome::IllegalState(reason) => Step::IllegalState(reason),
    }
}

pub fn handle(broker: &Broker, request: SaslAuthenticateRequest, call: &Call) -> Reply {
    let response = SaslAuthenticateResponse::default();
    match step(broker, &request.auth_bytes, call.peer, call.session) {
        Step::Answer {
            bytes,
            session_lifetime_ms,
        } => {
            let lifetime = if call.version >= 1 {
                session_lifetime_ms
            } else {
                0
            };
            ResponseKind::SaslAuthenticate(
                response
                    .with_auth_bytes(Bytes::from(bytes))
                    .with_session_lifetime_ms(lifetime),
            )
            .into()
        }
        Step::Failed { mechanism, delay } => {
            let body = ResponseKind::SaslAuthenticate(
                response
                    .with_error_code(ResponseError::SaslAuthenticationFailed.code())
                    .with_error_message(Some(str_bytes(&format!(
                        "Authentication failed during authentication due to invalid \
                         credentials with SASL mechanism {mechanism}"
                    )))),
            );
            Reply::Later(Box::pin(async move {
                tokio::time::sleep(delay).await;
                Some(body)
            }))
        }
        Step::IllegalState(reason) => ResponseKind::SaslAuthenticate(
            response
                .with_error_code(ResponseError::IllegalSaslState.code())
                .with_error_message(Some(str_bytes(&reason))),
        )
        .into(),
    }
}

/// One bare token of an exchange after SaslHandshake v0: the bare answer (PLAIN's success is
/// an empty one), or, for a failed login, the connection closed after the pause (v0 has no
/// way to say why).
pub fn bare_token(broker: &Broker, token: &[u8], peer: &Peer, session: &Session) -> PendingToken {
    match step(broker, token, peer, session) {
        Step::Answer { bytes, .. } => Box::pin(std::future::ready(Ok(Bytes::from(bytes)))),
        Step::Failed { delay, .. } => Box::pin(async move {
            tokio::time::sleep(delay).await;
            Err("SASL authentication failed".to_string())
        }),
        Step::IllegalState(reason) => Box::pin(std::future::ready(Err(reason))),
    }
}

/// A SCRAM server nonce: 128 random bits, printable (RFC 5802 §5.1 `r=`).
fn server_nonce() -> String {
    uuid::Uuid::new_v4().simple().to_string()
}
