//! `sluice topic reassign` and `sluice topic reassignments`: move a partition's replicas to
//! other nodes (AlterPartitionReassignments), and follow the moves still running
//! (ListPartitionReassignments), with how many bytes each new replica holds against its
//! leader (DescribeLogDirs on each node). Over the Kafka protocol, so they work against any
//! Kafka-compatible cluster.

use std::collections::{BTreeMap, BTreeSet};
use std::io::Write;
use std::time::Duration;

use anyhow::{bail, Context};
use sluice_broker::replication::throttle::{FOLLOWER_RATE, LEADER_RATE};
use sluice_broker::topic_config::{
    FOLLOWER_THROTTLED_REPLICAS as FOLLOWER_REPLICAS, LEADER_THROTTLED_REPLICAS as LEADER_REPLICAS,
};
use sluice_client::reassignment::{Move, Ongoing};
use sluice_client::Client;

/// `1,2,3` → node ids.
pub fn parse_replicas(s: &str) -> Result<Vec<i32>, String> {
    parse_node_ids(s, ',')
}

/// Node ids separated by `separator` (`,` in `--replicas`, `:` within a partition of
/// `--replica-assignment`).
pub fn parse_node_ids(s: &str, separator: char) -> Result<Vec<i32>, String> {
    let ids: Result<Vec<i32>, String> = s
        .split(separator)
        .map(|n| {
            n.trim()
                .parse::<i32>()
                .ok()
                .filter(|id| *id >= 0)
                .ok_or_else(|| format!("'{n}' is not a node id"))
        })
        .collect();
    let ids = ids?;
    if ids.is_empty() {
        return Err("name at least one node".into());
    }
    Ok(ids)
}

/// Starts (or cancels) the move of `partitions` (all of the topic's when empty) and, with
/// `wait`, follows it until it completes or `wait` runs out.
#[allow(clippy::too_many_arguments)]
pub async fn reassign(
    client: &mut Client,
    topic: &str,
    partitions: &[i32],
    replicas: Option<Vec<i32>>,
    allow_rf_change: bool,
    wait: Option<Duration>,
    throttle: Option<u64>,
    out: &mut impl Write,
) -> anyhow::Result<()> {
    let partitions: Vec<i32> = if partitions.is_empty() {
        client
            .partitions(topic)
            .await?
            .iter()
            .map(|p| p.partition)
            .collect()
    } else {
        partitions.to_vec()
    };
    if let Some(rate) = throttle {
        set_throttles(client, topic, &partitions, replicas.as_deref(), rate, out).await?;
    }
    let moves: Vec<Move> = partitions
        .iter()
        .map(|p| Move {
            topic: topic.to_string(),
            partition: *p,
            replicas: replicas.clone(),
        })
        .collect();
    let results = client
        .alter_partition_reassignments(&moves, allow_rf_change)
        .await?;
    let mut failed = 0;
    for (m, result) in moves.iter().zip(results) {
        match (result, &m.replicas) {
            (Ok(()), Some(r)) => writeln!(out, "{topic}-{}: moving to {}", m.partition, list(r))?,
            (Ok(()), None) => writeln!(out, "{topic}-{}: reassignment cancelled", m.partition)?,
            (Err(e), _) => {
                failed += 1;
                writeln!(out, "{topic}-{}: {e}", m.partition)?;
            }
        }
    }
    if failed > 0 {
        bail!("{failed} of {} partition(s) not reassigned", moves.len());
    }
    let Some(wait) = wait.filter(|_| replicas.is_some()) else {
        return Ok(());
    };
    let moving: BTreeSet<(String, i32)> =
        partitions.iter().map(|p| (topic.to_string(), *p)).collect();
    let left = wait_for(client, &moving, wait).await?;
    if left.is_empty() {
        writeln!(out, "done")?;
        if throttle.is_some() {
            clear_throttles(client, topic, out).await?;
        }
        return Ok(());
    }
    show(client, &left, out).await?;
    if throttle.is_some() {
        writeln!(
            out,
            "the throttle stays until the move ends: run `sluice topic reassign {topic} \
             --clear-throttle` then"
        )?;
    }
    bail!("{} move(s) still running after {wait:?}", left.len());
}

/// Waits up to `wait` until none of `moving` (topic, partition) is being reassigned any more;
/// returns those still running when the time is up (empty: all done).
pub async fn wait_for(
    client: &mut Client,
    moving: &BTreeSet<(String, i32)>,
    wait: Duration,
) -> anyhow::Result<Vec<Ongoing>> {
    let finished = tokio::time::timeout(wait, async {
        loop {
            if running(client, moving).await?.is_empty() {
                return anyhow::Ok(());
            }
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
    })
    .await;
    match finished {
        Ok(done) => done.map(|()| Vec::new()),
        Err(_) => running(client, moving).await,
    }
}

/// Throttles the copy that fills the new replicas (as kafka-reassign-partitions.sh
/// --throttle does): the topic lists the current replicas as leader-throttled and the new ones
/// as follower-throttled, and every node gets `rate` bytes/s as its leader and follower rate.
async fn set_throttles(
    client: &mut Client,
    topic: &str,
    partitions: &[i32],
    target: Option<&[i32]>,
    rate: u64,
    out: &mut impl Write,
) -> anyhow::Result<()> {
    let Some(target) = target else {
        bail!("--throttle applies to a move, not to --cancel");
    };
    let current = client.partitions(topic).await?;
    let mut leaders = Vec::new();
    let mut followers = Vec::new();
    for p in current.iter().filter(|p| partitions.contains(&p.partition)) {
        leaders.extend(p.replicas.iter().map(|r| format!("{}:{r}", p.partition)));
        followers.extend(
            target
                .iter()
                .filter(|n| !p.replicas.contains(n))
                .map(|n| format!("{}:{n}", p.partition)),
        );
    }
    client
        .alter_topic_configs(
            topic,
            &[
                (LEADER_REPLICAS.into(), leaders.join(",")),
                (FOLLOWER_REPLICAS.into(), followers.join(",")),
            ],
            &[],
        )
        .await?;
    let rates = [
        (LEADER_RATE.to_string(), rate.to_string()),
        (FOLLOWER_RATE.to_string(), rate.to_string()),
    ];
    for (node, addr) in node_addresses(client).await? {
        let mut c = Client::connect(&addr, "sluice-cli")
            .await
            .with_context(|| format!("node {node} at {addr}"))?;
        c.alter_broker_configs(node, &rates, &[]).await?;
    }
    writeln!(out, "throttled the copy to {rate} bytes/s per node")?;
    Ok(())
}

/// Removes what [`set_throttles`] set.
pub async fn clear_throttles(
    client: &mut Client,
    topic: &str,
    out: &mut impl Write,
) -> anyhow::Result<()> {
    client
        .alter_topic_configs(
            topic,
            &[],
            &[LEADER_REPLICAS.into(), FOLLOWER_REPLICAS.into()],
        )
        .await?;
    let rates = [LEADER_RATE.to_string(), FOLLOWER_RATE.to_string()];
    let mut unreachable = Vec::new();
    for (node, addr) in node_addresses(client).await? {
        match Client::connect(&addr, "sluice-cli").await {
            Ok(mut c) => c.alter_broker_configs(node, &[], &rates).await?,
            Err(_) => unreachable.push(node),
        }
    }
    writeln!(out, "throttle removed")?;
    if !unreachable.is_empty() {
        writeln!(
            out,
            "nodes {unreachable:?} did not answer: their rates go when they restart"
        )?;
    }
    Ok(())
}

/// The moves of `moving` still running.
async fn running(
    client: &mut Client,
    moving: &BTreeSet<(String, i32)>,
) -> anyhow::Result<Vec<Ongoing>> {
    Ok(client
        .list_partition_reassignments()
        .await?
        .into_iter()
        .filter(|o| moving.contains(&(o.topic.clone(), o.partition)))
        .collect())
}

/// The moves still running, each new replica's size against its leader's.
pub async fn show(
    client: &mut Client,
    running: &[Ongoing],
    out: &mut impl Write,
) -> anyhow::Result<()> {
    if running.is_empty() {
        writeln!(out, "no reassignment is running")?;
        return Ok(());
    }
    let addresses = node_addresses(client).await?;
    writeln!(
        out,
        "{:<30}  {:>10}  {:>8}  {:>8}  {:>6}  PROGRESS (bytes held / leader's)",
        "PARTITION", "REPLICAS", "ADDING", "REMOVING", "LEADER"
    )?;
    let mut sizes: BTreeMap<(i32, String), BTreeMap<i32, i64>> = BTreeMap::new();
    let mut leaders: BTreeMap<(String, i32), i32> = BTreeMap::new();
    for o in running {
        if !leaders.keys().any(|(t, _)| *t == o.topic) {
            for p in client.partitions(&o.topic).await? {
                leaders.insert((o.topic.clone(), p.partition), p.leader);
            }
        }
        let leader = leaders
            .get(&(o.topic.clone(), o.partition))
            .copied()
            .unwrap_or(-1);
        let mut progress = Vec::new();
        let leader_size = size_on(&mut sizes, &addresses, leader, o).await;
        for node in &o.adding {
            let held = size_on(&mut sizes, &addresses, *node, o).await;
            progress.push(match (held, leader_size) {
                (Some(h), Some(l)) if l > 0 => format!(
                    "node {node}: {} / {} ({:.0}%)",
                    bytes(h),
                    bytes(l),
                    100.0 * h.min(l) as f64 / l as f64
                ),
                (Some(h), Some(l)) => format!("node {node}: {} / {}", bytes(h), bytes(l)),
                _ => format!("node {node}: size unknown (node unreachable)"),
            });
        }
        writeln!(
            out,
            "{:<30}  {:>10}  {:>8}  {:>8}  {:>6}  {}",
            format!("{}-{}", o.topic, o.partition),
            list(&o.replicas),
            list(&o.adding),
            list(&o.removing),
            leader,
            progress.join("; ")
        )?;
    }
    Ok(())
}

/// The size of `o`'s partition on `node` (asked once per node and topic).
async fn size_on(
    cache: &mut BTreeMap<(i32, String), BTreeMap<i32, i64>>,
    addresses: &BTreeMap<i32, String>,
    node: i32,
    o: &Ongoing,
) -> Option<i64> {
    let key = (node, o.topic.clone());
    if !cache.contains_key(&key) {
        let addr = addresses.get(&node)?;
        let sizes = async {
            let mut c = Client::connect(addr, "sluice-cli").await.ok()?;
            c.replica_sizes(&o.topic).await.ok()
        };
        let sizes = tokio::time::timeout(Duration::from_secs(5), sizes)
            .await
            .ok()
            .flatten()
            .unwrap_or_default();
        cache.insert(key.clone(), sizes);
    }
    cache.get(&key)?.get(&o.partition).copied()
}

async fn node_addresses(client: &mut Client) -> anyhow::Result<BTreeMap<i32, String>> {
    Ok(client
        .nodes()
        .await
        .context("the cluster's nodes")?
        .into_iter()
        .collect())
}

fn list(v: &[i32]) -> String {
    if v.is_empty() {
        return "-".into();
    }
    v.iter().map(i32::to_string).collect::<Vec<_>>().join(",")
}

fn bytes(n: i64) -> String {
    const MIB: f64 = 1024.0 * 1024.0;
    if n >= 1024 * 1024 {
        format!("{:.1} MiB", n as f64 / MIB)
    } else {
        format!("{n} B")
    }
}
