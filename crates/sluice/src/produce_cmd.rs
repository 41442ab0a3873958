//! `sluice produce`: one record per stdin line (like `kcat -P`), batched, to a topic.

use std::collections::HashMap;
use std::time::Duration;

use anyhow::{bail, Context};
use bytes::Bytes;
use sluice_client::partitioner::partition_for_key;
use sluice_client::records::{compression_from_name, encode_batch};
use sluice_client::{Client, Leaders, OutRecord};
use tokio::io::{AsyncBufReadExt, BufReader};

#[derive(Debug, clap::Args)]
pub struct ProduceArgs {
    #[arg(long, short = 't')]
    pub topic: String,
    /// Send every record to this partition (default: by key, like the Java client, else round robin)
    #[arg(long, short = 'p')]
    pub partition: Option<i32>,
    /// Split each line into key and value at the first occurrence of this string
    #[arg(long, short = 'K')]
    pub key_separator: Option<String>,
    /// A header on every record, name=value (repeatable)
    #[arg(long = "header", short = 'H', value_parser = crate::topic_cmd::parse_pair)]
    pub headers: Vec<(String, String)>,
    /// 0, 1 or all
    #[arg(long, default_value = "all")]
    pub acks: String,
    /// none, gzip, snappy, lz4 or zstd
    #[arg(long, short = 'z', default_value = "none")]
    pub compression: String,
    /// Most records per batch
    #[arg(long, default_value_t = 1000)]
    pub batch_records: usize,
}

const LINGER: Duration = Duration::from_millis(5);

pub async fn run(bootstrap: &str, args: ProduceArgs) -> anyhow::Result<()> {
    let acks: i16 = match args.acks.as_str() {
        "all" | "-1" => -1,
        "1" => 1,
        "0" => 0,
        other => bail!("--acks must be 0, 1 or all, not '{other}'"),
    };
    let Some(compression) = compression_from_name(&args.compression) else {
        bail!(
            "--compression must be none, gzip, snappy, lz4 or zstd, not '{}'",
            args.compression
        );
    };
    if args.batch_records == 0 {
        bail!("--batch-records must be at least 1");
    }
    let mut client = Client::connect(bootstrap, "sluice-cli").await?;
    let partitions = client.partitions(&args.topic).await.or_else(|_| {
        // Unknown topic: a Produce lets an auto-creating broker create it, with partition 0.
        Ok::<_, anyhow::Error>(Vec::new())
    })?;
    let partition_count = (partitions.len() as i32).max(1);
    // Each batch goes to its partition's leader (in a cluster, not always this node).
    let mut client = Leaders::new(client);
    if let Some(p) = args.partition {
        if p < 0 || p >= partition_count {
            bail!(
                "topic '{}' has {partition_count} partition(s); there is no partition {p}",
                args.topic
            );
        }
    }
    let headers: Vec<(String, Option<Bytes>)> = args
        .headers
        .iter()
        .map(|(k, v)| (k.clone(), Some(Bytes::from(v.clone()))))
        .collect();
    let mut lines = BufReader::new(tokio::io::stdin()).lines();
    let mut pending: HashMap<i32, Vec<OutRecord>> = HashMap::new();
    let mut round_robin = 0i32;
    let mut sent = 0u64;
    let mut eof = false;
    while !eof {
        let mut batched = 0;
        while batched < args.batch_records {
            let next = if batched == 0 {
                lines.next_line().await
            } else {
                match tokio::time::timeout(LINGER, lines.next_line()).await {
                    Ok(r) => r,
                    Err(_) => break,
                }
            };
            let Some(line) = next.context("reading stdin")? else {
                eof = true;
                break;
            };
            let (key, value) = match &args.key_separator {
                Some(sep) => match line.split_once(sep.as_str()) {
                    Some((k, v)) => (Some(Bytes::from(k.to_string())), v.to_string()),
                    None => (None, line),
                },
                None => (None, line),
            };
            let partition = match (args.partition, &key) {
                (Some(p), _) => p,
                (None, Some(k)) => partition_for_key(k, partition_count),
                (None, None) => round_robin,
            };
            pending.entry(partition).or_default().push(OutRecord {
                key,
                value: Some(Bytes::from(value)),
                headers: headers.clone(),
                timestamp_ms: now_ms(),
            });
            batched += 1;
        }
        round_robin = (round_robin + 1) % partition_count;
        for (partition, records) in pending.drain() {
            let batch = encode_batch(&records, compression)?;
            client
                .produce(&args.topic, partition, batch, acks)
                .await
                .with_context(|| format!("after {sent} records"))?;
            sent += records.len() as u64;
        }
    }
    crate::stdout::tell!("produced {sent} record(s) to {}", args.topic);
    Ok(())
}

#[allow(clippy::disallowed_methods)] // the CLI stamps records with the wall clock
fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as i64)
        .unwrap_or(0)
}
