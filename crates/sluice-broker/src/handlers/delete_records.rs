//! DeleteRecords (KIP-107): move a partition's log start offset up, so that the records below
//! it can no longer be read (`kafka-delete-records.sh`, `AdminClient.delete_records`, Kafka
//! Streams purging its repartition topics). Whole segments below the new start are deleted.
//!
//! As in Kafka: offset -1 means the high watermark; an offset past it, or negative, is
//! OFFSET_OUT_OF_RANGE; internal topics are INVALID_TOPIC_EXCEPTION; a topic whose
//! `cleanup.policy` lacks `delete` is POLICY_VIOLATION. The answer's low watermark is the new
//! log start offset.

use kafka_protocol::messages::delete_records_response::{
    DeleteRecordsPartitionResult, DeleteRecordsTopicResult,
};
use kafka_protocol::messages::{DeleteRecordsRequest, DeleteRecordsResponse, ResponseKind};

use crate::broker::Broker;
use crate::handlers::{Call, Versions};

pub const VERSIONS: Versions = Versions::new(0, 2);

pub fn handle(broker: &Broker, request: DeleteRecordsRequest, _call: &Call) -> ResponseKind {
    let topics = request
        .topics
        .iter()
        .map(|t| {
            let partitions = t
                .partitions
                .iter()
                .map(|p| {
                    let result =
                        DeleteRecordsPartitionResult::default().with_partition_index(p.partition_index);
                    match broker.delete_records(&t.name, p.partition_index, p.offset) {
                        Ok(start) => result.with_low_watermark(start.0),
                        Err(e) => {
                            tracing::debug!(topic = %t.name.as_str(), partition = p.partition_index, offset = p.offset, error = %e, "delete records refused");
                            result.with_low_watermark(-1).with_error_code(e.code())
                        }
                    }
                })
                .collect();
            DeleteRecordsTopicResult::default()
                .with_name(t.name.clone())
                .with_partitions(partitions)
        })
        .collect();
    ResponseKind::DeleteRecords(DeleteRecordsResponse::default().with_topics(topics))
}
