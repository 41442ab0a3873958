//! `sluice txn list|describe|abort`, over the Kafka protocol, for operators.

use std::io::Write;

use anyhow::bail;
use clap::{Args, Subcommand};
use sluice_client::coordinator::TRANSACTION;
use sluice_client::{Client, Leaders};

use crate::every_node::ask_every_node;

#[derive(Debug, Subcommand)]
pub enum TxnCommand {
    /// List transactional ids with their producer id and state
    List {
        /// Only these states (repeatable): Empty, Ongoing, PrepareCommit, PrepareAbort,
        /// CompleteCommit, CompleteAbort
        #[arg(long)]
        state: Vec<String>,
    },
    /// Show a transactional id's state, producer, timeout and open partitions
    Describe { transactional_id: String },
    /// End a hanging transaction: by transactional id (fences its producer and aborts what it
    /// left open), or on one partition by producer id (writes an abort marker there)
    Abort(AbortArgs),
}

#[derive(Debug, Args)]
pub struct AbortArgs {
    #[arg(long, conflicts_with_all = ["topic", "partition", "producer_id"])]
    pub transactional_id: Option<String>,
    #[arg(long, requires_all = ["partition", "producer_id"])]
    pub topic: Option<String>,
    #[arg(long)]
    pub partition: Option<i32>,
    #[arg(long)]
    pub producer_id: Option<i64>,
}

pub async fn run(bootstrap: &str, command: TxnCommand) -> anyhow::Result<()> {
    let mut client = Client::connect(bootstrap, "sluice-cli").await?;
    let mut out = crate::stdout::lock();
    match command {
        // In a cluster each node coordinates (and lists) only some transactional ids.
        TxnCommand::List { state } => {
            let mut found = ask_every_node(&mut client, |mut c| {
                let state = state.clone();
                async move { c.list_transactions(&state).await }
            })
            .await?;
            found.sort_by(|a, b| a.transactional_id.cmp(&b.transactional_id));
            for t in found {
                writeln!(
                    out,
                    "{}\t{}\t{}",
                    t.transactional_id, t.producer_id, t.state
                )?;
            }
        }
        TxnCommand::Describe { transactional_id } => {
            let d = client
                .coordinator(&transactional_id, TRANSACTION)
                .await?
                .describe_transaction(&transactional_id)
                .await?;
            writeln!(
                out,
                "Transactional id: {}  State: {}  Producer: {} epoch {}  Timeout: {} ms",
                d.transactional_id, d.state, d.producer_id, d.producer_epoch, d.timeout_ms
            )?;
            if d.start_time_ms >= 0 {
                writeln!(out, "Started at: {} ms since the epoch", d.start_time_ms)?;
            }
            for (topic, p) in d.partitions {
                writeln!(out, "  {topic}-{p}")?;
            }
        }
        TxnCommand::Abort(args) => match (args.transactional_id, args.topic) {
            (Some(id), None) => {
                let mut coordinator = client.coordinator(&id, TRANSACTION).await?;
                let before = coordinator.describe_transaction(&id).await?;
                let epoch = coordinator
                    .fence_transactional_id(&id, before.timeout_ms.max(1))
                    .await?;
                writeln!(
                    out,
                    "transactional id {id}: was {}, now fenced at epoch {epoch}; any open transaction was aborted",
                    before.state
                )?;
            }
            (None, Some(topic)) => {
                let (Some(partition), Some(pid)) = (args.partition, args.producer_id) else {
                    bail!("--topic needs --partition and --producer-id");
                };
                // DescribeProducers and WriteTxnMarkers go to the partition's leader.
                let mut leaders = Leaders::new(client);
                let leader = leaders.leader_of(&topic, partition).await?;
                let open = leader.open_transactions(&topic, partition).await?;
                let Some(txn) = open.into_iter().find(|t| t.producer_id == pid) else {
                    bail!("producer {pid} has no open transaction on {topic}-{partition}");
                };
                leader.abort_on_partition(&topic, partition, txn).await?;
                writeln!(
                    out,
                    "aborted producer {pid}'s transaction on {topic}-{partition} (it began at offset {})",
                    txn.start_offset
                )?;
            }
            _ => bail!("give --transactional-id, or --topic, --partition and --producer-id"),
        },
    }
    Ok(())
}
