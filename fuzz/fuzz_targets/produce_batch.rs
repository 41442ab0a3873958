//! Any bytes as a Produce request's records: validation accepts or refuses without panicking,
//! and whatever it accepts is a whole batch with a correct CRC that the log can append and
//! serve back byte for byte (apart from the offset and epoch it patches).
#![no_main]

use std::sync::Arc;

use libfuzzer_sys::fuzz_target;
use sluice_log::{validate_produce, LeaderEpoch, Log, LogConfig, Offset, SystemClock};

fuzz_target!(|data: &[u8]| {
    let Ok(batch) = validate_produce(data, 1 << 20) else {
        return;
    };
    let header = *batch.header();
    assert!(sluice_log::batch::crc_matches(data, &header));
    let dir = tempfile::tempdir().unwrap();
    let (mut log, _) = Log::open(dir.path(), LogConfig::default(), Arc::new(SystemClock)).unwrap();
    let info = log.append(batch, LeaderEpoch(0)).unwrap();
    assert_eq!(info.base_offset, Offset(0));
    let stored = log.read(Offset(0), 1 << 20, log.next_offset(), true).unwrap().load().unwrap();
    assert_eq!(&stored[21..], &data[21..], "records are stored as received");
});
