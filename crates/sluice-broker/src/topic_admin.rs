//! Topic operations shared by the Kafka admin APIs and the HTTP admin API, with the rules
//! both must apply (internal topics, replication on this node).

use std::collections::BTreeMap;
use std::sync::Arc;

use crate::broker::Broker;
use crate::error::BrokerError;
use crate::topics::Topic;

/// A topic config's effective value and where it comes from (as DescribeConfigs says it).
#[derive(Debug, Clone, serde::Serialize)]
pub struct ConfigValue {
    pub name: String,
    pub value: String,
    /// `topic` (an override), `broker` (a broker setting) or `default`.
    pub source: &'static str,
    pub doc: &'static str,
}

impl Broker {
    /// Deletes a topic and every group's committed offsets for it; internal topics stay.
    pub fn delete_topic(&self, name: &str) -> Result<Arc<Topic>, BrokerError> {
        if crate::topics::is_internal(name) {
            return Err(BrokerError::InvalidTopic(format!(
                "{name} is internal and cannot be deleted"
            )));
        }
        let deleted = self.topics.delete(name)?;
        self.groups.forget_topic(name);
        Ok(deleted)
    }

    /// Creates a topic; `partitions` and `replication` of `None` take the broker defaults.
    pub fn create_topic(
        &self,
        name: &str,
        partitions: Option<i32>,
        replication: Option<i32>,
        configs: BTreeMap<String, String>,
    ) -> Result<Arc<Topic>, BrokerError> {
        if let Some(r) = replication.filter(|&r| r != 1) {
            return Err(BrokerError::InvalidReplicationFactor(format!(
                "replication factor {r} is not possible: this cluster has 1 broker"
            )));
        }
        let partitions = partitions.unwrap_or(self.config.num_partitions);
        self.topics
            .create(name, partitions, configs, false)?
            .ok_or_else(|| BrokerError::TopicExists(name.to_string()))
    }

    /// A partition of an existing topic, or `UnknownTopic` naming it.
    pub fn partition_of(
        &self,
        topic: &str,
        partition: i32,
    ) -> Result<Arc<crate::partition::Partition>, BrokerError> {
        self.topics
            .get(topic)
            .ok_or_else(|| BrokerError::UnknownTopic(topic.to_string()))?
            .partition(partition)
            .ok_or_else(|| BrokerError::UnknownTopic(format!("{topic}-{partition}")))
    }

    /// DeleteRecords: moves a partition's log start up to `before` (-1: its high watermark)
    /// and returns the new log start. As in Kafka, internal topics and topics whose
    /// `cleanup.policy` lacks `delete` refuse it, and an offset past the high watermark is
    /// out of range.
    pub fn delete_records(
        &self,
        topic: &str,
        partition: i32,
        before: i64,
    ) -> Result<sluice_log::Offset, BrokerError> {
        if crate::topics::is_internal(topic) {
            return Err(BrokerError::InvalidTopic(format!(
                "cannot delete records of internal topic {topic}"
            )));
        }
        let p = self.partition_of(topic, partition)?;
        if !p.config().delete_policy {
            return Err(BrokerError::PolicyViolation(format!(
                "records of {topic}-{partition} cannot be deleted: its cleanup.policy has no 'delete'"
            )));
        }
        p.delete_records(before)
    }

    /// Every config of a topic with its effective value.
    /// In a cluster, as the applied metadata has them (this node may hold no replica).
    pub fn topic_configs(&self, name: &str) -> Result<Vec<ConfigValue>, BrokerError> {
        let in_cluster = self.replication.get().map(|r| {
            r.state()
                .state
                .topic_by_name(name)
                .map(|t| t.configs.clone())
        });
        let overrides = match in_cluster {
            Some(configs) => configs,
            None => self.topics.get(name).map(|t| t.overrides()),
        }
        .ok_or_else(|| BrokerError::UnknownTopic(name.to_string()))?;
        Ok(crate::handlers::describe_configs::topic_entries(
            self,
            &overrides,
            None,
            crate::handlers::describe_configs::cluster_replicas(self, name),
        )
        .into_iter()
        .map(|e| ConfigValue {
            name: e.name.to_string(),
            value: e.value.map(|v| v.to_string()).unwrap_or_default(),
            source: crate::handlers::describe_configs::source_name(e.config_source),
            doc: e.doc,
        })
        .collect())
    }
}
