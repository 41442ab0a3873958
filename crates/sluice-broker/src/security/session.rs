//! One connection's authentication: who it is, where its SASL exchange stands, and until when
//! its login holds (KIP-368). The connection loop calls into it in request order, so the lock
//! is never contended; it exists because a request's handler gets the session by reference.

use std::fmt;

use kafka_protocol::messages::ApiKey;
use parking_lot::Mutex;
use sluice_auth::{SaslMechanism, ScramCredential, ScramMechanism, ScramServer, ScramStep};
use sluice_wire::Peer;

use super::{SecurityConfig, SecurityProtocol};

/// Who is asking (Kafka's `KafkaPrincipal`; only `User` principals exist here).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Principal {
    pub name: String,
}

impl Principal {
    /// Kafka's name for an unauthenticated client (PLAINTEXT, SSL without a certificate).
    pub const ANONYMOUS: &'static str = "ANONYMOUS";

    pub fn user(name: impl Into<String>) -> Principal {
        Principal { name: name.into() }
    }
}

impl fmt::Display for Principal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "User:{}", self.name)
    }
}

/// Where a SASL connection's login stands.
enum Stage {
    /// Waiting for SaslHandshake (the first login, or a re-authentication).
    Start,
    /// Handshake done: the next SaslAuthenticate starts this mechanism's exchange.
    Handshaken(SaslMechanism),
    /// A SCRAM exchange waits for the client's final message.
    Scram(Box<ScramServer>, ScramMechanism),
    /// The login failed: nothing more is served on this connection.
    Failed,
}

struct State {
    principal: Option<Principal>,
    stage: Stage,
    /// The exchange follows a SaslHandshake v0: its tokens come bare, not in
    /// SaslAuthenticate requests.
    bare_tokens: bool,
    /// When the login stops holding (ms on the broker's clock); `None`: never.
    expires_at_ms: Option<i64>,
}

pub struct Session {
    protocol: SecurityProtocol,
    /// Authenticated when it opened and for good (a PLAINTEXT or SSL listener with a
    /// principal): every request passes without the lock or the clock.
    open: bool,
    state: Mutex<State>,
    /// Set with `State::bare_tokens` (read on every frame without the lock).
    bare_tokens: std::sync::atomic::AtomicBool,
    /// Until when (ms on the broker's clock) the connection is muted after a throttled
    /// answer (KIP-219); 0: not muted.
    muted_until_ms: std::sync::Arc<std::sync::atomic::AtomicI64>,
}

impl fmt::Debug for Session {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Session({:?}, {:?})", self.protocol, self.principal())
    }
}

/// How a handshake was refused.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum HandshakeRefusal {
    /// Not a SASL listener, or a handshake in the middle of an exchange (ILLEGAL_SASL_STATE).
    IllegalState(String),
    /// The mechanism is not enabled (UNSUPPORTED_SASL_MECHANISM).
    Unsupported,
}

/// What one SaslAuthenticate step came to.
#[derive(Debug)]
pub enum AuthOutcome {
    /// Send these bytes; the exchange goes on.
    Challenge(Vec<u8>),
    /// Logged in: send these bytes (empty for PLAIN) and the session lifetime.
    Done {
        bytes: Vec<u8>,
        principal: Principal,
        mechanism: &'static str,
        session_lifetime_ms: i64,
        reauthentication: bool,
    },
    /// Wrong user or password, or a malformed message: SASL_AUTHENTICATION_FAILED, then the
    /// connection closes. `user` is who the client claimed to be, for the log.
    Failed {
        mechanism: &'static str,
        user: Option<String>,
        reason: String,
    },
    /// No handshake before it (ILLEGAL_SASL_STATE).
    IllegalState(String),
}

/// The SCRAM users a login is checked against.
pub trait UserCredentials {
    fn scram(&self, user: &str, mechanism: ScramMechanism) -> Option<ScramCredential>;
    /// Any of the user's credentials (a PLAIN login is checked against it).
    fn any(&self, user: &str) -> Option<ScramCredential>;
}

impl Session {
    /// A new connection's session. Without SASL the connection is authenticated at once: as
    /// its certificate's (mapped) subject when the client presented one, else as ANONYMOUS.
    pub fn open(peer: &Peer, config: &SecurityConfig) -> Session {
        let listener = config.listener(&peer.listener);
        let protocol = listener.map_or(SecurityProtocol::SaslPlaintext, |l| l.protocol);
        let principal = if listener.is_none() {
            // A listener the settings do not name serves no one (a bug if it happens).
            tracing::error!(listener = %peer.listener, "a connection on an unknown listener");
            None
        } else if protocol.uses_sasl() {
            None
        } else if peer.client_certificate.is_some() {
            // A certificate whose subject cannot be read or mapped authenticates no one.
            let principal = certificate_principal(peer, config);
            if let Some(p) = &principal {
                tracing::debug!(peer = %peer.addr, principal = %p, "TLS client certificate");
            }
            principal
        } else {
            Some(Principal::user(Principal::ANONYMOUS))
        };
        Session {
            protocol,
            open: !protocol.uses_sasl() && principal.is_some(),
            state: Mutex::new(State {
                principal,
                stage: if listener.is_none() {
                    Stage::Failed
                } else {
                    Stage::Start
                },
                bare_tokens: false,
                expires_at_ms: None,
            }),
            bare_tokens: Default::default(),
            muted_until_ms: Default::default(),
        }
    }

    /// Mutes the connection until `until_ms` (a later mute wins).
    pub fn mute_until(&self, until_ms: i64) {
        self.muted_until_ms
            .fetch_max(until_ms, std::sync::atomic::Ordering::Relaxed);
    }

    /// What mutes this connection, for an answer completed after the request's handler
    /// returned (a long-polling fetch).
    pub fn mute_handle(&self) -> std::sync::Arc<std::sync::atomic::AtomicI64> {
        std::sync::Arc::clone(&self.muted_until_ms)
    }

    /// How long the connection stays muted from `now_ms` (one atomic load when it is not).
    pub fn muted_for(&self, now_ms: impl FnOnce() -> i64) -> Option<std::time::Duration> {
        let until = self
            .muted_until_ms
            .load(std::sync::atomic::Ordering::Relaxed);
        if until == 0 {
            return None;
        }
        let left = until - now_ms();
        if left <= 0 {
            self.muted_until_ms
                .compare_exchange(
                    until,
                    0,
                    std::sync::atomic::Ordering::Relaxed,
                    std::sync::atomic::Ordering::Relaxed,
                )
                .ok();
            return None;
        }
        Some(std::time::Duration::from_millis(left.unsigned_abs()))
    }

    /// Until a SASL login, frames are capped at Kafka's `sasl.server.max.receive.size`.
    pub fn frame_limit(&self) -> Option<usize> {
        const BEFORE_LOGIN: usize = 512 * 1024;
        (self.protocol.uses_sasl() && self.state.lock().principal.is_none()).then_some(BEFORE_LOGIN)
    }

    pub fn principal(&self) -> Option<Principal> {
        self.state.lock().principal.clone()
    }

    /// Whether a request of `api` may be served now; `Err` says why the connection closes.
    /// Before a SASL login only ApiVersions and the SASL requests pass (as in Kafka, another
    /// request closes the connection); after it, everything until the login expires.
    pub fn admit(&self, api: ApiKey, now_ms: impl FnOnce() -> i64) -> Result<(), String> {
        if self.open {
            return Ok(());
        }
        let state = self.state.lock();
        if matches!(state.stage, Stage::Failed) {
            return Err("authentication failed".into());
        }
        if matches!(
            api,
            ApiKey::ApiVersions | ApiKey::SaslHandshake | ApiKey::SaslAuthenticate
        ) {
            return Ok(());
        }
        if state.principal.is_none() {
            return Err(if self.protocol.uses_sasl() {
                format!(
                    "{api:?} before SASL authentication on a {} listener",
                    self.protocol.name()
                )
            } else {
                "the client certificate maps to no principal".to_string()
            });
        }
        match state.expires_at_ms {
            Some(at) if now_ms() >= at => Err(format!(
                "{api:?} after the SASL session expired (connections.max.reauth.ms); the client \
                 did not re-authenticate"
            )),
            _ => Ok(()),
        }
    }

    /// SaslHandshake: choose the mechanism of the next exchange. After a v0 handshake
    /// (`bare_tokens`) the exchange's tokens come as bare frames (KIP-43's first form).
    pub fn handshake(
        &self,
        mechanism: &str,
        enabled: &[SaslMechanism],
        bare_tokens: bool,
    ) -> Result<(), HandshakeRefusal> {
        let mut state = self.state.lock();
        if !self.protocol.uses_sasl() {
            return Err(HandshakeRefusal::IllegalState(format!(
                "SaslHandshake on a {} listener, which has no SASL",
                self.protocol.name()
            )));
        }
        if !matches!(state.stage, Stage::Start) {
            return Err(HandshakeRefusal::IllegalState(
                "SaslHandshake in the middle of an authentication".into(),
            ));
        }
        let Some(mechanism) = SaslMechanism::from_name(mechanism).filter(|m| enabled.contains(m))
        else {
            return Err(HandshakeRefusal::Unsupported);
        };
        state.stage = Stage::Handshaken(mechanism);
        state.bare_tokens = bare_tokens;
        self.bare_tokens
            .store(bare_tokens, std::sync::atomic::Ordering::Relaxed);
        Ok(())
    }

    /// Whether the next frame is a bare SASL token (an exchange after a v0 handshake).
    pub fn expects_bare_token(&self) -> bool {
        if !self.bare_tokens.load(std::sync::atomic::Ordering::Relaxed) {
            return false;
        }
        let state = self.state.lock();
        state.bare_tokens && matches!(state.stage, Stage::Handshaken(_) | Stage::Scram(..))
    }

    /// SaslAuthenticate: one step of the exchange. `server_nonce` is fresh randomness for a
    /// SCRAM exchange's first step; `unknown_user_secret` the broker's secret that makes an
    /// unknown user's challenge look like a real one's (the same salt every time);
    /// `max_reauth_ms` the session lifetime to grant.
    pub fn authenticate(
        &self,
        token: &[u8],
        users: &dyn UserCredentials,
        server_nonce: impl FnOnce() -> String,
        unknown_user_secret: &[u8],
        now_ms: i64,
        max_reauth_ms: Option<i64>,
    ) -> AuthOutcome {
        let mut state = self.state.lock();
        let stage = std::mem::replace(&mut state.stage, Stage::Failed);
        let (mechanism, claimed, step) = match stage {
            Stage::Handshaken(SaslMechanism::Plain) => {
                let login = match sluice_auth::parse_plain(token) {
                    Ok(login) => login,
                    Err(e) => {
                        return AuthOutcome::Failed {
                            mechanism: "PLAIN",
                            user: None,
                            reason: e.to_string(),
                        }
                    }
                };
                // An unknown user costs the same key derivation as a known one, so the
                // answer's timing does not tell which users exist.
                let ok = off_the_workers(|| match users.any(&login.user) {
                    Some(c) => c.verifies_password(&login.password),
                    None => {
                        let _ = unknown_user_plain().verifies_password(&login.password);
                        false
                    }
                });
                if !ok {
                    return AuthOutcome::Failed {
                        mechanism: "PLAIN",
                        user: Some(login.user.clone()),
                        reason: "invalid user name or password".into(),
                    };
                }
                (
                    "PLAIN",
                    Some(login.user.clone()),
                    Ok(ScramStep::Done {
                        user: login.user.clone(),
                        server_final: Vec::new(),
                    }),
                )
            }
            Stage::Handshaken(SaslMechanism::Scram(m)) => {
                let mut server = Box::new(
                    ScramServer::new(m, server_nonce())
                        .with_unknown_user_secret(unknown_user_secret),
                );
                let step = server.step(token, &|user| users.scram(user, m));
                if let Ok(ScramStep::Challenge(bytes)) = step {
                    state.stage = Stage::Scram(server, m);
                    return AuthOutcome::Challenge(bytes);
                }
                (m.name(), None, step)
            }
            Stage::Scram(mut server, m) => {
                let claimed = server.user().map(str::to_owned);
                let step = server.step(token, &|user| users.scram(user, m));
                (m.name(), claimed, step)
            }
            Stage::Start => {
                state.stage = Stage::Start;
                return AuthOutcome::IllegalState(
                    "SaslAuthenticate without a SaslHandshake before it".into(),
                );
            }
            Stage::Failed => {
                return AuthOutcome::IllegalState("the authentication already failed".into())
            }
        };
        match step {
            Ok(ScramStep::Done { user, server_final }) => {
                let principal = Principal::user(user);
                let reauthentication = state.principal.is_some();
                if let Some(before) = state.principal.as_ref().filter(|p| **p != principal) {
                    return AuthOutcome::Failed {
                        mechanism,
                        user: Some(principal.name.clone()),
                        reason: format!(
                            "re-authentication as {principal} on a connection of {before}"
                        ),
                    };
                }
                state.principal = Some(principal.clone());
                state.bare_tokens = false;
                self.bare_tokens
                    .store(false, std::sync::atomic::Ordering::Relaxed);
                state.expires_at_ms = max_reauth_ms.map(|ms| now_ms.saturating_add(ms));
                state.stage = Stage::Start;
                AuthOutcome::Done {
                    bytes: server_final,
                    principal,
                    mechanism,
                    session_lifetime_ms: max_reauth_ms.unwrap_or(0),
                    reauthentication,
                }
            }
            // A challenge after the final message cannot happen: the exchange has two steps.
            Ok(ScramStep::Challenge(_)) => AuthOutcome::Failed {
                mechanism,
                user: claimed,
                reason: "unexpected SCRAM step".into(),
            },
            Err(e) => AuthOutcome::Failed {
                mechanism,
                user: claimed,
                reason: e.to_string(),
            },
        }
    }
}

/// Runs a PLAIN login's key derivation (PBKDF2: thousands of hash rounds, milliseconds) as
/// blocking work when on the multi-threaded runtime: the worker hands its other connections to
/// another thread meanwhile, so a burst of PLAIN logins (every client reconnecting after a
/// restart) does not hold up everyone's requests. SCRAM needs no derivation on the broker.
fn off_the_workers<T>(derive: impl FnOnce() -> T) -> T {
    let multi_threaded = tokio::runtime::Handle::try_current()
        .is_ok_and(|h| h.runtime_flavor() == tokio::runtime::RuntimeFlavor::MultiThread);
    if multi_threaded {
        tokio::task::block_in_place(derive)
    } else {
        derive()
    }
}

/// What a PLAIN login of an unknown user is checked against: a credential of the CLI's
/// default strength that no password matches in practice.
fn unknown_user_plain() -> &'static ScramCredential {
    static DUMMY: std::sync::OnceLock<ScramCredential> = std::sync::OnceLock::new();
    DUMMY.get_or_init(|| ScramCredential {
        mechanism: ScramMechanism::Sha512,
        salt: vec![0; sluice_auth::SALT_BYTES],
        stored_key: vec![0; 64],
        server_key: vec![0; 64],
        iterations: sluice_auth::DEFAULT_ITERATIONS,
    })
}

/// The principal a TLS client certificate names: its subject, through the mapping rules.
fn certificate_principal(peer: &Peer, config: &SecurityConfig) -> Option<Principal> {
    let der = peer.client_certificate.as_ref()?;
    match sluice_auth::subject_dn(der) {
        Ok(dn) => match &config.principal_mapper {
            None => Some(Principal::user(dn)),
            // As in Kafka, a subject no rule maps is refused (DEFAULT as the last rule keeps
            // every subject).
            Some(mapper) => match mapper.try_map(&dn) {
                Some(name) => Some(Principal::user(name)),
                None => {
                    tracing::warn!(peer = %peer.addr, subject = %dn, "no tls_principal_mapping_rules rule matches the client certificate");
                    None
                }
            },
        },
        Err(e) => {
            tracing::warn!(peer = %peer.addr, error = %e, "cannot read the client certificate's subject");
            None
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)] // test code: a failed unwrap is a failed test

    use std::collections::BTreeMap;
    use std::sync::Arc;

    use sluice_auth::ScramClient;

    use super::*;
    use crate::security::{default_mechanisms, ListenerConfig};

    struct Users(BTreeMap<String, Vec<ScramCredential>>);

    impl UserCredentials for Users {
        fn scram(&self, user: &str, m: ScramMechanism) -> Option<ScramCredential> {
            self.0.get(user)?.iter().find(|c| c.mechanism == m).cloned()
        }
        fn any(&self, user: &str) -> Option<ScramCredential> {
            self.0.get(user)?.first().cloned()
        }
    }

    fn users() -> Users {
        let mut map = BTreeMap::new();
        for (name, password) in [("alice", "alice-pw"), ("bob", "bob-pw")] {
            map.insert(
                name.to_string(),
                vec![
                    ScramCredential::from_password(
                        ScramMechanism::Sha256,
                        password,
                        b"salt-1",
                        4096,
                    ),
                    ScramCredential::from_password(
                        ScramMechanism::Sha512,
                        password,
                        b"salt-2",
                        4096,
                    ),
                ],
            );
        }
        Users(map)
    }

    fn config() -> SecurityConfig {
        let listener = |name: &str, protocol| ListenerConfig {
            name: name.into(),
            protocol,
            advertised_host: "h".into(),
            advertised_port: 1,
        };
        SecurityConfig {
            listeners: vec![
                listener("PLAINTEXT", SecurityProtocol::Plaintext),
                listener("SASL_PLAINTEXT", SecurityProtocol::SaslPlaintext),
            ],
            ..SecurityConfig::default()
        }
    }

    fn session(listener: &str) -> Session {
        let mut peer = Peer::plaintext("127.0.0.1:5000".parse().unwrap());
        peer.listener = Arc::from(listener);
        Session::open(&peer, &config())
    }

    fn plain(s: &Session, user: &str, password: &str, now_ms: i64) -> AuthOutcome {
        s.handshake("PLAIN", &default_mechanisms(), false).unwrap();
        let token = format!("\0{user}\0{password}");
        s.authenticate(
            token.as_bytes(),
            &users(),
            || unreachable!(),
            b"k",
            now_ms,
            Some(1_000),
        )
    }

    #[test]
    fn a_plaintext_connection_is_anonymous_and_served_at_once() {
        let s = session("PLAINTEXT");
        assert_eq!(s.principal(), Some(Principal::user("ANONYMOUS")));
        assert!(s.admit(ApiKey::Produce, || 0).is_ok());
        assert!(matches!(
            s.handshake("PLAIN", &default_mechanisms(), false),
            Err(HandshakeRefusal::IllegalState(_))
        ));
    }

    #[test]
    fn a_sasl_connection_serves_only_the_handshake_until_it_logs_in() {
        let s = session("SASL_PLAINTEXT");
        assert!(s.admit(ApiKey::ApiVersions, || 0).is_ok());
        assert!(s.admit(ApiKey::SaslHandshake, || 0).is_ok());
        assert!(s
            .admit(ApiKey::Metadata, || 0)
            .unwrap_err()
            .contains("before SASL"));
        assert_eq!(
            s.handshake("GSSAPI", &default_mechanisms(), false),
            Err(HandshakeRefusal::Unsupported)
        );
        let AuthOutcome::Done {
            principal,
            session_lifetime_ms,
            reauthentication,
            ..
        } = plain(&s, "alice", "alice-pw", 10)
        else {
            panic!("PLAIN login failed");
        };
        assert_eq!(principal.to_string(), "User:alice");
        assert_eq!((session_lifetime_ms, reauthentication), (1_000, false));
        assert!(s.admit(ApiKey::Metadata, || 500).is_ok());
        // The login holds 1 s: then only a re-authentication is served.
        assert!(s
            .admit(ApiKey::Metadata, || 1_010)
            .unwrap_err()
            .contains("expired"));
        assert!(matches!(
            plain(&s, "alice", "alice-pw", 1_020),
            AuthOutcome::Done {
                reauthentication: true,
                ..
            }
        ));
        assert!(s.admit(ApiKey::Metadata, || 1_500).is_ok());
    }

    #[test]
    fn a_wrong_password_fails_and_nothing_more_is_served() {
        let s = session("SASL_PLAINTEXT");
        let AuthOutcome::Failed {
            mechanism, user, ..
        } = plain(&s, "alice", "nope", 0)
        else {
            panic!("a wrong password must fail");
        };
        assert_eq!((mechanism, user.as_deref()), ("PLAIN", Some("alice")));
        assert!(s.admit(ApiKey::ApiVersions, || 0).is_err());
        assert!(s.admit(ApiKey::SaslHandshake, || 0).is_err());
    }

    #[test]
    fn a_reauthentication_cannot_change_the_principal() {
        let s = session("SASL_PLAINTEXT");
        assert!(matches!(
            plain(&s, "alice", "alice-pw", 0),
            AuthOutcome::Done { .. }
        ));
        let AuthOutcome::Failed { reason, .. } = plain(&s, "bob", "bob-pw", 10) else {
            panic!("switching principals must fail");
        };
        assert!(
            reason.contains("User:bob") && reason.contains("User:alice"),
            "{reason}"
        );
        assert!(s.admit(ApiKey::Metadata, || 20).is_err());
    }

    #[test]
    fn a_scram_exchange_runs_over_two_authenticate_requests() {
        for m in [ScramMechanism::Sha256, ScramMechanism::Sha512] {
            let s = session("SASL_PLAINTEXT");
            s.handshake(m.name(), &default_mechanisms(), false).unwrap();
            let (mut client, first) = ScramClient::new(m, "bob", "bob-pw", "client-nonce".into());
            let users = users();
            let AuthOutcome::Challenge(server_first) =
                s.authenticate(&first, &users, || "server-nonce".into(), b"k", 0, None)
            else {
                panic!("SCRAM's first step is a challenge");
            };
            // Nothing but the exchange is served in between.
            assert!(s.admit(ApiKey::Metadata, || 0).is_err());
            let last = client.server_first(&server_first).unwrap();
            let AuthOutcome::Done {
                bytes,
                principal,
                session_lifetime_ms,
                ..
            } = s.authenticate(&last, &users, || unreachable!(), b"k", 0, None)
            else {
                panic!("SCRAM login failed");
            };
            client.server_final(&bytes).unwrap();
            assert_eq!((principal.name.as_str(), session_lifetime_ms), ("bob", 0));
            assert!(s.admit(ApiKey::Metadata, || i64::MAX).is_ok());
        }
    }

    #[test]
    fn a_failed_scram_login_names_the_user_it_claimed() {
        let s = session("SASL_PLAINTEXT");
        let m = ScramMechanism::Sha512;
        s.handshake(m.name(), &default_mechanisms(), false).unwrap();
        let (mut client, first) = ScramClient::new(m, "bob", "not-bobs", "cn".into());
        let users = users();
        let AuthOutcome::Challenge(server_first) =
            s.authenticate(&first, &users, || "sn".into(), b"k", 0, None)
        else {
            panic!("SCRAM's first step is a challenge");
        };
        let last = client.server_first(&server_first).unwrap();
        let AuthOutcome::Failed {
            mechanism, user, ..
        } = s.authenticate(&last, &users, || unreachable!(), b"k", 0, None)
        else {
            panic!("a wrong password must fail");
        };
        assert_eq!((mechanism, user.as_deref()), ("SCRAM-SHA-512", Some("bob")));
    }

    #[test]
    fn after_a_v0_handshake_the_exchange_comes_as_bare_tokens_until_it_ends() {
        let s = session("SASL_PLAINTEXT");
        assert!(!s.expects_bare_token());
        s.handshake("PLAIN", &default_mechanisms(), true).unwrap();
        assert!(s.expects_bare_token());
        let outcome = s.authenticate(
            b"bob\0bob\0bob-pw",
            &users(),
            || unreachable!(),
            b"k",
            0,
            None,
        );
        assert!(matches!(outcome, AuthOutcome::Done { ref bytes, .. } if bytes.is_empty()));
        assert!(!s.expects_bare_token(), "requests follow the login");
        assert!(s.admit(ApiKey::Metadata, || 0).is_ok());
    }

    #[test]
    fn authenticate_without_a_handshake_is_an_illegal_state_and_may_be_followed_by_one() {
        let s = session("SASL_PLAINTEXT");
        assert!(matches!(
            s.authenticate(b"x", &users(), || unreachable!(), b"k", 0, None),
            AuthOutcome::IllegalState(_)
        ));
        assert!(matches!(
            plain(&s, "bob", "bob-pw", 0),
            AuthOutcome::Done { .. }
        ));
    }
}
