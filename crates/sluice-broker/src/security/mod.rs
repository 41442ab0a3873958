//! Who a connection is: its listener's security protocol, its TLS client certificate, its
//! SASL login (PLAIN, SCRAM-SHA-256/512), and the SCRAM users the logins are checked against.
//!
//! ```text
//!  accept ─► TLS handshake (SSL, SASL_SSL) ─► Session::open ─┬─ PLAINTEXT/SSL: authenticated at once
//!                                                            └─ SASL_*: only ApiVersions and
//!                                SaslHandshake ─► SaslAuthenticate … ─► authenticated (until the
//!                                session lifetime of KIP-368 runs out: then re-authenticate)
//! ```
//!
//! The exchanges themselves are `sluice_auth`'s state machines; this module keeps their state
//! per connection, looks the credentials up, and paces failed logins.

pub mod acls;
pub mod audit;
mod audit_gap;
mod audit_topic;
pub mod authorizer;
pub mod credentials;
pub mod failures;
pub mod log_budget;
pub mod session;

use std::sync::Arc;

use sluice_auth::{PrincipalMapper, SaslMechanism, ScramMechanism};

pub use authorizer::{AuthorizerConfig, Authz};
pub use session::{Principal, Session};

/// A listener's security protocol (Kafka's `listener.security.protocol.map` values).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SecurityProtocol {
    Plaintext,
    Ssl,
    SaslPlaintext,
    SaslSsl,
}

impl SecurityProtocol {
    pub fn parse(name: &str) -> Option<SecurityProtocol> {
        Some(match name {
            "PLAINTEXT" => SecurityProtocol::Plaintext,
            "SSL" => SecurityProtocol::Ssl,
            "SASL_PLAINTEXT" => SecurityProtocol::SaslPlaintext,
            "SASL_SSL" => SecurityProtocol::SaslSsl,
            _ => return None,
        })
    }

    pub fn name(self) -> &'static str {
        match self {
            SecurityProtocol::Plaintext => "PLAINTEXT",
            SecurityProtocol::Ssl => "SSL",
            SecurityProtocol::SaslPlaintext => "SASL_PLAINTEXT",
            SecurityProtocol::SaslSsl => "SASL_SSL",
        }
    }

    pub fn uses_tls(self) -> bool {
        matches!(self, SecurityProtocol::Ssl | SecurityProtocol::SaslSsl)
    }

    pub fn uses_sasl(self) -> bool {
        matches!(
            self,
            SecurityProtocol::SaslPlaintext | SecurityProtocol::SaslSsl
        )
    }
}

/// One Kafka listener as clients see it: its name, protocol and advertised address.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ListenerConfig {
    pub name: String,
    pub protocol: SecurityProtocol,
    pub advertised_host: String,
    pub advertised_port: i32,
}

/// The broker's authentication settings.
#[derive(Clone)]
pub struct SecurityConfig {
    /// Every Kafka listener; the first is the one [`crate::config::BrokerConfig`]'s
    /// `advertised_host` names.
    pub listeners: Vec<ListenerConfig>,
    /// `sasl.enabled.mechanisms`.
    pub sasl_mechanisms: Vec<SaslMechanism>,
    /// `ssl.principal.mapping.rules`: client certificate subject → principal name.
    pub principal_mapper: Option<Arc<PrincipalMapper>>,
    /// `connections.max.reauth.ms` (KIP-368): a SASL session lasts this long, then the client
    /// must authenticate again on the same connection or be disconnected. `None`: for ever.
    pub max_reauth_ms: Option<i64>,
    /// `connection.failed.authentication.delay.ms`: a failed login is answered this late
    /// (more for an address that keeps failing, see [`failures`]).
    pub failed_auth_delay_ms: u64,
    /// Where the audit log goes (logins, user changes); `None`: no audit log.
    pub audit_log_file: Option<std::path::PathBuf>,
    /// A topic the audit events also go to, one record each; `None`: none.
    pub audit_log_topic: Option<String>,
    /// ACL enforcement and super users.
    pub authorizer: AuthorizerConfig,
}

impl std::fmt::Debug for SecurityConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SecurityConfig")
            .field("listeners", &self.listeners)
            .field(
                "sasl_mechanisms",
                &self
                    .sasl_mechanisms
                    .iter()
                    .map(|m| m.name())
                    .collect::<Vec<_>>(),
            )
            .field("principal_mapping", &self.principal_mapper.is_some())
            .field("max_reauth_ms", &self.max_reauth_ms)
            .field("audit_log_file", &self.audit_log_file)
            .field("audit_log_topic", &self.audit_log_topic)
            .field("authorizer", &self.authorizer)
            .finish()
    }
}

impl Default for SecurityConfig {
    fn default() -> Self {
        SecurityConfig {
            listeners: vec![ListenerConfig {
                name: "PLAINTEXT".into(),
                protocol: SecurityProtocol::Plaintext,
                advertised_host: "127.0.0.1".into(),
                advertised_port: 9092,
            }],
            sasl_mechanisms: default_mechanisms(),
            principal_mapper: None,
            max_reauth_ms: None,
            failed_auth_delay_ms: 100,
            audit_log_file: None,
            audit_log_topic: None,
            authorizer: AuthorizerConfig::default(),
        }
    }
}

/// SCRAM first (the password never crosses the wire), PLAIN for clients that only have it.
pub fn default_mechanisms() -> Vec<SaslMechanism> {
    vec![
        SaslMechanism::Scram(ScramMechanism::Sha256),
        SaslMechanism::Scram(ScramMechanism::Sha512),
        SaslMechanism::Plain,
    ]
}

impl SecurityConfig {
    pub fn listener(&self, name: &str) -> Option<&ListenerConfig> {
        self.listeners.iter().find(|l| l.name == name)
    }
}
