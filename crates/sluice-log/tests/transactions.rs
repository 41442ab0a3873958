#![allow(clippy::unwrap_used)] // test code: a failed unwrap is a failed test
//! Transactions in the log: open transactions bound the last stable offset, markers close
//! them, aborts are indexed, and all of it survives a clean restart and a crash.

use std::path::Path;
use std::sync::Arc;

use sluice_log::testing::{batch_bytes, transactional_batch_bytes};
use sluice_log::{
    validate_produce, AbortedTxn, LeaderEpoch, Log, LogConfig, LogError, ManualClock, Marker,
    Offset, ProducerError,
};

fn open(dir: &Path, clock: &Arc<ManualClock>) -> Log {
    let config = LogConfig {
        segment_bytes: 4096,
        retention_ms: -1,
        ..LogConfig::default()
    };
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
