//! Transaction administration over the Kafka protocol (what `kafka-transactions.sh` does):
//! list and describe transactional ids, find a partition's open transactions, and abort them.

use kafka_protocol::messages::describe_producers_request::TopicRequest;
use kafka_protocol::messages::write_txn_markers_request::{
    WritableTxnMarker, WritableTxnMarkerTopic,
};
use kafka_protocol::messages::{
    DescribeProducersRequest, DescribeTransactionsRequest, InitProducerIdRequest,
    ListTransactionsRequest, ProducerId, TopicName, TransactionalId, WriteTxnMarkersRequest,
};

use crate::client::{check, s, Client};
use crate::error::ClientError;

/// One transactional id, as ListTransactions and DescribeTransactions report it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TxnSummary {
    pub transactional_id: String,
    pub producer_id: i64,
    pub state: String,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TxnDescription {
    pub transactional_id: String,
    pub state: String,
    pub producer_id: i64,
    pub producer_epoch: i16,
    pub timeout_ms: i32,
    /// -1 when no transaction is open.
    pub start_time_ms: i64,
    pub partitions: Vec<(String, i32)>,
}

/// A transaction open on a partition (DescribeProducers).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OpenTxn {
    pub producer_id: i64,
    pub producer_epoch: i16,
    pub start_offset: i64,
    pub coordinator_epoch: i32,
}

impl Client {
    /// Transactional ids, optionally only those in `states`.
    pub async fn list_transactions(
        &mut self,
        states: &[String],
    ) -> Result<Vec<TxnSummary>, ClientError> {
        let request = ListTransactionsRequest::default()
            .with_state_filters(states.iter().map(|x| s(x)).collect())
            .with_duration_filter(-1);
        let r = self.connection().call(&request, 0, 1).await?;
        check("ListTransactions", r.error_code, None)?;
        if let Some(bad) = r.unknown_state_filters.first() {
            return Err(ClientError::Protocol(format!(
                "unknown transaction state '{bad}' (Empty, Ongoing, PrepareCommit, PrepareAbort, CompleteCommit, CompleteAbort)"
            )));
        }
        Ok(r.transaction_states
            .into_iter()
            .map(|t| TxnSummary {
                transactional_id: t.transactional_id.to_string(),
                producer_id: t.producer_id.0,
                state: t.transaction_state.to_string(),
            })
            .collect())
    }

    pub async fn describe_transaction(&mut self, id: &str) -> Result<TxnDescription, ClientError> {
        let request = DescribeTransactionsRequest::default()
            .with_transactional_ids(vec![TransactionalId(s(id))]);
        let r = self.connection().call(&request, 0, 0).await?;
        let t =
            r.transaction_states.into_iter().next().ok_or_else(|| {
                ClientError::Protocol("DescribeTransactions without the id".into())
            })?;
        check(
            format!("describing transactional id '{id}'"),
            t.error_code,
            None,
        )?;
        Ok(TxnDescription {
            transactional_id: t.transactional_id.to_string(),
            state: t.transaction_state.to_string(),
            producer_id: t.producer_id.0,
            producer_epoch: t.producer_epoch,
            timeout_ms: t.transaction_timeout_ms,
            start_time_ms: t.transaction_start_time_ms,
            partitions: t
                .topics
                .into_iter()
                .flat_map(|x| {
                    let name = x.topic.to_string();
                    x.partitions.into_iter().map(move |p| (name.clone(), p))
                })
                .collect(),
        })
    }

    /// Ends whatever transaction `id` has open, as a new producer with that id would: its epoch
    /// is bumped (fencing the current producer) and the open transaction aborted. Returns the
    /// new epoch.
    pub async fn fence_transactional_id(
        &mut self,
        id: &str,
        timeout_ms: i32,
    ) -> Result<i16, ClientError> {
        let request = InitProducerIdRequest::default()
            .with_transactional_id(Some(TransactionalId(s(id))))
            .with_transaction_timeout_ms(timeout_ms)
            .with_producer_id(ProducerId(-1))
            .with_producer_epoch(-1);
        let r = self.connection().call(&request, 0, 5).await?;
        check(
            format!("fencing transactional id '{id}'"),
            r.error_code,
            None,
        )?;
        Ok(r.producer_epoch)
    }

    /// The transactions open on a partition.
    pub async fn open_transactions(
        &mut self,
        topic: &str,
        partition: i32,
    ) -> Result<Vec<OpenTxn>, ClientError> {
        let request = DescribeProducersRequest::default()
            .with_topics(vec![TopicRequest::default()
                .with_name(TopicName(s(topic)))
                .with_partition_indexes(vec![partition])]);
        let r = self.connection().call(&request, 0, 0).await?;
        let p = r
            .topics
            .into_iter()
            .flat_map(|t| t.partitions)
            .next()
            .ok_or_else(|| {
                ClientError::Protocol("DescribeProducers without the partition".into())
            })?;
        check(
            format!("describing producers of {topic}-{partition}"),
            p.error_code,
            p.error_message.as_ref(),
        )?;
        Ok(p.active_producers
            .into_iter()
            .filter(|a| a.current_txn_start_offset >= 0)
            .map(|a| OpenTxn {
                producer_id: a.producer_id.0,
                producer_epoch: i16::try_from(a.producer_epoch).unwrap_or(i16::MAX),
                start_offset: a.current_txn_start_offset,
                coordinator_epoch: a.coordinator_epoch,
            })
            .collect())
    }

    /// Writes an abort marker for `txn` on one partition (ends a hanging transaction there).
    pub async fn abort_on_partition(
        &mut self,
        topic: &str,
        partition: i32,
        txn: OpenTxn,
    ) -> Result<(), ClientError> {
        let request =
            WriteTxnMarkersRequest::default().with_markers(vec![WritableTxnMarker::default()
                .with_producer_id(ProducerId(txn.producer_id))
                .with_producer_epoch(txn.producer_epoch)
                .with_transaction_result(false)
                .with_coordinator_epoch(txn.coordinator_epoch)
                .with_topics(vec![WritableTxnMarkerTopic::default()
                    .with_name(TopicName(s(topic)))
                    .with_partition_indexes(vec![partition])])]);
        let r = self.connection().call(&request, 1, 1).await?;
        for m in r.markers {
            for t in m.topics {
                for p in t.partitions {
                    check(
                        format!("aborting on {topic}-{partition}"),
                        p.error_code,
                        None,
                    )?;
                }
            }
        }
        Ok(())
    }
}
