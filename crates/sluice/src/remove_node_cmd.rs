//! `sluice cluster remove-node N`: drain a node, then forget it. Every partition with a
//! replica on N moves that replica to the live node holding the fewest replicas that the
//! partition does not use yet (AlterPartitionReassignments, optionally throttled); once the
//! moves complete and N is down, the cluster forgets it (UnregisterBroker). Run against a node
//! still running, it drains it and says to stop it and run the command again.

use std::collections::{BTreeMap, BTreeSet};
use std::io::Write;
use std::time::Duration;

use anyhow::bail;
use sluice_client::reassignment::Move;
use sluice_client::Client;

pub async fn run(
    client: &mut Client,
    node: i32,
    wait: Duration,
    out: &mut impl Write,
) -> anyhow::Result<()> {
    let described = client.describe_cluster().await?;
    let Some(me) = described.nodes.iter().find(|n| n.id == node) else {
        bail!("node {node} is not a node of this cluster");
    };
    let down = me.fenced;
    let live: BTreeSet<i32> = described
        .nodes
        .iter()
        .filter(|n| !n.fenced && n.id != node)
        .map(|n| n.id)
        .collect();
    let metadata = client.metadata(None).await?;
    let mut load: BTreeMap<i32, usize> = live.iter().map(|n| (*n, 0)).collect();
    for t in &metadata.topics {
        for p in &t.partitions {
            for r in &p.replica_nodes {
                if let Some(count) = load.get_mut(&r.0) {
                    *count += 1;
                }
            }
        }
    }
    let mut moves = Vec::new();
    for t in &metadata.topics {
        let Some(topic) = t.name.as_ref().map(|n| n.to_string()) else {
            continue;
        };
        for p in &t.partitions {
            let replicas: Vec<i32> = p.replica_nodes.iter().map(|b| b.0).collect();
            if !replicas.contains(&node) {
                continue;
            }
            let Some(spare) = load
                .iter()
                .filter(|(n, _)| !replicas.contains(n))
                .min_by_key(|(n, count)| (**count, **n))
                .map(|(n, _)| *n)
            else {
                bail!(
                    "no live node can take node {node}'s replica of {topic}-{}: every live node \
                     holds one already (add a node first)",
                    p.partition_index
                );
            };
            *load.entry(spare).or_default() += 1;
            let target = replicas
                .iter()
                .map(|r| if *r == node { spare } else { *r })
                .collect();
            moves.push(Move {
                topic: topic.clone(),
                partition: p.partition_index,
                replicas: Some(target),
            });
        }
    }
    if !moves.is_empty() {
        let results = client.alter_partition_reassignments(&moves, false).await?;
        for (m, result) in moves.iter().zip(results) {
            if let Err(e) = result {
                bail!("{}-{}: {e}", m.topic, m.partition);
            }
        }
        writeln!(out, "moving {} replica(s) off node {node}", moves.len())?;
        let moving: BTreeSet<(String, i32)> = moves
            .iter()
            .map(|m| (m.topic.clone(), m.partition))
            .collect();
        let left = crate::reassign_cmd::wait_for(client, &moving, wait).await?;
        if !left.is_empty() {
            bail!(
                "{} move(s) off node {node} still running after {wait:?}: follow them with \
                 `sluice topic reassignments`, then run remove-node again",
                left.len()
            );
        }
        writeln!(out, "node {node} holds no replica now")?;
    }
    if !down {
        writeln!(
            out,
            "node {node} is still running: stop it, then run `sluice cluster remove-node {node}` \
             again to remove it from the cluster"
        )?;
        return Ok(());
    }
    client.unregister_broker(node).await?;
    writeln!(out, "node {node} removed from the cluster")?;
    Ok(())
}
