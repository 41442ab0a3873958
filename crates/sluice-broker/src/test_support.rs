//! Helpers for this crate's unit tests.

use std::sync::Arc;

use bytes::Bytes;
use sluice_log::SystemClock;

use crate::broker::Broker;
use crate::config::BrokerConfig;
use crate::publish::NewRecord;

/// A broker in a temporary directory with topic `topic` (one partition) holding `n` records:
/// record i has key `key-i`, value `value-i`, header `h=i` and timestamp 1000 + i.
pub fn broker_with_records(topic: &str, n: i64) -> (tempfile::TempDir, Arc<Broker>) {
    let dir = tempfile::tempdir().expect("tempdir");
    let config = BrokerConfig {
        data_dir: dir.path().to_path_buf(),
        offsets_topic_partitions: 1,
        ..Default::default()
    };
    let broker = Broker::open(config, Arc::new(SystemClock)).expect("open broker");
    broker
        .topics()
        .create(topic, 1, Default::default(), false)
        .expect("create topic");
    for i in 0..n {
        broker
            .publish(
                topic,
                0,
                NewRecord {
                    key: Some(Bytes::from(format!("key-{i}"))),
                    value: Some(Bytes::from(format!("value-{i}"))),
                    headers: vec![("h".into(), Some(Bytes::from(i.to_string())))],
                    timestamp_ms: Some(1_000 + i),
                },
            )
            .expect("publish");
    }
    (dir, broker)
}
