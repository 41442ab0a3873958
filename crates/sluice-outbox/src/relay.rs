//! The relay's life: connect to the database, take the lease (or stand by), fence earlier
//! instances through the transactional id, read the committed position, then follow the
//! change stream, publishing committed transactions in batches and confirming each batch's
//! position to the database only once Sluice has committed it.

use std::collections::HashSet;
use std::io::Write as _;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use futures::FutureExt;
use tokio::sync::watch;
use tokio::task::block_in_place;

use crate::config::OutboxConfig;
use crate::error::OutboxError;
use crate::row::{Change, OutboxRow, SourceTxn, PART_BYTES};
use crate::sink::{Progress, Sink};
use crate::source::{ChangeStream, Source};
use crate::stats::{State, Stats};

/// Resolves once `stop` says so; never if its sender is gone.
async fn stopped(stop: &mut watch::Receiver<bool>) {
    loop {
        if *stop.borrow() {
            return;
        }
        if stop.changed().await.is_err() {
            std::future::pending::<()>().await;
        }
    }
}

/// The longest pause between logins Sluice refused (inside `sluice serve`).
const LOGIN_RETRY_MAX: Duration = Duration::from_secs(60);

/// Runs the relay until `stop` turns true (Ok) or an error waiting cannot fix (Err). A lost
/// database or broker ends a session; the relay starts a new one a second later.
pub async fn run(
    cfg: OutboxConfig,
    stats: Arc<Stats>,
    mut stop: watch::Receiver<bool>,
) -> Result<(), OutboxError> {
    cfg.validate()?;
    let mut reached_database = false;
    // The transaction (its end) whose rows a session could not place and left to the next one,
    // which reads the table's shape again.
    let mut reread_at: Option<u64> = None;
    // The producer's batch size, once a topic refused the default's batches (for the
    // process's life: a restarted relay learns it again from the next refusal).
    let mut batch_bytes: Option<usize> = None;
    // Refused logins in a row.
    let mut refused_logins = 0u32;
    loop {
        stats.set_state(State::Starting);
        let outcome = session(
            &cfg,
            &stats,
            &mut stop,
            &mut reached_database,
            &mut reread_at,
            batch_bytes,
        )
        .await;
        match outcome {
            Ok(()) => {
                stats.set_state(State::Stopped);
                return Ok(());
            }
            // Not a failure: the refused transaction was aborted, and the next session
            // publishes it in batches the topic takes, at once.
            Err(OutboxError::BatchTooLarge {
                topic,
                limit,
                batch_bytes: fitting,
            }) => {
                let smaller = batch_bytes.map_or(fitting, |b| b.min(fitting));
                tracing::warn!(
                    %topic,
                    max_message_bytes = limit,
                    batch_bytes = smaller,
                    "a topic refused a batch of rows it takes one by one (Kafka checks whole \
                     batches): the relay sends smaller batches from now on, to every topic"
                );
                batch_bytes = Some(smaller);
                if *stop.borrow() {
                    stats.set_state(State::Stopped);
                    return Ok(());
                }
            }
            // A database never reached, or a login Sluice refuses, is a setting to fix, not a
            // restart to wait for (inside `sluice serve` the relay keeps trying: a user may be
            // made after the broker started).
            Err(e)
                if e.is_fatal()
                    || (!cfg.retry_unreachable
                        && (matches!(e, OutboxError::Login(_))
                            || (!reached_database && matches!(e, OutboxError::Database(_))))) =>
            {
                stats.set_state(State::Failed);
                stats.set_error(Some(e.to_string()));
                return Err(e);
            }
            Err(e) => {
                // A refused login is tried again less and less often (each one is audited and
                // counted by the broker), up to once a minute; anything else after 1 s.
                let pause = if matches!(e, OutboxError::Login(_)) {
                    refused_logins = refused_logins.saturating_add(1);
                    Duration::from_secs(1u64 << refused_logins.min(6)).min(LOGIN_RETRY_MAX)
                } else {
                    refused_logins = 0;
                    Duration::from_secs(1)
                };
                tracing::warn!(
                    error = %e,
                    "the relay's session ended; starting again in {} s",
                    pause.as_secs()
                );
                stats.set_error(Some(e.to_string()));
                stats.set_state(State::Retrying);
                tokio::select! {
                    _ = tokio::time::sleep(pause) => {}
                    _ = stopped(&mut stop) => {
                        stats.set_state(State::Stopped);
                        return Ok(());
                    }
                }
            }
        }
    }
}

async fn session(
    cfg: &OutboxConfig,
    stats: &Stats,
    stop: &mut watch::Receiver<bool>,
    reached_database: &mut bool,
    reread_at: &mut Option<u64>,
    batch_bytes: Option<usize>,
) -> Result<(), OutboxError> {
    let mut source = Source::connect(cfg).await?;
    *reached_database = true;
    source.prepare().await?;

    let mut announced = false;
    while !source.try_lease().await? {
        if !announced {
            tracing::info!(slot = %cfg.slot, "standing by: another instance holds the lease");
            announced = true;
        }
        stats.set_state(State::Standby);
        tokio::select! {
            _ = tokio::time::sleep(Duration::from_millis(cfg.standby_poll_ms)) => {}
            e = source.lease_lost() => return Err(e),
            _ = stopped(stop) => return Ok(()),
        }
    }
    tracing::info!(slot = %cfg.slot, "took the lease: this instance publishes");
    stats.set_state(State::Starting);

    // Fences any earlier instance (its producer, and its open transaction is aborted).
    let mut sink = block_in_place(|| Sink::connect(cfg, batch_bytes))?;
    let progress_topic = cfg.progress_topic();
    sink.ensure_topics(&[progress_topic.as_str()]).await?;
    let progress = block_in_place(|| sink.read_progress())?;
    match &progress {
        Some(p) => {
            tracing::info!(position = %p.position, rows = p.rows, "resuming after the committed position")
        }
        None => tracing::info!("no committed position: starting where the database is now"),
    }
    // The stream starts at the later of the two (the slot may be ahead: confirm_idle).
    let slot_position = source.start_position().await?;
    // With --delete-published the last batch is read again (and skipped as published): a
    // relay stopped between its commit and its delete deletes its rows now.
    let mut stream = source
        .stream(progress.as_ref(), cfg.delete_published)
        .await?;
    // What is committed before the next batch: rows, and the position (or the slot's).
    let mut before = Before {
        rows: progress.as_ref().map_or(0, |p| p.rows),
        position: progress
            .as_ref()
            .map(|p| (p.end, p.position.clone()))
            .or_else(|| (!cfg.is_mysql()).then(|| (slot_position, String::new()))),
    };
    stats.set_position(
        slot_position.max(progress.as_ref().map_or(0, |p| p.end)),
        progress
            .as_ref()
            .filter(|_| cfg.is_mysql())
            .map(|p| p.position.as_str()),
    );
    // MySQL keeps no slot: without a committed position, commit the stream's start now, or a
    // restart before the first batch would begin at the log's new end and skip rows.
    if progress.is_none() {
        if let Some((end, position)) = stream.start_to_commit() {
            let first = Progress {
                end,
                position,
                rows: 0,
                source: cfg.source_identity(),
                batch_start: None,
            };
            block_in_place(|| sink.publish(&[], &first))?;
            before.position = Some((first.end, first.position));
        }
    }
    stats.activations.fetch_add(1, Ordering::Relaxed);
    stats.set_error(None);
    stats.set_state(State::Active);

    let mut batch: Vec<SourceTxn> = Vec::new();
    let mut batch_rows = 0usize;
    let mut batch_row_bytes = 0usize;
    loop {
        let skipped = stream.take_skipped();
        if !skipped.is_empty() {
            // A failure ends the session before anything is confirmed past these rows, as a
            // failed delete of a batch does: nothing more is published until deletes work.
            let ids: Vec<&str> = skipped.iter().map(String::as_str).collect();
            let deleted = source.delete(&ids).await?;
            tracing::info!(
                rows = skipped.len(),
                deleted,
                "deleted the rows of a transaction published before this session"
            );
        }
        stats.wal_end.store(stream.server_end(), Ordering::Relaxed);
        stats.pending_rows.store(
            u64::try_from(batch_rows + stream.pending_rows()).unwrap_or(u64::MAX),
            Ordering::Relaxed,
        );
        let next = if batch.is_empty() {
            // Also keeps the lease's session in use while only other tables' events flow.
            source.verify_lease().await?;
            if let Some(through) = stream.confirm_idle() {
                stats.set_position(through, None);
            }
            tokio::select! {
                biased;
                e = source.lease_lost() => return Err(e),
                _ = stopped(stop) => return Ok(()),
                t = stream.next() => Some(t?),
            }
        } else if batch_rows < cfg.max_batch_rows && batch_row_bytes < PART_BYTES {
            // More of what the database has sent already joins this batch.
            stream.next().now_or_never().transpose()?
        } else {
            None
        };
        // The batch is published when nothing more is ready, before a transaction with a
        // row Sluice cannot take (the relay then stops before that one), or before a large
        // transaction's first part (which goes on in a Sluice transaction of its own).
        let (refused, part) = match next {
            Some(Some(Change::Part(rows))) => (None, Some(rows)),
            Some(Some(Change::Txn(txn))) if txn.unpublishable.is_some() => {
                let end = txn.end;
                (
                    txn.unpublishable.map(|why| (why, txn.reread_shape, end)),
                    None,
                )
            }
            Some(Some(Change::Txn(txn))) if !txn.rows.is_empty() => {
                batch_rows += txn.rows.len();
                batch_row_bytes += txn.rows.iter().map(OutboxRow::size).sum::<usize>();
                batch.push(txn);
                continue;
            }
            Some(_) => continue, // an event inside a transaction, or one with no outbox rows
            None => (None, None),
        };
        // A relay that lost its lease publishes nothing more (a new active instance would
        // fence it anyway).
        source.verify_lease().await?;
        publish(
            cfg,
            &mut source,
            &mut sink,
            &mut stream,
            &batch,
            &before,
            stats,
        )
        .await?;
        if let Some(last) = batch.last() {
            before.position = Some((last.end, last.position.clone()));
        }
        if let Some((why, reread_shape, end)) = refused {
            return Err(stop_before(why, reread_shape, end, reread_at));
        }
        before.rows += u64::try_from(batch_rows).unwrap_or(u64::MAX);
        batch.clear();
        batch_rows = 0;
        batch_row_bytes = 0;
        if let Some(rows) = part {
            let streamed = publish_streamed(
                cfg,
                &mut source,
                &mut sink,
                &mut stream,
                rows,
                &mut before,
                stats,
                stop,
                reread_at,
            )
            .await;
            match streamed {
                Ok(true) => {}
                Ok(false) => return Ok(()),
                Err(e) => {
                    block_in_place(|| sink.abort());
                    return Err(e);
                }
            }
        }
    }
}

/// The error that stops the relay before a transaction with a row it cannot publish (`why`),
/// ending at `end`; with `reread_shape`, once the session after it read the table's shape again.
fn stop_before(
    why: String,
    reread_shape: bool,
    end: u64,
    reread_at: &mut Option<u64>,
) -> OutboxError {
    if !reread_shape {
        return OutboxError::Row(why);
    }
    if *reread_at != Some(end) {
        tracing::info!(
            reason = %why,
            "the outbox table may have changed shape since the relay read it: starting \
             again from the last published transaction, with its shape read again"
        );
        *reread_at = Some(end);
        return OutboxError::Stream(format!("{why}; reading the table's shape again"));
    }
    OutboxError::Row(format!(
        "{why}, also by the shape read again: they were written before an ALTER \
         TABLE; the relay stops here rather than publish one column's bytes as \
         another's, or an ENUM or SET value under another name (nothing of their \
         transaction or after it is published; see docs/outbox.md, \"Altering the \
         outbox table\")"
    ))
}

/// A transaction too large to hold whole, from its first part (see [`Change::Part`]): its rows
/// go into one Sluice transaction part by part as the stream hands them out, and its end
/// commits them with its position, so it is published whole or not at all, as a batch is.
/// Ok(false) when the relay is told to stop meanwhile: the Sluice transaction is aborted, and
/// the next start reads the database transaction again (also aborted, Ok(true): a database
/// transaction that ends without a commit). On an error the caller aborts it.
#[allow(clippy::too_many_arguments)]
async fn publish_streamed(
    cfg: &OutboxConfig,
    source: &mut Source,
    sink: &mut Sink,
    stream: &mut ChangeStream,
    first: Vec<OutboxRow>,
    before: &mut Before,
    stats: &Stats,
    stop: &mut watch::Receiver<bool>,
    reread_at: &mut Option<u64>,
) -> Result<bool, OutboxError> {
    block_in_place(|| sink.begin())?;
    let mut sent = 0usize;
    let mut ids: Vec<String> = Vec::new();
    let mut part = first;
    let txn = loop {
        send_part(cfg, sink, &part, &mut sent, &mut ids).await?;
        stats.pending_rows.store(
            u64::try_from(sent + stream.pending_rows()).unwrap_or(u64::MAX),
            Ordering::Relaxed,
        );
        let next = tokio::select! {
            biased;
            e = source.lease_lost() => return Err(e),
            _ = stopped(stop) => {
                block_in_place(|| sink.abort());
                return Ok(false);
            }
            change = stream.next() => change?,
        };
        part = match next {
            Some(Change::Part(rows)) => rows,
            Some(Change::Txn(txn)) => break txn,
            Some(Change::Abandoned) => {
                tracing::warn!(
                    rows = sent,
                    "a database transaction whose rows were being sent ended without a commit \
                     (the change log went on with another one): its Sluice transaction is aborted"
                );
                block_in_place(|| sink.abort());
                return Ok(true);
            }
            None => Vec::new(), // an event inside the transaction
        };
    };
    if let Some(why) = txn.unpublishable {
        return Err(stop_before(why, txn.reread_shape, txn.end, reread_at));
    }
    send_part(cfg, sink, &txn.rows, &mut sent, &mut ids).await?;
    let progress = Progress {
        end: txn.end,
        position: txn.position.clone(),
        rows: before.rows + u64::try_from(sent).unwrap_or(u64::MAX),
        source: cfg.source_identity(),
        batch_start: txn.begin.clone().or_else(|| before.position.clone()),
    };
    // A relay that lost its lease publishes nothing more.
    source.verify_lease().await?;
    block_in_place(|| sink.commit(&progress))?;
    count_published(stats, sent, 1);
    delete_rows(source, ids.iter().map(String::as_str).collect()).await?;
    confirm_published(cfg, stream, stats, &txn);
    before.rows = progress.rows;
    before.position = Some((txn.end, txn.position));
    Ok(true)
}

/// Sends a large transaction's `rows` into the open Sluice transaction (creating the topics
/// they need first); counts them in `sent`, and keeps their ids in `ids` with
/// `--delete-published`.
async fn send_part(
    cfg: &OutboxConfig,
    sink: &mut Sink,
    rows: &[OutboxRow],
    sent: &mut usize,
    ids: &mut Vec<String>,
) -> Result<(), OutboxError> {
    if rows.is_empty() {
        return Ok(());
    }
    ensure_topics_of(sink, rows.iter()).await?;
    block_in_place(|| sink.send_rows(rows))?;
    *sent += rows.len();
    if cfg.delete_published {
        ids.extend(rows.iter().filter_map(|r| r.id.clone()));
    }
    Ok(())
}

/// What Sluice has committed before a batch: rows published in all, and the position (end,
/// as the database writes it) where reading the change log again shows the batch.
struct Before {
    rows: u64,
    position: Option<(u64, String)>,
}

async fn publish(
    cfg: &OutboxConfig,
    source: &mut Source,
    sink: &mut Sink,
    stream: &mut ChangeStream,
    batch: &[SourceTxn],
    before: &Before,
    stats: &Stats,
) -> Result<(), OutboxError> {
    let Some(last) = batch.last() else {
        return Ok(());
    };
    let rows: usize = batch.iter().map(|t| t.rows.len()).sum();
    let progress = Progress {
        end: last.end,
        position: last.position.clone(),
        rows: before.rows + u64::try_from(rows).unwrap_or(u64::MAX),
        source: cfg.source_identity(),
        batch_start: batch
            .first()
            .and_then(|t| t.begin.clone())
            .or_else(|| before.position.clone()),
    };
    let deleted_each = match publish_txns(sink, batch, &progress).await {
        Ok(()) => false,
        // A row Sluice refuses: the transactions before its own are published one by one,
        // then the relay stops before it.
        Err(OutboxError::Row(why)) if batch.len() > 1 => {
            let mut rows_so_far = before.rows;
            let mut start = before.position.clone();
            for txn in batch {
                rows_so_far += u64::try_from(txn.rows.len()).unwrap_or(u64::MAX);
                let previous = start.replace((txn.end, txn.position.clone()));
                let one = Progress {
                    end: txn.end,
                    position: txn.position.clone(),
                    rows: rows_so_far,
                    source: cfg.source_identity(),
                    batch_start: txn.begin.clone().or(previous),
                };
                let one_txn = std::slice::from_ref(txn);
                publish_txns(sink, one_txn, &one).await?;
                // Counted at once: an error after it ends the session.
                count_published(stats, txn.rows.len(), 1);
                delete_published(cfg, source, one_txn).await?;
                confirm_published(cfg, stream, stats, txn);
            }
            // Every transaction went through on its own: the refusal did not last.
            tracing::warn!(%why, "a batch was refused, but each of its transactions was taken");
            true
        }
        Err(e) => return Err(e),
    };
    // Deleted before the database may let that WAL go: a relay stopped in between reads the
    // batch again after its restart and deletes its rows then.
    if !deleted_each {
        count_published(stats, rows, batch.len());
        delete_published(cfg, source, batch).await?;
    }
    confirm_published(cfg, stream, stats, last);
    Ok(())
}

/// Counts `rows` in `txns` database transactions, published in one Sluice transaction, in
/// the relay's statistics.
fn count_published(stats: &Stats, rows: usize, txns: usize) {
    stats
        .rows
        .fetch_add(u64::try_from(rows).unwrap_or(u64::MAX), Ordering::Relaxed);
    stats
        .txns
        .fetch_add(u64::try_from(txns).unwrap_or(u64::MAX), Ordering::Relaxed);
    stats.batches.fetch_add(1, Ordering::Relaxed);
}

/// Sluice has the rows and the position up to `last`'s end (and, with `--delete-published`,
/// they are deleted): the database may let that WAL go, and the statistics say so.
fn confirm_published(
    cfg: &OutboxConfig,
    stream: &mut ChangeStream,
    stats: &Stats,
    last: &SourceTxn,
) {
    stream.confirm(last.end);
    stats.set_position(last.end, cfg.is_mysql().then_some(last.position.as_str()));
    stats.lag_us.store(
        crate::clock::now_us().saturating_sub(last.commit_time_us),
        Ordering::Relaxed,
    );
}

/// With `--delete-published`, deletes the rows of `txns` from the outbox table.
async fn delete_published(
    cfg: &OutboxConfig,
    source: &mut Source,
    txns: &[SourceTxn],
) -> Result<(), OutboxError> {
    if !cfg.delete_published {
        return Ok(());
    }
    let ids: Vec<&str> = txns
        .iter()
        .flat_map(|t| t.rows.iter().filter_map(|r| r.id.as_deref()))
        .collect();
    delete_rows(source, ids).await
}

/// Deletes the published rows `ids` from the outbox table.
async fn delete_rows(source: &mut Source, ids: Vec<&str>) -> Result<(), OutboxError> {
    if ids.is_empty() {
        return Ok(());
    }
    let deleted = source.delete(&ids).await?;
    if deleted < u64::try_from(ids.len()).unwrap_or(u64::MAX) {
        // A trigger, a row-level security policy or a service that deleted them first.
        tracing::warn!(
            published = ids.len(),
            deleted,
            "fewer published rows were deleted than published"
        );
    }
    Ok(())
}

/// Creates the topics the rows need, then publishes them and `progress` in one transaction.
async fn publish_txns(
    sink: &mut Sink,
    txns: &[SourceTxn],
    progress: &Progress,
) -> Result<(), OutboxError> {
    ensure_topics_of(sink, txns.iter().flat_map(|t| &t.rows)).await?;
    block_in_place(|| sink.publish(txns, progress))
}

/// Creates the topics `rows` go to that Sluice does not have yet.
async fn ensure_topics_of<'a>(
    sink: &mut Sink,
    rows: impl Iterator<Item = &'a OutboxRow>,
) -> Result<(), OutboxError> {
    let topics: HashSet<&str> = rows.map(|r| r.topic.as_str()).collect();
    sink.ensure_topics(&topics.into_iter().collect::<Vec<_>>())
        .await
}

/// Prints a progress line every `every` until `stop`: state, rows/s, position and lag.
pub async fn report(stats: Arc<Stats>, every: Duration, mut stop: watch::Receiver<bool>) {
    if every.is_zero() {
        return;
    }
    let mut before = stats.rows.load(Ordering::Relaxed);
    loop {
        tokio::select! {
            _ = tokio::time::sleep(every) => {}
            _ = stopped(&mut stop) => return,
        }
        let s = stats.snapshot();
        let rate = (s.rows - before.min(s.rows)) as f64 / every.as_secs_f64();
        before = s.rows;
        // Not eprintln!, which panics when standard error's reader is gone.
        let _ = writeln!(
            std::io::stderr().lock(),
            "outbox: {} | {rate:.0} rows/s | {} rows published | position {} | last batch \
             {:.1} ms after its commit | {} rows and {} WAL bytes behind",
            s.state.name(),
            s.rows,
            s.position,
            s.lag_ms,
            s.pending_rows,
            s.lag_bytes
        );
    }
}
