//! Carrying out what AlterConfigs and IncrementalAlterConfigs decided for each resource: a
//! topic's new overrides (on the single node, written here; in a cluster, validated here and
//! applied by the controller through the metadata log, so every node gets them), or a node's
//! dynamic broker configs (the replication throttle rates; every other broker setting is
//! static and refused).

use std::collections::BTreeMap;

use kafka_protocol::messages::ResponseKind;
use kafka_protocol::protocol::StrBytes;
use sluice_wire::Reply;

use crate::broker::Broker;
use crate::error::BrokerError;
use crate::replication::throttle::{ReplicationThrottles, FOLLOWER_RATE, LEADER_RATE};
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
    for (kind, name, change) in resources {
        let outcome = match change {
            Err(e) => Err(e),
            Ok(Change::Broker { name, changes }) => {
                alter_broker(broker, &name, &changes, validate_only)
            }
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
    let Some(replication) = replication.filter(|_| !for_controller.is_empty()) else {
        return Reply::Ready(Box::new(build(outcomes)));
    };
    Reply::Later(Box::pin(async move {
        for (at, topic, configs) in for_controller {
            outcomes[at].2 = replication.set_topic_configs(&topic, configs).await;
        }
        Some(build(outcomes))
    }))
}

/// This node's dynamic broker configs: all of a resource's changes, or none of them.
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
    if let Some((key, _)) = changes
        .iter()
        .find(|(k, _)| !ReplicationThrottles::is_dynamic(k))
    {
        return Err(BrokerError::InvalidRequest(format!(
            "broker config '{key}' is static in Sluice: set it in the config file, environment \
             or flags (only {LEADER_RATE} and {FOLLOWER_RATE} change at run time)"
        )));
    }
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
