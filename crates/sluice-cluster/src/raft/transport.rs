//! How nodes reach each other's internal listeners: plain TCP, or mutual TLS when the node is
//! given a certificate, its key and the cluster's authority (`internal_tls_*`).
//!
//! The internal listener takes metadata proposals, Raft votes and the brokers' calls to each
//! other: whoever may talk to it may change the cluster. Under TLS both sides present a
//! certificate that must chain to the cluster's authority, and the dialling side checks that
//! the listener's certificate names the address it dialled (its IP address or host name), as
//! Kafka's `ssl.endpoint.identification.algorithm=https` does. A connection that fails the
//! handshake is closed before a frame is read.

use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::time::Duration;

use parking_lot::{Mutex, RwLock};
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::TcpStream;
use tokio_rustls::rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName};
use tokio_rustls::rustls::server::WebPkiClientVerifier;
use tokio_rustls::rustls::{self, ClientConfig, RootCertStore, ServerConfig};
use tokio_rustls::{TlsAcceptor, TlsConnector};

/// Connections one address may have in their TLS handshake at once, and all addresses
/// together: a flood of half-open connections must neither hold a task and a socket each for
/// the handshake's 10 s without bound, nor, from one address, shut the nodes out.
const HANDSHAKES_PER_ADDRESS: usize = 32;
const HANDSHAKES: usize = 1024;

/// A connection's byte stream, plain or TLS.
pub trait Stream: AsyncRead + AsyncWrite + Unpin + Send {}
impl<T: AsyncRead + AsyncWrite + Unpin + Send> Stream for T {}

pub type InternalStream = Box<dyn Stream>;

/// How long an accepted connection may take to finish its TLS handshake.
const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);

/// Refused connections are logged at most this often (a node left without TLS retries every
/// heartbeat).
const REFUSAL_LOG_INTERVAL: Duration = Duration::from_secs(30);

/// Both sides of mutual TLS: the listener's (client certificates required) and the dialler's
/// (its certificate presented, the listener's verified).
#[derive(Clone)]
pub struct TlsConfigs {
    pub server: Arc<ServerConfig>,
    pub client: Arc<ClientConfig>,
}

impl TlsConfigs {
    /// This node's certificate `chain` (leaf first) and its `key`, presented on both sides;
    /// `authority`: what the other nodes' certificates must chain to. TLS 1.2 and 1.3 only.
    pub fn new(
        chain: Vec<CertificateDer<'static>>,
        key: PrivateKeyDer<'static>,
        authority: RootCertStore,
    ) -> Result<TlsConfigs, rustls::Error> {
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let versions: &[&rustls::SupportedProtocolVersion] =
            &[&rustls::version::TLS13, &rustls::version::TLS12];
        let authority = Arc::new(authority);
        let verifier = WebPkiClientVerifier::builder_with_provider(
            Arc::clone(&authority),
            Arc::clone(&provider),
        )
        .build()
        .map_err(|e| rustls::Error::General(e.to_string()))?;
        let server = ServerConfig::builder_with_provider(Arc::clone(&provider))
            .with_protocol_versions(versions)?
            .with_client_cert_verifier(verifier)
            .with_single_cert(chain.clone(), key.clone_key())?;
        let client = ClientConfig::builder_with_provider(provider)
            .with_protocol_versions(versions)?
            .with_root_certificates(authority)
            .with_client_auth_cert(chain, key)?;
        Ok(TlsConfigs {
            server: Arc::new(server),
            client: Arc::new(client),
        })
    }
}

#[derive(Default)]
pub struct Transport {
    tls: Option<RwLock<TlsConfigs>>,
    /// Connections in their handshake, by peer address.
    handshaking: Arc<Mutex<std::collections::HashMap<IpAddr, usize>>>,
    /// When a refused connection was last logged, and how many were not logged since.
    refusals: Mutex<(Option<tokio::time::Instant>, u64)>,
}

impl std::fmt::Debug for Transport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let kind = if self.tls.is_some() {
            "mutual TLS"
        } else {
            "plain"
        };
        write!(f, "Transport({kind})")
    }
}

impl Transport {
    /// Plain TCP, no authentication.
    pub fn plain() -> Transport {
        Transport::default()
    }

    /// Mutual TLS with these configurations.
    pub fn tls(configs: TlsConfigs) -> Transport {
        Transport {
            tls: Some(RwLock::new(configs)),
            handshaking: Arc::default(),
            refusals: Mutex::default(),
        }
    }

    pub fn is_tls(&self) -> bool {
        self.tls.is_some()
    }

    /// Replaces the certificates for connections made from now on (a certificate renewed on
    /// disk); open connections keep theirs. Ignored by a plain transport.
    pub fn replace_tls(&self, configs: TlsConfigs) {
        if let Some(tls) = &self.tls {
            *tls.write() = configs;
        }
    }

    /// The accepted `tcp` as this transport speaks it: after the TLS handshake, in which the
    /// peer must present a certificate of the cluster's authority. Refused at once when its
    /// address (or everyone) has too many connections in their handshake already.
    pub async fn accept(&self, tcp: TcpStream) -> std::io::Result<InternalStream> {
        let _ = tcp.set_nodelay(true);
        let Some(tls) = &self.tls else {
            return Ok(Box::new(tcp));
        };
        let _slot = HandshakeSlot::take(&self.handshaking, tcp.peer_addr()?.ip())?;
        let acceptor = TlsAcceptor::from(Arc::clone(&tls.read().server));
        match tokio::time::timeout(HANDSHAKE_TIMEOUT, acceptor.accept(tcp)).await {
            Ok(Ok(stream)) => Ok(Box::new(stream)),
            // Closed before a handshake: a reachability probe ([`crate::probe`]), not a refusal.
            Ok(Err(e)) if e.kind() == std::io::ErrorKind::UnexpectedEof => Err(e),
            Ok(Err(e)) => Err(std::io::Error::new(
                std::io::ErrorKind::PermissionDenied,
                format!("TLS handshake failed: {e}"),
            )),
            Err(_) => Err(std::io::Error::new(
                std::io::ErrorKind::TimedOut,
                "TLS handshake not finished in 10 s",
            )),
        }
    }

    /// A connection to the internal listener at `addr` (HOST:PORT).
    pub async fn connect(&self, addr: &str) -> std::io::Result<InternalStream> {
        let tcp = TcpStream::connect(addr).await?;
        tcp.set_nodelay(true)?;
        let Some(tls) = &self.tls else {
            return Ok(Box::new(tcp));
        };
        let name = server_name(addr)?;
        let connector = TlsConnector::from(Arc::clone(&tls.read().client));
        let stream = connector.connect(name, tcp).await.map_err(|e| {
            std::io::Error::new(
                std::io::ErrorKind::PermissionDenied,
                format!("TLS handshake with {addr} failed: {e}"),
            )
        })?;
        Ok(Box::new(stream))
    }

    /// Logs a connection the listener refused (a failed handshake, or a TLS handshake on a
    /// plain listener): the first, then at most one line per 30 s with the count since.
    pub fn log_refusal(&self, peer: SocketAddr, error: &std::io::Error) {
        let now = tokio::time::Instant::now();
        let mut refusals = self.refusals.lock();
        let (last, skipped) = &mut *refusals;
        if last.is_some_and(|t| now.duration_since(t) < REFUSAL_LOG_INTERVAL) {
            *skipped += 1;
            return;
        }
        let also = std::mem::take(skipped);
        *last = Some(now);
        drop(refusals);
        tracing::warn!(
            %peer,
            error = %error,
            refused_since_last_line = also,
            tls = self.is_tls(),
            "internal listener: connection refused"
        );
    }
}

/// One connection's place among those in their handshake, given back when dropped.
struct HandshakeSlot {
    table: Arc<Mutex<std::collections::HashMap<IpAddr, usize>>>,
    ip: IpAddr,
}

impl HandshakeSlot {
    fn take(
        table: &Arc<Mutex<std::collections::HashMap<IpAddr, usize>>>,
        ip: IpAddr,
    ) -> std::io::Result<HandshakeSlot> {
        let mut counts = table.lock();
        let total: usize = counts.values().sum();
        let mine = counts.entry(ip).or_insert(0);
        if *mine >= HANDSHAKES_PER_ADDRESS || total >= HANDSHAKES {
            return Err(std::io::Error::new(
                std::io::ErrorKind::PermissionDenied,
                format!(
                    "too many connections in their handshake ({} from this address, {total} in all)",
                    *mine
                ),
            ));
        }
        *mine += 1;
        Ok(HandshakeSlot {
            table: Arc::clone(table),
            ip,
        })
    }
}

impl Drop for HandshakeSlot {
    fn drop(&mut self) {
        let mut counts = self.table.lock();
        if let Some(n) = counts.get_mut(&self.ip) {
            *n = n.saturating_sub(1);
            if *n == 0 {
                counts.remove(&self.ip);
            }
        }
    }
}

/// The name the listener at `addr` must prove in its certificate: its IP address, or its host
/// name.
fn server_name(addr: &str) -> std::io::Result<ServerName<'static>> {
    if let Ok(socket) = addr.parse::<SocketAddr>() {
        return Ok(ServerName::IpAddress(socket.ip().into()));
    }
    let host = addr.rsplit_once(':').map_or(addr, |(host, _)| host);
    let host = host.trim_start_matches('[').trim_end_matches(']');
    if let Ok(ip) = host.parse::<IpAddr>() {
        return Ok(ServerName::IpAddress(ip.into()));
    }
    ServerName::try_from(host.to_string()).map_err(|e| {
        std::io::Error::new(
            std::io::ErrorKind::InvalidInput,
            format!("internal address {addr}: {e}"),
        )
    })
}

/// Whether a frame length read from a plain connection is really the start of a TLS
/// handshake (a record of type 22, version 3.x): a peer that uses TLS where this node does
/// not.
pub fn looks_like_tls(first_four_bytes: u32) -> bool {
    first_four_bytes >> 16 == 0x1603
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_the_listener_by_its_ip_or_host() {
        assert_eq!(
            server_name("127.0.0.2:9093").unwrap(),
            ServerName::IpAddress(IpAddr::from([127, 0, 0, 2]).into())
        );
        assert_eq!(
            server_name("[::1]:9093").unwrap(),
            ServerName::IpAddress("::1".parse::<IpAddr>().unwrap().into())
        );
        assert_eq!(
            server_name("node-1.example:9093").unwrap(),
            ServerName::try_from("node-1.example").unwrap()
        );
        assert!(server_name("bad name:1").is_err());
    }

    #[test]
    fn one_address_cannot_take_every_handshake_slot() {
        let table = Arc::default();
        let a = IpAddr::from([10, 0, 0, 1]);
        let b = IpAddr::from([10, 0, 0, 2]);
        let held: Vec<_> = (0..HANDSHAKES_PER_ADDRESS)
            .map(|_| HandshakeSlot::take(&table, a).unwrap())
            .collect();
        assert!(HandshakeSlot::take(&table, a).is_err());
        let other = HandshakeSlot::take(&table, b).unwrap();
        drop(held);
        drop(other);
        assert!(table.lock().is_empty(), "every slot is given back");
        assert!(HandshakeSlot::take(&table, a).is_ok());
    }

    #[test]
    fn recognises_a_tls_handshake_read_as_a_frame_length() {
        // A ClientHello starts 0x16 0x03 0x01 (or 0x03), then the record's length.
        assert!(looks_like_tls(u32::from_be_bytes([0x16, 0x03, 0x01, 0x02])));
        assert!(!looks_like_tls(300));
    }
}
