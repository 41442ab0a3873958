//! `/api/topics`: list, create, describe (configs and the partition table), edit configs,
//! add partitions, delete records (move log starts up), delete (the caller must repeat the
//! topic's name to confirm).

use std::collections::BTreeMap;

use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::IntoResponse;
use axum::Json;
use serde::{Deserialize, Serialize};
use sluice_broker::topic_admin::ConfigValue;
use sluice_broker::topics::Topic;

use crate::error::{ApiError, ApiJson, ApiQuery};
use crate::AppState;

#[derive(Debug, Serialize)]
pub struct TopicSummary {
    pub name: String,
    pub internal: bool,
    pub partitions: i32,
    pub replication_factor: i32,
    pub size_bytes: u64,
    /// Records between each partition's log start and high watermark (offsets, so compacted
    /// topics count the gaps too).
    pub messages: i64,
    pub produce_msgs_per_s: f64,
    pub produce_bytes_per_s: f64,
}

#[derive(Debug, Serialize)]
pub struct PartitionRow {
    pub partition: i32,
    pub leader: i32,
    pub replicas: Vec<i32>,
    pub in_sync_replicas: Vec<i32>,
    pub log_start_offset: i64,
    pub log_end_offset: i64,
    pub high_watermark: i64,
    pub size_bytes: u64,
    pub segments: usize,
    pub offline: bool,
}

#[derive(Debug, Serialize)]
pub struct TopicDetail {
    #[serde(flatten)]
    pub summary: TopicSummary,
    pub id: String,
    pub configs: Vec<ConfigValue>,
    pub partition_table: Vec<PartitionRow>,
}

fn summary(state: &AppState, topic: &Topic) -> TopicSummary {
    let (mut size, mut messages) = (0u64, 0i64);
    for p in topic.partitions() {
        let info = p.info();
        size += info.size_bytes;
        messages += (info.high_watermark.0 - info.log_start.0).max(0);
    }
    let rate = state.history.topic_rate(&topic.name);
    TopicSummary {
        name: topic.name.to_string(),
        internal: sluice_broker::topics::is_internal(&topic.name),
        partitions: topic.partition_count(),
        replication_factor: 1,
        size_bytes: size,
        messages,
        produce_msgs_per_s: rate.msgs_per_s,
        produce_bytes_per_s: rate.bytes_per_s,
    }
}

fn detail(state: &AppState, topic: &Topic) -> Result<TopicDetail, ApiError> {
    let node = state.broker.node_id();
    Ok(TopicDetail {
        summary: summary(state, topic),
        id: topic.id.to_string(),
        configs: state.broker.topic_configs(&topic.name)?,
        partition_table: topic
            .partitions()
            .iter()
            .map(|p| {
                let info = p.info();
                PartitionRow {
                    partition: p.index,
                    leader: if info.offline { -1 } else { node },
                    replicas: vec![node],
                    in_sync_replicas: if info.offline { vec![] } else { vec![node] },
                    log_start_offset: info.log_start.0,
                    log_end_offset: info.log_end.0,
                    high_watermark: info.high_watermark.0,
                    size_bytes: info.size_bytes,
                    segments: info.segments,
                    offline: info.offline,
                }
            })
            .collect(),
    })
}

fn find(state: &AppState, name: &str) -> Result<std::sync::Arc<Topic>, ApiError> {
    state
        .broker
        .topics()
        .get(name)
        .ok_or_else(|| ApiError::not_found(format!("no topic '{name}'")))
}

pub async fn list(State(state): State<AppState>) -> Json<Vec<TopicSummary>> {
    let mut topics: Vec<TopicSummary> = state
        .broker
        .topics()
        .list()
        .iter()
        .map(|t| summary(&state, t))
        .collect();
    topics.sort_by(|a, b| a.name.cmp(&b.name));
    Json(topics)
}

pub async fn get(
    State(state): State<AppState>,
    Path(name): Path<String>,
) -> Result<Json<TopicDetail>, ApiError> {
    let topic = find(&state, &name)?;
    Ok(Json(detail(&state, &topic)?))
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CreateTopic {
    pub name: String,
    pub partitions: Option<i32>,
    pub replication_factor: Option<i32>,
    #[serde(default)]
    pub configs: BTreeMap<String, String>,
}

pub async fn create(
    State(state): State<AppState>,
    ApiJson(body): ApiJson<CreateTopic>,
) -> Result<impl IntoResponse, ApiError> {
    let broker = state.broker.clone();
    let topic = tokio::task::spawn_blocking(move || {
        broker.create_topic(
            &body.name,
            body.partitions,
            body.replication_factor,
            body.configs,
        )
    })
    .await
    .map_err(|e| ApiError::new(StatusCode::INTERNAL_SERVER_ERROR, e.to_string()))??;
    Ok((StatusCode::CREATED, Json(detail(&state, &topic)?)))
}

#[derive(Debug, Deserialize)]
pub struct DeleteQuery {
    pub confirm: Option<String>,
}

pub async fn delete(
    State(state): State<AppState>,
    Path(name): Path<String>,
    ApiQuery(query): ApiQuery<DeleteQuery>,
) -> Result<StatusCode, ApiError> {
    find(&state, &name)?;
    if query.confirm.as_deref() != Some(name.as_str()) {
        return Err(ApiError::bad_request(format!(
            "deleting a topic destroys its data: repeat its name as ?confirm={name}"
        )));
    }
    let broker = state.broker.clone();
    tokio::task::spawn_blocking(move || broker.delete_topic(&name))
        .await
        .map_err(|e| ApiError::new(StatusCode::INTERNAL_SERVER_ERROR, e.to_string()))??;
    Ok(StatusCode::NO_CONTENT)
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SetConfigs {
    /// The topic's overrides after the change; a config left out returns to its default.
    pub configs: BTreeMap<String, String>,
}

pub async fn set_configs(
    State(state): State<AppState>,
    Path(name): Path<String>,
    ApiJson(body): ApiJson<SetConfigs>,
) -> Result<Json<TopicDetail>, ApiError> {
    find(&state, &name)?;
    if sluice_broker::topics::is_internal(&name) {
        return Err(ApiError::bad_request(format!(
            "{name} is internal; its configs are the broker's"
        )));
    }
    let broker = state.broker.clone();
    let n = name.clone();
    tokio::task::spawn_blocking(move || broker.topics().set_configs(&n, body.configs, false))
        .await
        .map_err(|e| ApiError::new(StatusCode::INTERNAL_SERVER_ERROR, e.to_string()))??;
    let topic = find(&state, &name)?;
    Ok(Json(detail(&state, &topic)?))
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AddPartitions {
    /// The new total number of partitions.
    pub count: i32,
}

pub async fn add_partitions(
    State(state): State<AppState>,
    Path(name): Path<String>,
    ApiJson(body): ApiJson<AddPartitions>,
) -> Result<Json<TopicDetail>, ApiError> {
    find(&state, &name)?;
    if sluice_broker::topics::is_internal(&name) {
        return Err(ApiError::bad_request(format!(
            "{name} is internal; its partition count is fixed"
        )));
    }
    let broker = state.broker.clone();
    let n = name.clone();
    tokio::task::spawn_blocking(move || broker.topics().add_partitions(&n, body.count, false))
        .await
        .map_err(|e| ApiError::new(StatusCode::INTERNAL_SERVER_ERROR, e.to_string()))??;
    let topic = find(&state, &name)?;
    Ok(Json(detail(&state, &topic)?))
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DeleteRecords {
    /// One partition, or every partition when absent.
    #[serde(default)]
    pub partition: Option<i32>,
    /// Records below this offset go; -1 means up to the high watermark (everything so far).
    pub before_offset: i64,
}

/// DeleteRecords from the console: the same rules as the Kafka API (internal and
/// compacted-only topics refuse, an offset past the high watermark is out of range).
pub async fn delete_records(
    State(state): State<AppState>,
    Path(name): Path<String>,
    ApiJson(body): ApiJson<DeleteRecords>,
) -> Result<Json<TopicDetail>, ApiError> {
    let topic = find(&state, &name)?;
    if body.before_offset < -1 {
        return Err(ApiError::bad_request(format!(
            "before_offset {} is negative (use -1 for everything up to the high watermark)",
            body.before_offset
        )));
    }
    if body.partition.is_none() && body.before_offset != -1 {
        return Err(ApiError::bad_request(
            "without a partition, before_offset must be -1 (every partition up to its high watermark)",
        ));
    }
    let partitions: Vec<i32> = match body.partition {
        Some(p) => vec![p],
        None => topic.partitions().iter().map(|p| p.index).collect(),
    };
    let broker = state.broker.clone();
    let n = name.clone();
    tokio::task::spawn_blocking(move || {
        partitions
            .into_iter()
            .try_for_each(|p| broker.delete_records(&n, p, body.before_offset).map(drop))
    })
    .await
    .map_err(|e| ApiError::new(StatusCode::INTERNAL_SERVER_ERROR, e.to_string()))??;
    let topic = find(&state, &name)?;
    Ok(Json(detail(&state, &topic)?))
}
