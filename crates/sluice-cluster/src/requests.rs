//! What a node asks of the controller on behalf of a client or of its own replicas: topic
//! administration (CreateTopics, DeleteTopics, CreatePartitions), ISR changes
//! (AlterPartition), producer id blocks, preferred-leader elections (ElectLeaders) and
//! reassignments (AlterPartitionReassignments). Any node may ask; [`crate::runtime::ClusterNode`]
//! answers on the metadata leader and forwards from the others.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use uuid::Uuid;

use crate::assignment::AssignmentError;
use crate::controller::{AlterPartitionError, Controller, CreateTopicError, Election};
use crate::ids::{LeaderEpoch, NodeId, PartitionEpoch};
use crate::metadata::{ClusterState, MetadataRecord};
use crate::placement::PlacementError;
use crate::raft::network::ProposeError;
use crate::reassignment::{ReassignOutcome, Reassignment};

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum ControllerRequest {
    CreateTopic {
        name: String,
        partitions: i32,
        replication_factor: i32,
        configs: BTreeMap<String, String>,
        validate_only: bool,
    },
    /// CreateTopics with a manual assignment: partition `i` gets the replicas
    /// `assignment[i]`, the preferred leader first. A variant of its own, not a field of
    /// `CreateTopic`: a controller that predates it refuses it rather than placing the
    /// replicas itself.
    CreateTopicAssigned {
        name: String,
        assignment: Vec<Vec<NodeId>>,
        configs: BTreeMap<String, String>,
        validate_only: bool,
    },
    DeleteTopic {
        name: String,
    },
    /// A topic's config overrides, replaced as a whole (AlterConfigs, IncrementalAlterConfigs;
    /// the broker has validated them).
    TopicConfig {
        name: String,
        configs: BTreeMap<String, String>,
    },
    /// A node's complete dynamic broker configs (validated by the node that was asked).
    BrokerConfig {
        node: NodeId,
        configs: BTreeMap<String, String>,
    },
    AddPartitions {
        name: String,
        count: i32,
        validate_only: bool,
    },
    /// CreatePartitions with a manual assignment of the new partitions, which continue the
    /// topic's numbering.
    AddPartitionsAssigned {
        name: String,
        count: i32,
        assignment: Vec<Vec<NodeId>>,
        validate_only: bool,
    },
    AlterPartition {
        node: NodeId,
        topic: Uuid,
        partition: i32,
        leader_epoch: LeaderEpoch,
        partition_epoch: PartitionEpoch,
        isr: Vec<NodeId>,
    },
    ProducerIds {
        node: NodeId,
    },
    /// ElectLeaders with the preferred election type; `None`: every partition.
    ElectPreferred {
        partitions: Option<Vec<(String, i32)>>,
    },
    /// ElectLeaders with the unclean election type: each partition with its candidate
    /// leaders, the replica holding the most of the log first.
    ElectUnclean {
        partitions: Vec<(String, i32, Vec<NodeId>)>,
    },
    /// UnregisterBroker (`sluice cluster remove-node`): forget a node that is down and holds
    /// no replica (move its replicas away first).
    RemoveNode {
        node: NodeId,
    },
    /// AlterPartitionReassignments: move (or stop moving) partitions' replicas.
    Reassign {
        moves: Vec<Reassignment>,
        allow_rf_change: bool,
    },
    /// AlterUserScramCredentials for one user (validated by the node that was asked): the
    /// controller applies the changes to the user's credentials as they are when it decides,
    /// so two nodes changing one user's mechanisms at once lose neither change.
    UserScramCredentials {
        user: String,
        upserts: Vec<sluice_auth::ScramCredential>,
        deletions: Vec<sluice_auth::ScramMechanism>,
    },
    /// AlterClientQuotas for one entity (validated by the node that was asked): the controller
    /// applies the changes to the entity's limits as they are when it decides.
    ClientQuota {
        entity: crate::metadata::quotas::QuotaEntity,
        set: crate::metadata::quotas::QuotaValues,
        remove: Vec<String>,
    },
    /// CreateAcls (validated by the node that was asked).
    CreateAcls {
        acls: Vec<sluice_auth::acl::AclBinding>,
    },
    /// DeleteAcls: the controller removes what the filters match when it decides, and
    /// answers, per filter, the ACLs removed.
    DeleteAcls {
        filters: Vec<sluice_auth::acl::AclFilter>,
    },
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum ControllerReply {
    Done,
    TopicCreated {
        id: Uuid,
    },
    ProducerIds {
        first: i64,
        count: i64,
    },
    Elections(Vec<(String, i32, Election)>),
    Reassignments(Vec<ReassignOutcome>),
    /// Per DeleteAcls filter, the ACLs it removed.
    AclsDeleted(Vec<Vec<sluice_auth::acl::AclBinding>>),
}

/// Why the controller refused (or could not be asked); the broker maps each to a Kafka error.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, thiserror::Error)]
pub enum ControllerError {
    #[error(transparent)]
    Unavailable(#[from] ProposeError),
    #[error("topic '{0}' already exists")]
    TopicExists(String),
    #[error("unknown topic '{0}'")]
    UnknownTopic(String),
    #[error("{0}")]
    InvalidPartitions(String),
    #[error("{0}")]
    InvalidReplicationFactor(String),
    #[error("{0}")]
    AlterPartition(String),
    #[error("the metadata log refused the change: {0}")]
    Refused(String),
    #[error("node {0} is not registered")]
    UnknownNode(NodeId),
    #[error(transparent)]
    InvalidAssignment(#[from] AssignmentError),
    /// The metadata leader could not decode the request: it runs a version that predates it.
    #[error("the metadata leader does not know this request (does it run an older version?): {0}")]
    NotUnderstood(String),
}

impl From<CreateTopicError> for ControllerError {
    fn from(e: CreateTopicError) -> Self {
        match e {
            CreateTopicError::Exists(name) => ControllerError::TopicExists(name),
            CreateTopicError::InvalidPartitions(_) => {
                ControllerError::InvalidPartitions(e.to_string())
            }
            CreateTopicError::Placement(p) => p.into(),
            CreateTopicError::Assignment(a) => a.into(),
        }
    }
}

impl From<PlacementError> for ControllerError {
    fn from(e: PlacementError) -> Self {
        ControllerError::InvalidReplicationFactor(e.to_string())
    }
}

impl From<AlterPartitionError> for ControllerError {
    fn from(e: AlterPartitionError) -> Self {
        ControllerError::AlterPartition(e.to_string())
    }
}

/// One decision: the records that carry out `request` against `state`, and the reply.
pub fn decide(
    controller: &mut Controller,
    state: &ClusterState,
    request: ControllerRequest,
) -> Result<(Vec<MetadataRecord>, ControllerReply), ControllerError> {
    let topic_id = |name: &str| {
        state
            .names
            .get(name)
            .copied()
            .ok_or_else(|| ControllerError::UnknownTopic(name.to_string()))
    };
    match request {
        ControllerRequest::CreateTopic {
            name,
            partitions,
            replication_factor,
            configs,
            validate_only,
        } => {
            let id = Uuid::new_v4();
            let records = controller.create_topic(
                state,
                &name,
                id,
                partitions,
                replication_factor,
                configs,
            )?;
            if validate_only {
                return Ok((Vec::new(), ControllerReply::Done));
            }
            Ok((records, ControllerReply::TopicCreated { id }))
        }
        ControllerRequest::CreateTopicAssigned {
            name,
            assignment,
            configs,
            validate_only,
        } => {
            let id = Uuid::new_v4();
            let records =
                controller.create_topic_assigned(state, &name, id, &assignment, configs)?;
            if validate_only {
                return Ok((Vec::new(), ControllerReply::Done));
            }
            Ok((records, ControllerReply::TopicCreated { id }))
        }
        ControllerRequest::DeleteTopic { name } => {
            let topic = topic_id(&name)?;
            Ok((
                vec![MetadataRecord::DeleteTopic { topic }],
                ControllerReply::Done,
            ))
        }
        ControllerRequest::TopicConfig { name, configs } => {
            let topic = topic_id(&name)?;
            Ok((
                vec![MetadataRecord::TopicConfig { topic, configs }],
                ControllerReply::Done,
            ))
        }
        ControllerRequest::UserScramCredentials {
            user,
            upserts,
            deletions,
        } => {
            let credentials = sluice_auth::apply_changes(
                state.users.get(&user).cloned().unwrap_or_default(),
                &upserts,
                &deletions,
            );
            Ok((
                vec![MetadataRecord::UserScramCredentials { user, credentials }],
                ControllerReply::Done,
            ))
        }
        ControllerRequest::ClientQuota {
            entity,
            set,
            remove,
        } => {
            let mut values = state
                .client_quotas
                .get(&entity)
                .cloned()
                .unwrap_or_default();
            for key in &remove {
                values.remove(key);
            }
            values.extend(set);
            Ok((
                vec![MetadataRecord::ClientQuota { entity, values }],
                ControllerReply::Done,
            ))
        }
        ControllerRequest::CreateAcls { acls } => Ok((
            vec![MetadataRecord::Acls {
                added: acls,
                removed: Vec::new(),
            }],
            ControllerReply::Done,
        )),
        ControllerRequest::DeleteAcls { filters } => {
            let per_filter: Vec<Vec<sluice_auth::acl::AclBinding>> =
                filters.iter().map(|f| state.acls.matching(f)).collect();
            let mut removed: Vec<sluice_auth::acl::AclBinding> =
                per_filter.iter().flatten().cloned().collect();
            removed.sort();
            removed.dedup();
            let records = if removed.is_empty() {
                Vec::new()
            } else {
                vec![MetadataRecord::Acls {
                    added: Vec::new(),
                    removed,
                }]
            };
            Ok((records, ControllerReply::AclsDeleted(per_filter)))
        }
        ControllerRequest::BrokerConfig { node, configs } => {
            if node != NodeId::CLUSTER_DEFAULT && !state.nodes.contains_key(&node) {
                return Err(ControllerError::UnknownNode(node));
            }
            Ok((
                vec![MetadataRecord::BrokerConfig { node, configs }],
                ControllerReply::Done,
            ))
        }
        ControllerRequest::AddPartitions {
            name,
            count,
            validate_only,
        } => {
            let topic = topic_id(&name)?;
            let current = state
                .topics
                .get(&topic)
                .map_or(0, |t| t.partitions.len() as i32);
            if count <= current {
                return Err(ControllerError::InvalidPartitions(format!(
                    "topic '{name}' has {current} partitions; the new count must be larger, not {count}"
                )));
            }
            let rf = state
                .topics
                .get(&topic)
                .and_then(|t| t.partitions.first())
                .map_or(1, |p| p.target().len() as i32);
            let added = crate::controller::new_partitions(state, (count - current) as usize, rf)?;
            if validate_only {
                return Ok((Vec::new(), ControllerReply::Done));
            }
            Ok((
                vec![MetadataRecord::AddPartitions {
                    topic,
                    partitions: added,
                }],
                ControllerReply::Done,
            ))
        }
        ControllerRequest::AddPartitionsAssigned {
            name,
            count,
            assignment,
            validate_only,
        } => {
            let topic = topic_id(&name)?;
            let existing = state.topics.get(&topic).map(|t| &t.partitions);
            let current = existing.map_or(0, |p| p.len());
            if count <= current as i32 {
                return Err(ControllerError::InvalidPartitions(format!(
                    "topic '{name}' has {current} partitions; the new count must be larger, not {count}"
                )));
            }
            let additional = count as usize - current;
            if assignment.len() != additional {
                return Err(AssignmentError::Count {
                    additional,
                    given: assignment.len(),
                }
                .into());
            }
            // The topic's partitions all have the same number of replicas, as Kafka requires;
            // during a reassignment a partition lists its leaving replicas too, so the count
            // is what the first one will have.
            let rf = existing.and_then(|p| p.first()).map(|p| p.target().len());
            let added = crate::assignment::assigned_partitions(state, current, &assignment, rf)?;
            if validate_only {
                return Ok((Vec::new(), ControllerReply::Done));
            }
            Ok((
                vec![MetadataRecord::AddPartitions {
                    topic,
                    partitions: added,
                }],
                ControllerReply::Done,
            ))
        }
        ControllerRequest::AlterPartition {
            node,
            topic,
            partition,
            leader_epoch,
            partition_epoch,
            isr,
        } => {
            let records = controller.alter_partition(
                state,
                node,
                topic,
                partition,
                leader_epoch,
                partition_epoch,
                isr,
            )?;
            Ok((records, ControllerReply::Done))
        }
        ControllerRequest::ProducerIds { node } => {
            if !state.is_live(node) {
                return Err(ControllerError::Refused(format!(
                    "node {node} is not registered yet"
                )));
            }
            let record = controller.producer_ids(state, node);
            let MetadataRecord::ProducerIds { first, count, .. } = record else {
                return Err(ControllerError::Refused("not a producer id block".into()));
            };
            Ok((vec![record], ControllerReply::ProducerIds { first, count }))
        }
        ControllerRequest::ElectPreferred { partitions } => {
            let (records, outcomes) = controller.elect_preferred(state, partitions.as_deref());
            Ok((records, ControllerReply::Elections(outcomes)))
        }
        ControllerRequest::ElectUnclean { partitions } => {
            let (records, outcomes) = controller.elect_unclean(state, &partitions);
            Ok((records, ControllerReply::Elections(outcomes)))
        }
        ControllerRequest::RemoveNode { node } => {
            if !state.nodes.contains_key(&node) {
                return Err(ControllerError::UnknownNode(node));
            }
            if state.is_live(node) {
                return Err(ControllerError::Refused(format!(
                    "node {node} is running: stop it first (its replicas must have moved away)"
                )));
            }
            if let Some((topic, index, _)) = state
                .partitions()
                .find(|(.., p)| p.replicas.contains(&node))
            {
                return Err(ControllerError::Refused(format!(
                    "node {node} still holds a replica of {}-{index}: move it away first \
                     (sluice cluster remove-node drains a node)",
                    topic.name
                )));
            }
            Ok((
                vec![MetadataRecord::RemoveNode { node }],
                ControllerReply::Done,
            ))
        }
        ControllerRequest::Reassign {
            moves,
            allow_rf_change,
        } => {
            let (records, outcomes) = controller.reassign(state, &moves, allow_rf_change);
            Ok((records, ControllerReply::Reassignments(outcomes)))
        }
    }
}
