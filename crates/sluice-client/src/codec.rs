//! Request frames out, response frames in: pure functions over the `kafka-protocol` crate,
//! shared by the async [`crate::Connection`] and the [`crate::blocking`] one.

use std::io::Read;

use bytes::{BufMut, Bytes, BytesMut};
use kafka_protocol::messages::{ApiKey, RequestHeader, ResponseHeader};
use kafka_protocol::protocol::{Decodable, Encodable, Request, StrBytes};

use crate::error::ClientError;

/// Responses larger than this are refused (a broken or hostile peer).
pub const MAX_RESPONSE_BYTES: usize = 256 * 1024 * 1024;

pub fn api_key<R: Request>() -> Result<ApiKey, ClientError> {
    ApiKey::try_from(R::KEY)
        .map_err(|()| ClientError::Protocol(format!("unknown API key {}", R::KEY)))
}

/// The highest version of `api` in `min..=max` that a broker advertising `versions`
/// (ApiVersions: key → (min, max)) also speaks.
pub fn negotiate(
    versions: &std::collections::HashMap<i16, (i16, i16)>,
    api: ApiKey,
    min: i16,
    max: i16,
) -> Result<i16, ClientError> {
    let (broker_min, broker_max) = versions
        .get(&(api as i16))
        .copied()
        .ok_or(ClientError::Unsupported { api, min, max })?;
    let version = max.min(broker_max);
    if version < min.max(broker_min) {
        return Err(ClientError::Unsupported { api, min, max });
    }
    Ok(version)
}

/// The whole frame of a request: size, header, body.
pub fn encode_request<R: Request>(
    request: &R,
    version: i16,
    correlation_id: i32,
    client_id: &StrBytes,
) -> Result<Bytes, ClientError> {
    let api = api_key::<R>()?;
    let mut buf = BytesMut::with_capacity(256);
    buf.put_i32(0);
    RequestHeader::default()
        .with_request_api_key(R::KEY)
        .with_request_api_version(version)
        .with_correlation_id(correlation_id)
        .with_client_id(Some(client_id.clone()))
        .encode(&mut buf, R::header_version(version))
        .map_err(|e| ClientError::Protocol(format!("encoding {api:?} header: {e:#}")))?;
    request
        .encode(&mut buf, version)
        .map_err(|e| ClientError::Protocol(format!("encoding {api:?} v{version}: {e:#}")))?;
    let size = (buf.len() - 4) as i32;
    buf[..4].copy_from_slice(&size.to_be_bytes());
    Ok(buf.freeze())
}

/// Decodes a response frame (without its size) that must answer `correlation_id`.
pub fn decode_response<R: Request>(
    mut frame: Bytes,
    version: i16,
    correlation_id: i32,
) -> Result<R::Response, ClientError> {
    let api = api_key::<R>()?;
    let header = ResponseHeader::decode(&mut frame, api.response_header_version(version))
        .map_err(|e| ClientError::Protocol(format!("{api:?} response header: {e:#}")))?;
    if header.correlation_id != correlation_id {
        return Err(ClientError::Protocol(format!(
            "correlation id {} answers {correlation_id}",
            header.correlation_id
        )));
    }
    R::Response::decode(&mut frame, version)
        .map_err(|e| ClientError::Protocol(format!("{api:?} v{version} response: {e:#}")))
}

/// The size prefix of a response, checked.
pub fn frame_size(head: [u8; 4]) -> std::io::Result<usize> {
    let size = i32::from_be_bytes(head);
    usize::try_from(size)
        .ok()
        .filter(|s| *s <= MAX_RESPONSE_BYTES)
        .ok_or_else(|| {
            std::io::Error::new(
                std::io::ErrorKind::InvalidData,
                format!("response size {size}"),
            )
        })
}

/// Reads one response frame from a blocking reader.
pub fn read_frame(reader: &mut impl Read) -> std::io::Result<Bytes> {
    let mut head = [0u8; 4];
    reader.read_exact(&mut head)?;
    let mut buf = BytesMut::zeroed(frame_size(head)?);
    reader.read_exact(&mut buf)?;
    Ok(buf.freeze())
}
