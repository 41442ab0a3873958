//! `sluice group list|describe|delete|reset-offsets`, over the Kafka protocol.

use std::collections::BTreeMap;
use std::io::Write;

use anyhow::{bail, Context};
use clap::{Args, Subcommand};
use sluice_client::coordinator::GROUP;
use sluice_client::{Client, Leaders};

use crate::every_node::ask_every_node;

#[derive(Debug, Subcommand)]
pub enum GroupCommand {
    /// List consumer groups with their state
    List,
    /// Show a group's state, members, and per-partition committed offset, end offset and lag
    Describe { group: String },
    /// Delete an empty group and its committed offsets
    Delete { group: String },
    /// Move an inactive group's committed offsets
    ResetOffsets(ResetArgs),
}

#[derive(Debug, Args)]
pub struct ResetArgs {
    pub group: String,
    #[arg(long, short = 't')]
    pub topic: String,
    /// Only these partitions (repeatable; default all)
    #[arg(long, short = 'p')]
    pub partition: Vec<i32>,
    #[arg(long, group = "to")]
    pub to_earliest: bool,
    #[arg(long, group = "to")]
    pub to_latest: bool,
    #[arg(long, group = "to", allow_negative_numbers = true)]
    pub to_offset: Option<i64>,
    /// YYYY-MM-DDTHH:MM:SS[.mmm][Z|±HH:MM], or milliseconds since the epoch
    #[arg(long, group = "to")]
    pub to_datetime: Option<String>,
    #[arg(long, group = "to", allow_negative_numbers = true)]
    pub shift_by: Option<i64>,
    /// Show the new offsets without committing them
    #[arg(long)]
    pub dry_run: bool,
}

pub async fn run(bootstrap: &str, command: GroupCommand) -> anyhow::Result<()> {
    let mut client = Client::connect(bootstrap, "sluice-cli").await?;
    let mut out = crate::stdout::lock();
    // In a cluster each group has its own coordinator, and each node lists only its groups.
    match command {
        GroupCommand::List => {
            let listed =
                ask_every_node(&mut client, |mut c| async move { c.list_groups().await }).await?;
            let groups: BTreeMap<String, (String, String)> =
                listed.into_iter().map(|(g, s, p)| (g, (s, p))).collect();
            for (group, (state, protocol)) in groups {
                writeln!(
                    out,
                    "{group}\t{state}\t{}",
                    if protocol.is_empty() { "-" } else { &protocol }
                )?;
            }
        }
        GroupCommand::Describe { group } => {
            let mut coordinator = client.coordinator(&group, GROUP).await?;
            let mut leaders = Leaders::new(client);
            describe(&mut coordinator, &mut leaders, &group, &mut out).await?
        }
        GroupCommand::Delete { group } => {
            client
                .coordinator(&group, GROUP)
                .await?
                .delete_group(&group)
                .await?;
            writeln!(out, "deleted group {group}")?;
        }
        GroupCommand::ResetOffsets(args) => {
            let mut coordinator = client.coordinator(&args.group, GROUP).await?;
            let mut leaders = Leaders::new(client);
            reset(&mut coordinator, &mut leaders, args, &mut out).await?
        }
    }
    Ok(())
}

async fn describe(
    client: &mut Client,
    leaders: &mut Leaders,
    group: &str,
    out: &mut impl Write,
) -> anyhow::Result<()> {
    let d = client.describe_group(group).await?;
    if d.state == "Dead" {
        bail!("no group '{group}'");
    }
    writeln!(
        out,
        "Group: {}  State: {}  Protocol: {} {}  Members: {}",
        d.group,
        d.state,
        d.protocol_type,
        d.protocol,
        d.members.len()
    )?;
    let mut owner: BTreeMap<(String, i32), (String, String, String)> = BTreeMap::new();
    for m in &d.members {
        for (topic, partitions) in &m.assignment {
            for p in partitions {
                owner.insert(
                    (topic.clone(), *p),
                    (
                        m.member_id.clone(),
                        m.client_id.clone(),
                        m.client_host.clone(),
                    ),
                );
            }
        }
    }
    let committed = client.committed_offsets(group).await?;
    let mut rows: BTreeMap<(String, i32), i64> =
        committed.into_iter().map(|(t, p, o)| ((t, p), o)).collect();
    for key in owner.keys() {
        rows.entry(key.clone()).or_insert(-1);
    }
    writeln!(
        out,
        "{:<24} {:>9} {:>12} {:>12} {:>8}  {:<40} {:<16} HOST",
        "TOPIC", "PARTITION", "COMMITTED", "END", "LAG", "MEMBER", "CLIENT"
    )?;
    let mut topics: Vec<String> = rows.keys().map(|(t, _)| t.clone()).collect();
    topics.dedup();
    for topic in topics {
        let partitions: Vec<i32> = rows
            .keys()
            .filter(|(t, _)| *t == topic)
            .map(|(_, p)| *p)
            .collect();
        let ends: BTreeMap<i32, i64> = leaders
            .list_offsets(&topic, &partitions, -1)
            .await
            .map(|v| v.into_iter().map(|(p, o, _)| (p, o)).collect())
            .unwrap_or_default();
        for p in partitions {
            let committed = rows[&(topic.clone(), p)];
            let end = ends.get(&p).copied().unwrap_or(-1);
            let lag = if committed >= 0 && end >= 0 {
                (end - committed).to_string()
            } else {
                "-".into()
            };
            let (member, client_id, host) = owner
                .get(&(topic.clone(), p))
                .cloned()
                .unwrap_or_else(|| ("-".into(), "-".into(), "-".into()));
            let show = |v: i64| {
                if v < 0 {
                    "-".to_string()
                } else {
                    v.to_string()
                }
            };
            writeln!(
                out,
                "{topic:<24} {p:>9} {:>12} {:>12} {lag:>8}  {member:<40} {client_id:<16} {host}",
                show(committed),
                show(end)
            )?;
        }
    }
    Ok(())
}

async fn reset(
    client: &mut Client,
    leaders: &mut Leaders,
    args: ResetArgs,
    out: &mut impl Write,
) -> anyhow::Result<()> {
    let d = client.describe_group(&args.group).await?;
    if !matches!(d.state.as_str(), "Empty" | "Dead") {
        bail!(
            "group '{}' is {} with {} active member(s): stop its consumers before resetting offsets",
            args.group,
            d.state,
            d.members.len()
        );
    }
    let partitions =
        crate::partitions::select(leaders.bootstrap(), &args.topic, &args.partition).await?;
    let earliest: BTreeMap<i32, i64> = leaders
        .list_offsets(&args.topic, &partitions, -2)
        .await?
        .into_iter()
        .map(|(p, o, _)| (p, o))
        .collect();
    let latest: BTreeMap<i32, i64> = leaders
        .list_offsets(&args.topic, &partitions, -1)
        .await?
        .into_iter()
        .map(|(p, o, _)| (p, o))
        .collect();
    let committed: BTreeMap<i32, i64> = client
        .committed_offsets(&args.group)
        .await?
        .into_iter()
        .filter(|(t, _, _)| *t == args.topic)
        .map(|(_, p, o)| (p, o))
        .collect();
    let by_time: Option<BTreeMap<i32, i64>> = match &args.to_datetime {
        Some(text) => {
            let ts = parse_datetime(text).with_context(|| format!("--to-datetime '{text}'"))?;
            Some(
                leaders
                    .list_offsets(&args.topic, &partitions, ts)
                    .await?
                    .into_iter()
                    .map(|(p, o, _)| (p, o))
                    .collect(),
            )
        }
        None => None,
    };
    let mut plan = Vec::new();
    for p in &partitions {
        let (lo, hi) = (earliest[p], latest[p]);
        let current = committed.get(p).copied().filter(|o| *o >= 0);
        let target = if args.to_earliest {
            lo
        } else if args.to_latest {
            hi
        } else if let Some(o) = args.to_offset {
            o
        } else if let Some(times) = &by_time {
            times.get(p).copied().filter(|o| *o >= 0).unwrap_or(hi)
        } else if let Some(n) = args.shift_by {
            current.unwrap_or(lo).saturating_add(n)
        } else {
            bail!("say where to: --to-earliest, --to-latest, --to-offset N, --to-datetime T or --shift-by N");
        };
        plan.push((args.topic.clone(), *p, current, target.clamp(lo, hi)));
    }
    writeln!(
        out,
        "{:<24} {:>9} {:>12} {:>12}",
        "TOPIC", "PARTITION", "CURRENT", "NEW"
    )?;
    for (t, p, current, new) in &plan {
        writeln!(
            out,
            "{t:<24} {p:>9} {:>12} {new:>12}",
            current.map_or("-".to_string(), |c| c.to_string())
        )?;
    }
    if args.dry_run {
        writeln!(out, "(dry run: nothing committed)")?;
        return Ok(());
    }
    let offsets: Vec<(String, i32, i64)> = plan.into_iter().map(|(t, p, _, n)| (t, p, n)).collect();
    client.commit_offsets(&args.group, &offsets).await?;
    writeln!(out, "committed new offsets for group {}", args.group)?;
    Ok(())
}

/// `YYYY-MM-DDTHH:MM:SS[.mmm][Z|±HH:MM]` (no zone: UTC) or epoch milliseconds.
pub fn parse_datetime(text: &str) -> anyhow::Result<i64> {
    if let Ok(ms) = text.parse::<i64>() {
        return Ok(ms);
    }
    let bad =
        || anyhow::anyhow!("expected YYYY-MM-DDTHH:MM:SS[.mmm][Z|±HH:MM] or epoch milliseconds");
    let (date, rest) = text.split_once(['T', ' ']).ok_or_else(bad)?;
    let mut d = date.splitn(3, '-').map(|v| v.parse::<i64>());
    let (y, mo, day) = match (d.next(), d.next(), d.next()) {
        (Some(Ok(y)), Some(Ok(m)), Some(Ok(dd)))
            if (1..=12).contains(&m) && (1..=31).contains(&dd) =>
        {
            (y, m, dd)
        }
        _ => return Err(bad()),
    };
    let (time, offset_s) = match rest.find(['Z', '+', '-']) {
        Some(i) => {
            let zone = &rest[i..];
            let offset = if zone == "Z" {
                0
            } else {
                let sign = if zone.starts_with('-') { -1 } else { 1 };
                let (h, m) = zone[1..].split_once(':').ok_or_else(bad)?;
                sign * (h.parse::<i64>().map_err(|_| bad())? * 3600
                    + m.parse::<i64>().map_err(|_| bad())? * 60)
            };
            (&rest[..i], offset)
        }
        None => (rest, 0),
    };
    let (hms, frac) = time.split_once('.').unwrap_or((time, "0"));
    let mut t = hms.splitn(3, ':').map(|v| v.parse::<i64>());
    let (h, mi, s) = match (t.next(), t.next(), t.next()) {
        (Some(Ok(h)), Some(Ok(m)), Some(Ok(s))) if h < 24 && m < 60 && s < 61 => (h, m, s),
        _ => return Err(bad()),
    };
    let ms_frac: i64 = format!("{:0<3}", &frac[..frac.len().min(3)])
        .parse()
        .map_err(|_| bad())?;
    // Days from 1970-01-01 to y-mo-day (Howard Hinnant's days_from_civil).
    let y = if mo <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let doy = (153 * (mo + if mo > 2 { -3 } else { 9 }) + 2) / 5 + day - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    let days = era * 146_097 + doe - 719_468;
    Ok(((days * 86_400 + h * 3600 + mi * 60 + s - offset_s) * 1000) + ms_frac)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn datetimes_parse_to_epoch_milliseconds() {
        assert_eq!(parse_datetime("1970-01-01T00:00:00Z").unwrap(), 0);
        assert_eq!(
            parse_datetime("2026-11-22T01:02:03.5Z").unwrap(),
            1_795_309_323_500
        );
        assert_eq!(
            parse_datetime("2026-11-22T02:02:03.500+01:00").unwrap(),
            1_795_309_323_500
        );
        assert_eq!(
            parse_datetime("2000-02-29T00:00:00").unwrap(),
            951_782_400_000
        );
        assert_eq!(parse_datetime("1234").unwrap(), 1234);
        assert!(parse_datetime("yesterday").is_err());
        assert!(parse_datetime("2026-13-01T00:00:00Z").is_err());
    }
}
