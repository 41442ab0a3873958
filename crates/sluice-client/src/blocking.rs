//! A blocking connection on a `std::net::TcpStream`, for load generators that run on their own
//! threads and need sub-millisecond timing (the async runtime's timer has 1 ms granularity).
//! Same codec as the async connection, and the same security: TLS and a SASL login when the
//! process is configured for them ([`crate::security::configure`]).

use std::collections::HashMap;
use std::net::TcpStream;
use std::time::Duration;

use bytes::Bytes;
use kafka_protocol::messages::{ApiKey, ApiVersionsRequest, ApiVersionsResponse};
use kafka_protocol::protocol::{Request, StrBytes};

use crate::blocking_stream::{ReadHalf, WriteHalf};
use crate::codec::{api_key, decode_response, encode_request, read_frame};
use crate::error::ClientError;
use crate::security::{authenticate_request, check_handshake, handshake_request, LoginExchange};

pub use crate::blocking_stream::ReadHalf as ResponseReader;

pub struct BlockingConnection {
    addr: String,
    writer: WriteHalf,
    /// `None` once [`BlockingConnection::split_reader`] took it.
    reader: Option<ReadHalf>,
    client_id: StrBytes,
    next_correlation_id: i32,
    versions: HashMap<i16, (i16, i16)>,
}

impl std::fmt::Debug for BlockingConnection {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "BlockingConnection({})", self.addr)
    }
}

impl BlockingConnection {
    pub fn connect(
        addr: &str,
        client_id: &str,
        timeout: Duration,
    ) -> Result<BlockingConnection, ClientError> {
        let io = |source| ClientError::Io {
            addr: addr.to_string(),
            source,
        };
        let stream = connect_within(addr, timeout).map_err(|source| ClientError::Connect {
            addr: addr.to_string(),
            source,
        })?;
        stream.set_nodelay(true).map_err(io)?;
        stream.set_read_timeout(Some(timeout)).map_err(io)?;
        stream.set_write_timeout(Some(timeout)).map_err(io)?;
        let (writer, reader) = crate::blocking_stream::open(stream, addr)?;
        let mut conn = BlockingConnection {
            addr: addr.to_string(),
            writer,
            reader: Some(reader),
            client_id: StrBytes::from_string(client_id.to_string()),
            next_correlation_id: 1,
            versions: HashMap::new(),
        };
        let response: ApiVersionsResponse = conn.exchange(&ApiVersionsRequest::default(), 0)?;
        if response.error_code != 0 {
            return Err(ClientError::kafka("ApiVersions", response.error_code, None));
        }
        conn.versions = response
            .api_keys
            .iter()
            .map(|k| (k.api_key, (k.min_version, k.max_version)))
            .collect();
        conn.login()?;
        Ok(conn)
    }

    /// Logs in when the process is configured for SASL.
    fn login(&mut self) -> Result<(), ClientError> {
        let Some(login) = crate::security::sasl_login() else {
            return Ok(());
        };
        let r = self.call(&handshake_request(&login), 1, 1)?;
        check_handshake(&login, &r)?;
        let (mut exchange, mut token) = LoginExchange::start(&login);
        loop {
            let r = self.call(&authenticate_request(token), 0, 1)?;
            match exchange.next(&login, &r)? {
                Some(next) => token = next,
                None => return Ok(()),
            }
        }
    }

    pub fn addr(&self) -> &str {
        &self.addr
    }

    /// The highest version of `api` in `min..=max` that the broker speaks.
    pub fn version_for(&self, api: ApiKey, min: i16, max: i16) -> Result<i16, ClientError> {
        crate::codec::negotiate(&self.versions, api, min, max)
    }

    pub fn call<R: Request>(
        &mut self,
        request: &R,
        min: i16,
        max: i16,
    ) -> Result<R::Response, ClientError> {
        let version = self.version_for(api_key::<R>()?, min, max)?;
        self.exchange(request, version)
    }

    fn exchange<R: Request>(
        &mut self,
        request: &R,
        version: i16,
    ) -> Result<R::Response, ClientError> {
        let correlation_id = self.send(request, version)?;
        let frame = self.receive_frame()?;
        decode_response::<R>(frame, version, correlation_id)
    }

    /// Writes a request; returns its correlation id (pipelining: read responses in order).
    pub fn send<R: Request>(&mut self, request: &R, version: i16) -> Result<i32, ClientError> {
        let correlation_id = self.next_correlation_id;
        self.next_correlation_id = self.next_correlation_id.wrapping_add(1);
        let frame = encode_request(request, version, correlation_id, &self.client_id)?;
        self.writer
            .write_all(&frame)
            .map_err(|source| ClientError::Io {
                addr: self.addr.clone(),
                source,
            })?;
        Ok(correlation_id)
    }

    pub fn receive_frame(&mut self) -> Result<Bytes, ClientError> {
        let addr = &self.addr;
        let reader = self.reader.as_mut().ok_or_else(|| ClientError::Io {
            addr: addr.clone(),
            source: std::io::Error::other("this connection's responses are read elsewhere"),
        })?;
        read_frame(reader).map_err(|source| ClientError::Io {
            addr: addr.clone(),
            source,
        })
    }

    /// Takes the reading half, for reading responses on another thread (`read_frame` on it);
    /// this connection then only sends.
    pub fn split_reader(&mut self) -> Result<ResponseReader, ClientError> {
        self.reader.take().ok_or_else(|| ClientError::Io {
            addr: self.addr.clone(),
            source: std::io::Error::other("the reading half was already taken"),
        })
    }
}

/// Connects to the first of `addr`'s addresses that answers within `timeout` each (an address
/// that drops packets would otherwise hold the caller for the system's connect timeout,
/// minutes on Linux).
fn connect_within(addr: &str, timeout: Duration) -> std::io::Result<TcpStream> {
    use std::net::ToSocketAddrs;
    let mut last = None;
    for a in addr.to_socket_addrs()? {
        match TcpStream::connect_timeout(&a, timeout) {
            Ok(stream) => return Ok(stream),
            Err(e) => last = Some(e),
        }
    }
    Err(last.unwrap_or_else(|| {
        std::io::Error::new(
            std::io::ErrorKind::InvalidInput,
            "the name resolves to no address",
        )
    }))
}
