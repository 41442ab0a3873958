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
        let reply = self
            .ask(ControllerRequest::CreateTopic {
                name: name.to_string(),
                partitions,
                replication_factor,
                configs,
                validate_only,
            })
            .await?;
        match reply {
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

    /// Node `node`'s dynamic broker configs as the metadata holds them.
    pub fn broker_configs(&self, node: sluice_cluster::NodeId) -> BTreeMap<String, String> {
        self.state()
            .state
            .broker_configs
            .get(&node)
            .cloned()
            .unwrap_or_default()
    }

    pub async fn add_partitions(
        &self,
        name: &str,
        count: i32,
        validate_only: bool,
    ) -> Result<(), BrokerError> {
        self.ask(ControllerRequest::AddPartitions {
            name: name.to_string(),
            count,
            validate_only,
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
        let reply = self
            .ask(ControllerRequest::ElectPreferred { partitions })
            .await?;
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
                    s.partition_by_name(name, *index).is_some_and(|(_, p)| {
                        p.leader.is_some() && p.leader == p.replicas.first().copied()
                    })
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
