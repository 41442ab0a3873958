//! `/api/overview`: the cluster at a glance (nodes, controller, partition health, current
//! rates) and `/api/overview/history`, the last 15 minutes of traffic for the charts.

use axum::extract::State;
use axum::Json;
use serde::Serialize;

use crate::history::TrafficPoint;
use crate::AppState;

#[derive(Debug, Serialize)]
pub struct Node {
    pub id: i32,
    pub kafka_address: String,
    pub admin_address: String,
    pub roles: Vec<&'static str>,
    pub status: &'static str,
    pub version: &'static str,
    pub uptime_ms: i64,
    /// Bytes of the partitions' logs on this node.
    pub data_bytes: u64,
    pub disk_free_bytes: Option<u64>,
    pub disk_total_bytes: Option<u64>,
}

#[derive(Debug, Serialize)]
pub struct Overview {
    pub cluster_id: String,
    pub controller_id: i32,
    pub nodes: Vec<Node>,
    pub topics: usize,
    pub partitions: usize,
    pub under_replicated_partitions: usize,
    pub offline_partitions: usize,
    pub groups: usize,
    pub connections: i64,
    pub traffic: Option<TrafficPoint>,
}

pub async fn overview(State(state): State<AppState>) -> Json<Overview> {
    let broker = &state.broker;
    let status = broker.status();
    let (mut partitions, mut offline, mut data_bytes) = (0usize, 0usize, 0u64);
    for t in &status.topics {
        for p in &t.partitions {
            partitions += 1;
            offline += usize::from(p.offline);
            data_bytes += p.size_bytes;
        }
    }
    let disk = sluice_broker::disk::disk_space(&broker.config().data_dir);
    Json(Overview {
        cluster_id: status.cluster_id,
        controller_id: status.node_id,
        nodes: vec![Node {
            id: status.node_id,
            kafka_address: status.kafka_listener,
            admin_address: state.admin_address.clone(),
            roles: vec!["broker", "controller"],
            status: if offline > 0 { "degraded" } else { "online" },
            version: status.version,
            uptime_ms: status.uptime_ms,
            data_bytes,
            disk_free_bytes: disk.map(|d| d.0),
            disk_total_bytes: disk.map(|d| d.1),
        }],
        topics: status.topics.len(),
        partitions,
        // Every partition has one replica, on this node: it is its own in-sync set.
        under_replicated_partitions: 0,
        offline_partitions: offline,
        groups: broker.groups_summary().len(),
        connections: broker.metrics().connections(),
        traffic: state.history.latest(),
    })
}

#[derive(Debug, Serialize)]
pub struct History {
    pub interval_ms: u64,
    pub points: Vec<TrafficPoint>,
}

pub async fn history(State(state): State<AppState>) -> Json<History> {
    Json(History {
        interval_ms: crate::history::INTERVAL.as_millis() as u64,
        points: state.history.traffic(),
    })
}
