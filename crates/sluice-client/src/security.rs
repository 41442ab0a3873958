//! How this process's connections reach a broker: in the clear or over TLS, with or without a
//! SASL login (PLAIN, SCRAM-SHA-256/512). Set once, before the first connection (the CLI does
//! it from its flags), and used by every async [`crate::Connection`] the process opens: the
//! CLI follows leaders and coordinators to other nodes, each on the same listener kind.

use std::path::PathBuf;
use std::sync::{Arc, OnceLock};

use bytes::Bytes;
use kafka_protocol::messages::{SaslAuthenticateRequest, SaslHandshakeRequest};
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

struct Prepared {
    tls: Option<TlsConnector>,
    sasl: Option<SaslLogin>,
}

static SECURITY: OnceLock<Arc<Prepared>> = OnceLock::new();

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
        Some(TlsConnector::from(Arc::new(config)))
    } else {
        None
    };
    SECURITY
        .set(Arc::new(Prepared {
            tls,
            sasl: security.sasl,
        }))
        .map_err(|_| ClientError::Security("the client's security is already set".into()))
}

/// `tcp` as this process connects: wrapped in TLS when configured (checking the broker's
/// certificate against `host`).
pub(crate) async fn open(tcp: TcpStream, addr: &str) -> Result<Box<dyn Stream>, ClientError> {
    let Some(connector) = SECURITY.get().and_then(|s| s.tls.clone()) else {
        return Ok(Box::new(tcp));
    };
    let host = addr
        .rsplit_once(':')
        .map_or(addr, |(host, _)| host)
        .trim_start_matches('[')
        .trim_end_matches(']');
    let name = rustls::pki_types::ServerName::try_from(host.to_string())
        .map_err(|e| ClientError::Security(format!("{host}: {e}")))?;
    let stream = connector
        .connect(name, tcp)
        .await
        .map_err(|e| ClientError::Security(format!("TLS with {addr}: {e}")))?;
    Ok(Box::new(stream))
}

/// Logs in on a new connection (after its ApiVersions) when SASL is configured.
pub(crate) async fn login(conn: &mut Connection) -> Result<(), ClientError> {
    let Some(login) = SECURITY.get().and_then(|s| s.sasl.clone()) else {
        return Ok(());
    };
    let handshake = SaslHandshakeRequest::default()
        .with_mechanism(StrBytes::from_string(login.mechanism.name().to_string()));
    let r = conn.call(&handshake, 1, 1).await?;
    if r.error_code != 0 {
        return Err(ClientError::kafka(
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
        ));
    }
    match login.mechanism {
        SaslMechanism::Plain => {
            step(
                conn,
                &login.user,
                format!("\0{}\0{}", login.user, login.password).into_bytes(),
            )
            .await?;
        }
        SaslMechanism::Scram(m) => {
            let nonce = uuid::Uuid::new_v4().simple().to_string();
            let (mut client, first) = ScramClient::new(m, &login.user, &login.password, nonce);
            let server_first = step(conn, &login.user, first).await?;
            let last = client
                .server_first(&server_first)
                .map_err(|e| ClientError::Security(e.to_string()))?;
            let server_final = step(conn, &login.user, last).await?;
            client
                .server_final(&server_final)
                .map_err(|e| ClientError::Security(format!("the broker's SCRAM signature: {e}")))?;
        }
    }
    Ok(())
}

/// One SaslAuthenticate: sends `token`, returns the broker's.
async fn step(conn: &mut Connection, user: &str, token: Vec<u8>) -> Result<Vec<u8>, ClientError> {
    let request = SaslAuthenticateRequest::default().with_auth_bytes(Bytes::from(token));
    let r = conn.call(&request, 0, 1).await?;
    if r.error_code != 0 {
        return Err(ClientError::kafka(
            format!("SASL login as {user}"),
            r.error_code,
            r.error_message.map(|m| m.to_string()),
        ));
    }
    Ok(r.auth_bytes.to_vec())
}
