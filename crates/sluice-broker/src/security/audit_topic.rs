//! The audit log's topic sink (`audit_log_topic`): every security event as one record, the
//! event's JSON as the value and the node's id as the key, on partition 0 of a topic of one
//! partition (so the events of every node are in one order), with the cluster's default
//! replication factor. The topic is created when the first event comes; a record that cannot
//! be written (no leader, not committed in time) is dropped and counted as a full queue is,
//! and said in the log at most every 30 s.

use std::collections::BTreeMap;
use std::sync::Arc;

use tokio_util::sync::CancellationToken;

use crate::broker::Broker;
use crate::error::BrokerError;
use crate::publish::NewRecord;
use crate::security::audit::AuditEvent;

impl Broker {
    /// Starts producing the audit events to their topic, if `audit_log_topic` is set.
    pub(crate) fn spawn_audit_topic(self: &Arc<Self>, shutdown: CancellationToken) {
        let Some((topic, mut events)) = self.audit.take_topic_events() else {
            return;
        };
        let broker = Arc::clone(self);
        tokio::spawn(async move {
            let mut created = false;
            let mut warned_ms = i64::MIN;
            loop {
                let event = tokio::select! {
                    () = shutdown.cancelled() => {
                        // What is still queued is lost with the process: counted, not silent.
                        while events.try_recv().is_ok() {
                            broker.audit.count_dropped();
                        }
                        return;
                    }
                    event = events.recv() => match event {
                        Some(event) => event,
                        None => return,
                    },
                };
                let written = async {
                    if !created {
                        broker.ensure_audit_topic(&topic).await?;
                        created = true;
                    }
                    broker.write_audit_record(&topic, &event).await
                }
                .await;
                if let Err(e) = written {
                    broker.audit.count_dropped();
                    if matches!(e, BrokerError::UnknownTopic(_)) {
                        // Deleted meanwhile: made again with the next event.
                        created = false;
                    }
                    let now = broker.now_ms();
                    if now.saturating_sub(warned_ms) >= 30_000 {
                        warned_ms = now;
                        tracing::warn!(%topic, error = %e, "an audit event could not be written to its topic (dropped and counted; said at most every 30 s)");
                    }
                }
            }
        });
    }

    async fn ensure_audit_topic(self: &Arc<Self>, topic: &str) -> Result<(), BrokerError> {
        if self.partition_count_of(topic).is_ok() {
            return Ok(());
        }
        let configs = BTreeMap::from([("cleanup.policy".to_string(), "delete".to_string())]);
        let made = if self.replication().is_some() {
            self.create_topic_in_cluster(topic, 1, -1, configs, false)
                .await
                .map(|_| ())
        } else {
            let broker = Arc::clone(self);
            let name = topic.to_string();
            tokio::task::spawn_blocking(move || broker.create_topic(&name, Some(1), None, configs))
                .await
                .map_err(|e| BrokerError::ControllerUnavailable(e.to_string()))?
                .map(|_| ())
        };
        match made {
            Ok(()) | Err(BrokerError::TopicExists(_)) => Ok(()),
            Err(e) => Err(e),
        }
    }

    async fn write_audit_record(&self, topic: &str, event: &AuditEvent) -> Result<(), BrokerError> {
        let value = serde_json::to_vec(event)
            .map_err(|e| BrokerError::InvalidRequest(format!("an audit event as JSON: {e}")))?;
        self.publish_at_leader(
            topic,
            0,
            NewRecord {
                key: Some(bytes::Bytes::from(self.config.node_id.to_string())),
                value: Some(bytes::Bytes::from(value)),
                headers: Vec::new(),
                timestamp_ms: None,
            },
        )
        .await
        .map(|_| ())
    }
}
