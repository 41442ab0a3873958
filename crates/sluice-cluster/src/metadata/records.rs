//! The records of the metadata log. Each is a fact the controller decided; applying the same
//! records in the same order gives every node the same [`super::ClusterState`]. They are
//! serialized as JSON: the metadata log is small and rarely written, and a readable log is
//! worth more than the bytes.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use uuid::Uuid;

use crate::ids::{LeaderEpoch, NodeId, PartitionEpoch};

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum MetadataRecord {
    /// A node announces itself (at every start): where clients and peers reach it. A new
    /// `incarnation` means the process restarted. A registered node is unfenced.
    RegisterNode(NodeRegistration),
    /// The node stopped heartbeating (or is being removed): it leads nothing and is in no ISR
    /// until it registers again. The partition changes that follow from it are separate
    /// records, written in the same batch.
    FenceNode {
        node: NodeId,
    },
    /// The node is gone for good (`sluice cluster remove-node`, after its replicas moved).
    RemoveNode {
        node: NodeId,
    },
    /// A topic and its partitions' first assignment. Partition `i` is `partitions[i]`.
    CreateTopic {
        name: String,
        id: Uuid,
        configs: BTreeMap<String, String>,
        partitions: Vec<PartitionChange>,
    },
    /// More partitions for a topic (CreatePartitions); they continue its numbering.
    AddPartitions {
        topic: Uuid,
        partitions: Vec<PartitionChange>,
    },
    DeleteTopic {
        topic: Uuid,
    },
    /// A topic's config overrides, replaced as a whole.
    TopicConfig {
        topic: Uuid,
        configs: BTreeMap<String, String>,
    },
    /// A node's dynamic broker configs (the replication throttle rates), replaced as a whole;
    /// empty: none. Kept in the metadata so they survive a restart, as Kafka keeps them.
    BrokerConfig {
        node: NodeId,
        configs: BTreeMap<String, String>,
    },
    /// A partition's new leader, ISR or replicas. `partition_epoch` is the new epoch; it must
    /// be the current one plus one.
    ChangePartition {
        topic: Uuid,
        partition: i32,
        change: PartitionChange,
    },
    /// Producer ids `[first, first + count)` now belong to `node` (for InitProducerId).
    ProducerIds {
        node: NodeId,
        first: i64,
        count: i64,
    },
    /// A SASL user's SCRAM credentials (salted and hashed, never the password), replaced as a
    /// whole; empty: the user is gone. Kafka keeps them in its metadata log too.
    UserScramCredentials {
        user: String,
        credentials: Vec<sluice_auth::ScramCredential>,
    },
    /// One quota entity's limits, replaced whole (AlterClientQuotas); empty: none left.
    ClientQuota {
        entity: super::quotas::QuotaEntity,
        values: crate::metadata::quotas::QuotaValues,
    },
    /// ACLs added and removed (CreateAcls, DeleteAcls), as Kafka's metadata log keeps them.
    Acls {
        added: Vec<sluice_auth::acl::AclBinding>,
        removed: Vec<sluice_auth::acl::AclBinding>,
    },
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct NodeRegistration {
    pub node: NodeId,
    pub incarnation: Uuid,
    /// The Kafka listener clients are told about (Metadata).
    pub kafka_host: String,
    pub kafka_port: i32,
    /// Every Kafka listener's advertised address, by listener name (the first is
    /// `kafka_host:kafka_port`); empty from nodes that predate named listeners.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub listeners: Vec<ListenerEndpoint>,
    /// The internal listener (Raft and replication traffic).
    pub internal_addr: String,
    pub rack: Option<String>,
    /// The id of the node's data directory, made when the directory was first used. A node
    /// that registers with another one lost its replicas (a wiped or replaced disk); `None`
    /// from nodes that predate it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub directory: Option<Uuid>,
}

/// A Kafka listener as clients are told about it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ListenerEndpoint {
    pub name: String,
    pub host: String,
    pub port: i32,
}

impl NodeRegistration {
    /// The address clients connected to listener `name` are told for this node: that
    /// listener's (Kafka answers each client with the addresses of the listener it came in
    /// on). `None` when the node has no such listener (Kafka leaves such a node out rather
    /// than send a client to another listener's port); a node that predates named listeners
    /// has only `kafka_host:kafka_port`.
    pub fn endpoint(&self, name: &str) -> Option<(&str, i32)> {
        if self.listeners.is_empty() {
            return Some((self.kafka_host.as_str(), self.kafka_port));
        }
        self.listeners
            .iter()
            .find(|l| l.name == name)
            .map(|l| (l.host.as_str(), l.port))
    }
}

/// A partition's state as the controller sets it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PartitionChange {
    /// In preference order: the first is the preferred leader.
    pub replicas: Vec<NodeId>,
    /// `None` while no in-sync replica is alive (the partition is offline).
    pub leader: Option<NodeId>,
    pub leader_epoch: LeaderEpoch,
    pub isr: Vec<NodeId>,
    pub partition_epoch: PartitionEpoch,
    /// While a reassignment runs (KIP-455): replicas being added (not yet in sync) and
    /// replicas leaving once every target replica is in sync. `replicas` lists the target
    /// first, then the leaving ones. Empty when no reassignment runs.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub adding: Vec<NodeId>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub removing: Vec<NodeId>,
}

impl PartitionChange {
    /// The replicas the partition will have once its reassignment completes (its replicas
    /// when none runs).
    pub fn target(&self) -> Vec<NodeId> {
        self.replicas
            .iter()
            .copied()
            .filter(|r| !self.removing.contains(r))
            .collect()
    }

    pub fn reassigning(&self) -> bool {
        !self.adding.is_empty() || !self.removing.is_empty()
    }
}
