//! WriteTxnMarkers: writes commit or abort markers for a producer on partitions of this broker.
//! Kafka's coordinators send it to partition leaders; operators send it (through
//! `sluice txn abort` or `kafka-transactions.sh abort`) to end a transaction left hanging on a
//! partition. A marker older than the producer's epoch on the partition is refused.

use kafka_protocol::error::ResponseError;
use kafka_protocol::messages::write_txn_markers_response::{
    WritableTxnMarkerPartitionResult, WritableTxnMarkerResult, WritableTxnMarkerTopicResult,
};
use kafka_protocol::messages::{ResponseKind, WriteTxnMarkersRequest, WriteTxnMarkersResponse};
use sluice_log::{FlushMode, LogError, Marker};
use sluice_wire::Reply;

use crate::broker::Broker;
use crate::error::BrokerError;
use crate::handlers::{Call, Versions};

pub const VERSIONS: Versions = Versions::new(1, 1);

/// How long a marker may take to be committed (Kafka's default `request.timeout.ms`, the
/// bound of its acks=all append; the request carries no timeout of its own).
const MARKER_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(30);

pub fn handle(broker: &Broker, request: WriteTxnMarkersRequest, _call: &Call) -> Reply {
    // In a cluster every marker waits until the partition's replicas have it (Kafka appends
    // them with acks=all): an operator told a hanging transaction was ended must not see a
    // failover take the marker back. A single node waits for the fsync under sync flushing.
    let clustered = broker.replication().is_some();
    // (marker, topic, partition) positions in the answer, and the write to wait for.
    let mut waits = Vec::new();
    let mut markers: Vec<WritableTxnMarkerResult> = request
        .markers
        .iter()
        .enumerate()
        .map(|(mi, m)| {
            let marker = if m.transaction_result {
                Marker::Commit
            } else {
                Marker::Abort
            };
            let topics = m
                .topics
                .iter()
                .enumerate()
                .map(|(ti, t)| {
                    let topic = broker.topics().get(&t.name);
                    let partitions = t
                        .partition_indexes
                        .iter()
                        .enumerate()
                        .map(|(pi, &index)| {
                            let code = match topic.as_ref().and_then(|x| x.partition(index)) {
                                None => ResponseError::UnknownTopicOrPartition.code(),
                                Some(p) => match p.append_marker(
                                    marker,
                                    m.producer_id.0,
                                    m.producer_epoch,
                                    m.coordinator_epoch,
                                ) {
                                    Ok(info) => {
                                        if clustered || p.config().flush == FlushMode::Sync {
                                            waits.push((
                                                (mi, ti, pi),
                                                crate::commit::Written::now(
                                                    &p,
                                                    info.last_offset.plus(1),
                                                ),
                                            ));
                                        }
                                        0
                                    }
                                    Err(e @ BrokerError::Log(LogError::Producer(_))) => {
                                        tracing::info!(error = %e, "refused a transaction marker");
                                        ResponseError::InvalidProducerEpoch.code()
                                    }
                                    Err(e) => e.code(),
                                },
                            };
                            WritableTxnMarkerPartitionResult::default()
                                .with_partition_index(index)
                                .with_error_code(code)
                        })
                        .collect();
                    WritableTxnMarkerTopicResult::default()
                        .with_name(t.name.clone())
                        .with_partitions(partitions)
                })
                .collect();
            WritableTxnMarkerResult::default()
                .with_producer_id(m.producer_id)
                .with_topics(topics)
        })
        .collect();
    Reply::Later(Box::pin(async move {
        let outcomes = futures::future::join_all(waits.into_iter().map(|(at, w)| async move {
            let committed = w.partition.wait_committed_write(w.end, w.epoch);
            let outcome = match tokio::time::timeout(MARKER_TIMEOUT, committed).await {
                Ok(Ok(())) => Ok(()),
                Ok(Err(e)) => Err(e.response_error()),
                Err(_) => Err(ResponseError::RequestTimedOut),
            };
            (at, outcome)
        }))
        .await;
        for ((mi, ti, pi), outcome) in outcomes {
            let Err(code) = outcome else { continue };
            if let Some(p) = markers
                .get_mut(mi)
                .and_then(|m| m.topics.get_mut(ti))
                .and_then(|t| t.partitions.get_mut(pi))
            {
                p.error_code = code.code();
            }
        }
        Some(ResponseKind::WriteTxnMarkers(
            WriteTxnMarkersResponse::default().with_markers(markers),
        ))
    }))
}
