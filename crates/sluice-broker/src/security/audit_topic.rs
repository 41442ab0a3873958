//! The audit log's topic sink (`audit_log_topic`): every security event as one record, the
//! event's JSON as the value and the node's id as the key, on partition 0 of a topic of one
//! partition (so the events of every node are in one order), with the cluster's default
//! replication factor. The topic is created when the first event comes. The events waiting
//! in the queue are written together, as one batch (up to [`BATCH_EVENTS`] events or
//! [`BATCH_BYTES`] of JSON): one commit round trip for all of them, so a flood of refused
//! requests reaches the topic instead of overflowing the queue. A batch the topic refuses as
//! too large is written again one event at a time. A record that cannot be written (no leader,
//! not committed in time) is dropped and counted as a full queue is, and said in the log at
//! most every 30 s; the next batch written begins with an `events_dropped` record saying how
//! many and since when (a lost batch's record included), and one is written within a second
//! of the loss when no event follows.

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
            let mut gap_check = tokio::time::interval(std::time::Duration::from_secs(1));
            gap_check.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            loop {
                let first = tokio::select! {
                    () = shutdown.cancelled() => {
                        // What is still queued is lost with the process: counted, not silent.
                        let mut lost = 0;
                        while events.try_recv().is_ok() {
                            lost += 1;
                        }
                        broker.audit.count_topic_dropped(lost);
                        return;
                    }
                    event = events.recv() => match event {
                        Some(event) => Some(event),
                        None => return,
                    },
                    _ = gap_check.tick() => None,
                };
                // A gap is written down first, with the events that follow it.
                let gap = broker.audit.take_topic_gap();
                let batch =
                    waiting_batch(&broker.audit, gap.iter().cloned().chain(first), &mut events);
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
                    let lost = count_lost(&broker.audit, gap.as_ref(), count, lost);
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

/// Counts the `lost` last records of a batch of `count` that could not be written (or are not
/// known to be). `gap`, the batch's `events_dropped` record, is its first: lost only if all
/// were, and then put back to be written with the next batch rather than counted (a batch
/// that timed out but was committed then says its gap twice).
/// Returns how many events were counted.
fn count_lost(audit: &AuditLog, gap: Option<&AuditEvent>, count: usize, lost: usize) -> usize {
    let gap_lost = match gap {
        Some(gap) if lost == count => {
            audit.restore_topic_gap(gap);
            1
        }
        _ => 0,
    };
    let events = lost.saturating_sub(gap_lost);
    audit.count_topic_dropped(events);
    events
}

/// `first` (the gap's entry, if one is due, and the event that woke the task) and the events
/// queued behind them as JSON, up to [`BATCH_EVENTS`] or [`BATCH_BYTES`]. An event that
/// cannot be put in JSON (none can fail today) is counted as dropped.
fn waiting_batch(
    audit: &AuditLog,
    first: impl IntoIterator<Item = AuditEvent>,
    events: &mut tokio::sync::mpsc::Receiver<AuditEvent>,
) -> Vec<Vec<u8>> {
    let mut batch = Vec::new();
    let mut bytes = 0;
    let mut first = first.into_iter();
    let mut next = first.next();
    while let Some(event) = next {
        match serde_json::to_vec(&event) {
            Ok(value) => {
                bytes += value.len();
                batch.push(value);
            }
            Err(_) => audit.count_topic_dropped(1),
        }
        if batch.len() >= BATCH_EVENTS || bytes >= BATCH_BYTES {
            break;
        }
        next = first.next().or_else(|| events.try_recv().ok());
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
        let first = waiting_batch(&audit, Some(denial("first")), &mut receiver);
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
        let second = waiting_batch(&audit, Some(denial("next")), &mut receiver);
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
        let batch = waiting_batch(&AuditLog::off(), Some(denial(&long)), &mut receiver);
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

    #[tokio::test]
    async fn a_gap_is_written_first_and_put_back_when_it_cannot_be() {
        let (sender, mut receiver) = tokio::sync::mpsc::channel(8);
        sender.try_send(denial("queued")).expect("queued");
        let audit = AuditLog::off();
        audit.count_topic_dropped(3);
        let gap = audit.take_topic_gap();
        assert!(audit.take_topic_gap().is_none(), "taken once");
        assert!(gap.is_some(), "a gap to write");
        let batch = waiting_batch(
            &audit,
            gap.iter().cloned().chain(Some(denial("first"))),
            &mut receiver,
        );
        let events: Vec<serde_json::Value> = batch
            .iter()
            .map(|v| serde_json::from_slice(v).expect("json"))
            .collect();
        assert_eq!(events.len(), 3);
        assert_eq!(events[0]["event"], "events_dropped");
        assert_eq!(events[0]["count"], 3);
        assert_eq!(events[1]["resource_name"], "first");
        assert_eq!(events[2]["resource_name"], "queued");
        // The whole batch lost: the gap is said again with the next one, with the two
        // events lost with it, and only those two are counted again.
        assert_eq!(count_lost(&audit, gap.as_ref(), 3, 3), 2);
        assert_eq!(audit.dropped(), 5);
        let again = audit.take_topic_gap();
        assert!(
            matches!(again, Some(AuditEvent::EventsDropped { count: 5, .. })),
            "{again:?}"
        );
        // Only the last event lost: the gap's record was written.
        assert_eq!(count_lost(&audit, again.as_ref(), 3, 1), 1);
        assert_eq!(audit.dropped(), 6);
        assert!(
            matches!(
                audit.take_topic_gap(),
                Some(AuditEvent::EventsDropped { count: 1, .. })
            ),
            "the lost event is a gap of its own"
        );
    }

    #[test]
    fn logins_and_refusals_leave_the_topic_queues_last_places_to_changes() {
        let audit = AuditLog::off().with_topic("audit");
        let (_, mut events) = audit.take_topic_events().expect("the topic's queue");
        for i in 0..10_000 {
            audit.record(denial(&format!("t{i}")));
        }
        audit.record(AuditEvent::QuotaChange {
            time_ms: 2,
            entity: "user=alice".into(),
            set: BTreeMap::from([("producer_byte_rate".to_string(), 1024.0)]),
            removed: Vec::new(),
            outcome: "success",
            by: "User:admin".into(),
            peer: "127.0.0.1:2".into(),
        });
        let reserved = crate::security::audit::RESERVED_FOR_CHANGES;
        assert_eq!(audit.dropped(), u64::try_from(reserved).expect("small"));
        let mut taken = Vec::new();
        while let Ok(event) = events.try_recv() {
            taken.push(event);
        }
        assert_eq!(taken.len(), 10_000 - reserved + 1);
        assert!(matches!(taken.last(), Some(AuditEvent::QuotaChange { .. })));
    }

    fn audit_bytes(batch: &[Vec<u8>]) -> usize {
        batch.iter().map(Vec::len).sum()
    }
}
