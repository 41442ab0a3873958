//! DeleteRecords (KIP-107): move a partition's log start offset up, so that the records below
//! it can no longer be read (`kafka-delete-records.sh`, `AdminClient.delete_records`, Kafka
//! Streams purging its repartition topics). Whole segments below the new start are deleted.
//!
//! As in Kafka: offset -1 means the high watermark; an offset past it, or negative, is
//! OFFSET_OUT_OF_RANGE; internal topics are INVALID_TOPIC_EXCEPTION; a topic whose
//! `cleanup.policy` lacks `delete` is POLICY_VIOLATION. The answer's low watermark is the new
//! log start offset.

use kafka_protocol::error::ResponseError;
use kafka_protocol::messages::delete_records_response::{
    DeleteRecordsPartitionResult, DeleteRecordsTopicResult,
};
use kafka_protocol::messages::{DeleteRecordsRequest, DeleteRecordsResponse, ResponseKind};

use crate::broker::Broker;
use crate::error::log_error;

pub fn handle(broker: &Broker, request: DeleteRecordsRequest, _version: i16) -> ResponseKind {
    let topics = request
        .topics
        .iter()
        .map(|t| {
            let topic = broker.topics().get(&t.name);
            let partitions = t
                .partitions
                .iter()
                .map(|p| {
                    let result = DeleteRecordsPartitionResult::default()
                        .with_partition_index(p.partition_index)
                        .with_low_watermark(-1);
                    let fail = |e: ResponseError| result.clone().with_error_code(e.code());
                    if crate::topics::is_internal(&t.name) {
                        return fail(ResponseError::InvalidTopicException);
                    }
                    let Some(partition) = topic.as_ref().and_then(|t| t.partition(p.partition_index))
                    else {
                        return fail(ResponseError::UnknownTopicOrPartition);
                    };
                    if !partition.config().delete_policy {
                        return fail(ResponseError::PolicyViolation);
                    }
                    match partition.delete_records(p.offset) {
                        Ok(start) => result.clone().with_low_watermark(start.0),
                        Err(e) => {
                            tracing::debug!(?partition, offset = p.offset, error = %e, "delete records refused");
                            fail(log_error(&e))
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
