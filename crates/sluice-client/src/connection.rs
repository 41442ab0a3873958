//! One connection to one broker: negotiate API versions, then send requests and read their
//! responses one at a time (or pipelined, with `send` / `receive`).

use std::collections::HashMap;
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use kafka_protocol::messages::{ApiKey, ApiVersionsRequest, ApiVersionsResponse};
use kafka_protocol::protocol::{Request, StrBytes};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use crate::codec::{api_key, decode_response, encode_request, frame_size};
use crate::error::ClientError;

pub struct Connection {
    addr: String,
    stream: Box<dyn crate::security::Stream>,
    client_id: StrBytes,
    next_correlation_id: i32,
    versions: HashMap<i16, (i16, i16)>,
    timeout: Duration,
    in_flight: std::collections::VecDeque<(i32, ApiKey, i16)>,
}

impl std::fmt::Debug for Connection {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Connection({})", self.addr)
    }
}

impl Connection {
    /// Connects and negotiates API versions (ApiVersions v3, falling back to v0, KIP-511),
    /// secured as the process is configured ([`crate::security::configure`]).
    pub async fn connect(
        addr: &str,
        client_id: &str,
        timeout: Duration,
    ) -> Result<Connection, ClientError> {
        let security = crate::security::process_default();
        Connection::connect_with(addr, client_id, timeout, &security).await
    }

    /// As [`Connection::connect`], secured with `security` instead of the process's default.
    pub async fn connect_with(
        addr: &str,
        client_id: &str,
        timeout: Duration,
        security: &crate::security::ConnectionSecurity,
    ) -> Result<Connection, ClientError> {
        let stream = tokio::time::timeout(timeout, TcpStream::connect(addr))
            .await
            .map_err(|_| ClientError::Timeout {
                addr: addr.to_string(),
                timeout_ms: timeout.as_millis() as u64,
            })?
            .map_err(|source| ClientError::Connect {
                addr: addr.to_string(),
                source,
            })?;
        stream.set_nodelay(true).map_err(|source| ClientError::Io {
            addr: addr.to_string(),
            source,
        })?;
        let stream = tokio::time::timeout(timeout, crate::security::open(stream, addr, security))
            .await
            .map_err(|_| ClientError::Timeout {
                addr: addr.to_string(),
                timeout_ms: timeout.as_millis() as u64,
            })??;
        let mut conn = Connection {
            addr: addr.to_string(),
            stream,
            client_id: StrBytes::from_string(client_id.to_string()),
            next_correlation_id: 1,
            versions: HashMap::new(),
            timeout,
            in_flight: Default::default(),
        };
        let request = ApiVersionsRequest::default()
            .with_client_software_name(StrBytes::from_static_str("sluice-client"))
            .with_client_software_version(StrBytes::from_static_str(env!("CARGO_PKG_VERSION")));
        let mut response: ApiVersionsResponse = conn
            .exchange(&request, 3)
            .await
            .map_err(crate::security::refused_session)?;
        if response.error_code == 35 {
            response = conn.exchange(&ApiVersionsRequest::default(), 0).await?;
        }
        if response.error_code != 0 {
            return Err(ClientError::kafka("ApiVersions", response.error_code, None));
        }
        conn.versions = response
            .api_keys
            .iter()
            .map(|k| (k.api_key, (k.min_version, k.max_version)))
            .collect();
        crate::security::login(&mut conn, security).await?;
        Ok(conn)
    }

    /// The client id this connection's requests carry.
    pub fn client_id(&self) -> &str {
        &self.client_id
    }

    pub fn addr(&self) -> &str {
        &self.addr
    }

    /// The version to use for `api`: the highest both this client (`max`) and the broker
    /// speak, at least `min`.
    pub fn version_for(&self, api: ApiKey, min: i16, max: i16) -> Result<i16, ClientError> {
        crate::codec::negotiate(&self.versions, api, min, max)
    }

    /// Sends `request` at the best common version in `min..=max` and waits for its response.
    pub async fn call<R: Request>(
        &mut self,
        request: &R,
        min: i16,
        max: i16,
    ) -> Result<R::Response, ClientError> {
        let api = api_key::<R>()?;
        let version = self.version_for(api, min, max)?;
        self.exchange(request, version).await
    }

    async fn exchange<R: Request>(
        &mut self,
        request: &R,
        version: i16,
    ) -> Result<R::Response, ClientError> {
        self.send(request, version, true).await?;
        let frame = self.receive_frame().await?;
        self.decode::<R>(frame)
    }

    /// Writes a request without waiting; `expect_response` is false for Produce with acks=0.
    pub async fn send<R: Request>(
        &mut self,
        request: &R,
        version: i16,
        expect_response: bool,
    ) -> Result<i32, ClientError> {
        let api = api_key::<R>()?;
        let correlation_id = self.next_correlation_id;
        self.next_correlation_id = self.next_correlation_id.wrapping_add(1);
        let frame = encode_request(request, version, correlation_id, &self.client_id)?;
        self.write(&frame).await?;
        if expect_response {
            self.in_flight.push_back((correlation_id, api, version));
        }
        Ok(correlation_id)
    }

    /// Reads the next pipelined response, which must answer the oldest request sent with `send`.
    pub async fn receive<R: Request>(&mut self) -> Result<R::Response, ClientError> {
        let frame = self.receive_frame().await?;
        self.decode::<R>(frame)
    }

    fn decode<R: Request>(&mut self, frame: Bytes) -> Result<R::Response, ClientError> {
        let (correlation_id, api, version) = self.in_flight.pop_front().ok_or_else(|| {
            ClientError::Protocol("a response arrived that nobody asked for".into())
        })?;
        if api as i16 != R::KEY {
            return Err(ClientError::Protocol(format!(
                "expected a {api:?} response"
            )));
        }
        decode_response::<R>(frame, version, correlation_id)
    }

    async fn write(&mut self, bytes: &[u8]) -> Result<(), ClientError> {
        let addr = self.addr.clone();
        let stream = &mut self.stream;
        let written = async move {
            stream.write_all(bytes).await?;
            // TLS holds what the socket did not take until a flush.
            stream.flush().await
        };
        match tokio::time::timeout(self.timeout, written).await {
            Ok(r) => r.map_err(|source| ClientError::Io { addr, source }),
            Err(_) => Err(ClientError::Timeout {
                addr,
                timeout_ms: self.timeout.as_millis() as u64,
            }),
        }
    }

    async fn receive_frame(&mut self) -> Result<Bytes, ClientError> {
        let addr = self.addr.clone();
        let timeout = self.timeout;
        let stream = &mut self.stream;
        let read = async move {
            let mut head = [0u8; 4];
            stream.read_exact(&mut head).await?;
            let mut buf = BytesMut::zeroed(frame_size(head)?);
            stream.read_exact(&mut buf).await?;
            Ok::<_, std::io::Error>(buf.freeze())
        };
        match tokio::time::timeout(timeout, read).await {
            Ok(r) => r.map_err(|source| ClientError::Io { addr, source }),
            Err(_) => Err(ClientError::Timeout {
                addr,
                timeout_ms: timeout.as_millis() as u64,
            }),
        }
    }
}
