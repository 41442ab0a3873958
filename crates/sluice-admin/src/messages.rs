//! The message browser's API: read a partition's records from the oldest, the newest, an
//! offset or a time, in either order; and produce a test record.
//!
//! Keys, values and header values are binary; each is sent as base64 plus, when it is valid
//! UTF-8, as text, so the console can show text, pretty JSON or hex. Values over 64 KiB are
//! cut (and marked so).

use std::sync::atomic::{AtomicU32, Ordering};

use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::Json;
use base64::engine::general_purpose::STANDARD as B64;
use base64::Engine;
use bytes::Bytes;
use serde::{Deserialize, Serialize};
use sluice_auth::acl::{Operation, ResourceType};
use sluice_broker::browse::{self, BrowseFrom, BrowseRequest, BrowsedRecord, MAX_BROWSE};
use sluice_broker::publish::NewRecord;

use crate::auth::Access;
use crate::error::{parse_partition, ApiError, ApiJson, ApiQuery};
use crate::AppState;

#[derive(Debug, Serialize)]
pub struct ShownBytes {
    pub base64: String,
    pub text: Option<String>,
    /// The full size; `base64`/`text` hold at most 64 KiB of it.
    pub size: usize,
    pub truncated: bool,
}

fn shown(bytes: &Option<browse::ShownBytes>) -> Option<ShownBytes> {
    bytes.as_ref().map(|b| ShownBytes {
        base64: B64.encode(&b.bytes),
        text: std::str::from_utf8(&b.bytes).ok().map(str::to_string),
        size: b.size,
        truncated: b.truncated(),
    })
}

#[derive(Debug, Serialize)]
pub struct ShownHeader {
    pub key: String,
    pub value: Option<ShownBytes>,
}

#[derive(Debug, Serialize)]
pub struct ShownRecord {
    pub offset: i64,
    pub timestamp: i64,
    pub timestamp_type: String,
    pub key: Option<ShownBytes>,
    pub value: Option<ShownBytes>,
    pub headers: Vec<ShownHeader>,
}

fn show(r: &BrowsedRecord) -> ShownRecord {
    ShownRecord {
        offset: r.offset,
        timestamp: r.timestamp,
        timestamp_type: r.timestamp_type.clone(),
        key: shown(&r.key),
        value: shown(&r.value),
        headers: r
            .headers
            .iter()
            .map(|(k, v)| ShownHeader {
                key: k.clone(),
                value: shown(v),
            })
            .collect(),
    }
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BrowseQuery {
    /// `oldest`, `newest` (default), `offset` or `timestamp`.
    pub from: Option<String>,
    /// The offset or the time (ms since the epoch) for `from=offset|timestamp`.
    pub value: Option<i64>,
    /// `newest_first` (default) or `oldest_first`.
    pub order: Option<String>,
    pub limit: Option<usize>,
}

#[derive(Debug, Serialize)]
pub struct BrowseResponse {
    pub topic: String,
    pub partition: i32,
    pub log_start_offset: i64,
    pub high_watermark: i64,
    pub records: Vec<ShownRecord>,
}

pub async fn browse(
    State(state): State<AppState>,
    access: Access,
    Path((topic, partition)): Path<(String, String)>,
    ApiQuery(q): ApiQuery<BrowseQuery>,
) -> Result<Json<BrowseResponse>, ApiError> {
    access.require(&state, Operation::Read, ResourceType::Topic, &topic)?;
    let partition = parse_partition(&partition)?;
    let value = || {
        q.value
            .ok_or_else(|| ApiError::bad_request("from=offset|timestamp needs 'value'"))
    };
    let from = match q.from.as_deref().unwrap_or("newest") {
        "oldest" => BrowseFrom::Oldest,
        "newest" => BrowseFrom::Newest,
        "offset" => BrowseFrom::Offset(value()?),
        "timestamp" => BrowseFrom::Timestamp(value()?),
        other => {
            return Err(ApiError::bad_request(format!(
                "'from' must be oldest, newest, offset or timestamp, not '{other}'"
            )))
        }
    };
    let newest_first = match q.order.as_deref().unwrap_or("newest_first") {
        "newest_first" => true,
        "oldest_first" => false,
        other => {
            return Err(ApiError::bad_request(format!(
                "'order' must be newest_first or oldest_first, not '{other}'"
            )))
        }
    };
    let limit = q.limit.unwrap_or(50);
    if limit == 0 || limit > MAX_BROWSE {
        return Err(ApiError::bad_request(format!(
            "'limit' must be 1..={MAX_BROWSE}, not {limit}"
        )));
    }
    let page = state
        .broker
        .browse_anywhere(BrowseRequest {
            topic: topic.clone(),
            partition,
            from,
            newest_first,
            limit,
        })
        .await?;
    Ok(Json(BrowseResponse {
        topic,
        partition,
        log_start_offset: page.log_start_offset,
        high_watermark: page.high_watermark,
        records: page.records.iter().map(show).collect(),
    }))
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ProduceHeader {
    pub key: String,
    pub value: Option<String>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ProduceRequest {
    /// The partition; when absent, the key's partition as the Java client picks it, or the
    /// next partition in turn for a record without a key.
    pub partition: Option<i32>,
    pub key: Option<String>,
    pub value: Option<String>,
    #[serde(default)]
    pub headers: Vec<ProduceHeader>,
    /// How key, value and header values are written: `text` (UTF-8, default) or `base64`.
    pub encoding: Option<String>,
}

#[derive(Debug, Serialize)]
pub struct ProduceResponse {
    pub partition: i32,
    pub offset: i64,
}

static NEXT_PARTITION: AtomicU32 = AtomicU32::new(0);

pub async fn produce(
    State(state): State<AppState>,
    access: Access,
    Path(topic): Path<String>,
    ApiJson(req): ApiJson<ProduceRequest>,
) -> Result<(StatusCode, Json<ProduceResponse>), ApiError> {
    access.require(&state, Operation::Write, ResourceType::Topic, &topic)?;
    let base64 = match req.encoding.as_deref().unwrap_or("text") {
        "text" => false,
        "base64" => true,
        other => {
            return Err(ApiError::bad_request(format!(
                "'encoding' must be text or base64, not '{other}'"
            )))
        }
    };
    let decode = |field: &str, s: Option<String>| -> Result<Option<Bytes>, ApiError> {
        match s {
            None => Ok(None),
            Some(s) if base64 => B64
                .decode(s.as_bytes())
                .map(|b| Some(Bytes::from(b)))
                .map_err(|e| ApiError::bad_request(format!("{field} is not base64: {e}"))),
            Some(s) => Ok(Some(Bytes::from(s))),
        }
    };
    let key = decode("key", req.key)?;
    let value = decode("value", req.value)?;
    let headers = req
        .headers
        .into_iter()
        .map(|h| Ok((h.key, decode("a header value", h.value)?)))
        .collect::<Result<Vec<_>, ApiError>>()?;
    let count = state.broker.partition_count_of(&topic)?;
    let partition = match (req.partition, &key) {
        (Some(p), _) => p,
        (None, Some(k)) => sluice_client::partitioner::partition_for_key(k, count),
        (None, None) => {
            i32::try_from(NEXT_PARTITION.fetch_add(1, Ordering::Relaxed) % count.max(1) as u32)
                .unwrap_or(0)
        }
    };
    let (partition, offset) = state
        .broker
        .publish_at_leader(
            &topic,
            partition,
            NewRecord {
                key,
                value,
                headers,
                timestamp_ms: None,
            },
        )
        .await?;
    Ok((
        StatusCode::CREATED,
        Json(ProduceResponse { partition, offset }),
    ))
}
