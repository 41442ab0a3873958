//! `sluice consume`: print a topic's records (like `kcat -C`), from the beginning, the end, an
//! offset or a time; follow new ones, or stop at the end or after a count.

use std::io::Write;
use std::time::Duration;

use anyhow::Context;
use sluice_client::{Client, InRecord, Leaders};

#[derive(Debug, clap::Args)]
pub struct ConsumeArgs {
    #[arg(long, short = 't')]
    pub topic: String,
    /// Only these partitions (repeatable; default all)
    #[arg(long, short = 'p')]
    pub partition: Vec<i32>,
    /// beginning, end, an offset, or @TIMESTAMP_MS
    #[arg(long, short = 'o', default_value = "beginning")]
    pub from: String,
    /// Stop after this many records
    #[arg(long, short = 'c')]
    pub count: Option<u64>,
    /// Stop at the end of every partition instead of waiting for more
    #[arg(long, short = 'e')]
    pub exit_at_end: bool,
    /// Print each record's key before its value
    #[arg(long)]
    pub print_key: bool,
    /// Print partition and offset before each record
    #[arg(long)]
    pub print_offset: bool,
    /// Print each record's timestamp
    #[arg(long)]
    pub print_timestamp: bool,
    /// Print each record's headers after its value
    #[arg(long)]
    pub print_headers: bool,
    /// Separator between printed fields
    #[arg(long, default_value = "\t")]
    pub separator: String,
}

pub async fn run(bootstrap: &str, args: ConsumeArgs) -> anyhow::Result<()> {
    let mut client = Client::connect(bootstrap, "sluice-cli").await?;
    let partitions = crate::partitions::select(&mut client, &args.topic, &args.partition).await?;
    // Fetch and ListOffsets go to each partition's leader (in a cluster, not always this node).
    let mut client = Leaders::new(client);
    let mut positions: Vec<(i32, i64)> = match args.from.as_str() {
        "beginning" => offsets(&mut client, &args.topic, &partitions, -2).await?,
        "end" => offsets(&mut client, &args.topic, &partitions, -1).await?,
        s if s.starts_with('@') => {
            let ts: i64 = s[1..]
                .parse()
                .with_context(|| format!("'{s}' is not @TIMESTAMP_MS"))?;
            let found = client.list_offsets(&args.topic, &partitions, ts).await?;
            let ends = offsets(&mut client, &args.topic, &partitions, -1).await?;
            found
                .into_iter()
                .zip(ends)
                .map(|((p, o, _), (_, end))| (p, if o < 0 { end } else { o }))
                .collect()
        }
        s => {
            let offset: i64 = s.parse().with_context(|| {
                format!("--from '{s}' is not beginning, end, an offset or @TIMESTAMP_MS")
            })?;
            partitions.iter().map(|&p| (p, offset)).collect()
        }
    };
    let mut printed = 0u64;
    let wait = if positions.len() > 1 {
        Duration::from_millis(100)
    } else {
        Duration::from_millis(500)
    };
    loop {
        let mut at_end = 0;
        for (partition, offset) in positions.iter_mut() {
            let fetched = client
                .fetch(&args.topic, *partition, *offset, wait, 1 << 20)
                .await?;
            let mut out = crate::stdout::lock();
            for record in &fetched.records {
                print_record(&mut out, &args, *partition, record)?;
                *offset = record.offset + 1;
                printed += 1;
                if args.count.is_some_and(|c| printed >= c) {
                    return Ok(());
                }
            }
            out.flush()?;
            *offset = (*offset).max(fetched.next_offset);
            if *offset >= fetched.high_watermark {
                at_end += 1;
            }
        }
        if args.exit_at_end && at_end == positions.len() {
            return Ok(());
        }
    }
}

async fn offsets(
    client: &mut Leaders,
    topic: &str,
    partitions: &[i32],
    which: i64,
) -> anyhow::Result<Vec<(i32, i64)>> {
    Ok(client
        .list_offsets(topic, partitions, which)
        .await?
        .into_iter()
        .map(|(p, o, _)| (p, o))
        .collect())
}

fn print_record(
    out: &mut impl Write,
    args: &ConsumeArgs,
    partition: i32,
    r: &InRecord,
) -> std::io::Result<()> {
    let sep = &args.separator;
    let text = |b: &Option<bytes::Bytes>| {
        b.as_ref()
            .map(|b| String::from_utf8_lossy(b).into_owned())
            .unwrap_or_default()
    };
    if args.print_offset {
        write!(out, "{partition}:{}{sep}", r.offset)?;
    }
    if args.print_timestamp {
        write!(out, "{}{sep}", r.timestamp_ms)?;
    }
    if args.print_key {
        write!(out, "{}{sep}", text(&r.key))?;
    }
    write!(out, "{}", text(&r.value))?;
    if args.print_headers {
        let headers: Vec<String> = r
            .headers
            .iter()
            .map(|(k, v)| format!("{k}={}", text(v)))
            .collect();
        write!(out, "{sep}{}", headers.join(","))?;
    }
    writeln!(out)
}
