//! How this process's connections reach a broker: in the clear or over TLS, with or without a
//! SASL login (PLAIN, SCRAM-SHA-256/512). Set once, before the first connection (the CLI does
//! it from its flags), and used by every async [`crate::Connection`] the process opens: the
//! CLI follows leaders and coordinators to other nodes, each on the same listener kind.

use std::path::PathBuf;
use std::sync::{Arc, OnceLock};

use bytes::Bytes;
use kafka_protocol::messages::{
    SaslAuthenticateRequest, SaslAuthenticateResponse, SaslHandshakeRequest, SaslHandshakeResponse,
};
use kafka_protocol::protocol::StrBytes;
use sluice_auth::{SaslMechanism, ScramClient};
use sluice_wire::rustls::{self, pki_types::pem::PemObject, pki_types::CertificateDer};
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::TcpStream;
use tokio_rustls::TlsConnector;

use crate::connection::Connection;
use crate::error::ClientError;

/// A connection's byte stream, plain or TLS.
pub(crate) trait Stream: AsyncRead + AsyncWrite + Unpin + Send {}
impl<T: AsyncRead + AsyncWrite + Unpin + Send> Stream for T {}

/// A SASL login.
#[derive(Clone)]
pub struct SaslLogin {
    pub mechanism: SaslMechanism,
    pub user: String,
    pub password: String,
}

impl std::fmt::Debug for SaslLogin {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "SaslLogin({} as {})", self.mechanism.name(), self.user)
    }
}

/// What `configure` is given: Kafka's `security.protocol` and what it needs.
#[derive(Debug, Clone, Default)]
pub struct ClientSecurity {
    /// Over TLS (`SSL`, `SASL_SSL`).
    pub tls: bool,
    /// The PEM authorities the broker's certificate must chain to (required with TLS).
    pub tls_ca_file: Option<PathBuf>,
    /// Log in with SASL (`SASL_PLAINTEXT`, `SASL_SSL`).
    pub sasl: Option<SaslLogin>,
}

/// How one connection is secured: TLS with this configuration, a SASL login, both or neither.
/// [`configure`] sets the process's default; [`crate::Connection::connect_with`] takes one of
/// its own (a broker's follower fetching from a leader over its inter-broker listener).
#[derive(Debug, Clone, Default)]
pub struct ConnectionSecurity {
    pub tls: Option<Arc<rustls::ClientConfig>>,
    pub sasl: Option<SaslLogin>,
}

static SECURITY: OnceLock<Arc<ConnectionSecurity>> = OnceLock::new();

/// The process's default security (none until [`configure`]).
pub(crate) fn process_default() -> Arc<ConnectionSecurity> {
    SECURITY.get().cloned().unwrap_or_default()
}

/// Sets how every later connection of this process connects. Once only.
pub fn configure(security: ClientSecurity) -> Result<(), ClientError> {
    let tls = if security.tls {
        let path = security.tls_ca_file.as_ref().ok_or_else(|| {
            ClientError::Security("TLS needs the authorities to trust (a PEM CA file)".into())
        })?;
        let mut roots = rustls::RootCertStore::empty();
        let certs = CertificateDer::pem_file_iter(path)
            .map_err(|e| ClientError::Security(format!("{}: {e}", path.display())))?;
        for cert in certs {
            let cert =
                cert.map_err(|e| ClientError::Security(format!("{}: {e}", path.display())))?;
            roots
                .add(cert)
                .map_err(|e| ClientError::Security(format!("{}: {e}", path.display())))?;
        }
        let config = rustls::ClientConfig::builder_with_provider(Arc::new(
            rustls::crypto::ring::default_provider(),
        ))
        .with_protocol_versions(&[&rustls::version::TLS13, &rustls::version::TLS12])
        .map_err(|e| ClientError::Security(e.to_string()))?
        .with_root_certificates(roots)
        .with_no_client_auth();
        Some(Arc::new(config))
    } else {
        None
    };
    SECURITY
        .set(Arc::new(ConnectionSecurity {
            tls,
            sasl: security.sasl,
        }))
        .map_err(|_| ClientError::Security("the client's security is already set".into()))
}

/// `tcp` wrapped in TLS when `security` says so (checking the broker's certificate against
/// the host of `addr`).
pub(crate) async fn open(
    tcp: TcpStream,
    addr: &str,
    security: &ConnectionSecurity,
) -> Result<Box<dyn Stream>, ClientError> {
    let Some(config) = security.tls.clone() else {
        return Ok(Box::new(tcp));
    };
    let stream = TlsConnector::from(config)
        .connect(server_name(addr)?, tcp)
        .await
        .map_err(|e| ClientError::Security(format!("TLS with {addr}: {e}")))?;
    Ok(Box::new(stream))
}

/// A TLS error on a connection's first exchange as [`ClientError::Security`]: under TLS 1.3
/// the client's handshake ends before the broker checks the client's certificate, so a broker
/// that refuses it says so with an alert the first read meets, not during `open`.
pub(crate) fn refused_session(e: ClientError) -> ClientError {
    if let ClientError::Io { addr, source } = &e {
        if let Some(tls) = source
            .get_ref()
            .and_then(|inner| inner.downcast_ref::<rustls::Error>())
        {
            return ClientError::Security(format!("TLS with {addr}: {tls}"));
        }
    }
    e
}

/// The TLS settings every connection of this process uses, if it speaks TLS.
pub(crate) fn tls_config() -> Option<Arc<rustls::ClientConfig>> {
    SECURITY.get().and_then(|s| s.tls.clone())
}

/// The SASL login every connection of this process makes, if any.
pub(crate) fn sasl_login() -> Option<SaslLogin> {
    SECURITY.get().and_then(|s| s.sasl.clone())
}

/// The name the broker's certificate must carry: the host part of `addr`.
pub(crate) fn server_name(
    addr: &str,
) -> Result<rustls::pki_types::ServerName<'static>, ClientError> {
    let host = addr
        .rsplit_once(':')
        .map_or(addr, |(host, _)| host)
        .trim_start_matches('[')
        .trim_end_matches(']');
    rustls::pki_types::ServerName::try_from(host.to_string())
        .map_err(|e| ClientError::Security(format!("{host}: {e}")))
}

/// Logs in on a new connection (after its ApiVersions) when `security` has a SASL login.
pub(crate) async fn login(
    conn: &mut Connection,
    security: &ConnectionSecurity,
) -> Result<(), ClientError> {
    let Some(login) = &security.sasl else {
        return Ok(());
    };
    let r = conn.call(&handshake_request(login), 1, 1).await?;
    check_handshake(login, &r)?;
    let (mut exchange, mut token) = LoginExchange::start(login);
    loop {
        let r = conn.call(&authenticate_request(token), 0, 1).await?;
        match exchange.next(login, &r)? {
            Some(next) => token = next,
            None => return Ok(()),
        }
    }
}

/// The SaslHandshake naming `login`'s mechanism (sent at version 1).
pub(crate) fn handshake_request(login: &SaslLogin) -> SaslHandshakeRequest {
    SaslHandshakeRequest::default()
        .with_mechanism(StrBytes::from_string(login.mechanism.name().to_string()))
}

/// The broker's answer to the handshake: an error naming what it offers instead.
pub(crate) fn check_handshake(
    login: &SaslLogin,
    r: &SaslHandshakeResponse,
) -> Result<(), ClientError> {
    if r.error_code == 0 {
        return Ok(());
    }
    Err(ClientError::kafka(
        format!("SASL handshake for {}", login.mechanism.name()),
        r.error_code,
        Some(format!(
            "the broker offers {}",
            r.mechanisms
                .iter()
                .map(|m| m.as_str())
                .collect::<Vec<_>>()
                .join(", ")
        )),
    ))
}

/// One SaslAuthenticate carrying `token`.
pub(crate) fn authenticate_request(token: Vec<u8>) -> SaslAuthenticateRequest {
    SaslAuthenticateRequest::default().with_auth_bytes(Bytes::from(token))
}

/// The client's side of a SASL exchange, whatever carries it (the async or the blocking
/// connection): the first token, then the next one for each of the broker's answers.
pub(crate) enum LoginExchange {
    /// PLAIN: one token; the broker's empty answer ends it.
    Plain,
    /// SCRAM: client-first, client-final, then the broker's signature is checked.
    Scram {
        client: Box<ScramClient>,
        sent_final: bool,
    },
}

impl LoginExchange {
    /// The exchange and its first token.
    pub(crate) fn start(login: &SaslLogin) -> (LoginExchange, Vec<u8>) {
        match login.mechanism {
            SaslMechanism::Plain => (
                LoginExchange::Plain,
                format!("\0{}\0{}", login.user, login.password).into_bytes(),
            ),
            SaslMechanism::Scram(m) => {
                let nonce = uuid::Uuid::new_v4().simple().to_string();
                let (client, first) = ScramClient::new(m, &login.user, &login.password, nonce);
                (
                    LoginExchange::Scram {
                        client: Box::new(client),
                        sent_final: false,
                    },
                    first,
                )
            }
        }
    }

    /// Takes the broker's answer to the last token: the next token, or `None` once logged in.
    pub(crate) fn next(
        &mut self,
        login: &SaslLogin,
        r: &SaslAuthenticateResponse,
    ) -> Result<Option<Vec<u8>>, ClientError> {
        if r.error_code != 0 {
            return Err(ClientError::kafka(
                format!("SASL login as {}", login.user),
                r.error_code,
                r.error_message.as_ref().map(|m| m.to_string()),
            ));
        }
        match self {
            LoginExchange::Plain => Ok(None),
            LoginExchange::Scram { client, sent_final } if !*sent_final => {
                *sent_final = true;
                client
                    .server_first(&r.auth_bytes)
                    .map(Some)
                    .map_err(|e| ClientError::Security(e.to_string()))
            }
            LoginExchange::Scram { client, .. } => {
                client.server_final(&r.auth_bytes).map_err(|e| {
                    ClientError::Security(format!("the broker's SCRAM signature: {e}"))
                })?;
                Ok(None)
            }
        }
    }
}
