#![allow(clippy::unwrap_used)] // test code: a failed unwrap is a failed test
//! Transactions in the log: open transactions bound the last stable offset, markers close
//! them, aborts are indexed, and all of it survives a clean restart and a crash.

use std::path::Path;
use std::sync::Arc;

use sluice_log::testing::{
    batch_bytes, keyed_batch_bytes, records_from_start, replicate_from_start, set_producer,
    transactional_batch_bytes,
};
use sluice_log::Clock as _;
use sluice_log::{
    validate_produce, AbortedTxn, LeaderEpoch, Log, LogConfig, LogError, ManualClock, Marker,
    Offset, ProducerError,
};

fn config() -> LogConfig {
    LogConfig {
        segment_bytes: 4096,
        retention_ms: -1,
        ..LogConfig::default()
    }
}

/// A compacted topic's log (`cleanup.policy=compact`).
fn compacted() -> LogConfig {
    LogConfig {
        compact: true,
        delete_policy: false,
        ..config()
    }
}

fn open(dir: &Path, clock: &Arc<ManualClock>) -> Log {
    open_with(dir, clock, config())
}

fn open_with(dir: &Path, clock: &Arc<ManualClock>, config: LogConfig) -> Log {
    Log::open(dir, config, Arc::clone(clock) as Arc<dyn sluice_log::Clock>)
        .unwrap()
        .0
}

fn txn(log: &mut Log, pid: i64, epoch: i16, seq: i32, count: usize) -> Offset {
    let bytes = transactional_batch_bytes(pid, epoch, seq, count);
    log.append(validate_produce(&bytes, 1 << 20).unwrap(), LeaderEpoch(0))
        .unwrap()
        .base_offset
}

fn plain(log: &mut Log, count: usize) {
    let bytes = batch_bytes(0, count, 1_000, 8, 0);
    log.append(validate_produce(&bytes, 1 << 20).unwrap(), LeaderEpoch(0))
        .unwrap();
}

fn marker(log: &mut Log, m: Marker, pid: i64, epoch: i16) -> Offset {
    log.append_marker(m, pid, epoch, 0, LeaderEpoch(0))
        .unwrap()
        .base_offset
}

#[test]
fn open_transactions_hold_back_the_stable_offset() {
    let dir = tempfile::tempdir().unwrap();
    let clock = ManualClock::new(1_000);
    let mut log = open(dir.path(), &clock);
    plain(&mut log, 3); // 0..3
    assert_eq!(log.first_unstable_offset(), None);
    let a = txn(&mut log, 7, 0, 0, 2); // 3..5, producer 7
    plain(&mut log, 1); // 5
    let b = txn(&mut log, 8, 0, 0, 2); // 6..8, producer 8
    assert_eq!((a, b), (Offset(3), Offset(6)));
    assert_eq!(log.first_unstable_offset(), Some(Offset(3)));
    txn(&mut log, 7, 0, 2, 1); // 8, still producer 7's transaction
    let commit = marker(&mut log, Marker::Commit, 7, 0); // 9
    assert_eq!(commit, Offset(9));
    assert_eq!(
        log.first_unstable_offset(),
        Some(Offset(6)),
        "producer 8 still open"
    );
    let abort = marker(&mut log, Marker::Abort, 8, 0); // 10
    assert_eq!(log.first_unstable_offset(), None);
    let aborted = AbortedTxn {
        producer_id: 8,
        first_offset: Offset(6),
        last_offset: abort,
    };
    assert_eq!(log.aborted_between(Offset(0), Offset(11)), vec![aborted]);
    assert_eq!(
        log.aborted_between(Offset(0), Offset(6)),
        vec![],
        "ends before it starts"
    );
    assert_eq!(
        log.aborted_between(Offset(11), Offset(20)),
        vec![],
        "starts after its marker"
    );

    // A stale epoch's marker is refused; a marker from a new epoch fences old data.
    assert!(log
        .append_marker(Marker::Commit, 7, 0, 0, LeaderEpoch(0))
        .is_ok());
    marker(&mut log, Marker::Abort, 7, 1);
    assert!(matches!(
        log.append_marker(Marker::Commit, 7, 0, 0, LeaderEpoch(0)),
        Err(LogError::Producer(ProducerError::StaleEpoch { .. }))
    ));
    let stale = transactional_batch_bytes(7, 0, 3, 1);
    assert!(matches!(
        log.append(validate_produce(&stale, 1 << 20).unwrap(), LeaderEpoch(0)),
        Err(LogError::Producer(ProducerError::StaleEpoch { .. }))
    ));
    // The next transaction of the bumped epoch starts its sequences at 0.
    txn(&mut log, 7, 1, 0, 1);
    assert!(log.first_unstable_offset().is_some());

    // A clean restart keeps the open transaction and the aborted index.
    log.close().unwrap();
    let log = open(dir.path(), &clock);
    assert_eq!(log.aborted_between(Offset(0), Offset(100)), vec![aborted]);
    let open_txns = log.open_transactions();
    assert_eq!(open_txns.len(), 1);
    assert_eq!(
        (open_txns[0].producer_id, open_txns[0].producer_epoch),
        (7, 1)
    );
}

#[test]
fn a_crash_rederives_what_the_files_lost() {
    let dir = tempfile::tempdir().unwrap();
    let clock = ManualClock::new(1_000);
    let mut log = open(dir.path(), &clock);
    txn(&mut log, 1, 0, 0, 3);
    let abort = marker(&mut log, Marker::Abort, 1, 0);
    txn(&mut log, 2, 0, 0, 1);
    if let Some(job) = log.flush_job() {
        let outcome = job.run();
        log.complete_flush(&job, outcome).unwrap();
    }
    drop(log); // a crash: no snapshot, no index fsync
    std::fs::remove_file(dir.path().join("aborted.txnindex")).unwrap();
    let log = open(dir.path(), &clock);
    assert_eq!(
        log.aborted_between(Offset(0), Offset(10)),
        vec![AbortedTxn {
            producer_id: 1,
            first_offset: Offset(0),
            last_offset: abort
        }]
    );
    assert_eq!(log.first_unstable_offset(), Some(abort.plus(1)));
}

/// Appends `key → value`, inside producer `pid`'s transaction when `pid` is given.
fn keyed(log: &mut Log, key: &str, value: &str, pid: Option<i64>) -> Offset {
    let mut bytes = keyed_batch_bytes(&[(key, Some(value))], 1_000);
    if let Some(pid) = pid {
        set_producer(&mut bytes, pid, 0, 0, true);
    }
    log.append(validate_produce(&bytes, 1 << 20).unwrap(), LeaderEpoch(0))
        .unwrap()
        .base_offset
}

/// Seals what was written so far: filler records under one key until a new segment starts
/// and is itself past its first batch.
fn seal(log: &mut Log) {
    let segments = log.segment_count();
    while log.segment_count() < segments + 1 {
        keyed(log, "filler", "filler-filler-filler-filler", None);
    }
    keyed(log, "filler", "filler-filler-filler-filler", None);
}

/// One stored record as the cleaner left it.
#[derive(Debug)]
struct Stored {
    offset: i64,
    producer_id: i64,
    transactional: bool,
    key: String,
    value: String,
}

/// Every data record in the log (no markers), in offset order.
fn stored(log: &Log) -> Vec<Stored> {
    records_from_start(log)
        .into_iter()
        .filter(|r| !r.control)
        .map(|r| Stored {
            offset: r.offset,
            producer_id: r.producer_id,
            transactional: r.transactional,
            key: String::from_utf8(r.key.unwrap().to_vec()).unwrap(),
            value: String::from_utf8(r.value.unwrap().to_vec()).unwrap(),
        })
        .collect()
}

/// The producers of the transaction markers in the log, in offset order.
fn markers(log: &Log) -> Vec<i64> {
    records_from_start(log)
        .into_iter()
        .filter(|r| r.control)
        .map(|r| r.producer_id)
        .collect()
}

/// What a `read_committed` consumer sees: the newest value per key below the last stable
/// offset, aborted records dropped.
fn committed_view(log: &Log) -> std::collections::BTreeMap<String, String> {
    let aborted = log.aborted_between(log.log_start_offset(), log.next_offset());
    let stable = log.first_unstable_offset().unwrap_or(log.next_offset());
    stored(log)
        .into_iter()
        .filter(|r| {
            r.offset < stable.0
                && !aborted.iter().any(|a| {
                    a.producer_id == r.producer_id
                        && a.first_offset.0 <= r.offset
                        && r.offset < a.last_offset.0
                })
        })
        .map(|r| (r.key, r.value))
        .collect()
}

fn compact(log: &mut Log) -> u64 {
    let Some(plan) = log.compaction_plan() else {
        return 0;
    };
    let cleaned = plan.run(|_| {}).unwrap();
    log.finish_compaction(cleaned).unwrap().records_removed
}

#[test]
fn compaction_never_lets_an_aborted_or_open_transaction_replace_a_value() {
    let dir = tempfile::tempdir().unwrap();
    let clock = ManualClock::new(1_000);
    let cfg = compacted();
    let mut log = open_with(dir.path(), &clock, cfg.clone());
    keyed(&mut log, "a", "a-committed", None);
    keyed(&mut log, "a", "a-aborted", Some(5));
    marker(&mut log, Marker::Abort, 5, 0);
    keyed(&mut log, "b", "b-in-transaction", Some(6));
    marker(&mut log, Marker::Commit, 6, 0);
    keyed(&mut log, "b", "b-plain-after", None);
    keyed(&mut log, "c", "c-in-transaction", Some(7));
    marker(&mut log, Marker::Commit, 7, 0);
    seal(&mut log);
    let open_at = keyed(&mut log, "a", "a-open", Some(8));
    seal(&mut log);
    seal(&mut log);
    let before = committed_view(&log);
    assert_eq!(before["a"], "a-committed");

    assert!(compact(&mut log) > 0);
    let after = stored(&log);
    assert_eq!(
        committed_view(&log),
        before,
        "read_committed sees the same values"
    );
    assert!(
        after.iter().all(|r| r.producer_id != 5),
        "the aborted transaction's records are gone"
    );
    assert!(
        !after.iter().any(|r| r.value == "b-in-transaction"),
        "a committed transactional record is compacted like any other"
    );
    let c = after.iter().find(|r| r.key == "c").unwrap();
    assert!(c.transactional && c.producer_id == 7, "{c:?}");
    assert!(after.iter().any(|r| r.value == "a-committed"));
    let filler_past_open = after
        .iter()
        .filter(|r| r.key == "filler" && r.offset > open_at.0)
        .count();
    assert!(
        filler_past_open > 1,
        "segments from the open transaction on are not cleaned yet"
    );

    // Once the open transaction aborts, its record goes and the rest is cleaned too.
    marker(&mut log, Marker::Abort, 8, 0);
    seal(&mut log);
    assert!(compact(&mut log) > 0);
    let after = stored(&log);
    assert_eq!(committed_view(&log)["a"], "a-committed");
    assert!(after.iter().all(|r| r.value != "a-open"));
    let sealed_filler = after.iter().filter(|r| r.key == "filler").count();
    assert!(sealed_filler <= 3, "{sealed_filler} filler records left");
    assert_eq!(
        markers(&log),
        vec![5, 6, 7, 8],
        "markers stay within delete.retention.ms"
    );

    // Past delete.retention.ms, the markers stay while their producers are known: each
    // producer's last batch is kept (emptied) for its sequence numbers, as in Kafka, and a
    // kept transactional batch keeps its marker.
    clock.advance_ms(LogConfig::default().delete_retention_ms + 1);
    seal(&mut log);
    compact(&mut log);
    assert_eq!(markers(&log), vec![5, 6, 7, 8]);
    assert_eq!(log.first_unstable_offset(), None);
    // A replica that copies the cleaned log sees every kept transaction end.
    let replica_dir = tempfile::tempdir().unwrap();
    let mut replica = open_with(replica_dir.path(), &clock, cfg.clone());
    replicate_from_start(&log, &mut replica);
    assert_eq!(replica.first_unstable_offset(), None);
    assert_eq!(committed_view(&replica), committed_view(&log));
    // Once the producers expire (`producer.id.expiration.ms`), a marker whose transaction has
    // no record left goes; the one of producer 7 (whose "c" survives) stays.
    assert_eq!(log.expire_producers(clock.now_ms()), 4);
    seal(&mut log);
    assert!(compact(&mut log) > 0);
    assert_eq!(markers(&log), vec![7]);
    assert_eq!(committed_view(&log)["c"], "c-in-transaction");
    assert_eq!(committed_view(&log)["a"], "a-committed");
    drop(log); // and it all recovers as it is
    let log = open_with(dir.path(), &clock, cfg);
    assert_eq!(markers(&log), vec![7]);
    assert_eq!(log.first_unstable_offset(), None);
}

/// The values a `read_committed` client reads from the log start, filtering as Kafka's
/// clients do: from an aborted transaction's first offset, its producer's transactional
/// records are skipped until that producer's abort marker.
fn client_read_committed(log: &Log) -> Vec<String> {
    let mut aborted = log.aborted_between(log.log_start_offset(), log.next_offset());
    aborted.sort_by_key(|a| a.first_offset);
    let mut pending = aborted.into_iter().peekable();
    let mut skipping = std::collections::HashSet::new();
    let stable = log.first_unstable_offset().unwrap_or(log.next_offset());
    let mut out = Vec::new();
    for r in records_from_start(log) {
        if r.offset >= stable.0 {
            break;
        }
        while let Some(a) = pending.next_if(|a| a.first_offset.0 <= r.offset) {
            skipping.insert(a.producer_id);
        }
        if r.control {
            // A control record's key: version, then type (0 abort, 1 commit).
            if r.key
                .as_deref()
                .is_some_and(|k| k.get(2..4) == Some(&[0, 0]))
            {
                skipping.remove(&r.producer_id);
            }
            continue;
        }
        if r.transactional && skipping.contains(&r.producer_id) {
            continue;
        }
        out.push(String::from_utf8(r.value.unwrap().to_vec()).unwrap());
    }
    out
}

#[test]
fn an_abort_marker_the_cleaner_removes_takes_its_index_entry_with_it() {
    let dir = tempfile::tempdir().unwrap();
    let clock = ManualClock::new(1_000);
    let cfg = compacted();
    let mut log = open_with(dir.path(), &clock, cfg.clone());
    // One producer aborts a transaction, then commits the next one.
    for (seq, key, value, end) in [
        (0, "a", "a-aborted", Marker::Abort),
        (1, "b", "b-committed", Marker::Commit),
    ] {
        let mut bytes = keyed_batch_bytes(&[(key, Some(value))], 1_000);
        set_producer(&mut bytes, 5, 0, seq, true);
        let written = log
            .append(validate_produce(&bytes, 1 << 20).unwrap(), LeaderEpoch(0))
            .unwrap();
        assert!(!written.duplicate);
        marker(&mut log, end, 5, 0);
    }
    seal(&mut log);
    seal(&mut log);
    assert!(client_read_committed(&log).contains(&"b-committed".to_string()));
    // Past delete.retention.ms the aborted record goes, and then its marker (no record of
    // its transaction is left); the committed one and its marker stay.
    clock.advance_ms(LogConfig::default().delete_retention_ms + 1);
    seal(&mut log);
    compact(&mut log);
    assert!(stored(&log).iter().all(|r| r.value != "a-aborted"));
    assert_eq!(markers(&log), vec![5], "only the commit marker is left");
    assert_eq!(
        log.aborted_between(log.log_start_offset(), log.next_offset()),
        vec![],
        "no aborted transaction whose marker is gone"
    );
    let seen = client_read_committed(&log);
    assert!(seen.contains(&"b-committed".to_string()), "{seen:?}");
    drop(log); // and after a crash
    let log = open_with(dir.path(), &clock, cfg);
    assert!(client_read_committed(&log).contains(&"b-committed".to_string()));
}

#[test]
fn an_abort_the_index_file_cannot_take_stays_aborted_for_readers() {
    let dir = tempfile::tempdir().unwrap();
    let clock = ManualClock::new(1_000);
    let mut log = open(dir.path(), &clock);
    plain(&mut log, 2);
    let first = txn(&mut log, 5, 0, 0, 3);
    // The index file cannot be created (a directory stands in its place).
    std::fs::create_dir(dir.path().join("aborted.txnindex")).unwrap();
    assert!(log
        .append_marker(Marker::Abort, 5, 0, 0, LeaderEpoch(0))
        .is_err());
    assert!(log.is_offline(), "no more writes");
    let expected = vec![AbortedTxn {
        producer_id: 5,
        first_offset: first,
        last_offset: Offset(5),
    }];
    assert_eq!(
        log.aborted_between(Offset(0), log.next_offset()),
        expected,
        "readers still see the transaction aborted"
    );
    assert_eq!(client_read_committed(&log).len(), 2);
    drop(log);
    std::fs::remove_dir(dir.path().join("aborted.txnindex")).unwrap();
    let log = open(dir.path(), &clock);
    assert_eq!(
        log.aborted_between(Offset(0), log.next_offset()),
        expected,
        "and a restart re-derives the entry"
    );
}

#[test]
fn retention_past_an_open_transaction_keeps_the_stable_offset_in_the_log() {
    let dir = tempfile::tempdir().unwrap();
    let clock = ManualClock::new(1_000);
    let cfg = LogConfig {
        retention_bytes: 8192,
        ..config()
    };
    let mut log = open_with(dir.path(), &clock, cfg);
    let first = txn(&mut log, 9, 0, 0, 2);
    for _ in 0..200 {
        plain(&mut log, 5);
    }
    assert_eq!(log.first_unstable_offset(), Some(first));
    assert!(log.apply_retention(Offset(i64::MAX)).unwrap() > 0);
    let start = log.log_start_offset();
    assert!(start > first);
    assert_eq!(
        log.first_unstable_offset(),
        Some(start),
        "the transaction is still open, from the log start on"
    );
    txn(&mut log, 9, 0, 2, 1);
    marker(&mut log, Marker::Commit, 9, 0);
    assert_eq!(log.first_unstable_offset(), None);
}

#[test]
fn a_log_reset_past_its_end_forgets_the_producers_and_transactions_of_the_old_log() {
    // A follower whose leader no longer holds its next records restarts its log at the
    // leader's start. The old log's snapshot still lists producer 7's open transaction, whose
    // marker lies in what the follower skips: it must not come back, or it would hold the last
    // stable offset at the new start for good.
    let dir = tempfile::tempdir().unwrap();
    let clock = ManualClock::new(1_000);
    let mut log = open(dir.path(), &clock);
    plain(&mut log, 3);
    txn(&mut log, 7, 0, 0, 2); // 3..5, never ended here
    log.close().unwrap(); // writes a producer snapshot at 5
    drop(log);
    let mut log = open(dir.path(), &clock);
    assert_eq!(log.first_unstable_offset(), Some(Offset(3)));
    log.reset_to(Offset(500)).unwrap();
    assert_eq!(log.first_unstable_offset(), None);
    assert!(log.open_transactions().is_empty());
    assert!(log.active_producers().is_empty());
    plain(&mut log, 2);
    drop(log);
    let log = open(dir.path(), &clock);
    assert_eq!(log.first_unstable_offset(), None, "nor after a restart");
    assert!(log.active_producers().is_empty());

    // The same for a log cut back below its start, with a snapshot at the cut point.
    let dir = tempfile::tempdir().unwrap();
    let mut log = open(dir.path(), &clock);
    txn(&mut log, 9, 0, 0, 2); // 0..2
    log.close().unwrap(); // a snapshot at 2: producer 9's transaction open
    drop(log);
    let mut log = open(dir.path(), &clock);
    marker(&mut log, Marker::Commit, 9, 0); // 2
    plain(&mut log, 10); // 3..13
    log.delete_records_before(Offset(8)).unwrap();
    assert_eq!(log.first_unstable_offset(), None);
    log.truncate_to(Offset(2)).unwrap();
    assert_eq!(log.first_unstable_offset(), None);
    assert!(log.active_producers().is_empty());
}
