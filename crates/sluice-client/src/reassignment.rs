//! Moving replicas between nodes (AlterPartitionReassignments, ListPartitionReassignments,
//! KIP-455) and the size of each replica a node holds (DescribeLogDirs), which shows how far a
//! new replica has been filled.

use std::collections::BTreeMap;

use kafka_protocol::messages::alter_partition_reassignments_request::{
    ReassignablePartition, ReassignableTopic,
};
use kafka_protocol::messages::describe_log_dirs_request::DescribableLogDirTopic;
use kafka_protocol::messages::{
    AlterPartitionReassignmentsRequest, BrokerId, DescribeLogDirsRequest,
    ListPartitionReassignmentsRequest, TopicName,
};
use kafka_protocol::protocol::StrBytes;

use crate::client::{check, Client};
use crate::error::ClientError;

/// One partition to move: its new replicas, or `None` to cancel its reassignment.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Move {
    pub topic: String,
    pub partition: i32,
    pub replicas: Option<Vec<i32>>,
}

/// A reassignment still running.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Ongoing {
    pub topic: String,
    pub partition: i32,
    /// The target replicas first, then the ones leaving.
    pub replicas: Vec<i32>,
    pub adding: Vec<i32>,
    pub removing: Vec<i32>,
}

const TIMEOUT_MS: i32 = 30_000;

impl Client {
    /// Starts (or cancels) each move; one result per move, in order.
    pub async fn alter_partition_reassignments(
        &mut self,
        moves: &[Move],
        allow_replication_factor_change: bool,
    ) -> Result<Vec<Result<(), ClientError>>, ClientError> {
        let mut topics: Vec<ReassignableTopic> = Vec::new();
        for m in moves {
            let entry = ReassignablePartition::default()
                .with_partition_index(m.partition)
                .with_replicas(
                    m.replicas
                        .as_ref()
                        .map(|r| r.iter().map(|n| BrokerId(*n)).collect()),
                );
            match topics.iter_mut().find(|t| t.name.as_str() == m.topic) {
                Some(t) => t.partitions.push(entry),
                None => topics.push(
                    ReassignableTopic::default()
                        .with_name(name(&m.topic))
                        .with_partitions(vec![entry]),
                ),
            }
        }
        let request = AlterPartitionReassignmentsRequest::default()
            .with_timeout_ms(TIMEOUT_MS)
            .with_allow_replication_factor_change(allow_replication_factor_change)
            .with_topics(topics);
        let response = self.connection().call(&request, 0, 1).await?;
        check(
            "reassigning partitions",
            response.error_code,
            response.error_message.as_ref(),
        )?;
        Ok(moves
            .iter()
            .map(|m| {
                let found = response
                    .responses
                    .iter()
                    .filter(|t| t.name.as_str() == m.topic)
                    .flat_map(|t| &t.partitions)
                    .find(|p| p.partition_index == m.partition);
                match found {
                    Some(p) => check(
                        format!("reassigning {}-{}", m.topic, m.partition),
                        p.error_code,
                        p.error_message.as_ref(),
                    ),
                    None => Err(ClientError::Protocol(format!(
                        "the broker did not answer for {}-{}",
                        m.topic, m.partition
                    ))),
                }
            })
            .collect())
    }

    /// Every reassignment still running.
    pub async fn list_partition_reassignments(&mut self) -> Result<Vec<Ongoing>, ClientError> {
        let request = ListPartitionReassignmentsRequest::default().with_timeout_ms(TIMEOUT_MS);
        let response = self.connection().call(&request, 0, 0).await?;
        check(
            "listing reassignments",
            response.error_code,
            response.error_message.as_ref(),
        )?;
        let ids = |v: &[BrokerId]| v.iter().map(|b| b.0).collect();
        Ok(response
            .topics
            .iter()
            .flat_map(|t| {
                t.partitions.iter().map(|p| Ongoing {
                    topic: t.name.to_string(),
                    partition: p.partition_index,
                    replicas: ids(&p.replicas),
                    adding: ids(&p.adding_replicas),
                    removing: ids(&p.removing_replicas),
                })
            })
            .collect())
    }

    /// The size in bytes of each of `topic`'s partitions that the connected node holds.
    pub async fn replica_sizes(&mut self, topic: &str) -> Result<BTreeMap<i32, i64>, ClientError> {
        let metadata = self.partitions(topic).await?;
        let request = DescribeLogDirsRequest::default().with_topics(Some(vec![
            DescribableLogDirTopic::default()
                .with_topic(name(topic))
                .with_partitions(metadata.iter().map(|p| p.partition).collect()),
        ]));
        let response = self.connection().call(&request, 1, 4).await?;
        check("describing log directories", response.error_code, None)?;
        Ok(response
            .results
            .iter()
            .flat_map(|r| &r.topics)
            .filter(|t| t.name.as_str() == topic)
            .flat_map(|t| &t.partitions)
            .map(|p| (p.partition_index, p.partition_size))
            .collect())
    }
}

fn name(topic: &str) -> TopicName {
    TopicName(StrBytes::from_string(topic.to_string()))
}
