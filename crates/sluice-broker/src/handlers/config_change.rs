//! Carrying out what AlterConfigs and IncrementalAlterConfigs decided for each resource: a
//! topic's new overrides (on the single node, written here; in a cluster, validated here and
//! applied by the controller through the metadata log, so every node gets them), or a node's
//! dynamic broker configs, or in a cluster the default ones of every node (the broker named
//! ""): the replication throttle rates and the recovery cap; every other broker setting is
//! static and refused.

use std::collections::BTreeMap;

use kafka_protocol::messages::ResponseKind;
use kafka_protocol::protocol::StrBytes;
use sluice_wire::Reply;

use crate::broker::Broker;
use crate::error::BrokerError;
use crate::replication::throttle::{
    ReplicationThrottles, FOLLOWER_RATE, LEADER_RATE, RECOVERY_RATE,
};
use crate::topic_config::ConfigError;

/// One resource's change, as worked out from the request.
pub(crate) enum Change {
    /// A topic's complete new overrides.
    Topic {
        name: String,
        configs: BTreeMap<String, String>,
    },
    /// Broker configs to set (`Some`) or delete (`None`) on the node named `name`.
    Broker {
        name: String,
        changes: Vec<(String, Option<String>)>,
    },
}

/// A resource's type, name and outcome.
pub(crate) type Outcome = (i8, StrBytes, Result<(), BrokerError>);

/// Applies each resource's change (or the refusal already found) and answers with `build`.
/// In a cluster, topic changes are validated here and made by the controller.
pub(crate) fn apply(
    broker: &Broker,
    resources: Vec<(i8, StrBytes, Result<Change, BrokerError>)>,
    validate_only: bool,
    build: impl FnOnce(Vec<Outcome>) -> ResponseKind + Send + 'static,
) -> Reply {
    let replication = broker.replication().cloned();
    let mut outcomes: Vec<Outcome> = Vec::with_capacity(resources.len());
    // (index in `outcomes`, topic, its new overrides) for the controller.
    let mut for_controller = Vec::new();
    // (index in `outcomes`, node, its complete new dynamic configs) for the controller.
    let mut brokers_for_controller = Vec::new();
    for (kind, name, change) in resources {
        let outcome = match change {
            Err(e) => Err(e),
            Ok(Change::Broker { name, changes }) if replication.is_none() => {
                alter_broker(broker, &name, &changes, validate_only)
            }
            Ok(Change::Broker { name, changes }) => replication
                .as_ref()
                .map_or(Ok(None), |r| {
                    broker_configs_after(r, &name, &changes).map(Some)
                })
                .map(|after| {
                    if let Some((node, configs)) = after.filter(|_| !validate_only) {
                        brokers_for_controller.push((outcomes.len(), node, configs));
                    }
                }),
            Ok(Change::Topic { name, configs }) if replication.is_none() => {
                broker.topics().set_configs(&name, configs, validate_only)
            }
            Ok(Change::Topic { name, configs }) => {
                let checked = broker.topics().check_configs(&name, &configs);
                if checked.is_ok() && !validate_only {
                    for_controller.push((outcomes.len(), name, configs));
                }
                checked
            }
        };
        outcomes.push((kind, name, outcome));
    }
    let Some(replication) =
        replication.filter(|_| !for_controller.is_empty() || !brokers_for_controller.is_empty())
    else {
        return Reply::Ready(Box::new(build(outcomes)));
    };
    let owner = broker.arc();
    Reply::Later(Box::pin(async move {
        for (at, topic, configs) in for_controller {
            outcomes[at].2 = replication.set_topic_configs(&topic, configs).await;
        }
        for (at, node, configs) in brokers_for_controller {
            let done = replication.set_broker_configs(node, configs).await;
            // In force here before the answer (the metadata follower applies it too, a moment
            // later): a DescribeConfigs right after shows it. `set_broker_configs` returns once
            // this node has applied the change, so its state holds it.
            if let (Ok(()), Some(owner)) = (&done, &owner) {
                let me = replication.me();
                if node == me || node == sluice_cluster::NodeId::CLUSTER_DEFAULT {
                    owner
                        .throttles
                        .apply_all(&replication.effective_broker_configs(me));
                }
            }
            outcomes[at].2 = done;
        }
        Some(build(outcomes))
    }))
}

/// In a cluster: node `name`'s complete dynamic configs after `changes`, validated; the
/// controller writes them. An empty name is the cluster-wide default, as Kafka's
/// `--entity-default`: every node without its own value takes it.
fn broker_configs_after(
    replication: &crate::replication::Replication,
    name: &str,
    changes: &[(String, Option<String>)],
) -> Result<(sluice_cluster::NodeId, BTreeMap<String, String>), BrokerError> {
    let node = if name.is_empty() {
        sluice_cluster::NodeId::CLUSTER_DEFAULT
    } else {
        name.parse::<i32>()
            .ok()
            .filter(|id| *id >= 0)
            .map(sluice_cluster::NodeId)
            .ok_or_else(|| BrokerError::InvalidRequest(format!("'{name}' is not a node id")))?
    };
    if node != sluice_cluster::NodeId::CLUSTER_DEFAULT
        && !replication.state().state.nodes.contains_key(&node)
    {
        return Err(BrokerError::InvalidRequest(format!(
            "there is no node {name}"
        )));
    }
    check_dynamic(changes)?;
    let mut configs = replication.broker_configs(node);
    for (key, value) in changes {
        match value {
            Some(v) => configs.insert(key.clone(), v.clone()),
            None => configs.remove(key),
        };
    }
    let scratch = ReplicationThrottles::default();
    for (key, value) in &configs {
        scratch
            .set(key, Some(value))
            .map_err(|why| BrokerError::InvalidConfig(ConfigError(why)))?;
    }
    Ok((node, configs))
}

/// Refuses a change to any broker config but the dynamic ones.
fn check_dynamic(changes: &[(String, Option<String>)]) -> Result<(), BrokerError> {
    match changes
        .iter()
        .find(|(k, _)| !ReplicationThrottles::is_dynamic(k))
    {
        Some((key, _)) => Err(BrokerError::InvalidRequest(format!(
            "broker config '{key}' is static in Sluice: set it in the config file, environment \
             or flags (only {LEADER_RATE}, {FOLLOWER_RATE} and {RECOVERY_RATE} change at run \
             time)"
        ))),
        None => Ok(()),
    }
}

/// This node's dynamic broker configs (a single node): all of a resource's changes, or none
/// of them.
fn alter_broker(
    broker: &Broker,
    name: &str,
    changes: &[(String, Option<String>)],
    validate_only: bool,
) -> Result<(), BrokerError> {
    let me = broker.node_id().to_string();
    if !name.is_empty() && name != me {
        return Err(BrokerError::InvalidRequest(format!(
            "this is node {me}: send the configs of broker '{name}' to that node"
        )));
    }
    let invalid = |why: String| BrokerError::InvalidConfig(ConfigError(why));
    check_dynamic(changes)?;
    // Validate everything on a scratch copy before touching the live throttles.
    let scratch = ReplicationThrottles::default();
    for (key, value) in changes {
        scratch.set(key, value.as_deref()).map_err(invalid)?;
    }
    if !validate_only {
        for (key, value) in changes {
            broker
                .throttles
                .set(key, value.as_deref())
                .map_err(invalid)?;
        }
        tracing::info!(configs = ?broker.throttles.configs(), "replication throttles changed");
    }
    Ok(())
}
