//! The cluster's nodes as DescribeCluster reports them (what `kafka-cluster.sh` and the admin
//! client's `describeCluster` read).

use kafka_protocol::messages::describe_quorum_request::{PartitionData, TopicData};
use kafka_protocol::messages::{
    AddRaftVoterRequest, BrokerId, DescribeClusterRequest, DescribeQuorumRequest,
    RemoveRaftVoterRequest, TopicName, UnregisterBrokerRequest,
};
use kafka_protocol::protocol::StrBytes;

use crate::client::{check, Client};
use crate::error::ClientError;

/// DescribeCluster's endpoint type for brokers (KIP-919).
const ENDPOINT_BROKERS: i8 = 1;
/// The topic DescribeQuorum is asked about (KIP-595): the metadata log's one partition.
const METADATA_TOPIC: &str = "__cluster_metadata";

/// One node of the cluster.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodeDescription {
    pub id: i32,
    pub host: String,
    pub port: i32,
    pub rack: Option<String>,
    /// Fenced: registered but out of touch with the controller (a node that is down).
    /// Only a broker answering DescribeCluster v2 (KIP-1073) reports fenced nodes.
    pub fenced: bool,
}

/// The cluster as DescribeCluster reports it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClusterDescription {
    pub cluster_id: String,
    pub nodes: Vec<NodeDescription>,
}

impl Client {
    /// Every registered node, fenced ones included where the broker reports them.
    pub async fn describe_cluster(&mut self) -> Result<ClusterDescription, ClientError> {
        let request = DescribeClusterRequest::default()
            .with_endpoint_type(ENDPOINT_BROKERS)
            .with_include_fenced_brokers(true);
        let response = self.connection().call(&request, 0, 2).await?;
        check(
            "describing the cluster".to_string(),
            response.error_code,
            response.error_message.as_ref(),
        )?;
        Ok(ClusterDescription {
            cluster_id: response.cluster_id.to_string(),
            nodes: response
                .brokers
                .iter()
                .map(|b| NodeDescription {
                    id: b.broker_id.0,
                    host: b.host.to_string(),
                    port: b.port,
                    rack: b.rack.as_ref().map(|r| r.to_string()),
                    fenced: b.is_fenced,
                })
                .collect(),
        })
    }

    /// The metadata group's leader (Kafka's active controller) as DescribeQuorum reports it;
    /// None while the cluster has none. Metadata and DescribeCluster do not say: they name the
    /// answering node as controller, as Kafka in KRaft mode names a live broker.
    pub async fn metadata_leader(&mut self) -> Result<Option<i32>, ClientError> {
        let request = DescribeQuorumRequest::default().with_topics(vec![TopicData::default()
            .with_topic_name(TopicName(StrBytes::from_static_str(METADATA_TOPIC)))
            .with_partitions(vec![PartitionData::default().with_partition_index(0)])]);
        let response = self.connection().call(&request, 0, 2).await?;
        check(
            "describing the metadata quorum".to_string(),
            response.error_code,
            response.error_message.as_ref(),
        )?;
        let partition = response
            .topics
            .iter()
            .flat_map(|t| t.partitions.iter())
            .next()
            .ok_or_else(|| ClientError::Protocol("DescribeQuorum answered no partition".into()))?;
        if partition.error_code == kafka_protocol::error::ResponseError::NotLeaderOrFollower.code()
        {
            return Ok(None);
        }
        check(
            "describing the metadata quorum".to_string(),
            partition.error_code,
            partition.error_message.as_ref(),
        )?;
        Ok((partition.leader_id.0 >= 0).then_some(partition.leader_id.0))
    }

    /// UnregisterBroker: the cluster forgets `node` (down, holding no replica).
    pub async fn unregister_broker(&mut self, node: i32) -> Result<(), ClientError> {
        let request = UnregisterBrokerRequest::default().with_broker_id(BrokerId(node));
        let response = self.connection().call(&request, 0, 0).await?;
        check(
            format!("removing node {node}"),
            response.error_code,
            response.error_message.as_ref(),
        )
    }

    /// Makes `node` (a learner of the metadata group) a voter (AddRaftVoter), or a voter a
    /// learner (RemoveRaftVoter); answered once the change is committed.
    pub async fn change_voter(&mut self, node: i32, add: bool) -> Result<(), ClientError> {
        let (code, message) = if add {
            let request = AddRaftVoterRequest::default()
                .with_cluster_id(None)
                .with_voter_id(node)
                .with_timeout_ms(30_000);
            let r = self.connection().call(&request, 0, 0).await?;
            (r.error_code, r.error_message)
        } else {
            let request = RemoveRaftVoterRequest::default()
                .with_cluster_id(None)
                .with_voter_id(node);
            let r = self.connection().call(&request, 0, 0).await?;
            (r.error_code, r.error_message)
        };
        let role = if add { "a voter" } else { "a learner" };
        check(format!("making node {node} {role}"), code, message.as_ref())
    }

    /// Every node Metadata lists: `(id, host:port)`.
    pub async fn nodes(&mut self) -> Result<Vec<(i32, String)>, ClientError> {
        let metadata = self.metadata(Some(&[])).await?;
        Ok(metadata
            .brokers
            .iter()
            .map(|b| (b.node_id.0, format!("{}:{}", b.host, b.port)))
            .collect())
    }
}
