//! `sluice topic create|list|describe|delete|delete-records|reassign|reassignments|alter-config`, over the Kafka protocol, so they
//! work against any Kafka-compatible broker.

use std::collections::BTreeMap;
use std::io::Write;

use anyhow::{bail, Context};
use clap::Subcommand;
use sluice_client::{Client, Leaders};

use crate::reassign_cmd;

#[derive(Debug, Subcommand)]
pub enum TopicCommand {
    /// Create a topic
    Create {
        name: String,
        #[arg(long, short = 'p', default_value_t = 1)]
        partitions: i32,
        #[arg(long, short = 'r', default_value_t = 1)]
        replication_factor: i16,
        /// The replicas of each partition instead of --partitions and --replication-factor,
        /// as kafka-topics.sh takes them: partitions separated by commas, each partition's
        /// node ids by colons, the preferred leader first; e.g. 1:2,2:3,3:1
        #[arg(long, value_parser = parse_assignment, conflicts_with_all = ["partitions", "replication_factor"])]
        replica_assignment: Option<Assignment>,
        /// A topic config, name=value (repeatable), e.g. --config retention.ms=60000
        #[arg(long = "config", short = 'c', value_parser = parse_pair)]
        configs: Vec<(String, String)>,
    },
    /// List topics
    List,
    /// Show a topic's partitions, offsets and configs
    Describe { name: String },
    /// Delete a topic and its data
    Delete { name: String },
    /// Delete the records below an offset (moves the log start, like kafka-delete-records.sh)
    DeleteRecords {
        name: String,
        /// The partition; all partitions when left out (then only --before end is allowed)
        #[arg(long, short = 'p')]
        partition: Option<i32>,
        /// An offset, or `end` for everything up to the high watermark
        #[arg(long, value_parser = parse_before)]
        before: i64,
    },
    /// Move partitions' replicas to other nodes (like kafka-reassign-partitions.sh): the new
    /// replicas copy the log, then the old ones are dropped
    Reassign {
        name: String,
        /// The partition (repeatable); every partition of the topic when left out
        #[arg(long, short = 'p')]
        partition: Vec<i32>,
        /// The new replicas as node ids, e.g. 1,2,4 (the first is the preferred leader)
        #[arg(long, required_unless_present_any = ["cancel", "clear_throttle"], conflicts_with = "cancel")]
        replicas: Option<String>,
        /// Stop a running move instead: the partition keeps its original replicas
        #[arg(long)]
        cancel: bool,
        /// Allow a target with another number of replicas than the partition has
        #[arg(long)]
        allow_replication_factor_change: bool,
        /// Wait up to this many seconds for the move to complete
        #[arg(long)]
        wait: Option<u64>,
        /// Cap the copy to the new replicas at this many bytes/s per node (removed once the
        /// move completes; needs --wait)
        #[arg(long, requires = "wait")]
        throttle: Option<u64>,
        /// Remove a throttle left by a --throttle move that outlived its --wait
        #[arg(long, conflicts_with_all = ["replicas", "cancel", "throttle"])]
        clear_throttle: bool,
    },
    /// The reassignments still running, with the bytes each new replica holds
    Reassignments,
    /// Change a topic's configs
    AlterConfig {
        name: String,
        /// Set a config, name=value (repeatable)
        #[arg(long = "set", value_parser = parse_pair)]
        set: Vec<(String, String)>,
        /// Remove an override, going back to the broker default (repeatable)
        #[arg(long = "delete")]
        delete: Vec<String>,
    },
}

pub fn parse_pair(s: &str) -> Result<(String, String), String> {
    match s.split_once('=') {
        Some((k, v)) if !k.is_empty() => Ok((k.to_string(), v.to_string())),
        _ => Err(format!("'{s}' is not name=value")),
    }
}

/// `--replica-assignment`: each partition's replicas, in partition order.
#[derive(Debug, Clone)]
pub struct Assignment(Vec<Vec<i32>>);

/// `1:2,2:3`: partition 0 on nodes 1 and 2, partition 1 on 2 and 3 (the broker checks that
/// the nodes exist and that every partition has as many).
fn parse_assignment(s: &str) -> Result<Assignment, String> {
    s.split(',')
        .enumerate()
        .map(|(p, replicas)| {
            reassign_cmd::parse_node_ids(replicas, ':').map_err(|e| format!("partition {p}: {e}"))
        })
        .collect::<Result<Vec<_>, String>>()
        .map(Assignment)
}

/// `end` (-1, the high watermark) or an offset ≥ 0.
fn parse_before(s: &str) -> Result<i64, String> {
    match s {
        "end" => Ok(-1),
        _ => s
            .parse::<i64>()
            .ok()
            .filter(|o| *o >= 0)
            .ok_or_else(|| format!("'{s}' is neither an offset (0 or more) nor 'end'")),
    }
}

pub async fn run(bootstrap: &str, command: TopicCommand) -> anyhow::Result<()> {
    let mut client = Client::connect(bootstrap, "sluice-cli").await?;
    let mut out = crate::stdout::lock();
    match command {
        TopicCommand::Create {
            name,
            partitions,
            replication_factor,
            replica_assignment,
            configs,
        } => {
            let configs: BTreeMap<String, String> = configs.into_iter().collect();
            let partitions = match replica_assignment {
                Some(Assignment(assignment)) => {
                    client
                        .create_topic_assigned(&name, &assignment, &configs)
                        .await?;
                    assignment.len() as i32
                }
                None => {
                    client
                        .create_topic(&name, partitions, replication_factor, &configs)
                        .await?;
                    partitions
                }
            };
            writeln!(out, "created topic {name} with {partitions} partition(s)")?;
        }
        TopicCommand::List => {
            let metadata = client.metadata(None).await?;
            let mut names: Vec<String> = metadata
                .topics
                .iter()
                .filter_map(|t| t.name.as_ref().map(|n| n.to_string()))
                .collect();
            names.sort();
            for name in names {
                writeln!(out, "{name}")?;
            }
        }
        TopicCommand::Describe { name } => return describe(client, &name, &mut out).await,
        TopicCommand::Delete { name } => {
            client.delete_topic(&name).await?;
            writeln!(out, "deleted topic {name}")?;
        }
        TopicCommand::DeleteRecords {
            name,
            partition,
            before,
        } => {
            let targets: Vec<(i32, i64)> = match partition {
                Some(p) => vec![(p, before)],
                None if before == -1 => client
                    .partitions(&name)
                    .await?
                    .iter()
                    .map(|p| (p.partition, -1))
                    .collect(),
                None => bail!("an offset needs --partition (or use --before end for all)"),
            };
            let mut leaders = Leaders::new(client);
            for (p, start) in leaders.delete_records(&name, &targets).await? {
                writeln!(out, "{name}-{p}: log start offset {start}")?;
            }
        }
        TopicCommand::Reassign {
            name,
            partition,
            replicas,
            cancel: _,
            allow_replication_factor_change,
            wait,
            throttle,
            clear_throttle,
        } => {
            if clear_throttle {
                reassign_cmd::clear_throttles(&mut client, &name, &mut out).await?;
                return Ok(());
            }
            let replicas = match replicas {
                Some(r) => Some(reassign_cmd::parse_replicas(&r).map_err(anyhow::Error::msg)?),
                None => None,
            };
            reassign_cmd::reassign(
                &mut client,
                &name,
                &partition,
                replicas,
                allow_replication_factor_change,
                wait.map(std::time::Duration::from_secs),
                throttle,
                &mut out,
            )
            .await?;
        }
        TopicCommand::Reassignments => {
            let running = client.list_partition_reassignments().await?;
            reassign_cmd::show(&mut client, &running, &mut out).await?;
        }
        TopicCommand::AlterConfig { name, set, delete } => {
            if set.is_empty() && delete.is_empty() {
                bail!("nothing to change: give --set name=value and/or --delete name");
            }
            client.alter_topic_configs(&name, &set, &delete).await?;
            writeln!(out, "altered configs of {name}")?;
        }
    }
    Ok(())
}

async fn describe(client: Client, name: &str, out: &mut impl Write) -> anyhow::Result<()> {
    // Offsets come from each partition's leader (in a cluster, not always this node).
    let mut leaders = Leaders::new(client);
    let partitions = leaders.bootstrap().partitions(name).await?;
    let ids: Vec<i32> = partitions.iter().map(|p| p.partition).collect();
    let earliest = leaders
        .list_offsets(name, &ids, -2)
        .await
        .context("earliest offsets")?;
    let latest = leaders
        .list_offsets(name, &ids, -1)
        .await
        .context("latest offsets")?;
    let client = leaders.bootstrap();
    writeln!(out, "Topic: {name}  Partitions: {}", partitions.len())?;
    writeln!(
        out,
        "{:>9}  {:>6}  {:>10}  {:>10}  {:>14}  {:>14}",
        "PARTITION", "LEADER", "REPLICAS", "ISR", "START OFFSET", "END OFFSET"
    )?;
    for (p, ((_, start, _), (_, end, _))) in
        partitions.iter().zip(earliest.iter().zip(latest.iter()))
    {
        let list = |v: &[i32]| v.iter().map(i32::to_string).collect::<Vec<_>>().join(",");
        writeln!(
            out,
            "{:>9}  {:>6}  {:>10}  {:>10}  {:>14}  {:>14}",
            p.partition,
            p.leader,
            list(&p.replicas),
            list(&p.isr),
            start,
            end
        )?;
    }
    writeln!(out, "Configs:")?;
    for c in client.topic_configs(name).await? {
        let source = match c.source {
            1 => "topic",
            4 => "broker",
            _ => "default",
        };
        writeln!(
            out,
            "  {} = {}  ({source})",
            c.name,
            c.value.unwrap_or_default()
        )?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn replica_assignments_parse_like_kafka_topics_sh() {
        let Ok(Assignment(a)) = parse_assignment("1:2, 2:3,3") else {
            panic!("a valid assignment was refused");
        };
        assert_eq!(a, vec![vec![1, 2], vec![2, 3], vec![3]]);
        for bad in ["", "1:", "1:x", "1,,2", "-1:2"] {
            assert!(parse_assignment(bad).is_err(), "{bad:?} was accepted");
        }
    }
}
