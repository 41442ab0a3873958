#![allow(clippy::unwrap_used)] // test code: a failed unwrap is a failed test
//! The metadata Raft group over real sockets on loopback: three nodes bootstrap together, a
//! proposal from any node commits and applies on all, the group survives losing its leader,
//! and a stopped node catches up when it returns (from its own files).

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;

use crate::common::{bind_voters, knows, register, wait_for};
use sluice_cluster::metadata::MetadataRecord;
use sluice_cluster::raft::node::{MetadataConfig, MetadataNode};
use sluice_cluster::NodeId;
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;

struct Running {
    node: Arc<MetadataNode>,
    stop: CancellationToken,
}

async fn start(
    id: u64,
    voters: &BTreeMap<u64, String>,
    dir: &Path,
    listener: TcpListener,
) -> Running {
    let stop = CancellationToken::new();
    let config = MetadataConfig::new(id, voters.clone(), dir.join(format!("node{id}")));
    let node = MetadataNode::start(config, stop.clone()).await.unwrap();
    tokio::spawn(sluice_cluster::raft::network::serve(
        listener,
        Arc::default(),
        Arc::clone(&node),
        stop.clone(),
    ));
    Running { node, stop }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_nodes_agree_survive_their_leader_and_catch_up() {
    let dir = tempfile::tempdir().unwrap();
    let (listeners, voters) = bind_voters(3).await;
    let mut nodes = BTreeMap::new();
    for (id, listener) in listeners {
        nodes.insert(id, start(id, &voters, dir.path(), listener).await);
    }
    wait_for("a leader", || {
        nodes.values().all(|n| n.node.leader().is_some())
    })
    .await;

    // A proposal through a follower is forwarded, committed, and applied everywhere.
    let leader = nodes[&1].node.leader().unwrap();
    let follower = *nodes.keys().find(|id| **id != leader).unwrap();
    let outcome = nodes[&follower].node.propose(register(7)).await.unwrap();
    assert_eq!(outcome.refused, None);
    wait_for("every node to apply", || {
        nodes.values().all(|n| knows(&n.node, 7))
    })
    .await;

    // A command that breaks an invariant is refused whole, the same way on every node.
    let bad = vec![
        register(8).remove(0),
        MetadataRecord::FenceNode { node: NodeId(99) },
    ];
    let outcome = nodes[&leader].node.propose(bad).await.unwrap();
    assert!(outcome.refused.unwrap().contains("unknown node 99"));
    assert!(
        !knows(&nodes[&leader].node, 8),
        "nothing of a refused command applies"
    );

    // The leader stops: the other two elect a new one and keep committing.
    let old = nodes.remove(&leader).unwrap();
    old.stop.cancel();
    let _ = old.node.raft().shutdown().await;
    wait_for("a new leader", || {
        nodes
            .values()
            .all(|n| n.node.leader().is_some_and(|l| l != leader))
    })
    .await;
    let any = nodes.values().next().unwrap();
    assert_eq!(any.node.propose(register(9)).await.unwrap().refused, None);
    wait_for("the survivors to apply", || {
        nodes.values().all(|n| knows(&n.node, 9))
    })
    .await;

    // It comes back from its files and catches up.
    drop(old);
    let listener = TcpListener::bind(&voters[&leader]).await.unwrap();
    let back = start(leader, &voters, dir.path(), listener).await;
    wait_for("the returning node to catch up", || {
        knows(&back.node, 9) && knows(&back.node, 7)
    })
    .await;
    for n in nodes.values().chain([&back]) {
        n.stop.cancel();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lone_voter_waits_then_leads_and_its_own_group_is_not_guarded_after_a_restart() {
    let dir = tempfile::tempdir().unwrap();
    let (mut listeners, voters) = bind_voters(1).await;
    let started = tokio::time::Instant::now();
    let first = start(1, &voters, dir.path(), listeners.remove(&1).unwrap()).await;
    wait_for("the lone voter to lead", || first.node.leader() == Some(1)).await;
    assert!(
        started.elapsed() >= std::time::Duration::from_secs(3),
        "it waited to be called on before starting a new group"
    );
    let outcome = first.node.propose(register(5)).await.unwrap();
    assert_eq!(outcome.refused, None);

    // Stopped as if between its bootstrap and the marker's removal: the marker is back, but
    // the stored group is its own (only it votes, its own vote): it leads again.
    first.stop.cancel();
    let _ = first.node.raft().shutdown().await;
    drop(first);
    let meta = dir.path().join("node1");
    sluice_cluster::raft::wiped_voter::mark(&meta).unwrap();
    let listener = TcpListener::bind(&voters[&1]).await.unwrap();
    let again = start(1, &voters, dir.path(), listener).await;
    wait_for("the restarted lone voter to lead", || {
        again.node.leader() == Some(1)
    })
    .await;
    assert!(knows(&again.node, 5));
    assert_eq!(again.node.propose(register(6)).await.unwrap().refused, None);
    assert!(
        !sluice_cluster::raft::wiped_voter::marked(&meta),
        "the marker is removed once the node runs unguarded"
    );
    again.stop.cancel();
}
