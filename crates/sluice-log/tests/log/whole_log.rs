#![allow(clippy::unwrap_used)] // test code: a failed unwrap is a failed test
//! Behaviour of a whole log on a real directory: append/read/roll, retention, recovery.

use std::fs;
use std::path::Path;
use std::sync::Arc;

use bytes::Bytes;
use kafka_protocol::records::RecordBatchDecoder;
use proptest::prelude::*;
use sluice_log::testing::batch_bytes;
use sluice_log::{
    validate_produce, FlushMode, LeaderEpoch, Log, LogConfig, LogError, ManualClock, Offset,
    TimestampType,
};

fn config() -> LogConfig {
    LogConfig {
        segment_bytes: 4096,
        index_interval_bytes: 256,
        retention_ms: -1,
        ..LogConfig::default()
    }
}

fn open(dir: &Path, config: LogConfig, clock: &Arc<ManualClock>) -> Log {
    Log::open(dir, config, Arc::clone(clock) as Arc<dyn sluice_log::Clock>)
        .unwrap()
        .0
}

fn append(
    log: &mut Log,
    count: usize,
    timestamp: i64,
    value_bytes: usize,
    codec: i16,
) -> sluice_log::AppendInfo {
    let bytes = batch_bytes(0, count, timestamp, value_bytes, codec);
    log.append(validate_produce(&bytes, 1 << 20).unwrap(), LeaderEpoch(3))
        .unwrap()
}

/// Every record from the log start: (offset, timestamp, value), checking offsets are dense.
fn read_all(log: &Log) -> Vec<(i64, i64, Bytes)> {
    let out: Vec<(i64, i64, Bytes)> = sluice_log::testing::records_from_start(log)
        .into_iter()
        .map(|r| (r.offset, r.timestamp, r.value.unwrap()))
        .collect();
    for (i, r) in out.iter().enumerate() {
        assert_eq!(r.0, log.log_start_offset().0 + i as i64, "dense offsets");
    }
    out
}

#[test]
fn appends_are_read_back_across_rolled_segments() {
    let dir = tempfile::tempdir().unwrap();
    let clock = ManualClock::new(1_000);
    let mut log = open(dir.path(), config(), &clock);
    let mut expected = 0;
    for i in 0..40 {
        let info = append(&mut log, 3, 1_000 + i, 300, (i % 5) as i16);
        assert_eq!(info.base_offset, Offset(expected));
        assert_eq!(info.last_offset, Offset(expected + 2));
        expected += 3;
    }
    assert_eq!(log.next_offset(), Offset(120));
    assert!(
        log.segment_count() > 3,
        "small segments roll: {}",
        log.segment_count()
    );
    let records = read_all(&log);
    assert_eq!(records.len(), 120);
    assert!(records.iter().all(|(_, _, v)| v.len() == 300));
    // Every segment file is named by its base offset and starts with that offset.
    for entry in fs::read_dir(dir.path()).unwrap() {
        let name = entry.unwrap().file_name().into_string().unwrap();
        if let Some(stem) = name.strip_suffix(".log") {
            let bytes = fs::read(dir.path().join(&name)).unwrap();
            assert_eq!(
                i64::from_be_bytes(bytes[..8].try_into().unwrap()),
                stem.parse::<i64>().unwrap()
            );
        }
    }
}

#[test]
fn reads_respect_max_bytes_upper_bound_and_range() {
    let dir = tempfile::tempdir().unwrap();
    let clock = ManualClock::new(0);
    let mut log = open(dir.path(), config(), &clock);
    for _ in 0..10 {
        append(&mut log, 2, 0, 50, 0);
    }
    let one = log
        .read(Offset(0), 1, log.next_offset(), true)
        .unwrap()
        .load()
        .unwrap();
    let header = sluice_log::batch::check_stored(&one).unwrap();
    assert_eq!(
        header.base_offset,
        Offset(0),
        "min_one returns the whole first batch"
    );
    assert!(log
        .read(Offset(0), 1, log.next_offset(), false)
        .unwrap()
        .load()
        .unwrap()
        .is_empty());
    let limited = log
        .read(Offset(3), 1 << 20, Offset(6), true)
        .unwrap()
        .load()
        .unwrap();
    let mut buf = limited.clone();
    let sets = RecordBatchDecoder::decode_all(&mut buf).unwrap();
    assert_eq!(
        sets.first().unwrap().records[0].offset,
        2,
        "starts with the batch holding offset 3"
    );
    assert_eq!(
        sets.last().unwrap().records.last().unwrap().offset,
        5,
        "stops below the upper bound"
    );
    assert!(log
        .read(Offset(20), 100, Offset(20), true)
        .unwrap()
        .load()
        .unwrap()
        .is_empty());
    assert!(matches!(
        log.read(Offset(21), 100, Offset(21), true),
        Err(LogError::OffsetOutOfRange { .. })
    ));
}

#[test]
fn log_append_time_is_stamped_and_epoch_patched() {
    let dir = tempfile::tempdir().unwrap();
    let clock = ManualClock::new(5_000);
    let mut log = open(
        dir.path(),
        LogConfig {
            timestamp_type: TimestampType::LogAppendTime,
            ..config()
        },
        &clock,
    );
    let info = append(&mut log, 2, 10, 10, 0);
    assert_eq!(info.log_append_time_ms, 5_000);
    let bytes = log
        .read(Offset(0), 1 << 20, log.next_offset(), true)
        .unwrap()
        .load()
        .unwrap();
    let header = sluice_log::batch::check_stored(&bytes).unwrap();
    assert!(header.is_log_append_time());
    assert_eq!(header.max_timestamp, 5_000);
    assert_eq!(header.partition_leader_epoch, LeaderEpoch(3));
}

#[test]
fn rolls_by_age() {
    let dir = tempfile::tempdir().unwrap();
    let clock = ManualClock::new(0);
    let mut log = open(
        dir.path(),
        LogConfig {
            segment_bytes: 1 << 20,
            segment_ms: 1_000,
            ..config()
        },
        &clock,
    );
    append(&mut log, 1, 0, 10, 0);
    append(&mut log, 1, 0, 10, 0);
    assert_eq!(log.segment_count(), 1);
    clock.advance_ms(1_000);
    append(&mut log, 1, 0, 10, 0);
    assert_eq!(log.segment_count(), 2);
}

#[test]
fn retention_by_time_deletes_old_segments_and_moves_the_start() {
    let dir = tempfile::tempdir().unwrap();
    let clock = ManualClock::new(100_000);
    let mut log = open(
        dir.path(),
        LogConfig {
            retention_ms: 10_000,
            ..config()
        },
        &clock,
    );
    for _ in 0..20 {
        append(&mut log, 4, 100_000, 100, 0); // old records
    }
    let old_end = log.next_offset();
    clock.set_ms(200_000);
    for _ in 0..3 {
        append(&mut log, 4, 199_000, 100, 0); // recent records
    }
    // Nothing past the high watermark goes: a segment is deleted only when it ends at or
    // below it.
    let second = segment_bases(dir.path())[1];
    assert_eq!(log.apply_retention(Offset(second.0 - 1)).unwrap(), 0);
    assert_eq!(log.log_start_offset(), Offset(0));
    assert_eq!(log.apply_retention(second).unwrap(), 1);
    assert_eq!(log.log_start_offset(), second);
    let deleted = log.apply_retention(Offset(i64::MAX)).unwrap();
    assert!(deleted > 0);
    assert!(log.log_start_offset() > Offset(0));
    assert!(log.log_start_offset() <= old_end, "recent records are kept");
    assert!(matches!(
        log.read(Offset(0), 100, log.next_offset(), true),
        Err(LogError::OffsetOutOfRange { .. })
    ));
    let files = fs::read_dir(dir.path())
        .unwrap()
        .filter(|e| {
            e.as_ref()
                .unwrap()
                .path()
                .extension()
                .is_some_and(|x| x == "log")
        })
        .count();
    assert_eq!(files, log.segment_count());
    // Everything expires: the active segment is rolled and deleted too.
    clock.set_ms(1_000_000);
    log.apply_retention(Offset(i64::MAX)).unwrap();
    assert_eq!(log.log_start_offset(), log.next_offset());
    assert_eq!(log.segment_count(), 1);
    append(&mut log, 1, 1_000_000, 10, 0);
    assert_eq!(read_all(&log).len(), 1);
}

#[test]
fn retention_by_bytes_keeps_the_newest_data_within_the_limit() {
    let dir = tempfile::tempdir().unwrap();
    let clock = ManualClock::new(0);
    let mut log = open(
        dir.path(),
        LogConfig {
            retention_bytes: 8192,
            ..config()
        },
        &clock,
    );
    for _ in 0..50 {
        append(&mut log, 4, 0, 100, 0);
    }
    log.apply_retention(Offset(i64::MAX)).unwrap();
    assert!(log.size_bytes() <= 8192 + 4096, "size {}", log.size_bytes());
    assert!(log.size_bytes() >= 8192 - 4096);
    assert_eq!(read_all(&log).last().unwrap().0, 199);
}

#[test]
fn clean_reopen_trusts_indexes_and_crash_reopen_scans() {
    let dir = tempfile::tempdir().unwrap();
    let clock = ManualClock::new(0);
    let mut log = open(dir.path(), config(), &clock);
    for i in 0..30 {
        append(&mut log, 3, i, 100, 0);
    }
    let before = read_all(&log);
    drop(log); // a crash with nothing ever fsynced: every segment is suspect
    let (log, report) = Log::open(dir.path(), config(), Arc::clone(&clock) as _).unwrap();
    assert!(report.segments > 1);
    assert_eq!(report.scanned_segments, report.segments, "{report:?}");
    assert_eq!(report.truncated_bytes, 0);
    assert_eq!(read_all(&log), before);
    let mut log = log;
    log.close().unwrap();
    let bytes = batch_bytes(0, 1, 0, 1, 0);
    assert!(
        log.append(validate_produce(&bytes, 1 << 20).unwrap(), LeaderEpoch(0))
            .is_err(),
        "closed"
    );
    drop(log);
    let (log, report) = Log::open(dir.path(), config(), Arc::clone(&clock) as _).unwrap();
    assert_eq!(
        report.scanned_segments, 0,
        "clean shutdown needs no scan: {report:?}"
    );
    assert_eq!(read_all(&log), before);
    drop(log); // a crash after a clean start: only the active segment is suspect
    let (log, report) = Log::open(dir.path(), config(), Arc::clone(&clock) as _).unwrap();
    assert_eq!(report.scanned_segments, 1, "{report:?}");
    assert_eq!(read_all(&log), before);
}

#[test]
fn flush_jobs_move_the_durable_offset_and_the_recovery_point() {
    let dir = tempfile::tempdir().unwrap();
    let clock = ManualClock::new(0);
    let mut log = open(dir.path(), config(), &clock);
    assert!(log.flush_job().is_none());
    for _ in 0..30 {
        append(&mut log, 3, 0, 100, 0);
    }
    assert_eq!(log.durable_offset(), Offset(0));
    let job = log.flush_job().unwrap();
    append(&mut log, 1, 0, 100, 0); // lands while the fsync runs
    let outcome = job.run();
    log.complete_flush(&job, outcome).unwrap();
    assert_eq!(log.durable_offset(), Offset(90));
    let job = log.flush_job().unwrap();
    log.complete_flush(&job, Ok(())).unwrap();
    assert_eq!(log.durable_offset(), Offset(91));
    assert!(log.flush_job().is_none());
    let segments = log.segment_count();
    drop(log);
    let (_, report) = Log::open(dir.path(), config(), Arc::clone(&clock) as _).unwrap();
    assert_eq!(
        report.scanned_segments, 1,
        "only the active segment after a flush: {report:?} of {segments}"
    );
}

#[test]
fn a_flush_overtaken_by_a_truncation_makes_nothing_durable() {
    // The fsync runs off the log's lock: meanwhile a follower's log is cut back and written
    // again. The job synced the old bytes, not the new ones at the same offsets.
    let dir = tempfile::tempdir().unwrap();
    let clock = ManualClock::new(0);
    let mut log = open(dir.path(), config(), &clock);
    for _ in 0..10 {
        append(&mut log, 3, 0, 100, 0);
    }
    let job = log.flush_job().unwrap();
    assert_eq!(job.upto(), Offset(30));
    log.truncate_to(Offset(12)).unwrap();
    for _ in 0..6 {
        append(&mut log, 3, 0, 100, 0);
    }
    let outcome = job.run();
    log.complete_flush(&job, outcome).unwrap();
    assert_eq!(
        log.durable_offset(),
        Offset(0),
        "the rewritten 12..30 is not durable"
    );
    let job = log.flush_job().unwrap();
    log.complete_flush(&job, Ok(())).unwrap();
    assert_eq!(log.durable_offset(), Offset(30));
}

#[test]
fn a_failed_fsync_takes_the_log_offline_for_writes_but_not_reads() {
    let dir = tempfile::tempdir().unwrap();
    let clock = ManualClock::new(0);
    let mut log = open(dir.path(), config(), &clock);
    append(&mut log, 3, 0, 100, 0);
    let job = log.flush_job().unwrap();
    assert!(log
        .complete_flush(&job, Err(std::io::Error::other("EIO")))
        .is_err());
    let bytes = batch_bytes(0, 1, 0, 1, 0);
    let err = log
        .append(validate_produce(&bytes, 1 << 20).unwrap(), LeaderEpoch(0))
        .unwrap_err();
    assert!(err.is_storage(), "{err}");
    assert_eq!(read_all(&log).len(), 3);
}

#[test]
fn damaged_index_files_are_rebuilt() {
    let dir = tempfile::tempdir().unwrap();
    let clock = ManualClock::new(0);
    let mut log = open(dir.path(), config(), &clock);
    for _ in 0..40 {
        append(&mut log, 3, 0, 100, 0);
    }
    let before = read_all(&log);
    log.close().unwrap();
    let mut damaged = 0;
    for entry in fs::read_dir(dir.path()).unwrap() {
        let path = entry.unwrap().path();
        match path.extension().and_then(|e| e.to_str()) {
            Some("index") if damaged % 2 == 0 => {
                fs::write(&path, b"\xff\xff\xff\xff\xff\xff\xff\xff\x00").unwrap();
                damaged += 1;
            }
            Some("timeindex") => {
                fs::remove_file(&path).unwrap();
                damaged += 1;
            }
            _ => {}
        }
    }
    assert!(damaged > 2);
    let log = open(dir.path(), config(), &clock);
    assert_eq!(read_all(&log), before);
}

#[test]
fn offsets_are_found_by_timestamp() {
    let dir = tempfile::tempdir().unwrap();
    let clock = ManualClock::new(0);
    let mut log = open(dir.path(), config(), &clock);
    // Batch i holds 4 records with timestamps 1000*i + 0..4.
    for i in 0..30 {
        append(&mut log, 4, 1_000 * i, 50, (i % 5) as i16);
    }
    let end = log.next_offset();
    assert_eq!(
        log.offset_for_timestamp(0, end).unwrap(),
        Some((Offset(0), 0))
    );
    assert_eq!(
        log.offset_for_timestamp(5_002, end).unwrap(),
        Some((Offset(22), 5_002))
    );
    assert_eq!(
        log.offset_for_timestamp(5_004, end).unwrap(),
        Some((Offset(24), 6_000))
    );
    assert_eq!(
        log.offset_for_timestamp(29_003, end).unwrap(),
        Some((Offset(119), 29_003))
    );
    assert_eq!(log.offset_for_timestamp(29_004, end).unwrap(), None);
    assert_eq!(
        log.offset_for_timestamp(29_000, Offset(100)).unwrap(),
        None,
        "hidden past the upper bound"
    );
    assert_eq!(
        log.offset_of_max_timestamp(end).unwrap(),
        Some((Offset(119), 29_003))
    );
}

#[test]
fn truncation_to_an_offset_removes_everything_after_it() {
    let dir = tempfile::tempdir().unwrap();
    let clock = ManualClock::new(0);
    let mut log = open(dir.path(), config(), &clock);
    for _ in 0..40 {
        append(&mut log, 3, 0, 100, 0);
    }
    assert_eq!(log.truncate_to(Offset(60)).unwrap(), Offset(60));
    assert_eq!(log.next_offset(), Offset(60));
    assert_eq!(read_all(&log).len(), 60);
    let info = append(&mut log, 3, 0, 100, 0);
    assert_eq!(info.base_offset, Offset(60));
    drop(log);
    let log = open(dir.path(), config(), &clock);
    assert_eq!(log.next_offset(), Offset(63));
    assert_eq!(read_all(&log).len(), 63);
}

#[test]
fn replicated_batches_must_not_overlap_the_log() {
    let dir = tempfile::tempdir().unwrap();
    let clock = ManualClock::new(0);
    let mut log = open(dir.path(), config(), &clock);
    let first = batch_bytes(0, 3, 0, 10, 0);
    let info = log.append_assigned(&first).unwrap();
    assert_eq!((info.base_offset, info.last_offset), (Offset(0), Offset(2)));
    assert!(matches!(
        log.append_assigned(&batch_bytes(2, 1, 0, 10, 0)),
        Err(LogError::NonContiguous { .. })
    ));
    let mut corrupt = batch_bytes(3, 1, 0, 10, 0);
    let last = corrupt.len() - 1;
    corrupt[last] ^= 1;
    assert!(log.append_assigned(&corrupt).is_err());
    log.append_assigned(&batch_bytes(3, 1, 0, 10, 0)).unwrap();
    assert_eq!(read_all(&log).len(), 4);
}

/// Offsets of every record from the log start, gaps allowed.
fn offsets(log: &Log) -> Vec<i64> {
    sluice_log::testing::records_from_start(log)
        .into_iter()
        .map(|r| r.offset)
        .collect()
}

#[test]
fn replicated_batches_may_skip_what_a_compacted_leader_no_longer_holds() {
    let dir = tempfile::tempdir().unwrap();
    let clock = ManualClock::new(0);
    let mut log = open(dir.path(), config(), &clock);
    // A fresh replica whose leader cleaned its first offsets away: a gap into the empty
    // active segment.
    log.append_assigned(&batch_bytes(5, 3, 0, 10, 0)).unwrap();
    // A gap inside the segment.
    let info = log.append_assigned(&batch_bytes(10, 2, 0, 10, 0)).unwrap();
    assert_eq!(
        (info.base_offset, info.last_offset),
        (Offset(10), Offset(11))
    );
    // Two batches in one append, with a gap between them.
    let mut two = batch_bytes(12, 1, 0, 10, 0);
    two.extend_from_slice(&batch_bytes(20, 2, 0, 10, 0));
    log.append_assigned(&two).unwrap();
    assert_eq!(log.next_offset(), Offset(22));
    let want = vec![5, 6, 7, 10, 11, 12, 20, 21];
    assert_eq!(offsets(&log), want);
    // A read from inside a gap starts at the next batch, as on the leader.
    let read = log
        .read(Offset(15), 1 << 20, log.next_offset(), true)
        .unwrap();
    let bytes = read.load().unwrap();
    assert_eq!(
        i64::from_be_bytes(bytes[..8].try_into().unwrap()),
        20,
        "the first batch returned"
    );
    // A crash with nothing fsynced: recovery scans the segment and must not take the gaps
    // for damage.
    let log = reopen_after_crash_cutting_nothing(log, dir.path(), &clock, 1);
    assert_eq!(offsets(&log), want);
    assert_eq!(log.next_offset(), Offset(22));
}

#[test]
fn a_gap_at_a_roll_marks_both_segments_before_the_write() {
    let dir = tempfile::tempdir().unwrap();
    let clock = ManualClock::new(0);
    let mut log = open(dir.path(), config(), &clock);
    // A segment without gaps, nearly full.
    log.append_assigned(&batch_bytes(0, 3, 0, 10, 0)).unwrap();
    log.append_assigned(&batch_bytes(3, 1, 0, 3000, 0)).unwrap();
    assert_eq!(markers(dir.path()), 0);
    // One append whose first batch starts past the end and no longer fits (a roll: the full
    // segment stops short of the new one) and whose second has a gap inside the new segment.
    let mut two = batch_bytes(100, 1, 0, 1000, 0);
    two.extend_from_slice(&batch_bytes(110, 1, 0, 10, 0));
    log.append_assigned(&two).unwrap();
    assert_eq!(log.segment_count(), 2);
    assert_eq!(markers(dir.path()), 2, "both segments may have gaps");
    let want = vec![0, 1, 2, 3, 100, 110];
    assert_eq!(offsets(&log), want);
    let log = reopen_after_crash_cutting_nothing(log, dir.path(), &clock, 2);
    assert_eq!(offsets(&log), want);
}

/// Drops `log` unflushed (a crash) and opens it again: recovery scans `scanned` segments and
/// neither truncates nor removes anything.
fn reopen_after_crash_cutting_nothing(
    log: Log,
    dir: &Path,
    clock: &Arc<ManualClock>,
    scanned: usize,
) -> Log {
    drop(log);
    let (log, report) = Log::open(dir, config(), Arc::clone(clock) as _).unwrap();
    assert_eq!(report.scanned_segments, scanned, "{report:?}");
    assert_eq!(
        (report.truncated_bytes, report.removed_segments),
        (0, 0),
        "{report:?}"
    );
    log
}

/// How many segments carry the "offsets may have gaps" marker.
fn markers(dir: &Path) -> usize {
    fs::read_dir(dir)
        .unwrap()
        .filter(|e| {
            e.as_ref()
                .unwrap()
                .path()
                .extension()
                .is_some_and(|x| x == "compacted")
        })
        .count()
}

#[test]
fn a_reset_log_starts_empty_at_the_given_offset_and_stays_there_after_reopen() {
    let dir = tempfile::tempdir().unwrap();
    let clock = ManualClock::new(0);
    let mut log = open(dir.path(), config(), &clock);
    for _ in 0..40 {
        append(&mut log, 3, 0, 100, 0);
    }
    assert!(log.segment_count() > 1);
    // The leader's log now starts at 500, beyond everything this replica holds.
    log.reset_to(Offset(500)).unwrap();
    assert_eq!(
        (log.log_start_offset(), log.next_offset()),
        (Offset(500), Offset(500))
    );
    assert_eq!(log.segment_count(), 1);
    assert!(read_all(&log).is_empty());
    assert!(matches!(
        log.append_assigned(&batch_bytes(0, 3, 0, 10, 0)),
        Err(LogError::NonContiguous { .. })
    ));
    log.append_assigned(&batch_bytes(500, 3, 0, 10, 0)).unwrap();
    drop(log);
    let log = open(dir.path(), config(), &clock);
    assert_eq!(
        (log.log_start_offset(), log.next_offset()),
        (Offset(500), Offset(503))
    );
    assert_eq!(read_all(&log).len(), 3);
    assert_eq!(
        std::fs::read_dir(dir.path())
            .unwrap()
            .filter(|e| {
                e.as_ref()
                    .unwrap()
                    .file_name()
                    .to_string_lossy()
                    .ends_with(".log")
            })
            .count(),
        1,
        "the old segments' files are gone"
    );
}

#[test]
fn garbage_after_the_last_batch_is_cut_on_recovery() {
    let dir = tempfile::tempdir().unwrap();
    let clock = ManualClock::new(0);
    let mut log = open(dir.path(), config(), &clock);
    for _ in 0..5 {
        append(&mut log, 3, 0, 100, 0);
    }
    let before = read_all(&log);
    drop(log);
    let active = last_segment(dir.path());
    let mut bytes = fs::read(&active).unwrap();
    let len = bytes.len();
    bytes.extend_from_slice(&[
        0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x0f, 0x00, 0x00, 0x10, 0x00, 0xde, 0xad,
    ]);
    fs::write(&active, &bytes).unwrap();
    let (log, report) = Log::open(dir.path(), config(), Arc::clone(&clock) as _).unwrap();
    assert_eq!(report.truncated_bytes, 14);
    assert_eq!(fs::metadata(&active).unwrap().len() as usize, len);
    assert_eq!(read_all(&log), before);
}

fn segment_bases(dir: &Path) -> Vec<Offset> {
    let mut bases: Vec<Offset> = fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "log"))
        .map(|p| Offset(p.file_stem().unwrap().to_str().unwrap().parse().unwrap()))
        .collect();
    bases.sort();
    bases
}

fn last_segment(dir: &Path) -> std::path::PathBuf {
    let mut logs: Vec<_> = fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "log"))
        .collect();
    logs.sort();
    logs.pop().unwrap()
}

/// One batch as written: its offsets and the length of its values.
#[derive(Debug, Clone)]
struct Written {
    first: i64,
    count: i64,
    value_bytes: usize,
}

fn recovery_point(dir: &Path) -> i64 {
    fs::read_to_string(dir.join("recovery-point"))
        .unwrap()
        .lines()
        .find_map(|l| {
            l.strip_prefix("recovery_point=")
                .map(|v| v.parse().unwrap())
        })
        .unwrap()
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 96, ..ProptestConfig::default() })]

    /// A crash can leave any segment written since the last fsync cut short at any byte, or
    /// with any byte damaged. Recovery must keep every batch that lies wholly before the
    /// damage, serve only intact batches with the right contents, and after a cut serve
    /// nothing past it.
    #[test]
    fn recovery_keeps_every_whole_batch_before_the_damage(
        batches in prop::collection::vec((1usize..6, 1usize..300, 0i16..5), 1..40),
        flushed_prefix in 0usize..40,
        victim in any::<prop::sample::Index>(),
        cut in any::<prop::sample::Index>(),
        flip in any::<bool>(),
    ) {
        let dir = tempfile::tempdir().unwrap();
        let clock = ManualClock::new(0);
        let mut log = open(dir.path(), config(), &clock);
        let mut written = Vec::new();
        for (i, &(count, value_bytes, codec)) in batches.iter().enumerate() {
            let info = append(&mut log, count, i as i64, value_bytes, codec);
            written.push(Written { first: info.base_offset.0, count: count as i64, value_bytes });
            if i + 1 == flushed_prefix {
                let job = log.flush_job().unwrap();
                let outcome = job.run();
                log.complete_flush(&job, outcome).unwrap();
            }
        }
        drop(log); // the crash

        // Only segments not wholly below the recovery point can have been torn by a crash.
        let rp = recovery_point(dir.path());
        let mut segments: Vec<(i64, std::path::PathBuf)> = fs::read_dir(dir.path()).unwrap()
            .map(|e| e.unwrap().path())
            .filter(|p| p.extension().is_some_and(|x| x == "log"))
            .map(|p| (p.file_stem().unwrap().to_str().unwrap().parse().unwrap(), p))
            .collect();
        segments.sort();
        let first_untrusted = segments.iter().rposition(|(base, _)| *base <= rp).unwrap_or(0);
        let (victim_base, victim) = victim.get(&segments[first_untrusted..]).clone();
        let bytes = fs::read(&victim).unwrap();
        prop_assume!(!bytes.is_empty());
        let at = cut.index(bytes.len());
        // The end of the batches of the victim that lie wholly before byte `at`.
        let mut intact_end = victim_base;
        let mut pos = 0usize;
        while pos < bytes.len() {
            let header = sluice_log::batch::BatchHeader::parse(&bytes[pos..]).unwrap();
            if pos + header.total_bytes() > at { break; }
            intact_end = header.last_offset().0 + 1;
            pos += header.total_bytes();
        }
        if flip {
            let mut damaged = bytes.clone();
            damaged[at] ^= 0x5a;
            fs::write(&victim, &damaged).unwrap();
        } else {
            fs::write(&victim, &bytes[..at]).unwrap();
        }

        let (log, _report) = Log::open(dir.path(), config(), Arc::clone(&clock) as _).unwrap();
        let end = log.next_offset().0;
        prop_assert!(end >= intact_end, "lost whole batches: end {} < {}", end, intact_end);
        if !flip {
            prop_assert_eq!(end, intact_end, "a cut log ends at the last whole batch before the cut");
        }
        let records = read_all_checked(&log);
        prop_assert_eq!(records.len() as i64, end - log.log_start_offset().0);
        for (offset, value_len) in records {
            let w = written.iter().find(|w| w.first <= offset && offset < w.first + w.count).unwrap();
            prop_assert_eq!(value_len, w.value_bytes, "offset {} has the wrong record", offset);
        }
    }
}

/// Reads everything, checking the CRC of every served batch; returns (offset, value length).
fn read_all_checked(log: &Log) -> Vec<(i64, usize)> {
    let mut out = Vec::new();
    let mut offset = log.log_start_offset();
    while offset < log.next_offset() {
        let bytes = log
            .read(offset, 1 << 20, log.next_offset(), true)
            .unwrap()
            .load()
            .unwrap();
        assert!(!bytes.is_empty());
        let mut at = 0;
        while at < bytes.len() {
            let extent = sluice_log::batch::peek_extent(&bytes[at..]).unwrap();
            let batch = &bytes[at..at + extent.total_bytes];
            sluice_log::batch::check_stored(batch).expect("a served batch is intact");
            let mut buf = Bytes::copy_from_slice(batch);
            for r in RecordBatchDecoder::decode(&mut buf).unwrap().records {
                if r.offset >= offset.0 {
                    out.push((r.offset, r.value.map_or(0, |v| v.len())));
                }
            }
            at += extent.total_bytes;
        }
        offset = Offset(out.last().unwrap().0 + 1);
    }
    out
}

#[test]
fn an_empty_directory_opens_as_an_empty_log() {
    let dir = tempfile::tempdir().unwrap();
    let clock = ManualClock::new(0);
    let log = open(
        &dir.path().join("t-0"),
        LogConfig {
            flush: FlushMode::Sync,
            ..config()
        },
        &clock,
    );
    assert_eq!(log.next_offset(), Offset(0));
    assert_eq!(log.log_start_offset(), Offset(0));
    assert!(read_all(&log).is_empty());
}

#[test]
fn producer_state_below_a_log_start_inside_a_segment_survives_a_crash() {
    use sluice_log::testing::idempotent_batch_bytes;
    let dir = tempfile::tempdir().unwrap();
    let clock = ManualClock::new(0);
    let send = |log: &mut Log, pid: i64, seq: i32| {
        let bytes = idempotent_batch_bytes(pid, 0, seq, 2, 300);
        log.append(validate_produce(&bytes, 1 << 20).unwrap(), LeaderEpoch(0))
    };
    let mut log = open(dir.path(), config(), &clock);
    let mut seq = 0;
    while log.segment_count() < 2 {
        send(&mut log, 42, seq).unwrap();
        seq += 2;
    }
    // Producer 42's last batch opened the new segment (whose snapshot predates it); another
    // producer writes after it, and DeleteRecords moves the start past 42's last batch but
    // not past the segment's base.
    let last_seq = seq - 2;
    let others = send(&mut log, 7, 0).unwrap();
    send(&mut log, 7, 2).unwrap();
    log.delete_records_before(others.base_offset).unwrap();
    assert_eq!(log.segment_count(), 1);
    for restart in ["before", "after"] {
        let retry = send(&mut log, 42, last_seq).unwrap();
        assert!(
            retry.duplicate,
            "{restart} a crash, a retry of 42's last batch is known"
        );
        drop(log); // crash
        log = open(dir.path(), config(), &clock);
    }
    assert!(!send(&mut log, 42, seq).unwrap().duplicate);
    assert!(
        matches!(send(&mut log, 42, seq + 4), Err(LogError::Producer(_))),
        "a gap is still refused"
    );
}

#[test]
fn a_replica_whose_first_batch_is_beyond_its_empty_segments_offsets_rolls_first() {
    let dir = tempfile::tempdir().unwrap();
    let clock = ManualClock::new(0);
    let mut log = open(dir.path(), config(), &clock);
    // A fresh replica of a compacted log whose first surviving batch lies more than
    // u32::MAX offsets past the empty segment's base.
    let far = 5_000_000_000;
    log.append_assigned(&batch_bytes(far, 3, 0, 10, 0)).unwrap();
    log.append_assigned(&batch_bytes(far + 3, 2, 0, 10, 0))
        .unwrap();
    assert_eq!(log.next_offset(), Offset(far + 5));
    for _ in 0..2 {
        drop(log); // crash, then a clean restart
        let (reopened, report) = Log::open(dir.path(), config(), Arc::clone(&clock) as _).unwrap();
        assert_eq!(report.truncated_bytes, 0, "{report:?}");
        assert_eq!(reopened.next_offset(), Offset(far + 5));
        assert_eq!(offsets(&reopened), (far..far + 5).collect::<Vec<_>>());
        log = reopened;
        log.close().unwrap();
    }
}

#[test]
fn idempotent_retries_are_deduplicated_across_restarts_and_rolls() {
    use sluice_log::testing::idempotent_batch_bytes;
    let dir = tempfile::tempdir().unwrap();
    let clock = ManualClock::new(0);
    let send = |log: &mut Log, seq: i32| {
        let bytes = idempotent_batch_bytes(42, 0, seq, 2, 300);
        log.append(validate_produce(&bytes, 1 << 20).unwrap(), LeaderEpoch(0))
    };
    let mut log = open(dir.path(), config(), &clock);
    let mut offsets = Vec::new();
    for i in 0..30 {
        offsets.push(send(&mut log, i * 2).unwrap());
    }
    assert!(
        log.segment_count() > 2,
        "the test crosses segment rolls (snapshots)"
    );
    let retry = send(&mut log, 58).unwrap();
    assert!(retry.duplicate);
    assert_eq!(retry.base_offset, offsets[29].base_offset);
    assert!(
        matches!(send(&mut log, 70), Err(LogError::Producer(_))),
        "a gap is refused"
    );
    drop(log); // crash: state comes from the last roll's snapshot plus replay
    let mut log = open(dir.path(), config(), &clock);
    let retry = send(&mut log, 56).unwrap();
    assert!(retry.duplicate, "a retry after a crash is still recognised");
    assert_eq!(retry.base_offset, offsets[28].base_offset);
    assert_eq!(send(&mut log, 60).unwrap().base_offset, Offset(60));
    log.close().unwrap();
    drop(log);
    let mut log = open(dir.path(), config(), &clock);
    assert!(
        send(&mut log, 60).unwrap().duplicate,
        "and after a clean restart"
    );
    assert_eq!(log.next_offset(), Offset(62));
    // A follower cut back below the last batches forgets them.
    log.truncate_to(Offset(58)).unwrap();
    assert!(matches!(send(&mut log, 60), Err(LogError::Producer(_))));
    assert!(!send(&mut log, 58).unwrap().duplicate);
    assert_eq!(read_all(&log).len(), 60);
}

#[test]
fn writeback_is_handed_out_every_few_mib() {
    let dir = tempfile::tempdir().unwrap();
    let clock = ManualClock::new(0);
    let mut log = open(
        dir.path(),
        LogConfig {
            segment_bytes: 64 << 20,
            ..config()
        },
        &clock,
    );
    let mut jobs = 0;
    let mut appended = 0u64;
    while appended < 10 << 20 {
        append(&mut log, 16, 0, 1000, 0);
        appended = log.size_bytes();
        if let Some(job) = log.take_writeback() {
            job.run();
            jobs += 1;
        }
    }
    assert_eq!(jobs, 2, "two 4 MiB chunks in 10 MiB");
    assert!(log.take_writeback().is_none());
}

/// A batch of keyed records (`key-<k>` → `value`), for compaction tests.
fn keyed_batch(records: &[(u32, Option<&str>)], timestamp: i64) -> Vec<u8> {
    let keys: Vec<String> = records.iter().map(|(k, _)| format!("key-{k}")).collect();
    let records: Vec<(&str, Option<&str>)> = keys
        .iter()
        .zip(records)
        .map(|(k, (_, v))| (k.as_str(), *v))
        .collect();
    sluice_log::testing::keyed_batch_bytes(&records, timestamp)
}

/// Plans, runs and swaps in one compaction of the sealed segments (there must be some).
fn compact(log: &mut Log) -> sluice_log::compaction::CompactionReport {
    let plan = log.compaction_plan().expect("sealed segments to clean");
    let cleaned = plan.run(|_| {}).unwrap();
    log.finish_compaction(cleaned).unwrap()
}

#[test]
fn compaction_keeps_the_newest_value_per_key_and_survives_a_restart() {
    let dir = tempfile::tempdir().unwrap();
    let clock = ManualClock::new(1_000_000);
    let cfg = LogConfig {
        compact: true,
        delete_policy: false,
        delete_retention_ms: 0,
        ..config()
    };
    let mut log = open(dir.path(), cfg.clone(), &clock);
    for version in 0..20 {
        let values: Vec<String> = (0..10).map(|k| format!("{k}:{version}")).collect();
        let records: Vec<(u32, Option<&str>)> = (0..10)
            .map(|k| (k, Some(values[k as usize].as_str())))
            .collect();
        log.append(
            validate_produce(&keyed_batch(&records, 1_000), 1 << 20).unwrap(),
            LeaderEpoch(0),
        )
        .unwrap();
    }
    log.append(
        validate_produce(&keyed_batch(&[(8, None), (9, None)], 1_000), 1 << 20).unwrap(),
        LeaderEpoch(0),
    )
    .unwrap();
    // Enough filler to seal the segments holding the newest versions (the active segment is
    // never cleaned, as in Kafka).
    for _ in 0..100 {
        log.append(
            validate_produce(
                &keyed_batch(&[(100, Some("filler-filler-filler"))], 1_000),
                1 << 20,
            )
            .unwrap(),
            LeaderEpoch(0),
        )
        .unwrap();
    }
    let end = log.next_offset();
    clock.advance_ms(10);
    let report = compact(&mut log);
    assert!(report.records_removed > 0, "{report:?}");
    assert_eq!(log.next_offset(), end, "offsets do not change");
    let check = |log: &Log| {
        let mut latest = std::collections::BTreeMap::new();
        let records = sluice_log::testing::records_from_start(log);
        for r in &records {
            let key = String::from_utf8(r.key.clone().unwrap().to_vec()).unwrap();
            assert!(
                latest.insert(key.clone(), r.value.clone()).is_none() || key == "key-100",
                "{key} twice"
            );
        }
        assert!(records.windows(2).all(|w| w[0].offset < w[1].offset));
        latest
    };
    let latest = check(&log);
    for k in 0..8 {
        assert_eq!(
            latest[&format!("key-{k}")].as_deref(),
            Some(format!("{k}:19").as_bytes())
        );
    }
    assert!(
        !latest.contains_key("key-8") && !latest.contains_key("key-9"),
        "expired tombstones are gone"
    );
    assert!(log.compaction_plan().is_none(), "nothing new to clean");
    drop(log); // a crash: the compacted segments (with gaps) must recover as they are
    let log = open(dir.path(), cfg, &clock);
    assert_eq!(log.next_offset(), end);
    assert_eq!(check(&log), latest);
}

#[test]
fn compaction_keeps_a_log_append_time_batchs_flag_and_the_brokers_time() {
    let dir = tempfile::tempdir().unwrap();
    let appended_at = 5_000_000;
    let clock = ManualClock::new(appended_at);
    let cfg = LogConfig {
        compact: true,
        delete_policy: false,
        timestamp_type: TimestampType::LogAppendTime,
        ..config()
    };
    let mut log = open(dir.path(), cfg, &clock);
    let producer_time = 1_000;
    let append_keyed = |log: &mut Log, records: &[(u32, Option<&str>)]| {
        log.append(
            validate_produce(&keyed_batch(records, producer_time), 1 << 20).unwrap(),
            LeaderEpoch(0),
        )
        .unwrap();
    };
    // Keys 0-3 in one batch, then 0 and 1 again: the first batch is cut to 2 and 3, re-encoded.
    append_keyed(
        &mut log,
        &[
            (0, Some("a")),
            (1, Some("b")),
            (2, Some("c")),
            (3, Some("d")),
        ],
    );
    append_keyed(&mut log, &[(0, Some("a2")), (1, Some("b2"))]);
    for _ in 0..100 {
        append_keyed(&mut log, &[(100, Some("filler-filler-filler"))]);
    }
    let before = sluice_log::testing::batch_headers_from_start(&log);
    assert_eq!(before[0].record_count, 4);
    clock.advance_ms(10);
    compact(&mut log);
    let after = sluice_log::testing::batch_headers_from_start(&log);
    let first = &after[0];
    assert_eq!(
        (first.base_offset, first.record_count),
        (Offset(2), 2),
        "the first batch was re-encoded with its 2 survivors"
    );
    for header in &after {
        assert!(header.is_log_append_time(), "{header:?}");
        assert_eq!(header.max_timestamp, appended_at, "{header:?}");
    }
}

/// A keyed batch from idempotent producer `producer_id` (epoch 0) starting at `sequence`.
fn producer_batch(producer_id: i64, sequence: i32, records: &[(u32, Option<&str>)]) -> Vec<u8> {
    let mut bytes = keyed_batch(records, 1_000);
    sluice_log::testing::set_producer(&mut bytes, producer_id, 0, sequence, false);
    bytes
}

fn produce(log: &mut Log, bytes: &[u8]) -> Result<sluice_log::AppendInfo, LogError> {
    log.append(validate_produce(bytes, 1 << 20).unwrap(), LeaderEpoch(0))
}

#[test]
fn compaction_keeps_each_producers_last_sequence_for_replicas_and_recovery() {
    let dir = tempfile::tempdir().unwrap();
    let clock = ManualClock::new(1_000_000);
    let cfg = LogConfig {
        compact: true,
        delete_policy: false,
        ..config()
    };
    let mut leader = open(dir.path(), cfg.clone(), &clock);
    // Producer 7: keys 0-3 (sequences 0-3) then its last batch, keys 4-5 (4-5), at 4-5.
    produce(
        &mut leader,
        &producer_batch(
            7,
            0,
            &[
                (0, Some("a")),
                (1, Some("b")),
                (2, Some("c")),
                (3, Some("d")),
            ],
        ),
    )
    .unwrap();
    let last7 = produce(
        &mut leader,
        &producer_batch(7, 4, &[(4, Some("e")), (5, Some("f"))]),
    )
    .unwrap();
    // Producer 8: keys 10-12 (sequences 0-2) in one batch at 6-8.
    let last8 = produce(
        &mut leader,
        &producer_batch(8, 0, &[(10, Some("x")), (11, Some("y")), (12, Some("z"))]),
    )
    .unwrap();
    // A producer without idempotence overwrites all of producer 7's last batch and the first
    // and last records of producer 8's, then fills segments so that all of the above is
    // sealed.
    produce(
        &mut leader,
        &keyed_batch(
            &[
                (4, Some("e2")),
                (5, Some("f2")),
                (10, Some("x2")),
                (12, Some("z2")),
            ],
            1_000,
        ),
    )
    .unwrap();
    for _ in 0..100 {
        produce(
            &mut leader,
            &keyed_batch(&[(100, Some("filler-filler-filler"))], 1_000),
        )
        .unwrap();
    }
    compact(&mut leader);

    let headers = sluice_log::testing::batch_headers_from_start(&leader);
    let of = |pid: i64| -> Vec<&sluice_log::BatchHeader> {
        headers.iter().filter(|h| h.producer_id == pid).collect()
    };
    let kept7 = of(7);
    assert_eq!(kept7.len(), 2, "{kept7:?}");
    let emptied = kept7[1];
    assert_eq!(
        (
            emptied.record_count,
            emptied.base_offset,
            emptied.last_offset(),
            emptied.base_sequence
        ),
        (0, last7.base_offset, last7.last_offset, 4),
        "producer 7's last batch is kept without its records"
    );
    let kept8 = of(8);
    assert_eq!(kept8.len(), 1);
    assert_eq!(
        (
            kept8[0].record_count,
            kept8[0].base_offset,
            kept8[0].base_sequence,
            kept8[0].last_offset(),
            kept8[0].base_sequence + kept8[0].last_offset_delta
        ),
        (1, Offset(7), 1, last8.last_offset, 2),
        "producer 8's batch lost its first and last records: it starts at its survivor and \
         keeps its last offset and sequence"
    );
    // Consumers read on across the emptied batch and the shortened one.
    let values: Vec<(i64, Bytes)> = sluice_log::testing::records_from_start(&leader)
        .into_iter()
        .filter(|r| r.offset < 9)
        .map(|r| (r.offset, r.value.unwrap()))
        .collect();
    let want: Vec<(i64, Bytes)> = [(0, "a"), (1, "b"), (2, "c"), (3, "d"), (7, "y")]
        .into_iter()
        .map(|(o, v)| (o, Bytes::from(v)))
        .collect();
    assert_eq!(values, want);

    // A replica that copies the cleaned log, and the leader recovering from the cleaned log
    // alone (no producer snapshots), both know where each producer goes on: a retry of the
    // last batch is a duplicate, the next sequence is taken, a skipped one refused.
    let replica_dir = tempfile::tempdir().unwrap();
    let mut replica = open(replica_dir.path(), cfg.clone(), &clock);
    sluice_log::testing::replicate_from_start(&leader, &mut replica);
    drop(leader);
    for entry in fs::read_dir(dir.path()).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().is_some_and(|x| x == "snapshot") {
            fs::remove_file(path).unwrap();
        }
    }
    let recovered = open(dir.path(), cfg, &clock);
    for mut log in [replica, recovered] {
        let retry = produce(
            &mut log,
            &producer_batch(7, 4, &[(4, Some("e")), (5, Some("f"))]),
        )
        .unwrap();
        assert_eq!(
            (retry.duplicate, retry.base_offset, retry.last_offset),
            (true, last7.base_offset, last7.last_offset),
            "a retry"
        );
        assert!(matches!(
            produce(&mut log, &producer_batch(7, 7, &[(4, Some("skip"))])),
            Err(LogError::Producer(
                sluice_log::ProducerError::OutOfOrder { .. }
            ))
        ));
        produce(&mut log, &producer_batch(7, 6, &[(4, Some("e3"))])).unwrap();
        let original8 = [(10, Some("x")), (11, Some("y")), (12, Some("z"))];
        let retry8 = produce(&mut log, &producer_batch(8, 0, &original8)).unwrap();
        assert_eq!(
            (retry8.duplicate, retry8.base_offset, retry8.last_offset),
            (true, last8.base_offset, last8.last_offset),
            "a retry of the shortened batch"
        );
        produce(&mut log, &producer_batch(8, 3, &[(12, Some("z3"))])).unwrap();
    }
}

#[test]
fn a_compaction_planned_before_the_log_is_cut_back_is_not_swapped_in() {
    let dir = tempfile::tempdir().unwrap();
    let clock = ManualClock::new(1_000_000);
    let cfg = LogConfig {
        compact: true,
        delete_policy: false,
        ..config()
    };
    let mut log = open(dir.path(), cfg, &clock);
    for version in 0..3 {
        let value = format!("v{version}");
        produce(&mut log, &keyed_batch(&[(1, Some(value.as_str()))], 1_000)).unwrap();
    }
    for _ in 0..100 {
        produce(
            &mut log,
            &keyed_batch(&[(100, Some("filler-filler-filler"))], 1_000),
        )
        .unwrap();
    }
    let plan = log.compaction_plan().expect("sealed segments to clean");
    let cleaned = plan.run(|_| {}).unwrap();
    // A follower cut back at its end while its cleaner worked: the producers whose batches
    // the plan kept may have lost theirs, so nothing planned before is swapped in.
    let end = log.next_offset();
    log.truncate_to(Offset(end.0 - 1)).unwrap();
    let report = log.finish_compaction(cleaned).unwrap();
    assert_eq!(report.segments, 0, "{report:?}");
    assert!(
        fs::read_dir(dir.path()).unwrap().all(|e| !e
            .unwrap()
            .path()
            .to_string_lossy()
            .ends_with(".cleaned")),
        "the cleaned files are removed"
    );
    assert!(compact(&mut log).segments > 0, "a new plan is swapped in");
}

#[test]
fn delete_records_moves_the_start_into_a_segment_and_survives_restarts() {
    let dir = tempfile::tempdir().unwrap();
    let clock = ManualClock::new(1_000);
    let mut log = open(dir.path(), config(), &clock);
    for _ in 0..100 {
        append(&mut log, 5, 1_000, 100, 0); // 500 records over many 4 KiB segments
    }
    let segments = log.segment_count();
    assert!(segments > 5);
    let start = log.delete_records_before(Offset(233)).unwrap();
    assert_eq!(start, Offset(233));
    assert_eq!(log.log_start_offset(), Offset(233));
    assert!(
        log.segment_count() < segments,
        "whole segments below the start are deleted"
    );
    assert!(matches!(
        log.read(Offset(232), 1000, log.next_offset(), true),
        Err(LogError::OffsetOutOfRange { .. })
    ));
    assert_eq!(read_all(&log).first().map(|r| r.0), Some(233));
    assert_eq!(
        log.offset_for_timestamp(0, log.next_offset())
            .unwrap()
            .map(|(o, _)| o),
        Some(Offset(233)),
        "a lookup never answers a deleted offset"
    );
    assert_eq!(log.delete_records_before(Offset(10)).unwrap(), Offset(233));
    assert!(matches!(
        log.delete_records_before(Offset(501)),
        Err(LogError::OffsetOutOfRange { .. })
    ));
    drop(log); // a crash
    let mut log = open(dir.path(), config(), &clock);
    assert_eq!(log.log_start_offset(), Offset(233));
    log.delete_records_before(Offset(300)).unwrap();
    log.close().unwrap();
    let mut log = open(dir.path(), config(), &clock);
    assert_eq!(log.log_start_offset(), Offset(300));
    // Up to the end: the log is empty from 500 on and appends go on from there.
    log.delete_records_before(Offset(500)).unwrap();
    assert_eq!(append(&mut log, 2, 1_000, 10, 0).base_offset, Offset(500));
    assert_eq!(read_all(&log).len(), 2);
}

fn append_in_epoch(log: &mut Log, count: usize, epoch: i32) -> sluice_log::AppendInfo {
    let bytes = batch_bytes(0, count, 1_000, 10, 0);
    log.append(
        validate_produce(&bytes, 1 << 20).unwrap(),
        LeaderEpoch(epoch),
    )
    .unwrap()
}

fn epochs(log: &Log) -> Vec<(i32, i64)> {
    log.epoch_starts().iter().map(|(e, o)| (e.0, o.0)).collect()
}

#[test]
fn the_leader_epoch_cache_follows_appends_truncation_restarts_and_the_log_start() {
    let dir = tempfile::tempdir().unwrap();
    let clock = Arc::new(ManualClock::new(1_000));
    let mut log = open(dir.path(), config(), &clock);
    assert_eq!(
        log.end_offset_for_epoch(LeaderEpoch(0)),
        None,
        "an empty log knows no epoch"
    );
    append_in_epoch(&mut log, 5, 0);
    append_in_epoch(&mut log, 5, 0);
    append_in_epoch(&mut log, 5, 2);
    append_in_epoch(&mut log, 5, 5);
    assert_eq!(epochs(&log), [(0, 0), (2, 10), (5, 15)]);
    let end = |log: &Log, e: i32| {
        log.end_offset_for_epoch(LeaderEpoch(e))
            .map(|(e, o)| (e.0, o.0))
    };
    assert_eq!(end(&log, 0), Some((0, 10)));
    assert_eq!(end(&log, 1), Some((0, 10)), "epoch 1 never wrote here");
    assert_eq!(end(&log, 5), Some((5, 20)));
    assert_eq!(end(&log, 6), None);

    // A follower of a new leader cuts its divergent tail (at the end of epoch 2 on the new
    // leader): epoch 5 goes with it.
    assert_eq!(log.truncate_to(Offset(15)).unwrap(), Offset(15));
    assert_eq!(epochs(&log), [(0, 0), (2, 10)]);
    // ... and copies the leader's batches of epoch 7, offsets assigned by the leader.
    let mut copied = batch_bytes(15, 4, 1_000, 10, 0);
    copied[12..16].copy_from_slice(&7i32.to_be_bytes());
    log.append_assigned(&copied).unwrap();
    assert_eq!(epochs(&log), [(0, 0), (2, 10), (7, 15)]);

    // A crash: the cache comes back from its file.
    drop(log);
    let mut log = open(dir.path(), config(), &clock);
    assert_eq!(epochs(&log), [(0, 0), (2, 10), (7, 15)]);

    // DeleteRecords moves the start into epoch 2.
    log.delete_records_before(Offset(12)).unwrap();
    assert_eq!(epochs(&log), [(2, 12), (7, 15)]);

    // A lost or damaged file is rebuilt from the batches.
    drop(log);
    fs::write(dir.path().join("leader-epoch-checkpoint"), "garbage").unwrap();
    let log = open(dir.path(), config(), &clock);
    assert_eq!(epochs(&log), [(2, 12), (7, 15)]);
}

#[test]
fn an_epoch_written_ahead_of_a_batch_that_never_landed_is_dropped_at_start() {
    let dir = tempfile::tempdir().unwrap();
    let clock = Arc::new(ManualClock::new(1_000));
    let mut log = open(dir.path(), config(), &clock);
    append_in_epoch(&mut log, 5, 1);
    drop(log);
    // What a crash between the checkpoint write and the data write leaves.
    fs::write(
        dir.path().join("leader-epoch-checkpoint"),
        "0\n2\n1 0\n4 5\n",
    )
    .unwrap();
    let log = open(dir.path(), config(), &clock);
    assert_eq!(epochs(&log), [(1, 0)]);
    assert_eq!(
        fs::read_to_string(dir.path().join("leader-epoch-checkpoint")).unwrap(),
        "0\n1\n1 0\n"
    );
}
