//! Writing records from outside the Kafka protocol (the console's "produce a test record", the
//! audit log's topic): encoded as a batch and appended through the same checks as an acks=all
//! Produce request, and answered as one is: once the records are committed (below the high
//! watermark: on disk under `flush.mode=sync`, and held by the in-sync replicas in a cluster).

use bytes::Bytes;
use kafka_protocol::records::Compression;
use sluice_client::records::encode_batch;
use sluice_client::OutRecord;
use sluice_log::{validate_produce, LogError};

use crate::broker::Broker;
use crate::error::BrokerError;

/// Where a published record landed, and what to wait on for it to be committed.
#[derive(Debug)]
pub struct Published {
    pub partition: i32,
    pub offset: i64,
    committed: crate::commit::Written,
}

impl Published {
    /// Waits until the record is committed, as an acks=all write is acknowledged; an error
    /// when the log failed or leadership moved first (the record may then be lost).
    pub async fn committed(self) -> Result<(), BrokerError> {
        let w = self.committed;
        w.partition.wait_committed_write(w.end, w.epoch).await
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
        self.publish_batch(topic, partition, vec![record])
    }

    /// Appends `records` (at least one) as one batch to a partition of an existing topic:
    /// consecutive offsets from the returned one, committed together.
    pub fn publish_batch(
        &self,
        topic: &str,
        partition: i32,
        records: Vec<NewRecord>,
    ) -> Result<Published, BrokerError> {
        if crate::topics::is_internal(topic) {
            return Err(BrokerError::InvalidTopic(format!(
                "{topic} is internal; only the broker writes to it"
            )));
        }
        if records.is_empty() {
            return Err(BrokerError::InvalidRequest("a batch of no records".into()));
        }
        let p = self.partition_of(topic, partition)?;
        let config = p.config();
        if config.compact && records.iter().any(|r| r.key.is_none()) {
            return Err(BrokerError::InvalidRequest(
                "a compacted topic needs a key on every record".into(),
            ));
        }
        let now_ms = self.clock.now_ms();
        let records: Vec<OutRecord> = records
            .into_iter()
            .map(|r| OutRecord {
                key: r.key,
                value: r.value,
                headers: r.headers,
                timestamp_ms: r.timestamp_ms.unwrap_or(now_ms),
            })
            .collect();
        let buf = encode_batch(&records, Compression::None)
            .map_err(|e| BrokerError::InvalidRequest(format!("cannot encode the records: {e}")))?;
        let validated = validate_produce(&buf, config.max_message_bytes).map_err(LogError::from)?;
        let info = p.append(validated, true)?;
        Ok(Published {
            partition,
            offset: info.base_offset.0,
            committed: crate::commit::Written::now(&p, info.last_offset.plus(1)),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_support::broker_with_records;

    fn value(v: &str) -> NewRecord {
        NewRecord {
            value: Some(Bytes::from(v.to_string())),
            ..Default::default()
        }
    }

    #[test]
    fn a_batch_is_one_append_of_consecutive_offsets() {
        let (_dir, broker) = broker_with_records("t", 2);
        let batch = broker
            .publish_batch("t", 0, vec![value("a"), value("b"), value("c")])
            .expect("publish a batch");
        // One append: its first offset and the end it waits on span the three records.
        assert_eq!(
            (batch.offset, batch.committed.end),
            (2, sluice_log::Offset(5))
        );
        let next = broker.publish("t", 0, value("d")).expect("publish");
        assert_eq!(
            (next.offset, next.committed.end),
            (5, sluice_log::Offset(6))
        );
    }

    #[test]
    fn an_empty_batch_or_an_internal_topic_is_refused() {
        let (_dir, broker) = broker_with_records("t", 0);
        assert!(matches!(
            broker.publish_batch("t", 0, Vec::new()),
            Err(BrokerError::InvalidRequest(_))
        ));
        assert!(matches!(
            broker.publish("__consumer_offsets", 0, value("x")),
            Err(BrokerError::InvalidTopic(_))
        ));
    }
}
