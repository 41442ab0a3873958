//! HTTPS for the admin port: TCP connections accepted here, their TLS handshakes run on
//! tasks of their own (bounded to 10 s, so a client that stalls its handshake holds up no
//! one), and the finished ones handed to axum. The certificate can be replaced while running
//! ([`AdminTls::replace`]); each handshake takes the one current when it starts.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use tokio::net::{TcpListener, TcpStream};
use tokio::sync::mpsc;
use tokio_rustls::rustls::ServerConfig;
use tokio_rustls::server::TlsStream;
use tokio_rustls::TlsAcceptor;
use tokio_util::sync::CancellationToken;

const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);
/// Handshakes done and not yet taken by axum, at most.
const READY: usize = 64;

/// The admin port's TLS configuration, replaceable (a renewed certificate).
pub struct AdminTls(std::sync::RwLock<TlsAcceptor>);

impl std::fmt::Debug for AdminTls {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("AdminTls")
    }
}

impl AdminTls {
    pub fn new(config: Arc<ServerConfig>) -> AdminTls {
        AdminTls(std::sync::RwLock::new(Self::acceptor(config)))
    }

    /// Handshakes from now on use `config`.
    pub fn replace(&self, config: Arc<ServerConfig>) {
        let mut current = self.0.write().unwrap_or_else(|e| e.into_inner());
        *current = Self::acceptor(config);
    }

    fn current(&self) -> TlsAcceptor {
        self.0.read().unwrap_or_else(|e| e.into_inner()).clone()
    }

    /// The listeners' configuration, speaking HTTP/1.1 (ALPN).
    fn acceptor(config: Arc<ServerConfig>) -> TlsAcceptor {
        let mut config = (*config).clone();
        config.alpn_protocols = vec![b"http/1.1".to_vec()];
        TlsAcceptor::from(Arc::new(config))
    }
}

pub struct TlsListener {
    ready: mpsc::Receiver<(TlsStream<TcpStream>, SocketAddr)>,
    local: SocketAddr,
}

impl TlsListener {
    /// Starts accepting on `listener` until `shutdown`.
    pub fn new(
        listener: TcpListener,
        tls: Arc<AdminTls>,
        shutdown: CancellationToken,
    ) -> std::io::Result<TlsListener> {
        let local = listener.local_addr()?;
        let (sender, ready) = mpsc::channel(READY);
        tokio::spawn(async move {
            loop {
                let accepted = tokio::select! {
                    () = shutdown.cancelled() => return,
                    accepted = listener.accept() => accepted,
                };
                let (stream, addr) = match accepted {
                    Ok(pair) => pair,
                    Err(e) => {
                        tracing::warn!(error = %e, "admin accept failed");
                        tokio::time::sleep(Duration::from_millis(50)).await;
                        continue;
                    }
                };
                let (acceptor, sender) = (tls.current(), sender.clone());
                tokio::spawn(async move {
                    match tokio::time::timeout(HANDSHAKE_TIMEOUT, acceptor.accept(stream)).await {
                        Ok(Ok(tls)) => {
                            let _ = sender.send((tls, addr)).await;
                        }
                        Ok(Err(e)) => {
                            tracing::info!(%addr, error = %e, "admin TLS handshake failed");
                        }
                        Err(_) => tracing::info!(%addr, "admin TLS handshake timed out"),
                    }
                });
            }
        });
        Ok(TlsListener { ready, local })
    }
}

impl axum::serve::Listener for TlsListener {
    type Io = TlsStream<TcpStream>;
    type Addr = SocketAddr;

    async fn accept(&mut self) -> (Self::Io, Self::Addr) {
        match self.ready.recv().await {
            Some(ready) => ready,
            // The acceptor stopped (shutdown): wait for axum's graceful shutdown.
            None => std::future::pending().await,
        }
    }

    fn local_addr(&self) -> std::io::Result<SocketAddr> {
        Ok(self.local)
    }
}

/// The client's address, for the login check (loopback or not) and ACL hosts.
#[derive(Debug, Clone, Copy)]
pub struct PeerAddr(pub SocketAddr);

impl axum::extract::connect_info::Connected<axum::serve::IncomingStream<'_, TlsListener>>
    for PeerAddr
{
    fn connect_info(stream: axum::serve::IncomingStream<'_, TlsListener>) -> Self {
        PeerAddr(*stream.remote_addr())
    }
}

impl axum::extract::connect_info::Connected<axum::serve::IncomingStream<'_, TcpListener>>
    for PeerAddr
{
    fn connect_info(stream: axum::serve::IncomingStream<'_, TcpListener>) -> Self {
        PeerAddr(*stream.remote_addr())
    }
}
