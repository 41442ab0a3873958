//! The cluster as the metadata log describes it. Every node applies the committed records in
//! order with [`ClusterState::apply`]; a record that would break an invariant is refused the
//! same way on every node (and the controller never proposes one: its tests check that).

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use uuid::Uuid;

use super::records::{MetadataRecord, NodeRegistration, PartitionChange};
use crate::ids::{LeaderEpoch, NodeId, PartitionEpoch};

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ClusterState {
    pub nodes: BTreeMap<NodeId, NodeInfo>,
    pub topics: BTreeMap<Uuid, TopicInfo>,
    /// Topic name → id.
    pub names: BTreeMap<String, Uuid>,
    /// The first producer id not yet handed to a node.
    pub next_producer_id: i64,
    /// Topics deleted: a node removes its replicas of these (and only these — a topic it
    /// holds but does not see here may be one its metadata has not caught up with).
    #[serde(default)]
    pub deleted: std::collections::BTreeSet<Uuid>,
    /// Each node's dynamic broker configs (only nodes that have some), and the cluster-wide
    /// defaults under [`NodeId::CLUSTER_DEFAULT`].
    #[serde(default)]
    pub broker_configs: BTreeMap<NodeId, BTreeMap<String, String>>,
    /// SASL users and their SCRAM credentials, one per mechanism at most.
    #[serde(default)]
    pub users: BTreeMap<String, Vec<sluice_auth::ScramCredential>>,
    /// The ACLs in force.
    #[serde(default)]
    pub acls: sluice_auth::acl::AclSet,
    /// Client quotas by entity.
    #[serde(default)]
    pub client_quotas: super::quotas::ClientQuotas,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct NodeInfo {
    pub registration: NodeRegistration,
    /// Fenced nodes lead nothing and are in no ISR.
    pub fenced: bool,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TopicInfo {
    pub name: String,
    pub id: Uuid,
    pub configs: BTreeMap<String, String>,
    pub partitions: Vec<PartitionInfo>,
}

pub type PartitionInfo = PartitionChange;

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ApplyError {
    #[error("unknown node {0}")]
    UnknownNode(NodeId),
    #[error("unknown topic {0}")]
    UnknownTopic(Uuid),
    #[error("topic {0} already exists")]
    TopicExists(String),
    #[error("unknown partition {1} of topic {0}")]
    UnknownPartition(Uuid, i32),
    #[error("invalid partition state: {0}")]
    InvalidPartition(String),
    #[error("stale partition epoch: {got:?}, expected {expected:?}")]
    StalePartitionEpoch {
        got: PartitionEpoch,
        expected: PartitionEpoch,
    },
    #[error("producer id block at {got} does not continue at {expected}")]
    ProducerIdGap { got: i64, expected: i64 },
}

impl ClusterState {
    /// Applies one committed record. On error the state is unchanged.
    pub fn apply(&mut self, record: &MetadataRecord) -> Result<(), ApplyError> {
        match record {
            MetadataRecord::RegisterNode(registration) => {
                self.nodes.insert(
                    registration.node,
                    NodeInfo {
                        registration: registration.clone(),
                        fenced: false,
                    },
                );
            }
            MetadataRecord::FenceNode { node } => {
                self.node_mut(*node)?.fenced = true;
            }
            MetadataRecord::RemoveNode { node } => {
                let hosting = self.partitions().any(|(_, _, p)| p.replicas.contains(node));
                if hosting {
                    return Err(ApplyError::InvalidPartition(format!(
                        "node {node} still hosts replicas"
                    )));
                }
                self.nodes
                    .remove(node)
                    .ok_or(ApplyError::UnknownNode(*node))?;
                self.broker_configs.remove(node);
            }
            MetadataRecord::CreateTopic {
                name,
                id,
                configs,
                partitions,
            } => {
                if self.names.contains_key(name) || self.topics.contains_key(id) {
                    return Err(ApplyError::TopicExists(name.clone()));
                }
                for p in partitions {
                    self.check_partition(p)?;
                }
                self.names.insert(name.clone(), *id);
                self.topics.insert(
                    *id,
                    TopicInfo {
                        name: name.clone(),
                        id: *id,
                        configs: configs.clone(),
                        partitions: partitions.clone(),
                    },
                );
            }
            MetadataRecord::AddPartitions { topic, partitions } => {
                for p in partitions {
                    self.check_partition(p)?;
                }
                self.topic_mut(*topic)?
                    .partitions
                    .extend(partitions.iter().cloned());
            }
            MetadataRecord::DeleteTopic { topic } => {
                let info = self
                    .topics
                    .remove(topic)
                    .ok_or(ApplyError::UnknownTopic(*topic))?;
                self.names.remove(&info.name);
                self.deleted.insert(*topic);
            }
            MetadataRecord::TopicConfig { topic, configs } => {
                self.topic_mut(*topic)?.configs = configs.clone();
            }
            MetadataRecord::BrokerConfig { node, configs } => {
                if configs.is_empty() {
                    self.broker_configs.remove(node);
                } else {
                    self.broker_configs.insert(*node, configs.clone());
                }
            }
            MetadataRecord::ChangePartition {
                topic,
                partition,
                change,
            } => {
                self.check_partition(change)?;
                let current = self.partition(*topic, *partition)?;
                if change.partition_epoch != current.partition_epoch.next() {
                    return Err(ApplyError::StalePartitionEpoch {
                        got: change.partition_epoch,
                        expected: current.partition_epoch.next(),
                    });
                }
                // The leader epoch moves with the leader; a leader that restarted leads on
                // in a new epoch (the controller's `register`).
                let allowed = if change.leader == current.leader {
                    change.leader_epoch == current.leader_epoch
                        || (change.leader.is_some()
                            && change.leader_epoch == current.leader_epoch.next())
                } else {
                    change.leader_epoch == current.leader_epoch.next()
                };
                if !allowed {
                    return Err(ApplyError::InvalidPartition(format!(
                        "leader epoch {:?} after {:?} (leader {:?} → {:?})",
                        change.leader_epoch, current.leader_epoch, current.leader, change.leader
                    )));
                }
                let topic = self.topic_mut(*topic)?;
                topic.partitions[*partition as usize] = change.clone();
            }
            MetadataRecord::ProducerIds { node, first, count } => {
                self.node_mut(*node)?;
                if *first != self.next_producer_id || *count <= 0 {
                    return Err(ApplyError::ProducerIdGap {
                        got: *first,
                        expected: self.next_producer_id,
                    });
                }
                self.next_producer_id = first + count;
            }
            MetadataRecord::UserScramCredentials { user, credentials } => {
                if credentials.is_empty() {
                    self.users.remove(user);
                } else {
                    self.users.insert(user.clone(), credentials.clone());
                }
            }
            MetadataRecord::ClientQuota { entity, values } => {
                self.client_quotas.set(entity.clone(), values.clone());
            }
            MetadataRecord::Acls { added, removed } => {
                self.acls.remove(removed);
                self.acls.add(added.iter().cloned());
            }
        }
        Ok(())
    }

    /// Every partition: (topic, index, state).
    pub fn partitions(&self) -> impl Iterator<Item = (&TopicInfo, i32, &PartitionInfo)> {
        self.topics.values().flat_map(|t| {
            t.partitions
                .iter()
                .enumerate()
                .map(move |(i, p)| (t, i as i32, p))
        })
    }

    pub fn partition(&self, topic: Uuid, partition: i32) -> Result<&PartitionInfo, ApplyError> {
        let t = self
            .topics
            .get(&topic)
            .ok_or(ApplyError::UnknownTopic(topic))?;
        usize::try_from(partition)
            .ok()
            .and_then(|i| t.partitions.get(i))
            .ok_or(ApplyError::UnknownPartition(topic, partition))
    }

    pub fn topic_by_name(&self, name: &str) -> Option<&TopicInfo> {
        self.names.get(name).and_then(|id| self.topics.get(id))
    }

    /// Partition `index` of the topic called `name`, with its topic.
    pub fn partition_by_name(
        &self,
        name: &str,
        index: i32,
    ) -> Option<(&TopicInfo, &PartitionInfo)> {
        let topic = self.topic_by_name(name)?;
        let p = topic.partitions.get(usize::try_from(index).ok()?)?;
        Some((topic, p))
    }

    /// Registered nodes that are not fenced.
    pub fn live_nodes(&self) -> impl Iterator<Item = &NodeInfo> {
        self.nodes.values().filter(|n| !n.fenced)
    }

    /// The ids of the fenced nodes.
    pub fn fenced_nodes(&self) -> std::collections::BTreeSet<NodeId> {
        self.nodes
            .iter()
            .filter(|(_, n)| n.fenced)
            .map(|(id, _)| *id)
            .collect()
    }

    pub fn is_live(&self, node: NodeId) -> bool {
        self.nodes.get(&node).is_some_and(|n| !n.fenced)
    }

    fn node_mut(&mut self, node: NodeId) -> Result<&mut NodeInfo, ApplyError> {
        self.nodes
            .get_mut(&node)
            .ok_or(ApplyError::UnknownNode(node))
    }

    fn topic_mut(&mut self, topic: Uuid) -> Result<&mut TopicInfo, ApplyError> {
        self.topics
            .get_mut(&topic)
            .ok_or(ApplyError::UnknownTopic(topic))
    }

    /// A partition's own invariants: distinct, registered replicas; leader ∈ ISR ⊆ replicas;
    /// a leader only while the ISR is not empty.
    fn check_partition(&self, p: &PartitionChange) -> Result<(), ApplyError> {
        let bad = |why: String| Err(ApplyError::InvalidPartition(why));
        if p.replicas.is_empty() {
            return bad("no replicas".into());
        }
        for (i, r) in p.replicas.iter().enumerate() {
            if !self.nodes.contains_key(r) {
                return Err(ApplyError::UnknownNode(*r));
            }
            if p.replicas[..i].contains(r) {
                return bad(format!("replica {r} listed twice"));
            }
        }
        for (i, r) in p.isr.iter().enumerate() {
            if !p.replicas.contains(r) || p.isr[..i].contains(r) {
                return bad(format!("ISR member {r} is not a distinct replica"));
            }
        }
        for r in p.adding.iter().chain(&p.removing) {
            if !p.replicas.contains(r) {
                return bad(format!("replica {r} being moved is not a replica"));
            }
        }
        if p.adding.iter().any(|r| p.removing.contains(r)) {
            return bad("a replica cannot be both added and removed".into());
        }
        if p.removing.len() >= p.replicas.len() {
            return bad("a reassignment must keep at least one replica".into());
        }
        if let Some(leader) = p.leader {
            if !p.isr.contains(&leader) {
                return bad(format!("leader {leader} is not in the ISR {:?}", p.isr));
            }
        }
        if p.leader_epoch < LeaderEpoch(0) {
            return bad("negative leader epoch".into());
        }
        Ok(())
    }
}
