//! Log throughput: appending 16 KiB batches (into the page cache, and made durable with one
//! fsync at the end of each sample), and reading the log back sequentially.
//!
//! `SLUICE_BENCH_DIR` chooses the disk (default: the system temp dir); `bench/log_vs_dd.sh`
//! runs this beside `dd oflag=direct` on the same directory and reports the ratio.
#![allow(clippy::unwrap_used, clippy::disallowed_methods)] // benchmark code: panics fail the run; it times with the real clock

use std::sync::Arc;
use std::time::{Duration, Instant};

use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use sluice_log::testing::batch_bytes;
use sluice_log::{validate_produce, FlushMode, LeaderEpoch, Log, LogConfig, Offset, SystemClock};

const BATCH_RECORDS: usize = 16;
const RECORD_VALUE_BYTES: usize = 1000;

fn bench_dir() -> tempfile::TempDir {
    match std::env::var_os("SLUICE_BENCH_DIR") {
        Some(dir) => {
            std::fs::create_dir_all(&dir).unwrap();
            tempfile::tempdir_in(dir).unwrap()
        }
        None => tempfile::tempdir().unwrap(),
    }
}

fn config() -> LogConfig {
    LogConfig {
        segment_bytes: 256 << 20,
        retention_ms: -1,
        flush: FlushMode::Interval { interval_ms: 1_000 },
        ..LogConfig::default()
    }
}

fn append_batches(c: &mut Criterion) {
    let batch = batch_bytes(0, BATCH_RECORDS, 0, RECORD_VALUE_BYTES, 0);
    let batch_len = batch.len();
    assert!(
        (16_000..17_000).contains(&batch_len),
        "a ~16 KiB batch, got {batch_len}"
    );
    let mut group = c.benchmark_group("append_16k_batches");
    group.throughput(Throughput::Bytes(batch_len as u64));
    group.sample_size(20);
    group.measurement_time(Duration::from_secs(8));
    for durable in [false, true] {
        let name = if durable { "durable" } else { "page_cache" };
        group.bench_function(name, |b| {
            b.iter_custom(|iters| {
                let dir = bench_dir();
                let (mut log, _) = Log::open(dir.path(), config(), Arc::new(SystemClock)).unwrap();
                let start = Instant::now();
                for _ in 0..iters {
                    let v = validate_produce(&batch, 1 << 20).unwrap();
                    log.append(v, LeaderEpoch(0)).unwrap();
                    // The broker runs these on a blocking thread; here, inline.
                    if let Some(job) = log.take_writeback() {
                        job.run();
                    }
                }
                if durable {
                    let job = log.flush_job().unwrap();
                    let outcome = job.run();
                    log.complete_flush(&job, outcome).unwrap();
                }
                start.elapsed()
            })
        });
    }
    group.finish();
}

fn sequential_read(c: &mut Criterion) {
    let dir = bench_dir();
    let (mut log, _) = Log::open(dir.path(), config(), Arc::new(SystemClock)).unwrap();
    let batch = batch_bytes(0, BATCH_RECORDS, 0, RECORD_VALUE_BYTES, 0);
    let batches = (256 << 20) / batch.len();
    for _ in 0..batches {
        log.append(validate_produce(&batch, 1 << 20).unwrap(), LeaderEpoch(0))
            .unwrap();
    }
    let total = log.size_bytes();
    let mut group = c.benchmark_group("sequential_read");
    group.throughput(Throughput::Bytes(total));
    group.sample_size(10);
    group.bench_function("1MiB_reads", |b| {
        b.iter(|| {
            let mut offset = Offset(0);
            let mut read = 0usize;
            while offset < log.next_offset() {
                let bytes = log
                    .read(offset, 1 << 20, log.next_offset(), true)
                    .unwrap()
                    .load()
                    .unwrap();
                read += bytes.len();
                let mut at = 0;
                let mut last = offset;
                while let Some(extent) = sluice_log::batch::peek_extent(&bytes[at..]) {
                    last = extent.last_offset;
                    at += extent.total_bytes;
                }
                offset = last.plus(1);
            }
            assert_eq!(read as u64, total);
        })
    });
    group.finish();
}

criterion_group!(benches, append_batches, sequential_read);
criterion_main!(benches);
