//! Writing one record from outside the Kafka protocol (the console's "produce a test
//! record"): encoded as a batch and appended through the same checks as an acks=all Produce
//! request, and answered as one is: once the record is committed (below the high watermark:
//! on disk under `flush.mode=sync`, and held by the in-sync replicas in a cluster).

use std::sync::Arc;

use bytes::{Bytes, BytesMut};
use kafka_protocol::protocol::StrBytes;
use kafka_protocol::records::{
    Compression, Record, RecordBatchEncoder, RecordEncodeOptions, TimestampType,
};
use sluice_log::{validate_produce, LogError, Offset};

use crate::broker::Broker;
use crate::error::BrokerError;
use crate::partition::Partition;

/// Where a published record landed, and what to wait on for it to be committed.
#[derive(Debug)]
pub struct Published {
    pub partition: i32,
    pub offset: i64,
    committed: (Arc<Partition>, Offset),
}

impl Published {
    /// Waits until the record is committed, as an acks=all write is acknowledged; an error
    /// when the log failed or leadership moved first (the record may then be lost).
    pub async fn committed(self) -> Result<(), BrokerError> {
        let (partition, end) = self.committed;
        partition.wait_committed(end).await
    }
}

/// A record to publish.
#[derive(Debug, Default, Clone)]
pub struct NewRecord {
    pub key: Option<Bytes>,
    pub value: Option<Bytes>,
    pub headers: Vec<(String, Option<Bytes>)>,
    /// CreateTime; now when absent.
    pub timestamp_ms: Option<i64>,
}

impl Broker {
    /// Appends one record to a partition of an existing topic.
    pub fn publish(
        &self,
        topic: &str,
        partition: i32,
        record: NewRecord,
    ) -> Result<Published, BrokerError> {
        if crate::topics::is_internal(topic) {
            return Err(BrokerError::InvalidTopic(format!(
                "{topic} is internal; only the broker writes to it"
            )));
        }
        let p = self.partition_of(topic, partition)?;
        let config = p.config();
        if config.compact && record.key.is_none() {
            return Err(BrokerError::InvalidRequest(
                "a compacted topic needs a key on every record".into(),
            ));
        }
        let kafka_record = Record {
            transactional: false,
            control: false,
            delete_horizon: false,
            partition_leader_epoch: -1,
            producer_id: -1,
            producer_epoch: -1,
            timestamp_type: TimestampType::Creation,
            offset: 0,
            sequence: -1,
            timestamp: record.timestamp_ms.unwrap_or_else(|| self.clock.now_ms()),
            key: record.key,
            value: record.value,
            headers: record
                .headers
                .into_iter()
                .map(|(k, v)| (StrBytes::from_string(k), v))
                .collect(),
        };
        let mut buf = BytesMut::new();
        RecordBatchEncoder::encode(
            &mut buf,
            std::slice::from_ref(&kafka_record),
            &RecordEncodeOptions {
                version: 2,
                compression: Compression::None,
            },
        )
        .map_err(|e| BrokerError::InvalidRequest(format!("cannot encode the record: {e:#}")))?;
        let validated = validate_produce(&buf, config.max_message_bytes).map_err(LogError::from)?;
        let info = p.append(validated, true)?;
        Ok(Published {
            partition,
            offset: info.base_offset.0,
            committed: (Arc::clone(&p), info.last_offset.plus(1)),
        })
    }
}
