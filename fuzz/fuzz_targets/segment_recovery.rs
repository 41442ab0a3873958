//! Any bytes as a segment file left by a crash: opening recovers without panicking, and every
//! batch the recovered log serves is whole and passes its CRC.
#![no_main]

use std::sync::Arc;

use libfuzzer_sys::fuzz_target;
use sluice_log::{Log, LogConfig, Offset, SystemClock};

fuzz_target!(|data: &[u8]| {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("00000000000000000000.log"), data).unwrap();
    let Ok((log, _)) = Log::open(dir.path(), LogConfig::default(), Arc::new(SystemClock)) else {
        return;
    };
    let mut offset = log.log_start_offset();
    while offset < log.next_offset() {
        let bytes = log.read(offset, 1 << 20, log.next_offset(), true).unwrap().load().unwrap();
        assert!(!bytes.is_empty(), "no progress at {offset}");
        let mut at = 0;
        while at < bytes.len() {
            let extent = sluice_log::batch::peek_extent(&bytes[at..]).expect("whole batches only");
            sluice_log::batch::check_stored(&bytes[at..at + extent.total_bytes]).expect("served batches are intact");
            offset = extent.last_offset.plus(1);
            at += extent.total_bytes;
        }
    }
    assert!(offset >= Offset(0));
});
