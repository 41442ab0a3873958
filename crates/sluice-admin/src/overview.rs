//! `/api/overview`: the cluster at a glance (nodes, controller, partition health, current
//! rates) and `/api/overview/history`, the last 15 minutes of traffic for the charts.

use std::collections::HashMap;

use axum::extract::State;
use axum::Json;
use serde::Serialize;
use sluice_broker::replication::node_report::NodeReport;
use sluice_broker::replication::Replication;

use crate::history::TrafficPoint;
use crate::AppState;

#[derive(Debug, Serialize)]
pub struct Node {
    pub id: i32,
    pub kafka_address: String,
    /// Unknown for a node that did not answer (or has no admin port).
    pub admin_address: Option<String>,
    pub rack: Option<String>,
    pub roles: Vec<&'static str>,
    /// online, degraded (single node with an offline partition), fenced (the controller has
    /// not heard from it) or unreachable (registered and alive, but it did not answer here).
    pub status: &'static str,
    pub version: Option<String>,
    pub uptime_ms: Option<i64>,
    /// Bytes of the partitions' logs on this node.
    pub data_bytes: Option<u64>,
    pub disk_free_bytes: Option<u64>,
    pub disk_total_bytes: Option<u64>,
    /// Open client connections on this node.
    pub connections: Option<i64>,
    /// Why the other fields are unknown.
    pub error: Option<String>,
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
    /// Consumer groups (in a cluster: of every node that answered).
    pub groups: usize,
    /// Open client connections (in a cluster: summed over the nodes that answered).
    pub connections: i64,
    /// This node's traffic in the last second.
    pub traffic: Option<TrafficPoint>,
}

pub async fn overview(State(state): State<AppState>) -> Json<Overview> {
    match state.broker.replication() {
        Some(replication) => Json(in_cluster(&state, replication).await),
        None => Json(on_one_node(&state)),
    }
}

fn on_one_node(state: &AppState) -> Overview {
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
    Overview {
        cluster_id: status.cluster_id,
        controller_id: status.node_id,
        nodes: vec![Node {
            id: status.node_id,
            kafka_address: status.kafka_listener,
            admin_address: Some(state.admin_address.clone()),
            rack: None,
            roles: vec!["broker", "controller"],
            status: if offline > 0 { "degraded" } else { "online" },
            version: Some(status.version.to_string()),
            uptime_ms: Some(status.uptime_ms),
            data_bytes: Some(data_bytes),
            disk_free_bytes: disk.map(|d| d.0),
            disk_total_bytes: disk.map(|d| d.1),
            connections: Some(broker.metrics().connections()),
            error: None,
        }],
        topics: status.topics.len(),
        partitions,
        // Every partition has one replica, on this node: it is its own in-sync set.
        under_replicated_partitions: 0,
        offline_partitions: offline,
        groups: broker.groups_summary().len(),
        connections: broker.metrics().connections(),
        traffic: state.history.latest(),
    }
}

/// The cluster as this node's applied metadata has it, with each node's own report and its
/// consumer groups (asked over the internal listener). The traffic is the cluster's (the
/// history sampler sums every node's), its produce P99 this node's.
async fn in_cluster(state: &AppState, replication: &Replication) -> Overview {
    let broker = &state.broker;
    let applied = replication.state();
    let cluster = &applied.state;
    let voters = replication.node().metadata().voter_ids();
    let controller = broker.controller_id();
    let (reports, (groups, _)) =
        tokio::join!(broker.cluster_reports(None), broker.cluster_groups());
    let reports: HashMap<i32, Result<NodeReport, String>> = reports.into_iter().collect();
    let nodes = cluster
        .nodes
        .values()
        .map(|n| {
            let id = n.registration.node.0;
            let mut roles = vec!["broker"];
            if u64::try_from(id).is_ok_and(|v| voters.contains(&v)) {
                roles.push("voter");
            }
            if id == controller {
                roles.push("controller");
            }
            let report = reports.get(&id);
            let ok = report.and_then(|r| r.as_ref().ok());
            Node {
                id,
                kafka_address: format!(
                    "{}:{}",
                    n.registration.kafka_host, n.registration.kafka_port
                ),
                admin_address: ok.and_then(|r| r.admin_address.clone()),
                rack: n.registration.rack.clone(),
                roles,
                status: match (n.fenced, ok) {
                    (true, _) => "fenced",
                    (false, Some(_)) => "online",
                    (false, None) => "unreachable",
                },
                version: ok.map(|r| r.version.clone()),
                uptime_ms: ok.map(|r| r.uptime_ms),
                data_bytes: ok.map(|r| r.data_bytes),
                disk_free_bytes: ok.and_then(|r| r.disk_free_bytes),
                disk_total_bytes: ok.and_then(|r| r.disk_total_bytes),
                connections: ok.map(|r| r.connections),
                error: report.and_then(|r| r.as_ref().err().cloned()),
            }
        })
        .collect();
    let partitions = cluster.topics.values().flat_map(|t| &t.partitions);
    let (mut count, mut under, mut offline) = (0, 0, 0);
    for p in partitions {
        count += 1;
        under += usize::from(p.isr.len() < p.replicas.len());
        offline += usize::from(p.leader.is_none());
    }
    Overview {
        cluster_id: broker.cluster_id().to_string(),
        controller_id: controller,
        nodes,
        topics: cluster.topics.len(),
        partitions: count,
        under_replicated_partitions: under,
        offline_partitions: offline,
        groups: groups.len(),
        connections: reports.values().flatten().map(|r| r.connections).sum(),
        traffic: state.history.latest(),
    }
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
