//! `sluice cluster status` (and `add-voter` / `remove-voter`, `add-node` in add_node_cmd.rs,
//! `remove-node` in remove_node_cmd.rs): the nodes, the controller, what each node leads and holds, and the
//! partitions that are under-replicated or offline — read from Metadata over the Kafka
//! protocol, so it works against any Kafka-compatible cluster.

use std::collections::{BTreeMap, BTreeSet};
use std::io::Write;

use clap::Subcommand;
use serde::Serialize;
use sluice_client::Client;

#[derive(Debug, Subcommand)]
pub enum ClusterCommand {
    /// Nodes, controller, leaders per node, under-replicated and offline partitions
    Status {
        /// Print JSON instead of tables
        #[arg(long)]
        json: bool,
    },
    /// Wait until a node started with --internal-listen has joined; --voter also makes it a
    /// voter of the metadata group
    AddNode {
        node: i32,
        /// Make it a voter of the metadata group once it has joined
        #[arg(long)]
        voter: bool,
        /// How long to wait for it to join, in seconds
        #[arg(long, default_value_t = 60)]
        wait: u64,
    },
    /// Make a node that joined with --internal-listen a voter of the metadata group
    AddVoter { node: i32 },
    /// Make a voter of the metadata group a non-voting member again (it stays a broker)
    RemoveVoter { node: i32 },
    /// Move every replica off a node, then (once it is stopped) remove it from the cluster
    RemoveNode {
        node: i32,
        /// How long to wait for the replicas to move, in seconds
        #[arg(long, default_value_t = 600)]
        wait: u64,
    },
}

#[derive(Debug, Default, Serialize)]
struct Status {
    cluster_id: Option<String>,
    /// The metadata leader (Kafka's "controller"); -1 while there is none.
    controller: i32,
    nodes: Vec<NodeStatus>,
    partitions: usize,
    under_replicated: Vec<PartitionStatus>,
    offline: Vec<PartitionStatus>,
}

#[derive(Debug, Serialize)]
struct NodeStatus {
    id: i32,
    /// `host:port`, or empty for a node that replicas name but Metadata does not list (down).
    address: String,
    rack: Option<String>,
    up: bool,
    leaders: usize,
    replicas: usize,
}

#[derive(Debug, Serialize)]
struct PartitionStatus {
    topic: String,
    partition: i32,
    leader: i32,
    replicas: Vec<i32>,
    isr: Vec<i32>,
}

pub async fn run(bootstrap: &str, command: ClusterCommand) -> anyhow::Result<()> {
    let mut client = Client::connect(bootstrap, "sluice-cli").await?;
    let json = match command {
        ClusterCommand::Status { json } => json,
        ClusterCommand::AddNode { node, voter, wait } => {
            let mut out = crate::stdout::lock();
            let wait = std::time::Duration::from_secs(wait);
            return crate::add_node_cmd::run(&mut client, node, voter, wait, &mut out).await;
        }
        ClusterCommand::AddVoter { node } | ClusterCommand::RemoveVoter { node } => {
            let add = matches!(command, ClusterCommand::AddVoter { .. });
            client.change_voter(node, add).await?;
            let role = if add {
                "a voter"
            } else {
                "a learner (non-voting)"
            };
            crate::stdout::say!("node {node} is now {role} of the metadata group")?;
            return Ok(());
        }
        ClusterCommand::RemoveNode { node, wait } => {
            let mut out = crate::stdout::lock();
            return crate::remove_node_cmd::run(
                &mut client,
                node,
                std::time::Duration::from_secs(wait),
                &mut out,
            )
            .await;
        }
    };
    let status = status(&mut client).await?;
    let mut out = crate::stdout::lock();
    if json {
        serde_json::to_writer_pretty(&mut out, &status).map_err(std::io::Error::from)?;
        writeln!(out)?;
    } else {
        print(&status, &mut out)?;
    }
    Ok(())
}

async fn status(client: &mut Client) -> anyhow::Result<Status> {
    let metadata = client.metadata(None).await?;
    // Which nodes are up: not fenced (DescribeCluster v2, KIP-1073); with an older broker, a
    // node DescribeCluster does not list is down.
    let described = client.describe_cluster().await?;
    let up: BTreeSet<i32> = described
        .nodes
        .iter()
        .filter(|n| !n.fenced)
        .map(|n| n.id)
        .collect();
    let mut nodes: BTreeMap<i32, NodeStatus> = metadata
        .brokers
        .iter()
        .map(|b| {
            (
                b.node_id.0,
                NodeStatus {
                    id: b.node_id.0,
                    address: format!("{}:{}", b.host, b.port),
                    rack: b.rack.as_ref().map(|r| r.to_string()),
                    up: up.contains(&b.node_id.0),
                    leaders: 0,
                    replicas: 0,
                },
            )
        })
        .collect();
    let mut status = Status {
        cluster_id: metadata.cluster_id.as_ref().map(|c| c.to_string()),
        controller: client.metadata_leader().await?.unwrap_or(-1),
        ..Status::default()
    };
    for topic in &metadata.topics {
        let Some(name) = topic.name.as_ref().map(|n| n.to_string()) else {
            continue;
        };
        for p in &topic.partitions {
            status.partitions += 1;
            let replicas: Vec<i32> = p.replica_nodes.iter().map(|b| b.0).collect();
            let isr: BTreeSet<i32> = p.isr_nodes.iter().map(|b| b.0).collect();
            for r in &replicas {
                let node = nodes.entry(*r).or_insert_with(|| NodeStatus {
                    id: *r,
                    address: String::new(),
                    rack: None,
                    up: false,
                    leaders: 0,
                    replicas: 0,
                });
                node.replicas += 1;
            }
            if let Some(node) = nodes.get_mut(&p.leader_id.0) {
                node.leaders += 1;
            }
            let entry = || PartitionStatus {
                topic: name.clone(),
                partition: p.partition_index,
                leader: p.leader_id.0,
                replicas: replicas.clone(),
                isr: isr.iter().copied().collect(),
            };
            if p.leader_id.0 < 0 {
                status.offline.push(entry());
            } else if replicas.iter().any(|r| !isr.contains(r)) {
                status.under_replicated.push(entry());
            }
        }
    }
    status.nodes = nodes.into_values().collect();
    for list in [&mut status.under_replicated, &mut status.offline] {
        list.sort_by(|a, b| (&a.topic, a.partition).cmp(&(&b.topic, b.partition)));
    }
    Ok(status)
}

fn print(status: &Status, out: &mut impl Write) -> std::io::Result<()> {
    writeln!(
        out,
        "cluster {}, controller (metadata leader): {}",
        status.cluster_id.as_deref().unwrap_or("(no id)"),
        if status.controller >= 0 {
            format!("node {}", status.controller)
        } else {
            "none".to_string()
        }
    )?;
    writeln!(
        out,
        "{:<6} {:<24} {:<12} {:<6} {:>8} {:>9}",
        "NODE", "ADDRESS", "RACK", "STATE", "LEADERS", "REPLICAS"
    )?;
    for n in &status.nodes {
        writeln!(
            out,
            "{:<6} {:<24} {:<12} {:<6} {:>8} {:>9}",
            n.id,
            if n.address.is_empty() {
                "-"
            } else {
                &n.address
            },
            n.rack.as_deref().unwrap_or("-"),
            if n.up { "up" } else { "down" },
            n.leaders,
            n.replicas
        )?;
    }
    writeln!(
        out,
        "{} partitions, {} under-replicated, {} offline",
        status.partitions,
        status.under_replicated.len(),
        status.offline.len()
    )?;
    for (title, list) in [
        ("under-replicated", &status.under_replicated),
        ("offline (no leader)", &status.offline),
    ] {
        if list.is_empty() {
            continue;
        }
        writeln!(out, "{title}:")?;
        for p in list {
            writeln!(
                out,
                "  {}-{}  leader {}  replicas {:?}  isr {:?}",
                p.topic, p.partition, p.leader, p.replicas, p.isr
            )?;
        }
    }
    Ok(())
}
