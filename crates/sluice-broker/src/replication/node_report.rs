//! What a node tells the others about itself, for the console's view of the whole cluster:
//! its version, uptime, admin address, disk, and how far behind each follower of the
//! partitions it leads is. Only the leader knows a follower's lag, so a console shows every
//! partition's lag by asking each node ([`PeerCall::Report`]) and merging the answers.

use std::time::Duration;

use futures::future::join_all;
use serde::{Deserialize, Serialize};

use super::PeerCall;
use crate::broker::Broker;

/// How long a console waits for another node's report before showing it unreachable.
const REPORT_TIMEOUT: Duration = Duration::from_millis(1500);

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct NodeReport {
    pub node: i32,
    pub version: String,
    pub uptime_ms: i64,
    /// Where this node's HTTP admin port listens, if it has one.
    pub admin_address: Option<String>,
    /// Bytes of the partition replicas' logs on this node.
    pub data_bytes: u64,
    pub disk_free_bytes: Option<u64>,
    pub disk_total_bytes: Option<u64>,
    pub connections: i64,
    /// Partitions this node leads, with their followers' lag (only the topic asked for).
    pub leading: Vec<LeaderLag>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct LeaderLag {
    pub topic: String,
    pub partition: i32,
    pub followers: Vec<ReplicaLag>,
}

/// One follower as its leader sees it.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ReplicaLag {
    pub node: i32,
    pub in_sync: bool,
    /// Records behind the leader's log end; `None` before its first fetch in this epoch.
    pub records: Option<i64>,
    /// Milliseconds since it last had everything the leader had.
    pub ms: i64,
}

impl Broker {
    /// Where this node's HTTP admin port listens (set once by whoever starts it).
    pub fn set_admin_address(&self, address: String) {
        let _ = self.admin_address.set(address);
    }

    /// This node's report; followers' lag only for partitions of `lag_of`.
    pub fn node_report(&self, lag_of: Option<&str>) -> NodeReport {
        let now = self.liveness_ms();
        let mut data_bytes = 0;
        let mut leading = Vec::new();
        for topic in self.topics.list() {
            let wanted = lag_of == Some(&*topic.name);
            for p in topic.partitions() {
                data_bytes += p.info().size_bytes;
                if !wanted {
                    continue;
                }
                let followers: Vec<ReplicaLag> = p
                    .follower_lag(now)
                    .into_iter()
                    .map(|f| ReplicaLag {
                        node: f.node.0,
                        in_sync: f.in_sync,
                        records: f.records,
                        ms: f.ms,
                    })
                    .collect();
                if !followers.is_empty() {
                    leading.push(LeaderLag {
                        topic: topic.name.to_string(),
                        partition: p.index,
                        followers,
                    });
                }
            }
        }
        let disk = crate::disk::disk_space(&self.config.data_dir);
        NodeReport {
            node: self.config.node_id,
            version: env!("CARGO_PKG_VERSION").to_string(),
            uptime_ms: self.clock.now_ms().saturating_sub(self.started_at_ms),
            admin_address: self.admin_address.get().cloned(),
            data_bytes,
            disk_free_bytes: disk.map(|d| d.0),
            disk_total_bytes: disk.map(|d| d.1),
            connections: self.metrics.connections(),
            leading,
        }
    }

    /// Every registered node's report: this node's own, the others' asked over the internal
    /// listener at once (a fenced node is not asked). An error says why a node did not answer.
    pub async fn cluster_reports(
        &self,
        lag_of: Option<&str>,
    ) -> Vec<(i32, Result<NodeReport, String>)> {
        let Some(replication) = self.replication.get() else {
            return vec![(self.config.node_id, Ok(self.node_report(lag_of)))];
        };
        let state = replication.state();
        let call = PeerCall::Report {
            lag_of: lag_of.map(str::to_string),
        };
        let asks = state.state.nodes.values().map(|n| {
            let id = n.registration.node;
            let fenced = n.fenced;
            let call = &call;
            async move {
                let report = if id == replication.me() {
                    Ok(self.node_report(lag_of))
                } else if fenced {
                    Err("fenced: the controller has not heard from it".to_string())
                } else {
                    match self.ask_peer(id, call, REPORT_TIMEOUT).await {
                        Ok(v) => serde_json::from_value(v).map_err(|e| e.to_string()),
                        Err(e) => Err(e.to_string()),
                    }
                };
                (id.0, report)
            }
        });
        join_all(asks).await
    }
}
