#![allow(clippy::unwrap_used)] // test code: a failed unwrap is a failed test
//! Cluster nodes over loopback: every node registers itself through the controller, a node
//! that stops heartbeating is fenced after the session timeout, the controller moves with the
//! metadata leader (and does not fence the living while it takes over), and a node that comes
//! back is registered and unfenced again.

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use crate::common::{bind_voters, wait_for};
use sluice_cluster::controller::ControllerConfig;
use sluice_cluster::metadata::NodeRegistration;
use sluice_cluster::raft::node::MetadataConfig;
use sluice_cluster::runtime::{ClusterConfig, ClusterNode};
use sluice_cluster::NodeId;
use sluice_log::SystemClock;
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;
use uuid::Uuid;

const SESSION_MS: i64 = 1_000;

struct Running {
    node: Arc<ClusterNode>,
    stop: CancellationToken,
}

async fn start(
    id: u64,
    voters: &BTreeMap<u64, String>,
    dir: &Path,
    listener: TcpListener,
) -> Running {
    let stop = CancellationToken::new();
    let config = ClusterConfig {
        registration: NodeRegistration {
            node: NodeId(id as i32),
            incarnation: Uuid::new_v4(),
            kafka_host: "127.0.0.1".into(),
            kafka_port: 9000 + id as i32,
            listeners: Vec::new(),
            internal_addr: voters[&id].clone(),
            rack: None,
            directory: None,
        },
        metadata: MetadataConfig::new(id, voters.clone(), dir.join(format!("node{id}"))),
        controller: ControllerConfig {
            session_timeout_ms: SESSION_MS,
            ..Default::default()
        },
        heartbeat_interval: Duration::from_millis(100),
        tick_interval: Duration::from_millis(100),
    };
    let node = ClusterNode::start(config, listener, Arc::new(SystemClock), stop.clone())
        .await
        .unwrap();
    Running { node, stop }
}

fn live(n: &ClusterNode, id: u64) -> bool {
    n.state().state.is_live(NodeId(id as i32))
}

fn fenced(n: &ClusterNode, id: u64) -> bool {
    n.state()
        .state
        .nodes
        .get(&NodeId(id as i32))
        .is_some_and(|info| info.fenced)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nodes_register_are_fenced_when_silent_and_return() {
    let dir = tempfile::tempdir().unwrap();
    let (listeners, voters) = bind_voters(3).await;
    let mut nodes = BTreeMap::new();
    for (id, listener) in listeners {
        nodes.insert(id, start(id, &voters, dir.path(), listener).await);
    }
    wait_for("all three registered, on every node", || {
        nodes.values().all(|n| (1..=3).all(|id| live(&n.node, id)))
    })
    .await;

    // A follower of the metadata group stops: it is fenced, the others stay live.
    let leader = nodes[&1].node.metadata().leader().unwrap();
    let quiet = *nodes.keys().find(|id| **id != leader).unwrap();
    let stopped = nodes.remove(&quiet).unwrap();
    stopped.stop.cancel();
    let _ = stopped.node.metadata().raft().shutdown().await;
    wait_for("the silent node to be fenced", || {
        nodes.values().all(|n| fenced(&n.node, quiet))
    })
    .await;
    assert!(nodes.values().all(|n| live(&n.node, leader)));

    // It comes back: registered again, unfenced.
    drop(stopped);
    let listener = TcpListener::bind(&voters[&quiet]).await.unwrap();
    nodes.insert(quiet, start(quiet, &voters, dir.path(), listener).await);
    wait_for("the returning node to be live again", || {
        nodes.values().all(|n| live(&n.node, quiet))
    })
    .await;

    // The metadata leader (and so the controller) stops: a new controller takes over, fences
    // it, and keeps the other two live throughout.
    let old = nodes.remove(&leader).unwrap();
    old.stop.cancel();
    let _ = old.node.metadata().raft().shutdown().await;
    wait_for("the old controller's node to be fenced", || {
        nodes.values().all(|n| fenced(&n.node, leader))
    })
    .await;
    for n in nodes.values() {
        for id in nodes.keys() {
            assert!(
                live(&n.node, *id),
                "node {id} stayed live through the takeover"
            );
        }
    }
    for n in nodes.values() {
        n.stop.cancel();
    }
}
