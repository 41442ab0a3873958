//! Fetch: stored batches, unchanged, below each partition's high watermark; a long poll
//! (`max_wait_ms`, `min_bytes`) woken by appends; byte limits per response (`max_bytes`) and
//! per partition (`partition_max_bytes`), with the first batch always returned whole so that a
//! consumer makes progress (KIP-74).
//!
//! Fetch sessions (KIP-227, `fetch_session.rs`): from Fetch v7 a consumer may open a session
//! and then send and receive only what changed.

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use futures::future::select_all;
use kafka_protocol::error::ResponseError;
use kafka_protocol::messages::fetch_request::FetchTopic;
use kafka_protocol::messages::fetch_response::{
    AbortedTransaction, FetchableTopicResponse, PartitionData,
};
use kafka_protocol::messages::{FetchRequest, FetchResponse, ResponseKind, TopicName};
use kafka_protocol::protocol::StrBytes;
use sluice_auth::acl::Operation;
use sluice_log::Offset;
use sluice_wire::Reply;
use tokio::sync::watch;
use uuid::Uuid;

use crate::broker::Broker;
use crate::error::log_error;
use crate::fetch_session::{FetchPosition, PartitionKey, Plan};
use crate::handlers::{Call, Versions};
use crate::partition::{Partition, Progress};
use crate::quotas::throttle::QuotaKind;
use crate::security::Authz;

/// What a fetch asked of one partition, resolved against this broker.
struct Wanted {
    index: i32,
    fetch_offset: Offset,
    max_bytes: usize,
    current_leader_epoch: i32,
    target: Result<Arc<Partition>, ResponseError>,
    /// Another replica to read from (KIP-392): answered with no records and its id.
    preferred_replica: Option<i32>,
}

struct WantedTopic {
    name: TopicName,
    id: Uuid,
    partitions: Vec<Wanted>,
}

const READ_COMMITTED: i8 = 1;

pub const VERSIONS: Versions = Versions::new(4, 17);

/// The most one Fetch answer holds (Kafka's `fetch.max.bytes` default, 55 MiB); the first
/// batch still goes whole when it is larger (KIP-74).
const FETCH_MAX_BYTES: usize = 55 * 1024 * 1024;

pub fn handle(broker: &Broker, request: FetchRequest, call: &Call) -> Reply {
    let version = call.version;
    let replica = if version >= 15 {
        request.replica_state.replica_id.0
    } else {
        request.replica_id.0
    };
    if replica >= 0 {
        // A follower's fetch reads everything and moves the high watermark: Kafka's
        // ClusterAction on the cluster (grant it to the nodes' principal and hosts).
        if !call.authz(broker).cluster(Operation::ClusterAction) {
            return Reply::Ready(Box::new(ResponseKind::Fetch(
                FetchResponse::default()
                    .with_error_code(ResponseError::ClusterAuthorizationFailed.code()),
            )));
        }
        if broker.replication().is_none() {
            return Reply::Ready(Box::new(ResponseKind::Fetch(
                FetchResponse::default().with_error_code(ResponseError::NotLeaderOrFollower.code()),
            )));
        }
        return crate::replication::leader_fetch::serve(
            broker,
            request,
            sluice_cluster::NodeId(replica),
            version,
        );
    }
    let named = named_partitions(request.topics);
    let plan = if version >= 7 {
        let forgotten = request
            .forgotten_topics_data
            .iter()
            .flat_map(|t| {
                t.partitions.iter().map(|&partition| PartitionKey {
                    topic_id: t.topic_id,
                    topic: t.topic.to_string(),
                    partition,
                })
            })
            .collect();
        broker.fetch_sessions.begin(
            request.session_id,
            request.session_epoch,
            &named,
            forgotten,
            broker.now_ms(),
        )
    } else {
        Plan::Sessionless
    };
    let (session, incremental, to_read) = match plan {
        Plan::Sessionless => (0, false, named),
        Plan::New(id) => (id, false, named),
        Plan::Incremental(id, partitions) => (id, true, partitions),
        Plan::Refused(error) => {
            return Reply::Ready(Box::new(ResponseKind::Fetch(
                FetchResponse::default()
                    .with_error_code(error.code())
                    .with_session_id(0),
            )))
        }
    };
    let rack = (version >= 11).then_some(request.rack_id.as_str());
    let topics = resolve(broker, &call.authz(broker), to_read, version, rack);
    // The consumer's byte-rate quota counts what it is sent, once the answer is ready.
    let quota = broker.has_client_quotas().then(|| {
        (
            call.session.principal().map(|p| p.name).unwrap_or_default(),
            call.client_id.to_string(),
            call.session.mute_handle(),
        )
    });
    let owner = quota.as_ref().and_then(|_| broker.arc());
    let sessions = Arc::clone(&broker.fetch_sessions);
    // At most Kafka's default `fetch.max.bytes` in one answer, whatever the client asks (a
    // consumer asking for 2 GiB would have the broker read that into memory); a `min_bytes`
    // above it would make every long poll wait its whole time.
    let max_bytes = if version >= 3 {
        usize::try_from(request.max_bytes).unwrap_or(0)
    } else {
        usize::MAX
    }
    .min(FETCH_MAX_BYTES);
    let min_bytes = usize::try_from(request.min_bytes)
        .unwrap_or(0)
        .min(max_bytes);
    let max_wait = Duration::from_millis(u64::try_from(request.max_wait_ms).unwrap_or(0));
    let read_committed = request.isolation_level == READ_COMMITTED;
    Reply::Later(Box::pin(async move {
        let deadline = tokio::time::Instant::now() + max_wait;
        // Subscribe before the first read so that no append between reading and waiting is missed.
        let mut watchers: Vec<watch::Receiver<Progress>> = topics
            .iter()
            .flat_map(|t| t.partitions.iter())
            .filter_map(|w| w.target.as_ref().ok().map(|p| p.subscribe()))
            .collect();
        let mut response = loop {
            for w in &mut watchers {
                w.mark_unchanged();
            }
            let (response, bytes, errors) = gather(&topics, max_bytes, read_committed, version);
            let now = tokio::time::Instant::now();
            if bytes >= min_bytes || errors || now >= deadline || watchers.is_empty() {
                break response;
            }
            let changed = select_all(watchers.iter_mut().map(|w| Box::pin(w.changed())));
            if tokio::time::timeout_at(deadline, changed).await.is_err() {
                break gather(&topics, max_bytes, read_committed, version).0;
            }
        };
        if session != 0 {
            sessions.finish(session, incremental, &mut response, |t, partition| {
                PartitionKey {
                    topic_id: t.topic_id,
                    topic: t.topic.to_string(),
                    partition,
                }
            });
        }
        if let (Some((user, client_id, mute)), Some(owner)) = (&quota, &owner) {
            let bytes: usize = response
                .responses
                .iter()
                .flat_map(|t| &t.partitions)
                .map(|p| p.records.as_ref().map_or(0, |r| r.len()))
                .sum();
            let ms = owner.throttle(user, client_id, mute, QuotaKind::Fetch, bytes as u64);
            response.throttle_time_ms = response.throttle_time_ms.max(ms);
        }
        Some(ResponseKind::Fetch(response))
    }))
}

/// The partitions a request names, in its order (by topic id from v13, by name before).
fn named_partitions(topics: Vec<FetchTopic>) -> Vec<(PartitionKey, FetchPosition)> {
    topics
        .into_iter()
        .flat_map(|t| {
            let (id, name) = (t.topic_id, t.topic.to_string());
            t.partitions.into_iter().map(move |p| {
                (
                    PartitionKey {
                        topic_id: id,
                        topic: name.clone(),
                        partition: p.partition,
                    },
                    FetchPosition {
                        fetch_offset: p.fetch_offset,
                        max_bytes: p.partition_max_bytes,
                        current_leader_epoch: p.current_leader_epoch,
                    },
                )
            })
        })
        .collect()
}

/// Resolves the partitions to read against this broker, grouped by topic in their order.
/// `rack`: the consumer's `client.rack` (Fetch v11+), for reading from a follower.
fn resolve(
    broker: &Broker,
    authz: &Authz,
    partitions: Vec<(PartitionKey, FetchPosition)>,
    version: i16,
    rack: Option<&str>,
) -> Vec<WantedTopic> {
    let mut topics: Vec<WantedTopic> = Vec::new();
    let mut found = Err(ResponseError::UnknownTopicOrPartition);
    for (key, position) in partitions {
        let same = topics
            .last()
            .is_some_and(|t| t.id == key.topic_id && t.name.as_str() == key.topic);
        if !same {
            found = if version >= 13 {
                broker
                    .topics()
                    .get_by_id(key.topic_id)
                    .ok_or(ResponseError::UnknownTopicId)
            } else {
                broker
                    .topics()
                    .get(&key.topic)
                    .ok_or(ResponseError::UnknownTopicOrPartition)
            };
            // Read on the topic, checked on every fetch (also of a session's partitions, so a
            // revoked ACL takes effect at the next fetch); an unknown topic id stays unknown.
            let name = found.as_ref().map_or(key.topic.as_str(), |t| &*t.name);
            let unknown_id = matches!(found, Err(ResponseError::UnknownTopicId));
            if !unknown_id && !authz.topic(Operation::Read, name) {
                found = Err(ResponseError::TopicAuthorizationFailed);
            }
            topics.push(WantedTopic {
                name: TopicName(StrBytes::from_string(key.topic.clone())),
                id: key.topic_id,
                partitions: Vec::new(),
            });
        }
        let target = found.as_ref().map_err(|e| *e).and_then(|t| {
            t.partition(key.partition)
                .ok_or_else(|| t.missing_partition_error(key.partition))
        });
        let fetch_offset = Offset(position.fetch_offset);
        let preferred_replica = match (&target, rack) {
            (Ok(p), Some(rack)) => broker.preferred_read_replica(p, fetch_offset, rack),
            _ => None,
        };
        if let Some(topic) = topics.last_mut() {
            topic.partitions.push(Wanted {
                index: key.partition,
                fetch_offset,
                max_bytes: usize::try_from(position.max_bytes).unwrap_or(0),
                current_leader_epoch: position.current_leader_epoch,
                target,
                preferred_replica,
            });
        }
    }
    topics
}

/// Reads every wanted partition once; returns the response, its data bytes, and whether any
/// partition had an error or a preferred replica (which end a long poll at once).
fn gather(
    topics: &[WantedTopic],
    max_bytes: usize,
    read_committed: bool,
    version: i16,
) -> (FetchResponse, usize, bool) {
    let mut remaining = max_bytes;
    let mut total = 0usize;
    let mut errors = false;
    let responses = topics
        .iter()
        .map(|topic| {
            let partitions = topic
                .partitions
                .iter()
                .map(|w| {
                    let data = read_one(w, &mut remaining, total == 0, read_committed, version);
                    total += data.records.as_ref().map_or(0, Bytes::len);
                    errors |= data.error_code != 0 || data.preferred_read_replica.0 >= 0;
                    data
                })
                .collect();
            FetchableTopicResponse::default()
                .with_topic(if version >= 13 {
                    TopicName::default()
                } else {
                    topic.name.clone()
                })
                .with_topic_id(if version >= 13 { topic.id } else { Uuid::nil() })
                .with_partitions(partitions)
        })
        .collect();
    (
        FetchResponse::default()
            .with_session_id(0)
            .with_responses(responses),
        total,
        errors,
    )
}

fn read_one(
    wanted: &Wanted,
    remaining: &mut usize,
    first: bool,
    read_committed: bool,
    version: i16,
) -> PartitionData {
    let base = PartitionData::default()
        .with_partition_index(wanted.index)
        .with_high_watermark(-1)
        .with_last_stable_offset(-1)
        .with_log_start_offset(-1)
        .with_preferred_read_replica(kafka_protocol::messages::BrokerId(-1))
        .with_aborted_transactions(read_committed.then(Vec::new));
    let partition = match &wanted.target {
        Ok(p) => p,
        Err(e) => return base.with_error_code(e.code()),
    };
    if let Err(e) = partition.check_current_epoch(wanted.current_leader_epoch) {
        return base.with_error_code(e.code());
    }
    // Before KIP-392 (v11) a consumer reads from the leader only, as in Kafka.
    if version < 11 && !partition.progress().leading {
        return base.with_error_code(ResponseError::NotLeaderOrFollower.code());
    }
    if let Some(replica) = wanted.preferred_replica {
        let progress = partition.progress();
        return base
            .with_high_watermark(progress.visible.0)
            .with_last_stable_offset(progress.stable.0)
            .with_log_start_offset(progress.log_start.0)
            .with_preferred_read_replica(kafka_protocol::messages::BrokerId(replica))
            .with_records(Some(Bytes::new()));
    }
    let limit = wanted.max_bytes.min(*remaining);
    let result = partition
        .read_isolated(wanted.fetch_offset, limit, first, read_committed)
        .and_then(|(plan, progress)| Ok((partition.load(&plan)?, progress)));
    let progress = partition.progress();
    let base = base
        .with_high_watermark(progress.visible.0)
        .with_last_stable_offset(progress.stable.0)
        .with_log_start_offset(progress.log_start.0);
    match result {
        Ok((bytes, read_at)) => {
            // The transactions aborted in what a read_committed consumer may have been given,
            // so that it drops their records.
            let base = if read_committed && !bytes.is_empty() {
                base.with_aborted_transactions(Some(
                    partition
                        .aborted_between(wanted.fetch_offset, read_at.stable)
                        .into_iter()
                        .map(|a| {
                            AbortedTransaction::default()
                                .with_producer_id(kafka_protocol::messages::ProducerId(
                                    a.producer_id,
                                ))
                                .with_first_offset(a.first_offset.0)
                        })
                        .collect(),
                ))
            } else {
                base
            };
            *remaining = remaining.saturating_sub(bytes.len());
            let counters = partition.counters();
            counters
                .fetched_bytes
                .fetch_add(bytes.len() as u64, std::sync::atomic::Ordering::Relaxed);
            counters
                .fetched_records
                .fetch_add(count_records(&bytes), std::sync::atomic::Ordering::Relaxed);
            base.with_records(Some(bytes))
        }
        Err(e) => {
            if e.is_storage() {
                tracing::warn!(?partition, error = %e, "fetch failed");
            }
            base.with_error_code(log_error(&e).code())
                .with_records(Some(Bytes::new()))
        }
    }
}

/// The records in a run of batches, from their headers (a batch's record count is the 4 bytes
/// at 57; a partial batch at the end is not counted).
fn count_records(bytes: &[u8]) -> u64 {
    let mut total = 0u64;
    let mut at = 0usize;
    while let Some(header) = bytes.get(at..at + 61) {
        let length = i32::from_be_bytes([header[8], header[9], header[10], header[11]]);
        let Ok(length) = usize::try_from(length) else {
            break;
        };
        let count = i32::from_be_bytes([header[57], header[58], header[59], header[60]]);
        if at + 12 + length > bytes.len() {
            break;
        }
        total += u64::try_from(count).unwrap_or(0);
        at += 12 + length;
    }
    total
}
