//! `/api/topics`: list, create, describe (configs and the partition table), edit configs,
//! add partitions, delete records (move log starts up), delete (the caller must repeat the
//! topic's name to confirm).

use std::collections::{BTreeMap, HashMap};

use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::IntoResponse;
use axum::Json;
use serde::{Deserialize, Serialize};
use sluice_auth::acl::{Operation, ResourceType};
use sluice_broker::replication::node_report::ReplicaLag;
use sluice_broker::topic_admin::ConfigValue;
use sluice_broker::topics::Topic;

use crate::auth::Access;
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
    /// -1 while the partition has no leader (offline).
    pub leader: i32,
    pub replicas: Vec<i32>,
    pub in_sync_replicas: Vec<i32>,
    /// This node's replica's log (`null` where this node holds no replica of the partition).
    pub log_start_offset: Option<i64>,
    pub log_end_offset: Option<i64>,
    pub high_watermark: Option<i64>,
    pub size_bytes: Option<u64>,
    pub segments: Option<usize>,
    pub offline: bool,
    /// Each follower as the leader sees it (empty on a single node, or when the leader did
    /// not answer).
    pub follower_lag: Vec<ReplicaLag>,
}

#[derive(Debug, Serialize)]
pub struct TopicDetail {
    #[serde(flatten)]
    pub summary: TopicSummary,
    pub id: String,
    pub configs: Vec<ConfigValue>,
    pub partition_table: Vec<PartitionRow>,
}

/// A topic as the console shows it: in a cluster, what the applied metadata says (this node
/// may hold only some of its partitions, or none).
struct Shape {
    id: String,
    partitions: Vec<Placement>,
}

struct Placement {
    leader: Option<i32>,
    replicas: Vec<i32>,
    isr: Vec<i32>,
}

fn shape(state: &AppState, name: &str) -> Result<Shape, ApiError> {
    let missing = || ApiError::not_found(format!("no topic '{name}'"));
    if let Some(replication) = state.broker.replication() {
        let applied = replication.state();
        let topic = applied.state.topic_by_name(name).ok_or_else(missing)?;
        let ids = |v: &[sluice_cluster::NodeId]| v.iter().map(|n| n.0).collect::<Vec<_>>();
        return Ok(Shape {
            id: topic.id.to_string(),
            partitions: topic
                .partitions
                .iter()
                .map(|p| Placement {
                    leader: p.leader.map(|l| l.0),
                    replicas: ids(&p.replicas),
                    isr: ids(&p.isr),
                })
                .collect(),
        });
    }
    let topic = find(state, name)?;
    let node = state.broker.node_id();
    Ok(Shape {
        id: topic.id.to_string(),
        partitions: topic
            .partitions()
            .iter()
            .map(|p| {
                let offline = p.info().offline;
                Placement {
                    leader: (!offline).then_some(node),
                    replicas: vec![node],
                    isr: if offline { vec![] } else { vec![node] },
                }
            })
            .collect(),
    })
}

fn summary(state: &AppState, name: &str, shape: &Shape) -> TopicSummary {
    let (mut size, mut messages) = (0u64, 0i64);
    if let Some(topic) = state.broker.topics().get(name) {
        for p in topic.partitions() {
            let info = p.info();
            size += info.size_bytes;
            messages += (info.high_watermark.0 - info.log_start.0).max(0);
        }
    }
    let rate = state.history.topic_rate(name);
    TopicSummary {
        name: name.to_string(),
        internal: sluice_broker::topics::is_internal(name),
        partitions: shape.partitions.len() as i32,
        replication_factor: shape.partitions.first().map_or(0, |p| p.replicas.len()) as i32,
        size_bytes: size,
        messages,
        produce_msgs_per_s: rate.msgs_per_s,
        produce_bytes_per_s: rate.bytes_per_s,
    }
}

/// The page as the user may see it: the configs only with DescribeConfigs on the topic (as
/// Kafka's DescribeConfigs; Describe alone does not show them).
fn shown(access: &Access, state: &AppState, mut page: TopicDetail) -> TopicDetail {
    if !access.allows_quietly(
        state,
        Operation::DescribeConfigs,
        ResourceType::Topic,
        &page.summary.name,
    ) {
        page.configs.clear();
    }
    page
}

async fn detail(state: &AppState, name: &str) -> Result<TopicDetail, ApiError> {
    let shape = shape(state, name)?;
    let local = state.broker.topics().get(name);
    let mut lag: HashMap<i32, Vec<ReplicaLag>> = HashMap::new();
    if state.broker.replication().is_some() {
        for (_, report) in state.broker.cluster_reports(Some(name)).await {
            for led in report.into_iter().flat_map(|r| r.leading) {
                lag.insert(led.partition, led.followers);
            }
        }
    }
    let partition_table = shape
        .partitions
        .iter()
        .enumerate()
        .map(|(index, placement)| {
            let index = index as i32;
            let info = local
                .as_ref()
                .and_then(|t| t.partition(index))
                .map(|p| p.info());
            let info = info.as_ref();
            PartitionRow {
                partition: index,
                leader: placement.leader.unwrap_or(-1),
                replicas: placement.replicas.clone(),
                in_sync_replicas: placement.isr.clone(),
                log_start_offset: info.map(|i| i.log_start.0),
                log_end_offset: info.map(|i| i.log_end.0),
                high_watermark: info.map(|i| i.high_watermark.0),
                size_bytes: info.map(|i| i.size_bytes),
                segments: info.map(|i| i.segments),
                offline: placement.leader.is_none() || info.is_some_and(|i| i.offline),
                follower_lag: lag.remove(&index).unwrap_or_default(),
            }
        })
        .collect();
    Ok(TopicDetail {
        summary: summary(state, name, &shape),
        id: shape.id,
        configs: state.broker.topic_configs(name)?,
        partition_table,
    })
}

fn find(state: &AppState, name: &str) -> Result<std::sync::Arc<Topic>, ApiError> {
    state
        .broker
        .topics()
        .get(name)
        .ok_or_else(|| ApiError::not_found(format!("no topic '{name}'")))
}

/// The topics the user may describe (as Kafka's Metadata lists them).
pub async fn list(State(state): State<AppState>, access: Access) -> Json<Vec<TopicSummary>> {
    let names: Vec<String> = match state.broker.replication() {
        Some(replication) => replication.state().state.names.keys().cloned().collect(),
        None => state
            .broker
            .topics()
            .list()
            .iter()
            .map(|t| t.name.to_string())
            .collect(),
    };
    let mut topics: Vec<TopicSummary> = names
        .iter()
        .filter(|name| access.shows(&state, ResourceType::Topic, name))
        .filter_map(|name| Some(summary(&state, name, &shape(&state, name).ok()?)))
        .collect();
    topics.sort_by(|a, b| a.name.cmp(&b.name));
    Json(topics)
}

pub async fn get(
    State(state): State<AppState>,
    access: Access,
    Path(name): Path<String>,
) -> Result<Json<TopicDetail>, ApiError> {
    access.require(&state, Operation::Describe, ResourceType::Topic, &name)?;
    Ok(Json(shown(&access, &state, detail(&state, &name).await?)))
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CreateTopic {
    pub name: String,
    pub partitions: Option<i32>,
    pub replication_factor: Option<i32>,
    /// Each partition's replicas (node ids, the preferred leader first) instead of
    /// `partitions` and `replication_factor`, as kafka-topics.sh's `--replica-assignment`.
    pub replicas: Option<Vec<Vec<i32>>>,
    #[serde(default)]
    pub configs: BTreeMap<String, String>,
}

pub async fn create(
    State(state): State<AppState>,
    access: Access,
    ApiJson(body): ApiJson<CreateTopic>,
) -> Result<impl IntoResponse, ApiError> {
    access.may_create_topic(&state, &body.name)?;
    let name = body.name.clone();
    if body.replicas.is_some() && (body.partitions.is_some() || body.replication_factor.is_some()) {
        return Err(ApiError::bad_request(
            "give either replicas or partitions and replication_factor, not both",
        ));
    }
    if state.broker.replication().is_some() {
        match body.replicas {
            Some(replicas) => {
                state.broker.check_new_topic_in_cluster(&body.name)?;
                state
                    .broker
                    .create_assigned_topic_in_cluster(&body.name, replicas, body.configs, false)
                    .await?;
            }
            None => {
                state
                    .broker
                    .create_topic_in_cluster(
                        &body.name,
                        body.partitions.unwrap_or(-1),
                        body.replication_factor.unwrap_or(-1),
                        body.configs,
                        false,
                    )
                    .await?;
            }
        }
    } else {
        let (partitions, replication_factor) = match &body.replicas {
            Some(replicas) => {
                if replicas.is_empty() {
                    return Err(ApiError::bad_request("replicas names no partition"));
                }
                sluice_broker::topics::check_one_node_assignment(state.broker.node_id(), replicas)?;
                (Some(replicas.len() as i32), Some(1))
            }
            None => (body.partitions, body.replication_factor),
        };
        let broker = state.broker.clone();
        tokio::task::spawn_blocking(move || {
            broker.create_topic(&body.name, partitions, replication_factor, body.configs)
        })
        .await
        .map_err(|e| ApiError::new(StatusCode::INTERNAL_SERVER_ERROR, e.to_string()))??;
    }
    Ok((
        StatusCode::CREATED,
        Json(shown(&access, &state, detail(&state, &name).await?)),
    ))
}

#[derive(Debug, Deserialize)]
pub struct DeleteQuery {
    pub confirm: Option<String>,
}

pub async fn delete(
    State(state): State<AppState>,
    access: Access,
    Path(name): Path<String>,
    ApiQuery(query): ApiQuery<DeleteQuery>,
) -> Result<StatusCode, ApiError> {
    access.require(&state, Operation::Delete, ResourceType::Topic, &name)?;
    shape(&state, &name)?;
    if query.confirm.as_deref() != Some(name.as_str()) {
        return Err(ApiError::bad_request(format!(
            "deleting a topic destroys its data: repeat its name as ?confirm={name}"
        )));
    }
    if state.broker.replication().is_some() {
        state.broker.delete_topic_in_cluster(&name).await?;
        return Ok(StatusCode::NO_CONTENT);
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
    access: Access,
    Path(name): Path<String>,
    ApiJson(body): ApiJson<SetConfigs>,
) -> Result<Json<TopicDetail>, ApiError> {
    access.require(&state, Operation::AlterConfigs, ResourceType::Topic, &name)?;
    shape(&state, &name)?;
    if sluice_broker::topics::is_internal(&name) {
        return Err(ApiError::bad_request(format!(
            "{name} is internal; its configs are the broker's"
        )));
    }
    if state.broker.replication().is_some() {
        state
            .broker
            .set_topic_configs_in_cluster(&name, body.configs)
            .await?;
    } else {
        let broker = state.broker.clone();
        let n = name.clone();
        tokio::task::spawn_blocking(move || broker.topics().set_configs(&n, body.configs, false))
            .await
            .map_err(|e| ApiError::new(StatusCode::INTERNAL_SERVER_ERROR, e.to_string()))??;
    }
    Ok(Json(shown(&access, &state, detail(&state, &name).await?)))
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AddPartitions {
    /// The new total number of partitions.
    pub count: i32,
    /// The new partitions' replicas (one list of node ids per new partition, the preferred
    /// leader first); the controller places them when left out.
    pub replicas: Option<Vec<Vec<i32>>>,
}

pub async fn add_partitions(
    State(state): State<AppState>,
    access: Access,
    Path(name): Path<String>,
    ApiJson(body): ApiJson<AddPartitions>,
) -> Result<Json<TopicDetail>, ApiError> {
    access.require(&state, Operation::Alter, ResourceType::Topic, &name)?;
    shape(&state, &name)?;
    if sluice_broker::topics::is_internal(&name) {
        return Err(ApiError::bad_request(format!(
            "{name} is internal; its partition count is fixed"
        )));
    }
    if state.broker.replication().is_some() {
        state
            .broker
            .add_partitions_in_cluster(&name, body.count, body.replicas, false)
            .await?;
    } else {
        if let Some(replicas) = &body.replicas {
            state.broker.topics().check_one_node_growth(
                state.broker.node_id(),
                &name,
                body.count,
                replicas,
            )?;
        }
        let broker = state.broker.clone();
        let n = name.clone();
        tokio::task::spawn_blocking(move || broker.topics().add_partitions(&n, body.count, false))
            .await
            .map_err(|e| ApiError::new(StatusCode::INTERNAL_SERVER_ERROR, e.to_string()))??;
    }
    Ok(Json(shown(&access, &state, detail(&state, &name).await?)))
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DeleteRecords {
    /// One partition, or every partition when absent.
    #[serde(default)]
    pub partition: Option<i32>,
    /// Records below this offset go; -1 means up to the high watermark (everything so far).
    pub before_offset: i64,
    /// In a cluster, how long to wait for the in-sync followers to delete them too (as the
    /// Kafka request's timeout); 30000 when absent, at most 60000.
    #[serde(default)]
    pub timeout_ms: Option<u64>,
}

/// DeleteRecords from the console: the same rules as the Kafka API (internal and
/// compacted-only topics refuse, an offset past the high watermark is out of range).
pub async fn delete_records(
    State(state): State<AppState>,
    access: Access,
    Path(name): Path<String>,
    ApiJson(body): ApiJson<DeleteRecords>,
) -> Result<Json<TopicDetail>, ApiError> {
    access.require(&state, Operation::Delete, ResourceType::Topic, &name)?;
    let shape = shape(&state, &name)?;
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
    let most = sluice_broker::low_watermark::MAX_WAIT.as_millis();
    if body.timeout_ms.is_some_and(|t| u128::from(t) > most) {
        return Err(ApiError::bad_request(format!(
            "timeout_ms is at most {most}"
        )));
    }
    let wait = std::time::Duration::from_millis(body.timeout_ms.unwrap_or(30_000));
    let partitions: Vec<i32> = match body.partition {
        Some(p) => vec![p],
        None => (0..shape.partitions.len() as i32).collect(),
    };
    for p in partitions {
        state
            .broker
            .delete_records_at_leader(&name, p, body.before_offset, wait)
            .await?;
    }
    Ok(Json(shown(&access, &state, detail(&state, &name).await?)))
}
