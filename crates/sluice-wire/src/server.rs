//! The TCP side: accept connections (bounded), read frames, hand decoded requests to a
//! [`Service`], write responses back in request order.
//!
//! A service answers in two steps. [`Service::call`] runs in arrival order on the connection's
//! task and does everything whose order matters (an append takes its offsets here); it may
//! return a future for what only needs waiting (an fsync, a long poll). Those futures run
//! concurrently, up to `max_in_flight` per connection, and their responses are written in
//! request order, as Kafka clients require.

use std::future::Future;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use futures::stream::{FuturesOrdered, StreamExt};
use futures::FutureExt;
use kafka_protocol::messages::{ApiKey, ResponseKind};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::Semaphore;
use tokio_util::sync::CancellationToken;

use crate::codec::{api_versions_fallback, decode_request, encode_response, DecodeError, Request};
use crate::frame::next_frame;
use crate::versions::ApiTable;

/// A response still being worked on.
pub type PendingResponse = Pin<Box<dyn Future<Output = Option<ResponseKind>> + Send>>;

/// What a service does with a request.
pub enum Reply {
    /// Respond with this.
    Ready(Box<ResponseKind>),
    /// Respond with what this future yields (`None`: no response).
    Later(PendingResponse),
    /// The request takes no response (Produce with acks=0).
    Silent,
}

/// Who sent a request.
#[derive(Debug, Clone)]
pub struct Peer {
    pub addr: SocketAddr,
}

/// The broker side of the protocol, as seen by the connection loop.
pub trait Service: Send + Sync + 'static {
    /// The API versions this service implements.
    fn api_table(&self) -> &ApiTable;
    /// Handles one request; called in arrival order for each connection.
    fn call(&self, request: Request, peer: &Peer) -> Reply;
    /// A request of `api` was answered `elapsed` after it was decoded (for metrics).
    fn request_done(&self, _api: ApiKey, _elapsed: Duration) {}
    fn connection_opened(&self) {}
    fn connection_closed(&self) {}
}

/// Bounds on what clients can make the server hold.
#[derive(Debug, Clone)]
pub struct Limits {
    /// `socket.request.max.bytes`: larger frames close the connection.
    pub max_frame_bytes: usize,
    pub max_connections: usize,
    /// Requests of one connection being worked on at once.
    pub max_in_flight: usize,
    /// A connection with no request for this long is closed (`connections.max.idle.ms`).
    pub idle_timeout: Duration,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_frame_bytes: 100 * 1024 * 1024,
            max_connections: 10_000,
            max_in_flight: 64,
            idle_timeout: Duration::from_secs(600),
        }
    }
}

/// Accepts connections until `shutdown` fires, then waits for open connections to finish
/// their in-flight responses (they stop reading at once).
pub async fn serve<S: Service>(
    listener: TcpListener,
    service: Arc<S>,
    limits: Limits,
    shutdown: CancellationToken,
) {
    let permits = Arc::new(Semaphore::new(limits.max_connections));
    let mut connections = tokio::task::JoinSet::new();
    loop {
        let accepted = tokio::select! {
            () = shutdown.cancelled() => break,
            accepted = listener.accept() => accepted,
        };
        let (stream, addr) = match accepted {
            Ok(pair) => pair,
            Err(e) => {
                // Typically EMFILE: back off instead of spinning.
                tracing::warn!(error = %e, "accept failed");
                tokio::time::sleep(Duration::from_millis(50)).await;
                continue;
            }
        };
        let Ok(permit) = Arc::clone(&permits).try_acquire_owned() else {
            tracing::warn!(%addr, max = limits.max_connections, "connection limit reached; closing new connection");
            drop(stream);
            continue;
        };
        let service = Arc::clone(&service);
        let limits = limits.clone();
        let shutdown = shutdown.clone();
        connections.spawn(async move {
            let _permit = permit;
            service.connection_opened();
            let outcome = Connection::new(stream, addr, &limits)
                .run(&service, &limits, &shutdown)
                .await;
            service.connection_closed();
            if let Err(reason) = outcome {
                tracing::info!(%addr, %reason, "closed connection");
            }
        });
        while connections.try_join_next().is_some() {}
    }
    while connections.join_next().await.is_some() {}
}

struct Connection {
    stream: TcpStream,
    peer: Peer,
    read_buf: BytesMut,
}

/// One pending response: the API it answers and how, tagged for encoding.
type Outgoing = Pin<Box<dyn Future<Output = Option<Bytes>> + Send>>;

impl Connection {
    fn new(stream: TcpStream, addr: SocketAddr, limits: &Limits) -> Self {
        if let Err(e) = stream.set_nodelay(true) {
            tracing::debug!(%addr, error = %e, "cannot set TCP_NODELAY");
        }
        Connection {
            stream,
            peer: Peer { addr },
            read_buf: BytesMut::with_capacity(64 * 1024.min(limits.max_frame_bytes)),
        }
    }

    /// Serves the connection; `Ok` when the client closed it, `Err` with the reason otherwise.
    async fn run<S: Service>(
        mut self,
        service: &Arc<S>,
        limits: &Limits,
        shutdown: &CancellationToken,
    ) -> Result<(), String> {
        let (mut reader, mut writer) = self.stream.split();
        let mut pending: FuturesOrdered<Outgoing> = FuturesOrdered::new();
        let mut out = BytesMut::new();
        let mut closing: Option<String> = None;
        let mut idle_deadline = tokio::time::Instant::now() + limits.idle_timeout;
        loop {
            // Requests already buffered are handled before reading more.
            while closing.is_none() && pending.len() < limits.max_in_flight {
                match next_frame(&mut self.read_buf, limits.max_frame_bytes) {
                    Ok(Some(frame)) => {
                        idle_deadline = tokio::time::Instant::now() + limits.idle_timeout;
                        match handle_frame(frame, service, &self.peer) {
                            Ok(Some(outgoing)) => pending.push_back(outgoing),
                            Ok(None) => {}
                            Err(reason) => closing = Some(reason),
                        }
                    }
                    Ok(None) => break,
                    Err(e) => closing = Some(e.to_string()),
                }
            }
            if closing.is_some() && pending.is_empty() {
                break;
            }
            let can_read = closing.is_none() && pending.len() < limits.max_in_flight;
            tokio::select! {
                biased;
                Some(done) = pending.next(), if !pending.is_empty() => {
                    if let Some(frame) = done {
                        out.extend_from_slice(&frame);
                    }
                    // Write every response that is already done with one syscall.
                    while let Some(Some(done)) = pending.next().now_or_never() {
                        if let Some(frame) = done {
                            out.extend_from_slice(&frame);
                        }
                    }
                    if !out.is_empty() {
                        writer.write_all(&out).await.map_err(|e| format!("write failed: {e}"))?;
                        out.clear();
                    }
                }
                read = reader.read_buf(&mut self.read_buf), if can_read => {
                    match read {
                        Ok(0) if self.read_buf.is_empty() => closing = Some(String::new()),
                        Ok(0) => closing = Some(format!("client disconnected mid-request ({} bytes unread)", self.read_buf.len())),
                        Ok(_) => {}
                        Err(e) => return Err(format!("read failed: {e}")),
                    }
                }
                () = tokio::time::sleep_until(idle_deadline), if pending.is_empty() => {
                    closing = Some("idle timeout".into());
                }
                () = shutdown.cancelled(), if closing.is_none() => {
                    closing = Some("broker shutting down".into());
                }
            }
        }
        let _ = writer.shutdown().await;
        match closing {
            Some(reason) if !reason.is_empty() => Err(reason),
            _ => Ok(()),
        }
    }
}

/// Decodes a frame and starts its handling; `Err` means close the connection.
#[allow(clippy::disallowed_methods)] // request latency is measured with the real clock
fn handle_frame<S: Service>(
    frame: Bytes,
    service: &Arc<S>,
    peer: &Peer,
) -> Result<Option<Outgoing>, String> {
    let started = std::time::Instant::now();
    let request = match decode_request(frame, service.api_table()) {
        Ok(request) => request,
        Err(DecodeError::UnsupportedVersion {
            api_key: ApiKey::ApiVersions,
            correlation_id,
            ..
        }) => {
            let frame = api_versions_fallback(correlation_id, service.api_table())
                .map_err(|e| e.to_string())?;
            return Ok(Some(Box::pin(std::future::ready(Some(frame)))));
        }
        Err(e) => return Err(e.to_string()),
    };
    let (api_key, version, correlation_id) =
        (request.api_key, request.version(), request.correlation_id());
    let timing = Arc::clone(service);
    let encode =
        move |body: ResponseKind| match encode_response(api_key, version, correlation_id, &body) {
            Ok(frame) => {
                timing.request_done(api_key, started.elapsed());
                Some(frame)
            }
            Err(e) => {
                // A response we built but cannot encode is our bug; the client will time out.
                tracing::error!(error = %e, "dropping response");
                None
            }
        };
    Ok(match service.call(request, peer) {
        Reply::Ready(body) => Some(Box::pin(std::future::ready(encode(*body)))),
        Reply::Later(future) => Some(Box::pin(future.map(move |body| body.and_then(encode)))),
        Reply::Silent => None,
    })
}
