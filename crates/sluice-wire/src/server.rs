//! The TCP side: accept connections (bounded), read frames, hand decoded requests to a
//! [`Service`], write responses back in request order.
//!
//! A service answers in two steps. [`Service::call`] runs in arrival order on the connection's
//! task and does everything whose order matters (an append takes its offsets here); it may
//! return a future for what only needs waiting (an fsync, a long poll). Those futures run
//! concurrently, up to `max_in_flight` per connection, and their responses are written in
//! request order, as Kafka clients require.
//!
//! A listener may speak TLS ([`TlsAcceptorCell`]); the handshake runs on the connection's own
//! task, bounded in time, before the first frame is read. What a connection has proved about
//! itself later (SASL) is the service's per-connection [`Service::Session`].

use std::future::Future;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::{Arc, RwLock};
use std::time::Duration;

use bytes::{Buf, Bytes, BytesMut};
use futures::stream::{FuturesOrdered, StreamExt};
use futures::FutureExt;
use kafka_protocol::messages::{ApiKey, ResponseKind};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::TcpListener;
use tokio::sync::Semaphore;
use tokio_rustls::TlsAcceptor;
use tokio_util::sync::CancellationToken;

use crate::codec::{
    api_versions_fallback, decode_request, encode_response, error_response, DecodeError, Request,
    UNKNOWN_SERVER_ERROR,
};
use crate::frame::next_frame;
use crate::frames::Frames;
use crate::versions::ApiTable;

/// A response still being worked on; `None` if it cannot be given (the connection is then
/// closed, so the client does not wait for it).
pub type PendingResponse = Pin<Box<dyn Future<Output = Option<ResponseKind>> + Send>>;

/// A bare SASL token to send back (without its size prefix), or why the connection closes.
pub type PendingToken = Pin<Box<dyn Future<Output = Result<Bytes, String>> + Send>>;

/// What a service does with a request.
pub enum Reply {
    /// Respond with this.
    Ready(Box<ResponseKind>),
    /// Respond with what this future yields.
    Later(PendingResponse),
    /// The request takes no response (Produce with acks=0).
    Silent,
    /// The request cannot be answered: close the connection after the responses before it,
    /// for this reason.
    Close(String),
}

impl From<ResponseKind> for Reply {
    fn from(body: ResponseKind) -> Self {
        Reply::Ready(Box::new(body))
    }
}

/// Who sent a request, as the transport knows it.
#[derive(Debug, Clone)]
pub struct Peer {
    pub addr: SocketAddr,
    /// The name of the listener the connection came in on (`PLAINTEXT`, `SASL_SSL`, ...).
    pub listener: Arc<str>,
    /// Whether the connection is encrypted.
    pub tls: bool,
    /// The client's certificate (DER), when TLS asked for one and the client gave it; the
    /// verifier has already checked it against the listener's trusted authorities.
    pub client_certificate: Option<Arc<[u8]>>,
}

impl Peer {
    /// A plaintext peer on a listener named `PLAINTEXT` (for tests and in-process callers).
    pub fn plaintext(addr: SocketAddr) -> Peer {
        Peer {
            addr,
            listener: Arc::from("PLAINTEXT"),
            tls: false,
            client_certificate: None,
        }
    }
}

/// Takes the time the server spent encoding a request's answer (zero when there was none to
/// encode); see [`Service::call_metered`].
pub type CodecMeter = Box<dyn FnOnce(Duration) + Send>;

/// The broker side of the protocol, as seen by the connection loop.
pub trait Service: Send + Sync + 'static {
    /// What the service remembers about one connection (its authentication); made when the
    /// connection opens (after its TLS handshake), dropped when it closes.
    type Session: Send + Sync + 'static;
    /// The API versions this service implements.
    fn api_table(&self) -> &ApiTable;
    /// A new connection's session.
    fn open_session(&self, peer: &Peer) -> Self::Session;
    /// Handles one request; called in arrival order for each connection.
    fn call(&self, request: Request, peer: &Peer, session: &Self::Session) -> Reply;
    /// [`Service::call`], and who pays for the server's own time on the request: decoding it
    /// and encoding its answer (part of what Kafka counts as network-thread time against a
    /// request quota, KIP-124). `received`: when the frame was read, before decoding; a
    /// service that meters the request takes the decoding time from it (so that requests
    /// nobody meters cost no clock read). The meter is called once: with the encoding time
    /// when the answer is encoded, or with zero when there is no answer to encode (acks=0, a
    /// closed connection, an answer dropped with its connection). The default: none.
    fn call_metered(
        &self,
        request: Request,
        peer: &Peer,
        session: &Self::Session,
        _received: std::time::Instant,
    ) -> (Reply, Option<CodecMeter>) {
        (self.call(request, peer, session), None)
    }
    /// A smaller frame limit than `Limits::max_frame_bytes` for this connection now (Kafka
    /// caps frames at 512 KiB until a SASL login, `sasl.server.max.receive.size`).
    fn max_frame_bytes(&self, _session: &Self::Session) -> Option<usize> {
        None
    }
    /// How long the connection stays muted (KIP-219: a client over its quota was answered
    /// with `throttle_time_ms`; its next requests are not read until that has passed).
    fn muted_for(&self, _session: &Self::Session) -> Option<Duration> {
        None
    }
    /// After a SaslHandshake v0 (KIP-43's first form) the client's next frames are bare SASL
    /// tokens, not Kafka requests, and it reads bare tokens back, until the exchange ends.
    /// `Some` when `frame` is such a token: the answer. Called before decoding each frame.
    fn sasl_token(
        &self,
        _frame: &Bytes,
        _peer: &Peer,
        _session: &Self::Session,
    ) -> Option<PendingToken> {
        None
    }
    /// A request of `api` was answered `elapsed` after it was decoded (for metrics).
    fn request_done(&self, _api: ApiKey, _elapsed: Duration) {}
    /// The response built for a request of `api` at `version` could not be encoded (a bug:
    /// for metrics and logs). The client got an error response instead, or the connection was
    /// closed.
    fn response_unencodable(&self, _api: ApiKey, _version: i16, _reason: &str) {}
    fn connection_opened(&self) {}
    fn connection_closed(&self) {}
    /// A TLS handshake failed or timed out (for metrics).
    fn tls_handshake_failed(&self) {}
    /// A new connection was closed at once: too many from its address (for metrics).
    fn connection_refused(&self, _reason: &'static str) {}
    /// New connections per second that the address `ip` may open (its `ip` quota), if any.
    fn connection_creation_rate(&self, _ip: std::net::IpAddr) -> Option<f64> {
        None
    }
}

/// A listener's current TLS configuration; replaced whole when its certificate files change,
/// so that new connections use the new certificate and open ones keep theirs.
pub struct TlsAcceptorCell(RwLock<TlsAcceptor>);

impl TlsAcceptorCell {
    pub fn new(config: Arc<tokio_rustls::rustls::ServerConfig>) -> Self {
        TlsAcceptorCell(RwLock::new(TlsAcceptor::from(config)))
    }

    pub fn replace(&self, config: Arc<tokio_rustls::rustls::ServerConfig>) {
        let mut current = self.0.write().unwrap_or_else(|e| e.into_inner());
        *current = TlsAcceptor::from(config);
    }

    fn current(&self) -> TlsAcceptor {
        self.0.read().unwrap_or_else(|e| e.into_inner()).clone()
    }
}

impl std::fmt::Debug for TlsAcceptorCell {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("TlsAcceptorCell")
    }
}

/// One bound Kafka listener.
#[derive(Debug)]
pub struct Endpoint {
    pub listener: TcpListener,
    pub name: Arc<str>,
    /// `Some` for `SSL` and `SASL_SSL` listeners.
    pub tls: Option<Arc<TlsAcceptorCell>>,
}

/// A TLS handshake that takes longer is abandoned (a client that connects and says nothing
/// must not hold a connection slot for long).
const TLS_HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);
/// The longest a connection over its address's creation rate is held before it is closed.
const MAX_DELAYED_CLOSE: Duration = Duration::from_secs(1);
/// At most this many such connections are held at once per listener (they hold no connection
/// slot); past it they are closed at once.
const MAX_DELAYED_CLOSES: usize = 1024;

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
    /// Per-address connection limits and the connection creation rate.
    pub quotas: crate::admission::ConnectionQuotas,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_frame_bytes: 100 * 1024 * 1024,
            max_connections: 10_000,
            max_in_flight: 64,
            idle_timeout: Duration::from_secs(600),
            quotas: crate::admission::ConnectionQuotas::default(),
        }
    }
}

/// Accepts connections on every endpoint until `shutdown` fires, then waits for open
/// connections to finish their in-flight responses (they stop reading at once).
/// `limits.max_connections` bounds the connections of all endpoints together.
pub async fn serve<S: Service>(
    endpoints: Vec<Endpoint>,
    service: Arc<S>,
    limits: Limits,
    shutdown: CancellationToken,
) {
    let permits = Arc::new(Semaphore::new(limits.max_connections));
    let admission = crate::admission::Admission::new(limits.quotas.clone());
    let mut listeners = tokio::task::JoinSet::new();
    for endpoint in endpoints {
        listeners.spawn(accept_loop(
            endpoint,
            Arc::clone(&service),
            limits.clone(),
            (Arc::clone(&permits), Arc::clone(&admission)),
            shutdown.clone(),
        ));
    }
    while listeners.join_next().await.is_some() {}
}

async fn accept_loop<S: Service>(
    endpoint: Endpoint,
    service: Arc<S>,
    limits: Limits,
    (permits, admission): (Arc<Semaphore>, Arc<crate::admission::Admission>),
    shutdown: CancellationToken,
) {
    let mut connections = tokio::task::JoinSet::new();
    let delayed_closes = Arc::new(Semaphore::new(MAX_DELAYED_CLOSES));
    'accepting: loop {
        let accepted = tokio::select! {
            () = shutdown.cancelled() => break,
            accepted = endpoint.listener.accept() => accepted,
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
        // Over its address's own rate, the connection is held for what the address owes,
        // then closed (Kafka's delayed close): its client backs off instead of spinning. At
        // most MAX_DELAYED_CLOSES are held at once (they take no connection slot); past that
        // they are closed at once. Checked before the broker-wide rate, so that a throttled
        // address does not use up the others' share.
        if let Some(rate) = service.connection_creation_rate(addr.ip()) {
            let owed = admission.throttle_ip(addr.ip(), rate, tokio::time::Instant::now());
            if !owed.is_zero() {
                tracing::debug!(%addr, rate, ?owed, "over the address's connection creation rate; closing after the delay");
                service.connection_refused("connection_creation_rate");
                if let Ok(held) = Arc::clone(&delayed_closes).try_acquire_owned() {
                    let shutdown = shutdown.clone();
                    connections.spawn(async move {
                        tokio::select! {
                            () = shutdown.cancelled() => {}
                            () = tokio::time::sleep(owed.min(MAX_DELAYED_CLOSE)) => {}
                        }
                        drop(stream);
                        drop(held);
                    });
                } else {
                    drop(stream);
                }
                while connections.try_join_next().is_some() {}
                continue;
            }
        }
        // Over the creation rate, the connection waits here (and the listener with it).
        loop {
            let wait = admission.wait_for_creation(tokio::time::Instant::now());
            if wait.is_zero() {
                break;
            }
            tokio::select! {
                // Out to the draining below, as a shutdown while accepting does.
                () = shutdown.cancelled() => break 'accepting,
                () = tokio::time::sleep(wait) => {}
            }
        }
        let Ok(permit) = Arc::clone(&permits).try_acquire_owned() else {
            tracing::warn!(%addr, max = limits.max_connections, "connection limit reached; closing new connection");
            service.connection_refused("max_connections");
            drop(stream);
            continue;
        };
        let admitted = match admission.admit(addr.ip()) {
            Ok(admitted) => admitted,
            Err(max) => {
                tracing::warn!(%addr, max, "too many connections from this address; closing new connection");
                service.connection_refused("max_connections_per_ip");
                drop(stream);
                continue;
            }
        };
        let service = Arc::clone(&service);
        let limits = limits.clone();
        let shutdown = shutdown.clone();
        let name = Arc::clone(&endpoint.name);
        let tls = endpoint.tls.as_ref().map(|cell| cell.current());
        connections.spawn(async move {
            let _permit = permit;
            let _admitted = admitted;
            if let Err(e) = stream.set_nodelay(true) {
                tracing::debug!(%addr, error = %e, "cannot set TCP_NODELAY");
            }
            let mut peer = Peer {
                addr,
                listener: name,
                tls: tls.is_some(),
                client_certificate: None,
            };
            service.connection_opened();
            let outcome = match tls {
                None => {
                    let mut stream = stream;
                    let (reader, writer) = stream.split();
                    let session = service.open_session(&peer);
                    Connection::new(reader, writer, peer, &limits)
                        .run(&service, &session, &limits, &shutdown)
                        .await
                }
                Some(acceptor) => {
                    match tokio::time::timeout(TLS_HANDSHAKE_TIMEOUT, acceptor.accept(stream)).await
                    {
                        Ok(Ok(stream)) => {
                            peer.client_certificate = stream
                                .get_ref()
                                .1
                                .peer_certificates()
                                .and_then(|chain| chain.first())
                                .map(|leaf| Arc::from(leaf.as_ref()));
                            let (reader, writer) = tokio::io::split(stream);
                            let session = service.open_session(&peer);
                            Connection::new(reader, writer, peer, &limits)
                                .run(&service, &session, &limits, &shutdown)
                                .await
                        }
                        Ok(Err(e)) => {
                            service.tls_handshake_failed();
                            Err(format!("TLS handshake failed: {e}"))
                        }
                        Err(_) => {
                            service.tls_handshake_failed();
                            Err(format!(
                                "TLS handshake not done within {} s",
                                TLS_HANDSHAKE_TIMEOUT.as_secs()
                            ))
                        }
                    }
                }
            };
            service.connection_closed();
            if let Err(reason) = outcome {
                tracing::info!(%addr, %reason, "closed connection");
            }
        });
        while connections.try_join_next().is_some() {}
    }
    while connections.join_next().await.is_some() {}
}

struct Connection<R, W> {
    reader: R,
    writer: W,
    peer: Peer,
    read_buf: BytesMut,
}

/// One pending response, encoded: the frame to send, or why the connection must close.
type Outgoing = Pin<Box<dyn Future<Output = Result<Bytes, String>> + Send>>;

impl<R: AsyncRead + Unpin, W: AsyncWrite + Unpin> Connection<R, W> {
    fn new(reader: R, writer: W, peer: Peer, limits: &Limits) -> Self {
        Connection {
            reader,
            writer,
            peer,
            read_buf: BytesMut::with_capacity(64 * 1024.min(limits.max_frame_bytes)),
        }
    }

    /// Serves the connection; `Ok` when the client closed it, `Err` with the reason otherwise.
    async fn run<S: Service>(
        mut self,
        service: &Arc<S>,
        session: &S::Session,
        limits: &Limits,
        shutdown: &CancellationToken,
    ) -> Result<(), String> {
        let (reader, writer) = (&mut self.reader, &mut self.writer);
        let mut pending: FuturesOrdered<Outgoing> = FuturesOrdered::new();
        let mut out = Frames::default();
        let mut closing: Option<String> = None;
        let mut idle_deadline = tokio::time::Instant::now() + limits.idle_timeout;
        loop {
            let mut muted = service.muted_for(session).filter(|d| !d.is_zero());
            // Requests already buffered are handled before reading more (unless muted: a
            // request that throttles mutes the connection before the next one is taken).
            while muted.is_none() && closing.is_none() && pending.len() < limits.max_in_flight {
                let max_frame = service
                    .max_frame_bytes(session)
                    .map_or(limits.max_frame_bytes, |m| m.min(limits.max_frame_bytes));
                match next_frame(&mut self.read_buf, max_frame) {
                    Ok(Some(frame)) => {
                        idle_deadline = tokio::time::Instant::now() + limits.idle_timeout;
                        match handle_frame(frame, service, &self.peer, session) {
                            Ok(Some(outgoing)) => pending.push_back(outgoing),
                            Ok(None) => {}
                            Err(reason) => closing = Some(reason),
                        }
                        muted = service.muted_for(session).filter(|d| !d.is_zero());
                    }
                    Ok(None) => break,
                    Err(e) => closing = Some(e.to_string()),
                }
            }
            if closing.is_some() && pending.is_empty() {
                break;
            }
            let can_read =
                muted.is_none() && closing.is_none() && pending.len() < limits.max_in_flight;
            tokio::select! {
                biased;
                Some(done) = pending.next(), if !pending.is_empty() => {
                    let mut next = Some(done);
                    // Write every response that is already done with one syscall; a response
                    // that cannot be given closes the connection once those before it are out.
                    while let Some(done) = next {
                        match done {
                            Ok(frame) => out.push(frame),
                            Err(reason) => {
                                closing.get_or_insert(reason);
                                pending.clear();
                                break;
                            }
                        }
                        next = pending.next().now_or_never().flatten();
                    }
                    if out.has_remaining() {
                        writer.write_all_buf(&mut out).await.map_err(|e| format!("write failed: {e}"))?;
                        // TLS keeps what the socket did not take inside the session until a
                        // flush (a no-op on plain TCP): without it the end of a large
                        // response waits for the next one.
                        writer.flush().await.map_err(|e| format!("write failed: {e}"))?;
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
                () = tokio::time::sleep(muted.unwrap_or_default()), if muted.is_some() => {
                    // Muted time is not idle time.
                    idle_deadline = tokio::time::Instant::now() + limits.idle_timeout;
                }
                () = tokio::time::sleep_until(idle_deadline), if pending.is_empty() && muted.is_none() => {
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
    session: &S::Session,
) -> Result<Option<Outgoing>, String> {
    let started = std::time::Instant::now();
    if let Some(answer) = service.sasl_token(&frame, peer, session) {
        return Ok(Some(Box::pin(answer.map(|token| {
            token.map(|token| {
                let mut framed = BytesMut::with_capacity(4 + token.len());
                framed.extend_from_slice(&(token.len() as u32).to_be_bytes());
                framed.extend_from_slice(&token);
                framed.freeze()
            })
        }))));
    }
    let request = match decode_request(frame, service.api_table()) {
        Ok(request) => request,
        Err(DecodeError::UnsupportedVersion {
            api_key: ApiKey::ApiVersions,
            correlation_id,
            ..
        }) => {
            let frame = api_versions_fallback(correlation_id, service.api_table())
                .map_err(|e| e.to_string())?;
            return Ok(Some(Box::pin(std::future::ready(Ok(frame)))));
        }
        Err(e) => return Err(e.to_string()),
    };
    let (api_key, version, correlation_id) =
        (request.api_key, request.version(), request.correlation_id());
    let (reply, meter) = service.call_metered(request, peer, session, started);
    let charge = meter.map(|meter| Charge(Some(meter)));
    let reporter = Arc::clone(service);
    let encode = move |body: Option<ResponseKind>| {
        let encoding = charge.as_ref().map(|_| std::time::Instant::now());
        let encoded = encode_answer(&reporter, body, api_key, version, correlation_id);
        if let (Some(mut charge), Some(encoding)) = (charge, encoding) {
            charge.pay(encoding.elapsed());
        }
        let frame = encoded?;
        reporter.request_done(api_key, started.elapsed());
        Ok(frame)
    };
    Ok(match reply {
        Reply::Ready(body) => Some(Box::pin(std::future::ready(encode(Some(*body))))),
        Reply::Later(future) => Some(Box::pin(future.map(encode))),
        // Dropping `encode` drops the charge, which the meter is told with zero.
        Reply::Silent => None,
        Reply::Close(reason) => return Err(reason),
    })
}

/// A request's meter, paid once: with the encoding time when there is an answer, else
/// (dropped unpaid) with zero.
struct Charge(Option<CodecMeter>);

impl Charge {
    fn pay(&mut self, encoding: Duration) {
        if let Some(meter) = self.0.take() {
            meter(encoding);
        }
    }
}

impl Drop for Charge {
    fn drop(&mut self) {
        self.pay(Duration::ZERO);
    }
}

/// The answer's frame; one the codec cannot encode at the request's version (our bug) becomes
/// the API's error response where it has one, else an error that closes the connection.
fn encode_answer<S: Service>(
    reporter: &Arc<S>,
    body: Option<ResponseKind>,
    api_key: ApiKey,
    version: i16,
    correlation_id: i32,
) -> Result<Bytes, String> {
    let body = body.ok_or_else(|| format!("{api_key:?} v{version}: no response could be built"))?;
    encode_response(api_key, version, correlation_id, &body).or_else(|e| {
        reporter.response_unencodable(api_key, version, &e.reason);
        error_response(api_key, UNKNOWN_SERVER_ERROR)
            .and_then(|body| encode_response(api_key, version, correlation_id, &body).ok())
            .ok_or_else(|| e.to_string())
    })
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)] // test code: a failed unwrap is a failed test
    //! A response the service built but the codec cannot encode at the request's version still
    //! gets an answer: the API's error response, or a closed connection. And a metered
    //! request's codec time is charged once, answered or not.

    use std::sync::atomic::{AtomicUsize, Ordering};

    use kafka_protocol::messages::find_coordinator_response::Coordinator;
    use kafka_protocol::messages::list_offsets_response::{
        ListOffsetsPartitionResponse, ListOffsetsTopicResponse,
    };
    use kafka_protocol::messages::{
        FindCoordinatorRequest, FindCoordinatorResponse, ListOffsetsRequest, ListOffsetsResponse,
        RequestHeader, RequestKind,
    };
    use kafka_protocol::protocol::{Decodable, Encodable};

    use super::*;
    use crate::versions::ApiRange;
    use tokio::net::TcpStream;

    /// Answers FindCoordinator v0 and ListOffsets v1 with fields those versions lack.
    struct Broken {
        table: ApiTable,
        unencodable: AtomicUsize,
        /// The codec time charged, per request metered.
        metered_ns: Arc<std::sync::Mutex<Vec<u128>>>,
    }

    impl Service for Broken {
        type Session = ();

        fn api_table(&self) -> &ApiTable {
            &self.table
        }

        fn open_session(&self, _peer: &Peer) {}

        fn call(&self, request: Request, _peer: &Peer, _session: &()) -> Reply {
            match request.body {
                // The list of coordinators exists from v4 on (KIP-699).
                RequestKind::FindCoordinator(_) => ResponseKind::FindCoordinator(
                    FindCoordinatorResponse::default()
                        .with_coordinators(vec![Coordinator::default().with_port(9092)]),
                )
                .into(),
                // leader_epoch exists from v4 on; ListOffsets has no top-level error field.
                RequestKind::ListOffsets(_) => {
                    ResponseKind::ListOffsets(ListOffsetsResponse::default().with_topics(vec![
                        ListOffsetsTopicResponse::default().with_partitions(vec![
                            ListOffsetsPartitionResponse::default().with_leader_epoch(3),
                        ]),
                    ]))
                    .into()
                }
                // An acks=0 produce: no answer.
                RequestKind::Produce(_) => Reply::Silent,
                _ => Reply::Close("unexpected".into()),
            }
        }

        fn response_unencodable(&self, _api: ApiKey, _version: i16, _reason: &str) {
            self.unencodable.fetch_add(1, Ordering::Relaxed);
        }

        fn call_metered(
            &self,
            request: Request,
            peer: &Peer,
            session: &(),
            received: std::time::Instant,
        ) -> (Reply, Option<CodecMeter>) {
            let metered = Arc::clone(&self.metered_ns);
            let decoding = received.elapsed();
            let meter: CodecMeter = Box::new(move |encoding| {
                metered
                    .lock()
                    .unwrap()
                    .push((decoding + encoding).as_nanos());
            });
            (self.call(request, peer, session), Some(meter))
        }
    }

    async fn start() -> (Arc<Broken>, SocketAddr, CancellationToken) {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let service = Arc::new(Broken {
            table: ApiTable::new(vec![
                ApiRange {
                    key: ApiKey::FindCoordinator,
                    min: 0,
                    max: 6,
                },
                ApiRange {
                    key: ApiKey::ListOffsets,
                    min: 1,
                    max: 7,
                },
                ApiRange {
                    key: ApiKey::Produce,
                    min: 3,
                    max: 9,
                },
            ]),
            unencodable: AtomicUsize::new(0),
            metered_ns: Default::default(),
        });
        let shutdown = CancellationToken::new();
        let endpoint = Endpoint {
            listener,
            name: Arc::from("PLAINTEXT"),
            tls: None,
        };
        tokio::spawn(serve(
            vec![endpoint],
            Arc::clone(&service),
            Limits::default(),
            shutdown.clone(),
        ));
        (service, addr, shutdown)
    }

    async fn send(stream: &mut TcpStream, api: ApiKey, version: i16, body: RequestKind) {
        let mut frame = BytesMut::new();
        frame.put_i32(0);
        RequestHeader::default()
            .with_request_api_key(api as i16)
            .with_request_api_version(version)
            .with_correlation_id(7)
            .encode(&mut frame, api.request_header_version(version))
            .unwrap();
        body.encode(&mut frame, version).unwrap();
        let size = (frame.len() - 4) as i32;
        frame[..4].copy_from_slice(&size.to_be_bytes());
        stream.write_all(&frame).await.unwrap();
    }

    use bytes::BufMut;

    #[tokio::test]
    async fn an_unencodable_response_becomes_the_apis_error_response() {
        let (service, addr, shutdown) = start().await;
        let mut stream = TcpStream::connect(addr).await.unwrap();
        send(
            &mut stream,
            ApiKey::FindCoordinator,
            0,
            RequestKind::FindCoordinator(FindCoordinatorRequest::default()),
        )
        .await;
        let size = stream.read_i32().await.unwrap() as usize;
        let mut buf = vec![0; size];
        stream.read_exact(&mut buf).await.unwrap();
        let mut buf = Bytes::from(buf);
        let header = kafka_protocol::messages::ResponseHeader::decode(&mut buf, 0).unwrap();
        assert_eq!(header.correlation_id, 7);
        let response = FindCoordinatorResponse::decode(&mut buf, 0).unwrap();
        assert_eq!(response.error_code, crate::codec::UNKNOWN_SERVER_ERROR);
        assert_eq!(service.unencodable.load(Ordering::Relaxed), 1);
        // The codec time was charged once (the meter runs before the frame is handed back).
        let metered = service.metered_ns.lock().unwrap().clone();
        assert!(
            metered.len() == 1 && metered[0] > 0,
            "one charge of the codec time: {metered:?}"
        );
        shutdown.cancel();
    }

    #[tokio::test]
    async fn without_an_error_field_the_connection_closes() {
        let (service, addr, shutdown) = start().await;
        let mut stream = TcpStream::connect(addr).await.unwrap();
        send(
            &mut stream,
            ApiKey::ListOffsets,
            1,
            RequestKind::ListOffsets(ListOffsetsRequest::default()),
        )
        .await;
        let mut rest = Vec::new();
        let read = tokio::time::timeout(Duration::from_secs(10), stream.read_to_end(&mut rest))
            .await
            .expect("the connection closes instead of leaving the client waiting");
        assert!(read.is_ok() && rest.is_empty(), "no frame: {rest:?}");
        assert_eq!(service.unencodable.load(Ordering::Relaxed), 1);
        shutdown.cancel();
    }

    /// With no answer to encode (acks=0), the meter is still charged, once, with the
    /// decoding.
    #[tokio::test]
    async fn a_request_without_an_answer_is_charged_its_decoding() {
        let (service, addr, shutdown) = start().await;
        let mut stream = TcpStream::connect(addr).await.unwrap();
        send(
            &mut stream,
            ApiKey::Produce,
            3,
            RequestKind::Produce(kafka_protocol::messages::ProduceRequest::default().with_acks(0)),
        )
        .await;
        let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
        while service.metered_ns.lock().unwrap().is_empty() {
            assert!(tokio::time::Instant::now() < deadline, "never charged");
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
        let metered = service.metered_ns.lock().unwrap().clone();
        assert!(metered.len() == 1 && metered[0] > 0, "{metered:?}");
        shutdown.cancel();
    }
}
