//! Topic administration in a cluster: the controller decides, every node applies. Each call
//! returns once this node has applied the decision too, so the client's next request here
//! (a Metadata, a Produce) already sees it.

use std::collections::BTreeMap;
use std::time::Duration;

use sluice_cluster::controller::Election;
use sluice_cluster::metadata::ClusterState;
use sluice_cluster::reassignment::{ReassignOutcome, Reassignment};
use sluice_cluster::requests::{ControllerReply, ControllerRequest};

use super::Replication;
use crate::broker::Broker;
use crate::error::BrokerError;

/// How long a change may take to reach this node after the controller made it.
const APPLY_WAIT: Duration = Duration::from_secs(10);

impl Replication {
    /// Waits until the applied metadata here satisfies `done`.
    pub async fn applied_until(
        &self,
        done: impl Fn(&ClusterState) -> bool,
    ) -> Result<(), BrokerError> {
        let mut applied = self.node.metadata().applied();
        let waited = tokio::time::timeout(APPLY_WAIT, applied.wait_for(|a| done(&a.state))).await;
        match waited {
            Ok(Ok(_)) => Ok(()),
            _ => Err(BrokerError::ControllerUnavailable(
                "the change was made but has not reached this node yet".into(),
            )),
        }
    }

    /// The replication factor a topic gets when the request leaves it to the broker: three,
    /// or every live node if there are fewer.
    pub fn default_replication_factor(&self) -> i32 {
        let live = self.state().state.live_nodes().count();
        live.clamp(1, 3) as i32
    }

    pub async fn create_topic(
        &self,
        name: &str,
        partitions: i32,
        replication_factor: i32,
        configs: BTreeMap<String, String>,
        validate_only: bool,
    ) -> Result<uuid::Uuid, BrokerError> {
        self.create(ControllerRequest::CreateTopic {
            name: name.to_string(),
            partitions,
            replication_factor,
            configs,
            validate_only,
        })
        .await
    }

    /// A topic whose replicas `assignment` names: partition `i` on `assignment[i]`, the
    /// preferred leader first.
    pub async fn create_topic_assigned(
        &self,
        name: &str,
        assignment: Vec<Vec<sluice_cluster::NodeId>>,
        configs: BTreeMap<String, String>,
        validate_only: bool,
    ) -> Result<uuid::Uuid, BrokerError> {
        self.create(ControllerRequest::CreateTopicAssigned {
            name: name.to_string(),
            assignment,
            configs,
            validate_only,
        })
        .await
    }

    /// Asks for a topic; answered once this node has applied it (nil if only validated).
    async fn create(&self, request: ControllerRequest) -> Result<uuid::Uuid, BrokerError> {
        match self.ask(request).await? {
            ControllerReply::TopicCreated { id } => {
                self.applied_until(|s| s.topics.contains_key(&id)).await?;
                Ok(id)
            }
            _ => Ok(uuid::Uuid::nil()),
        }
    }

    pub async fn delete_topic(&self, name: &str) -> Result<uuid::Uuid, BrokerError> {
        let id = self
            .state()
            .state
            .names
            .get(name)
            .copied()
            .ok_or_else(|| BrokerError::UnknownTopic(name.to_string()))?;
        self.ask(ControllerRequest::DeleteTopic {
            name: name.to_string(),
        })
        .await?;
        self.applied_until(|s| !s.topics.contains_key(&id)).await?;
        Ok(id)
    }

    /// Replaces a topic's config overrides; answered once this node applies them.
    pub async fn set_topic_configs(
        &self,
        name: &str,
        configs: BTreeMap<String, String>,
    ) -> Result<(), BrokerError> {
        self.ask(ControllerRequest::TopicConfig {
            name: name.to_string(),
            configs: configs.clone(),
        })
        .await?;
        self.applied_until(|s| s.topic_by_name(name).is_some_and(|t| t.configs == configs))
            .await
    }

    /// Node `node`'s complete dynamic broker configs, through the controller: every node
    /// applies its own from the metadata, at once and after every restart.
    pub async fn set_broker_configs(
        &self,
        node: sluice_cluster::NodeId,
        configs: BTreeMap<String, String>,
    ) -> Result<(), BrokerError> {
        use sluice_cluster::requests::ControllerError as E;
        self.node
            .ask(ControllerRequest::BrokerConfig {
                node,
                configs: configs.clone(),
            })
            .await
            .map_err(|e| match e {
                E::UnknownNode(_) => {
                    BrokerError::InvalidRequest(format!("there is no node {node}"))
                }
                other => BrokerError::ControllerUnavailable(other.to_string()),
            })?;
        self.applied_until(|s| s.broker_configs.get(&node).cloned().unwrap_or_default() == configs)
            .await
    }

    /// The configs in force on `node`: the cluster-wide defaults, then its own over them.
    pub fn effective_broker_configs(
        &self,
        node: sluice_cluster::NodeId,
    ) -> BTreeMap<String, String> {
        effective_broker_configs(&self.state().state, node)
    }

    /// `node`'s own dynamic broker configs (or the cluster-wide defaults', for
    /// [`sluice_cluster::NodeId::CLUSTER_DEFAULT`]).
    pub fn broker_configs(&self, node: sluice_cluster::NodeId) -> BTreeMap<String, String> {
        self.state()
            .state
            .broker_configs
            .get(&node)
            .cloned()
            .unwrap_or_default()
    }

    /// Grows topic `name` to `count` partitions; `assignment`: the new partitions' replicas
    /// (one list per new partition), or `None` for the controller to place them.
    pub async fn add_partitions(
        &self,
        name: &str,
        count: i32,
        assignment: Option<Vec<Vec<sluice_cluster::NodeId>>>,
        validate_only: bool,
    ) -> Result<(), BrokerError> {
        self.ask(match assignment {
            None => ControllerRequest::AddPartitions {
                name: name.to_string(),
                count,
                validate_only,
            },
            Some(assignment) => ControllerRequest::AddPartitionsAssigned {
                name: name.to_string(),
                count,
                assignment,
                validate_only,
            },
        })
        .await?;
        if !validate_only {
            self.applied_until(|s| {
                s.names
                    .get(name)
                    .and_then(|id| s.topics.get(id))
                    .is_some_and(|t| t.partitions.len() as i32 >= count)
            })
            .await?;
        }
        Ok(())
    }

    /// A preferred-leader election (ElectLeaders) over `partitions` (`None`: all); answered
    /// once this node has applied the new leaders.
    pub async fn elect_preferred(
        &self,
        partitions: Option<Vec<(String, i32)>>,
    ) -> Result<Vec<(String, i32, Election)>, BrokerError> {
        self.elect(ControllerRequest::ElectPreferred { partitions }, |p| {
            p.leader == p.replicas.first().copied()
        })
        .await
    }

    /// An unclean election (ElectLeaders) of each partition's first live candidate (see
    /// [`Broker::elect_unclean`]); answered once this node has applied the new leaders.
    pub async fn elect_unclean(
        &self,
        partitions: Vec<(String, i32, Vec<sluice_cluster::NodeId>)>,
    ) -> Result<Vec<(String, i32, Election)>, BrokerError> {
        self.elect(ControllerRequest::ElectUnclean { partitions }, |_| true)
            .await
    }

    async fn elect(
        &self,
        request: ControllerRequest,
        settled: impl Fn(&sluice_cluster::metadata::PartitionChange) -> bool,
    ) -> Result<Vec<(String, i32, Election)>, BrokerError> {
        let reply = self.ask(request).await?;
        let ControllerReply::Elections(outcomes) = reply else {
            return Err(BrokerError::ControllerUnavailable(
                "the controller answered an election with something else".into(),
            ));
        };
        let elected: Vec<(String, i32)> = outcomes
            .iter()
            .filter(|(.., e)| *e == Election::Elected)
            .map(|(t, p, _)| (t.clone(), *p))
            .collect();
        if !elected.is_empty() {
            self.applied_until(|s| {
                elected.iter().all(|(name, index)| {
                    s.partition_by_name(name, *index)
                        .is_some_and(|(_, p)| p.leader.is_some() && settled(p))
                })
            })
            .await?;
        }
        Ok(outcomes)
    }

    /// AlterPartitionReassignments: starts, replaces or cancels the named moves; answered once
    /// this node has applied the accepted ones.
    pub async fn reassign(
        &self,
        moves: Vec<Reassignment>,
        allow_rf_change: bool,
    ) -> Result<Vec<ReassignOutcome>, BrokerError> {
        let reply = self
            .ask(ControllerRequest::Reassign {
                moves: moves.clone(),
                allow_rf_change,
            })
            .await?;
        let ControllerReply::Reassignments(outcomes) = reply else {
            return Err(BrokerError::ControllerUnavailable(
                "the controller answered a reassignment with something else".into(),
            ));
        };
        let accepted: Vec<&Reassignment> = moves
            .iter()
            .filter(|m| {
                outcomes
                    .iter()
                    .any(|(t, p, r)| *t == m.topic && *p == m.partition && r.is_ok())
            })
            .collect();
        if !accepted.is_empty() {
            self.applied_until(|s| {
                accepted.iter().all(|m| {
                    s.partition_by_name(&m.topic, m.partition)
                        .is_some_and(|(_, p)| match &m.target {
                            Some(target) => p.target() == *target,
                            None => !p.reassigning(),
                        })
                })
            })
            .await?;
        }
        Ok(outcomes)
    }

    /// UnregisterBroker: forgets `node` (down, holding no replica); answered once this node
    /// has applied it.
    pub async fn remove_node(&self, node: sluice_cluster::NodeId) -> Result<(), BrokerError> {
        use sluice_cluster::requests::ControllerError as E;
        self.node
            .ask(ControllerRequest::RemoveNode { node })
            .await
            .map_err(|e| match e {
                E::UnknownNode(_) => BrokerError::NodeNotRegistered(e.to_string()),
                E::Refused(m) => BrokerError::InvalidRequest(m),
                other => BrokerError::ControllerUnavailable(other.to_string()),
            })?;
        self.applied_until(|s| !s.nodes.contains_key(&node)).await
    }
}

/// Topic changes made through the controller, with the checks Kafka's admin API makes: what
/// CreateTopics and the HTTP admin API both call in a cluster.
impl Broker {
    fn clustered(&self) -> Result<&Replication, BrokerError> {
        self.replication
            .get()
            .map(|r| &**r)
            .ok_or_else(|| BrokerError::InvalidRequest("this node is not in a cluster".into()))
    }

    /// Creates a topic (-1 partitions or replication factor: the broker's default); returns
    /// the partition count, the replication factor and the topic id (nil if only validated).
    pub async fn create_topic_in_cluster(
        &self,
        name: &str,
        partitions: i32,
        replication_factor: i32,
        configs: BTreeMap<String, String>,
        validate_only: bool,
    ) -> Result<(i32, i32, uuid::Uuid), BrokerError> {
        let replication = self.clustered()?;
        check_new_topic_name(name)?;
        let partitions = if partitions == -1 {
            self.config().num_partitions
        } else {
            partitions
        };
        self.topics().check_partition_count(partitions)?;
        let rf = if replication_factor == -1 {
            replication.default_replication_factor()
        } else {
            replication_factor
        };
        crate::topic_config::resolve(&configs, self.topics().defaults())?;
        let id = replication
            .create_topic(name, partitions, rf, configs, validate_only)
            .await?;
        Ok((partitions, rf, id))
    }

    /// What Kafka checks of a new topic before its layout: a legal name, not an internal
    /// topic's, not taken (as this node's metadata knows; the controller checks again).
    pub fn check_new_topic_in_cluster(&self, name: &str) -> Result<(), BrokerError> {
        let replication = self.clustered()?;
        check_new_topic_name(name)?;
        if replication.state().state.names.contains_key(name) {
            return Err(BrokerError::TopicExists(name.to_string()));
        }
        Ok(())
    }

    /// Creates a topic whose replicas `assignment` names (partition `i` on `assignment[i]`,
    /// the preferred leader first; the controller checks the nodes); returns the partition
    /// count, the replication factor and the topic id (nil if only validated).
    pub async fn create_assigned_topic_in_cluster(
        &self,
        name: &str,
        assignment: Vec<Vec<i32>>,
        configs: BTreeMap<String, String>,
        validate_only: bool,
    ) -> Result<(i32, i32, uuid::Uuid), BrokerError> {
        let replication = self.clustered()?;
        check_new_topic_name(name)?;
        let partitions = i32::try_from(assignment.len()).unwrap_or(i32::MAX);
        self.topics().check_partition_count(partitions)?;
        let rf = assignment.first().map_or(0, |r| r.len() as i32);
        crate::topic_config::resolve(&configs, self.topics().defaults())?;
        let id = replication
            .create_topic_assigned(name, node_ids(assignment), configs, validate_only)
            .await?;
        Ok((partitions, rf, id))
    }

    pub async fn delete_topic_in_cluster(&self, name: &str) -> Result<uuid::Uuid, BrokerError> {
        let replication = self.clustered()?;
        if crate::topics::is_internal(name) {
            return Err(BrokerError::InvalidTopic(format!(
                "{name} is internal and cannot be deleted"
            )));
        }
        replication.delete_topic(name).await
    }

    /// Replaces a topic's config overrides, validated here first.
    pub async fn set_topic_configs_in_cluster(
        &self,
        name: &str,
        configs: BTreeMap<String, String>,
    ) -> Result<(), BrokerError> {
        let replication = self.clustered()?;
        self.topics().check_configs(name, &configs)?;
        replication.set_topic_configs(name, configs).await
    }

    /// Grows topic `name` to `count` partitions (CreatePartitions, the admin API);
    /// `assignment`: the new partitions' replicas (one list of node ids per new partition),
    /// or `None` for the controller to place them.
    pub async fn add_partitions_in_cluster(
        &self,
        name: &str,
        count: i32,
        assignment: Option<Vec<Vec<i32>>>,
        validate_only: bool,
    ) -> Result<(), BrokerError> {
        let replication = self.clustered()?;
        if crate::topics::is_internal(name) {
            // More partitions would move every group (or transactional id) to another
            // partition, away from its state.
            return Err(BrokerError::InvalidPartitions(format!(
                "internal topic '{name}' cannot get more partitions"
            )));
        }
        // Kafka answers an unknown topic before it looks at the count (the controller does).
        if replication.state().state.names.contains_key(name) {
            self.topics().check_partition_count(count)?;
        }
        replication
            .add_partitions(name, count, assignment.map(node_ids), validate_only)
            .await
    }
}

impl Broker {
    /// DeleteRecords on the partition's leader: here, or asked of the node that leads it (the
    /// HTTP admin API; Kafka clients send DeleteRecords to the leader themselves); in a
    /// cluster answered once the in-sync followers have followed, within `wait`.
    pub async fn delete_records_at_leader(
        &self,
        topic: &str,
        partition: i32,
        before: i64,
        wait: Duration,
    ) -> Result<sluice_log::Offset, BrokerError> {
        use super::cluster_messages::{offline, Leader};
        if self.replication.get().is_none() {
            return self.delete_records(topic, partition, before);
        }
        let leader = match self.placement(topic, partition)?.0 {
            Leader::Me => {
                return self
                    .delete_records_here(topic, partition, before, wait)
                    .await
            }
            Leader::Other(leader) => leader,
            Leader::Nobody => return Err(offline(topic, partition)),
        };
        let call = super::PeerCall::DeleteRecords {
            topic: topic.to_string(),
            partition,
            before,
            wait_ms: Some(u64::try_from(wait.as_millis()).unwrap_or(u64::MAX)),
        };
        match self
            .ask_peer(leader, &call, wait + Duration::from_secs(8))
            .await
        {
            Ok(start) => start.as_i64().map(sluice_log::Offset).ok_or_else(|| {
                BrokerError::ControllerUnavailable(format!("node {leader} answered {start}"))
            }),
            Err(e) => Err(super::cluster_messages::refused(leader, e)),
        }
    }
}

/// The configs in force on `node`: the cluster-wide defaults, then its own over them.
pub(crate) fn effective_broker_configs(
    state: &sluice_cluster::ClusterState,
    node: sluice_cluster::NodeId,
) -> BTreeMap<String, String> {
    let mut configs = state
        .broker_configs
        .get(&sluice_cluster::NodeId::CLUSTER_DEFAULT)
        .cloned()
        .unwrap_or_default();
    if let Some(own) = state.broker_configs.get(&node) {
        configs.extend(own.iter().map(|(k, v)| (k.clone(), v.clone())));
    }
    configs
}

/// A name a client may create a topic under: legal, and not an internal topic's.
fn check_new_topic_name(name: &str) -> Result<(), BrokerError> {
    crate::topics::validate_topic_name(name)?;
    if crate::topics::is_internal(name) {
        return Err(BrokerError::InvalidTopic(format!(
            "{name} is internal; only the broker creates it"
        )));
    }
    Ok(())
}

/// Replica lists of node ids as the controller takes them.
fn node_ids(lists: Vec<Vec<i32>>) -> Vec<Vec<sluice_cluster::NodeId>> {
    lists
        .into_iter()
        .map(|r| r.into_iter().map(sluice_cluster::NodeId).collect())
        .collect()
}
