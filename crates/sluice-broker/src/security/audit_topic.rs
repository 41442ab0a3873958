//! The audit log's topic sink (`audit_log_topic`): every security event as one record, the
//! event's JSON as the value and the node's id as the key, on partition 0 of a topic of one
//! partition (so the events of every node are in one order), with the cluster's default
//! replication factor. The topic is created when the first event comes. The events waiting
//! in the queue are written together, as one batch (up to [`BATCH_EVENTS`] events or
//! [`BATCH_BYTES`] of JSON): one commit round trip for all of them, so a flood of refused
//! requests reaches the topic instead of overflowing the queue. A batch the topic refuses as
//! too large is written again one event at a time. A record that cannot be written (no leader,
//! not committed in time) is dropped and counted as a full queue is, and said in the log at
//! most every 30 s.

use std::collections::BTreeMap;
use std::sync::Arc;

use kafka_protocol::error::ResponseError;
use tokio_util::sync::CancellationToken;

use crate::broker::Broker;
use crate::error::BrokerError;
use crate::publish::NewRecord;
use crate::replication::cluster_messages::unknown_to_the_leader;
use crate::security::audit::{AuditEvent, AuditLog};

impl Broker {
    /// Starts producing the audit events to their topic, if `audit_log_topic` is set.
    pub(crate) fn spawn_audit_topic(self: &Arc<Self>, shutdown: CancellationToken) {
        let Some((topic, mut events)) = self.audit.take_topic_events() else {
            return;
        };
        let broker = Arc::clone(self);
        tokio::spawn(async move {
            let mut warned_ms = i64::MIN;
            loop {
                let first = tokio::select! {
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
                let batch = waiting_batch(&broker.audit, first, &mut events);
                let count = batch.len();
                if count == 0 {
                    continue;
                }
                // Made when the first event comes, and again if it was deleted meanwhile
                // (a lookup in the metadata when it exists).
                let written = match broker.ensure_audit_topic(&topic).await {
                    Ok(()) => broker.write_audit_records(&topic, batch).await,
                    Err(e) => Err((e, count)),
                };
                if let Err((e, lost)) = written {
                    broker.audit.count_dropped_n(lost);
                    let now = broker.now_ms();
                    if now.saturating_sub(warned_ms) >= 30_000 {
                        warned_ms = now;
                        tracing::warn!(%topic, error = %e, lost, "audit events could not be written to their topic (dropped and counted; said at most every 30 s)");
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

    /// Writes `values` (events as JSON) as one batch; when the topic refuses it as too large
    /// (or the leader, of an earlier version, cannot read a batch), one at a time, stopping at
    /// the first refusal. On failure: the error and how many events were not written (or not
    /// known to be: a leader that did not answer in time may still commit them).
    async fn write_audit_records(
        &self,
        topic: &str,
        values: Vec<Vec<u8>>,
    ) -> Result<(), (BrokerError, usize)> {
        let count = values.len();
        let records: Vec<NewRecord> = values
            .into_iter()
            .map(|value| self.audit_record(value))
            .collect();
        match self
            .publish_batch_at_leader(topic, 0, records.clone())
            .await
        {
            Ok(_) => Ok(()),
            Err(e)
                if count > 1
                    && (e.response_error() == ResponseError::MessageTooLarge
                        || unknown_to_the_leader(&e)) =>
            {
                for (written, record) in records.into_iter().enumerate() {
                    if let Err(e) = self.publish_at_leader(topic, 0, record).await {
                        return Err((e, count - written));
                    }
                }
                Ok(())
            }
            Err(e) => Err((e, count)),
        }
    }

    fn audit_record(&self, value: Vec<u8>) -> NewRecord {
        NewRecord {
            key: Some(bytes::Bytes::from(self.config.node_id.to_string())),
            value: Some(bytes::Bytes::from(value)),
            headers: Vec::new(),
            timestamp_ms: None,
        }
    }
}

/// At most this many events are written as one batch.
pub const BATCH_EVENTS: usize = 2_000;
/// A batch stops growing once its events' JSON reaches this size (under Kafka's default
/// `max.message.bytes`, 1 MiB).
pub const BATCH_BYTES: usize = 512 * 1024;

/// `first` and the events queued behind it as JSON, up to [`BATCH_EVENTS`] or [`BATCH_BYTES`].
/// An event that cannot be put in JSON (none can fail today) is counted as dropped.
fn waiting_batch(
    audit: &AuditLog,
    first: AuditEvent,
    events: &mut tokio::sync::mpsc::Receiver<AuditEvent>,
) -> Vec<Vec<u8>> {
    let mut batch = Vec::new();
    let mut bytes = 0;
    let mut next = Some(first);
    while let Some(event) = next {
        match serde_json::to_vec(&event) {
            Ok(value) => {
                bytes += value.len();
                batch.push(value);
            }
            Err(_) => audit.count_dropped(),
        }
        if batch.len() >= BATCH_EVENTS || bytes >= BATCH_BYTES {
            break;
        }
        next = events.try_recv().ok();
    }
    batch
}

#[cfg(test)]
mod tests {
    use super::*;

    fn denial(name: &str) -> AuditEvent {
        AuditEvent::AuthorizationDenied {
            time_ms: 1,
            principal: "User:mallory".into(),
            peer: "127.0.0.1:1".into(),
            api: "Metadata".into(),
            operation: "Describe",
            resource_type: "topic",
            resource_name: name.into(),
        }
    }

    #[tokio::test]
    async fn the_queued_events_are_taken_in_order_up_to_the_batch_limit() {
        let (sender, mut receiver) = tokio::sync::mpsc::channel(BATCH_EVENTS * 2);
        for i in 0..BATCH_EVENTS + 5 {
            sender.try_send(denial(&format!("t{i}"))).expect("queued");
        }
        let audit = AuditLog::off();
        let first = waiting_batch(&audit, denial("first"), &mut receiver);
        assert_eq!(first.len(), BATCH_EVENTS);
        let names: Vec<String> = first[..3]
            .iter()
            .map(|v| {
                let e: serde_json::Value = serde_json::from_slice(v).expect("json");
                e["resource_name"].as_str().unwrap_or_default().to_string()
            })
            .collect();
        assert_eq!(names, ["first", "t0", "t1"]);
        // The rest (6 events) comes with the next one.
        let second = waiting_batch(&audit, denial("next"), &mut receiver);
        assert_eq!(second.len(), 7);
        assert!(receiver.try_recv().is_err());
    }

    #[tokio::test]
    async fn a_batch_stops_growing_at_its_byte_limit() {
        let (sender, mut receiver) = tokio::sync::mpsc::channel(BATCH_EVENTS);
        let long = "x".repeat(BATCH_BYTES / 4);
        for _ in 0..10 {
            sender.try_send(denial(&long)).expect("queued");
        }
        let batch = waiting_batch(&AuditLog::off(), denial(&long), &mut receiver);
        // Each event is a little over a quarter of the limit: the fourth one passes it.
        assert_eq!(batch.len(), 4);
        assert!(audit_bytes(&batch) >= BATCH_BYTES);
    }

    #[tokio::test]
    async fn a_batch_too_large_for_the_topic_is_written_one_event_at_a_time() {
        let (_dir, broker) = crate::test_support::broker_with_records("other", 0);
        let configs = BTreeMap::from([("max.message.bytes".to_string(), "1000".to_string())]);
        broker
            .topics()
            .create("audit", 1, configs, false)
            .expect("create the topic");
        // Three events of ~300 bytes fit one by one, not together.
        let values: Vec<Vec<u8>> = (0..3)
            .map(|i| serde_json::to_vec(&denial(&format!("{i}{}", "x".repeat(100)))))
            .collect::<Result<_, _>>()
            .expect("json");
        assert!(values.iter().all(|v| v.len() < 900));
        assert!(matches!(
            broker.write_audit_records("audit", values.clone()).await,
            Ok(())
        ));
        let next = broker
            .publish_batch("audit", 0, vec![broker.audit_record(values[0].clone())])
            .expect("publish");
        assert_eq!(next.offset, 3, "the three events were written, one each");
        // One that is too large on its own is not written, and counted as not written.
        let huge = serde_json::to_vec(&denial(&"y".repeat(2_000))).expect("json");
        let refused = broker
            .write_audit_records("audit", vec![values[1].clone(), huge, values[2].clone()])
            .await;
        assert!(matches!(refused, Err((_, 2))), "{refused:?}");
    }

    fn audit_bytes(batch: &[Vec<u8>]) -> usize {
        batch.iter().map(Vec::len).sum()
    }
}
