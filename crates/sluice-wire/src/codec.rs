//! Bytes ↔ typed requests and responses, over the `kafka-protocol` crate. No I/O here.
//!
//! A request frame is `api_key:i16 api_version:i16 correlation_id:i32 client_id …` followed by
//! the body; the first eight bytes are read by hand so that an unknown key or version can
//! still be answered (ApiVersions, KIP-511) or logged with its correlation id.

use bytes::{BufMut, Bytes, BytesMut};
use kafka_protocol::messages::api_versions_response::ApiVersion;
use kafka_protocol::messages::{
    ApiKey, ApiVersionsResponse, RequestHeader, RequestKind, ResponseHeader, ResponseKind,
};
use kafka_protocol::protocol::{Decodable, Encodable};

use crate::versions::ApiTable;

/// Kafka's UNSUPPORTED_VERSION error code.
const UNSUPPORTED_VERSION: i16 = 35;
/// Kafka's UNKNOWN_SERVER_ERROR error code.
pub const UNKNOWN_SERVER_ERROR: i16 = -1;

/// A decoded request.
#[derive(Debug, Clone)]
pub struct Request {
    pub header: RequestHeader,
    pub api_key: ApiKey,
    pub body: RequestKind,
}

impl Request {
    pub fn version(&self) -> i16 {
        self.header.request_api_version
    }

    pub fn correlation_id(&self) -> i32 {
        self.header.correlation_id
    }
}

/// Why a request frame could not be turned into a [`Request`].
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum DecodeError {
    #[error("frame of {0} bytes is shorter than a request header")]
    Short(usize),
    #[error("unknown API key {api_key} (correlation id {correlation_id})")]
    UnknownApiKey { api_key: i16, correlation_id: i32 },
    #[error("{api_key:?} v{version} is not supported (correlation id {correlation_id})")]
    UnsupportedVersion {
        api_key: ApiKey,
        version: i16,
        correlation_id: i32,
    },
    #[error(
        "malformed {api_key:?} v{version} request (correlation id {correlation_id}): {reason}"
    )]
    Malformed {
        api_key: ApiKey,
        version: i16,
        correlation_id: i32,
        reason: String,
    },
}

#[derive(Debug, thiserror::Error)]
#[error("cannot encode {api_key:?} v{version} response: {reason}")]
pub struct EncodeError {
    pub api_key: ApiKey,
    pub version: i16,
    pub reason: String,
}

/// Decodes one request frame (without its size prefix), accepting only what `table` lists.
pub fn decode_request(mut frame: Bytes, table: &ApiTable) -> Result<Request, DecodeError> {
    if frame.len() < 8 {
        return Err(DecodeError::Short(frame.len()));
    }
    let raw_key = i16::from_be_bytes([frame[0], frame[1]]);
    let version = i16::from_be_bytes([frame[2], frame[3]]);
    let correlation_id = i32::from_be_bytes([frame[4], frame[5], frame[6], frame[7]]);
    let api_key = ApiKey::try_from(raw_key).map_err(|()| DecodeError::UnknownApiKey {
        api_key: raw_key,
        correlation_id,
    })?;
    if !table.supports(api_key, version) {
        return Err(DecodeError::UnsupportedVersion {
            api_key,
            version,
            correlation_id,
        });
    }
    let malformed = |reason: String| DecodeError::Malformed {
        api_key,
        version,
        correlation_id,
        reason,
    };
    let header = RequestHeader::decode(&mut frame, api_key.request_header_version(version))
        .map_err(|e| malformed(format!("header: {e:#}")))?;
    let body = RequestKind::decode(api_key, &mut frame, version)
        .map_err(|e| malformed(format!("{e:#}")))?;
    Ok(Request {
        header,
        api_key,
        body,
    })
}

/// Encodes a response frame, size prefix included.
pub fn encode_response(
    api_key: ApiKey,
    version: i16,
    correlation_id: i32,
    body: &ResponseKind,
) -> Result<Bytes, EncodeError> {
    let error = |e: String| EncodeError {
        api_key,
        version,
        reason: e,
    };
    // A fetch response carries up to megabytes of records: size it once rather than grow it
    // by doubling (each growth copied everything so far).
    let capacity = match body {
        ResponseKind::Fetch(fetch) => fetch.compute_size(version).map_or(256, |size| size + 64),
        _ => 256,
    };
    let mut out = BytesMut::with_capacity(capacity);
    out.put_i32(0); // size, patched below
    ResponseHeader::default()
        .with_correlation_id(correlation_id)
        .encode(&mut out, api_key.response_header_version(version))
        .map_err(|e| error(format!("{e:#}")))?;
    body.encode(&mut out, version)
        .map_err(|e| error(format!("{e:#}")))?;
    let size = i32::try_from(out.len() - 4).map_err(|_| error("response over 2 GiB".into()))?;
    out[..4].copy_from_slice(&size.to_be_bytes());
    Ok(out.freeze())
}

/// An error response to `api_key` carrying `error_code` in its top-level error field, for
/// the APIs whose response has one; `None` for the others (their errors are per topic,
/// partition or group, which only the handler can fill in). At versions without the
/// top-level field, encoding this response fails, which callers treat as `None`.
pub fn error_response(api_key: ApiKey, error_code: i16) -> Option<ResponseKind> {
    use kafka_protocol::messages as m;
    macro_rules! with_error {
        ($($api:ident => $response:ident),* $(,)?) => {
            match api_key {
                $(ApiKey::$api => Some(ResponseKind::$api(
                    m::$response::default().with_error_code(error_code),
                )),)*
                _ => None,
            }
        };
    }
    with_error! {
        ApiVersions => ApiVersionsResponse,
        Fetch => FetchResponse,
        DescribeCluster => DescribeClusterResponse,
        DescribeLogDirs => DescribeLogDirsResponse,
        InitProducerId => InitProducerIdResponse,
        FindCoordinator => FindCoordinatorResponse,
        JoinGroup => JoinGroupResponse,
        SyncGroup => SyncGroupResponse,
        Heartbeat => HeartbeatResponse,
        LeaveGroup => LeaveGroupResponse,
        ConsumerGroupHeartbeat => ConsumerGroupHeartbeatResponse,
        OffsetFetch => OffsetFetchResponse,
        ListGroups => ListGroupsResponse,
        OffsetDelete => OffsetDeleteResponse,
        AddPartitionsToTxn => AddPartitionsToTxnResponse,
        AddOffsetsToTxn => AddOffsetsToTxnResponse,
        EndTxn => EndTxnResponse,
        ListTransactions => ListTransactionsResponse,
    }
}

/// The answer to an ApiVersions request of a version we do not know (KIP-511): a v0 response
/// with UNSUPPORTED_VERSION and our table, so the client can retry with a version we speak.
pub fn api_versions_fallback(correlation_id: i32, table: &ApiTable) -> Result<Bytes, EncodeError> {
    encode_response(
        ApiKey::ApiVersions,
        0,
        correlation_id,
        &ResponseKind::ApiVersions(api_versions_body(table, UNSUPPORTED_VERSION)),
    )
}

/// The ApiVersions response body listing `table`.
pub fn api_versions_body(table: &ApiTable, error_code: i16) -> ApiVersionsResponse {
    ApiVersionsResponse::default()
        .with_error_code(error_code)
        .with_api_keys(
            table
                .advertised()
                .map(|r| {
                    ApiVersion::default()
                        .with_api_key(r.key as i16)
                        .with_min_version(r.min)
                        .with_max_version(r.max)
                })
                .collect(),
        )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::versions::ApiRange;
    use kafka_protocol::messages::metadata_request::MetadataRequestTopic;
    use kafka_protocol::messages::{MetadataRequest, MetadataResponse, TopicName};
    use kafka_protocol::protocol::StrBytes;
    use proptest::prelude::*;

    fn table() -> ApiTable {
        ApiTable::new(vec![
            ApiRange {
                key: ApiKey::ApiVersions,
                min: 0,
                max: 4,
            },
            ApiRange {
                key: ApiKey::Metadata,
                min: 1,
                max: 12,
            },
        ])
    }

    fn metadata_frame(version: i16, topics: &[&str]) -> Bytes {
        let mut buf = BytesMut::new();
        RequestHeader::default()
            .with_request_api_key(ApiKey::Metadata as i16)
            .with_request_api_version(version)
            .with_correlation_id(77)
            .with_client_id(Some(StrBytes::from_static_str("test")))
            .encode(&mut buf, ApiKey::Metadata.request_header_version(version))
            .unwrap();
        MetadataRequest::default()
            .with_topics(Some(
                topics
                    .iter()
                    .map(|t| {
                        MetadataRequestTopic::default()
                            .with_name(Some(TopicName(StrBytes::from_string(t.to_string()))))
                    })
                    .collect(),
            ))
            .encode(&mut buf, version)
            .unwrap();
        buf.freeze()
    }

    #[test]
    fn decodes_a_request_at_every_supported_version() {
        for version in 1..=12 {
            let req = decode_request(metadata_frame(version, &["a", "b"]), &table()).unwrap();
            assert_eq!(req.correlation_id(), 77);
            assert_eq!(req.version(), version);
            let RequestKind::Metadata(body) = req.body else {
                panic!("wrong kind")
            };
            assert_eq!(body.topics.unwrap().len(), 2);
        }
    }

    #[test]
    fn refuses_unknown_keys_versions_and_garbage() {
        assert!(matches!(
            decode_request(metadata_frame(13, &["a"]), &table()),
            Err(DecodeError::UnsupportedVersion { version: 13, .. })
        ));
        assert!(matches!(
            decode_request(Bytes::from_static(&[0x7f, 0, 0, 0, 0, 0, 0, 9]), &table()),
            Err(DecodeError::UnknownApiKey {
                correlation_id: 9,
                ..
            })
        ));
        let whole = metadata_frame(12, &["abc"]);
        let cut = whole.slice(..whole.len() - 2);
        assert!(matches!(
            decode_request(cut, &table()),
            Err(DecodeError::Malformed { .. })
        ));
        assert_eq!(
            decode_request(Bytes::from_static(&[0, 3]), &table()).unwrap_err(),
            DecodeError::Short(2)
        );
    }

    #[test]
    fn responses_carry_size_and_correlation_id() {
        let frame = encode_response(
            ApiKey::Metadata,
            12,
            77,
            &ResponseKind::Metadata(MetadataResponse::default()),
        )
        .unwrap();
        let size = i32::from_be_bytes(frame[..4].try_into().unwrap()) as usize;
        assert_eq!(size, frame.len() - 4);
        assert_eq!(i32::from_be_bytes(frame[4..8].try_into().unwrap()), 77);
        let mut body = frame.slice(8..);
        body = body.slice(1..); // flexible header v1: empty tagged fields
        let decoded = MetadataResponse::decode(&mut body, 12).unwrap();
        assert_eq!(decoded, MetadataResponse::default());
    }

    #[test]
    fn a_huge_array_count_is_a_decode_error_not_an_abort() {
        // Metadata v12: header v2 (key, version, correlation id, client id "", no tags), then
        // a compact topics array claiming 2^32-2 entries in 3 bytes.
        let frame = Bytes::from_static(&[
            0, 3, 0, 12, 0, 0, 0, 1, 0, 0, 0, 0xff, 0xff, 0xff, 0xff, 0x0f, 0, 0,
        ]);
        assert!(matches!(
            decode_request(frame, &table()),
            Err(DecodeError::Malformed { .. })
        ));
    }

    #[test]
    fn api_versions_fallback_is_a_v0_response() {
        let frame = api_versions_fallback(5, &table()).unwrap();
        let mut body = frame.slice(8..);
        let decoded = ApiVersionsResponse::decode(&mut body, 0).unwrap();
        assert_eq!(decoded.error_code, UNSUPPORTED_VERSION);
        assert_eq!(decoded.api_keys.len(), 2);
    }

    proptest! {
        /// Whatever bytes arrive, decoding returns (it never panics); valid frames round-trip.
        #[test]
        fn arbitrary_bytes_never_panic(bytes in prop::collection::vec(any::<u8>(), 0..200)) {
            let _ = decode_request(Bytes::from(bytes), &table());
        }

        #[test]
        fn metadata_round_trips(names in prop::collection::vec("[a-z]{1,20}", 0..10), version in 1i16..=12) {
            let refs: Vec<&str> = names.iter().map(String::as_str).collect();
            let req = decode_request(metadata_frame(version, &refs), &table()).unwrap();
            let RequestKind::Metadata(body) = req.body else { panic!("wrong kind") };
            let got: Vec<String> = body.topics.unwrap().into_iter().map(|t| t.name.unwrap().0.to_string()).collect();
            prop_assert_eq!(got, names);
        }
    }
}
