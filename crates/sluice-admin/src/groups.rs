//! `/api/groups`: consumer groups with their members, assignments and lag, the lag of the
//! last 15 minutes, and offset resets with a preview (`dry_run`).

use axum::extract::{Path, State};
use axum::Json;
use serde::{Deserialize, Serialize};
use sluice_auth::acl::{Operation, ResourceType};
use sluice_broker::broker::GroupStatus;
use sluice_broker::offset_reset::{OffsetChange, ResetTo};

use crate::auth::Access;
use crate::error::{ApiError, ApiJson};
use crate::history::LagPoint;
use crate::AppState;

/// A row of the list: every group of the cluster, each as its coordinator reports it (the
/// group's page is on that node's console: `admin_address`).
pub type GroupRow = sluice_broker::replication::cluster_groups::GroupReport;

/// The groups the user may describe (as Kafka's ListGroups lists them).
pub async fn list(State(state): State<AppState>, access: Access) -> Json<Vec<GroupRow>> {
    let (mut rows, missing) = state.broker.cluster_groups().await;
    rows.retain(|row| access.shows(&state, ResourceType::Group, &row.group));
    for (node, why) in missing {
        tracing::info!(node, %why, "a node did not list its consumer groups");
    }
    Json(rows)
}

fn status(state: &AppState, group: &str) -> Result<GroupStatus, ApiError> {
    state.broker.group_status(group).ok_or_else(|| {
        match state.broker.group_coordinator_elsewhere(group) {
            Some(node) => ApiError::not_found(format!(
                "consumer group '{group}' is coordinated by node {node}, not this one: its page \
                 is on node {node}'s console (the group list links to it)"
            )),
            None => ApiError::not_found(format!("no consumer group '{group}'")),
        }
    })
}

pub async fn get(
    State(state): State<AppState>,
    access: Access,
    Path(group): Path<String>,
) -> Result<Json<GroupStatus>, ApiError> {
    access.require(&state, Operation::Describe, ResourceType::Group, &group)?;
    let mut group = status(&state, &group)?;
    // As OffsetFetch: the committed offsets of topics one may describe.
    group
        .offsets
        .retain(|o| access.shows(&state, ResourceType::Topic, &o.topic));
    Ok(Json(group))
}

pub async fn lag_history(
    State(state): State<AppState>,
    access: Access,
    Path(group): Path<String>,
) -> Result<Json<Vec<LagPoint>>, ApiError> {
    access.require(&state, Operation::Describe, ResourceType::Group, &group)?;
    status(&state, &group)?;
    Ok(Json(state.history.lag(&group)))
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ResetRequest {
    pub topic: String,
    /// The partitions to reset; all of the topic's when empty or absent.
    #[serde(default)]
    pub partitions: Vec<i32>,
    /// `earliest`, `latest`, `offset`, `timestamp` or `shift`.
    pub to: String,
    /// The offset (`offset`), time in ms since the epoch (`timestamp`) or delta (`shift`).
    pub value: Option<i64>,
    /// Only compute the new offsets (the preview).
    #[serde(default)]
    pub dry_run: bool,
}

#[derive(Debug, Serialize)]
pub struct ResetResponse {
    pub dry_run: bool,
    pub changes: Vec<OffsetChange>,
}

fn reset_to(req: &ResetRequest) -> Result<ResetTo, ApiError> {
    let value = || {
        req.value
            .ok_or_else(|| ApiError::bad_request(format!("'to': '{}' needs a 'value'", req.to)))
    };
    Ok(match req.to.as_str() {
        "earliest" => ResetTo::Earliest,
        "latest" => ResetTo::Latest,
        "offset" => ResetTo::Offset(value()?),
        "timestamp" => ResetTo::Timestamp(value()?),
        "shift" => ResetTo::ShiftBy(value()?),
        other => {
            return Err(ApiError::bad_request(format!(
                "'to' must be earliest, latest, offset, timestamp or shift, not '{other}'"
            )))
        }
    })
}

/// As OffsetCommit: Read on the group and on the topic.
pub async fn reset_offsets(
    State(state): State<AppState>,
    access: Access,
    Path(group): Path<String>,
    ApiJson(req): ApiJson<ResetRequest>,
) -> Result<Json<ResetResponse>, ApiError> {
    access.require(&state, Operation::Read, ResourceType::Group, &group)?;
    access.require(&state, Operation::Read, ResourceType::Topic, &req.topic)?;
    let to = reset_to(&req)?;
    let changes = state
        .broker
        .reset_group_offsets(&group, &req.topic, &req.partitions, to, req.dry_run)
        .await?;
    Ok(Json(ResetResponse {
        dry_run: req.dry_run,
        changes,
    }))
}
