//! A follower's copy loop: one task per leader node, one Kafka Fetch at a time for every
//! partition this node follows from that leader (so one long poll per node pair, however many
//! partitions), as Kafka's replica fetcher does.
//!
//! ```text
//!   fetch(offset = log end, last fetched epoch)  ──▶ leader
//!   ◀── batches + high watermark   → append as they are (same offsets, same bytes)
//!   ◀── diverging epoch (E, end)   → truncate to min(end, our end of E), fetch again
//! ```
//! Under `flush.mode=sync` the next fetch goes out only once what was copied is fsynced: the
//! fetch offset is what the leader counts this follower as having, so it must survive a crash.

use std::collections::HashSet;
use std::sync::Arc;
use std::time::Duration;

use kafka_protocol::error::ResponseError;
use kafka_protocol::messages::fetch_request::{FetchPartition, FetchTopic};
use kafka_protocol::messages::{BrokerId, FetchRequest, TopicName};
use kafka_protocol::protocol::StrBytes;
use sluice_client::{ClientError, Connection};
use sluice_cluster::NodeId;
use sluice_log::{FlushMode, LeaderEpoch, Offset};
use tokio_util::sync::CancellationToken;

use super::throttle::Side;
use crate::broker::Broker;
use crate::partition::Partition;

/// How long the leader may hold a fetch with nothing new (`replica.fetch.wait.max.ms`).
const MAX_WAIT_MS: i32 = 500;
const PARTITION_MAX_BYTES: i32 = 1 << 20;
const MAX_BYTES: i32 = 16 << 20;
const RETRY: Duration = Duration::from_millis(100);
/// After the leader refused the whole fetch (e.g. CLUSTER_AUTHORIZATION_FAILED: the ACLs do
/// not give this node ClusterAction), as Kafka's `replica.fetch.backoff.ms`.
const REFUSED_BACKOFF: Duration = Duration::from_secs(1);

/// Copies from `leader` until this node follows nothing there any more.
pub(super) async fn run(
    broker: Arc<Broker>,
    leader: NodeId,
    addr: String,
    inter_broker: Arc<super::inter_broker::InterBroker>,
    shutdown: CancellationToken,
) {
    let me = broker.node_id();
    let mut connection: Option<Connection> = None;
    // The error of the last fetch the leader refused whole, while it keeps refusing.
    let mut refused: Option<i16> = None;
    // Why the leader last refused this follower's connection, while it keeps refusing.
    let mut refused_connection: Option<String> = None;
    let mut pace = super::recovery_pace::RecoveryPace::default();
    tracing::info!(%leader, %addr, "replica fetcher started");
    loop {
        if shutdown.is_cancelled() {
            return;
        }
        let partitions = broker.followed_from(leader);
        if partitions.is_empty() {
            tracing::info!(%leader, "replica fetcher stopped: nothing followed there");
            return;
        }
        if connection.is_none() {
            match Connection::connect_with(
                &addr,
                &format!("sluice-replica-{me}"),
                Duration::from_secs(10),
                &inter_broker.security(),
            )
            .await
            {
                Ok(c) => {
                    connection = Some(c);
                    refused_connection = None;
                }
                Err(e @ (ClientError::Security(_) | ClientError::Kafka { .. })) => {
                    // A TLS handshake or a SASL login the leader refused: no network blip.
                    // Logged once per change of reason, not at every retry.
                    let reason = e.to_string();
                    if refused_connection.as_ref() != Some(&reason) {
                        tracing::warn!(%leader, %addr, error = %reason, "the leader refused this follower's connection");
                        refused_connection = Some(reason);
                    }
                    pause(&shutdown, REFUSED_BACKOFF).await;
                    continue;
                }
                Err(e) => {
                    tracing::debug!(%leader, error = %e, "cannot reach the leader");
                    pause(&shutdown, RETRY).await;
                    continue;
                }
            }
        }
        let Some(conn) = connection.as_mut() else {
            continue;
        };
        // Replicas out of the ISR that the topic throttles copy within this node's
        // follower rate: left out of the fetch while the rate is used up.
        let throttled: Vec<bool> = partitions
            .iter()
            .map(|(name, p)| broker.throttled(Side::Follower, name, p.index, NodeId(me)))
            .collect();
        let allowance = if throttled.contains(&true) {
            broker.throttles.follower.allowance(broker.liveness_ms())
        } else {
            None
        };
        // Every replica out of the ISR also copies within the recovery cap (its own bucket
        // per leader node, shared out among them, and a pace that rises when their partitions
        // outgrow it).
        let recovering = broker.recovering(&partitions);
        let recovering_keys: HashSet<(Arc<str>, i32)> = partitions
            .iter()
            .zip(&recovering)
            .filter(|(_, r)| **r)
            .map(|((name, p), _)| (Arc::clone(name), p.index))
            .collect();
        let recovery_allowance = if recovering_keys.is_empty() {
            pace.reset();
            None
        } else {
            pace.keep_only(&recovering_keys);
            let now = broker.liveness_ms();
            if let Some(boost) = pace.tick(now) {
                tracing::info!(
                    %leader,
                    boost,
                    "the recovering replicas' partitions grow faster than the recovery cap \
                     copies: copying {boost} times faster"
                );
            }
            // Each gets its share, at least a byte (the leader answers at least one batch):
            // a share of 0 while the bucket holds something would leave them all out.
            pace.allowance(broker.throttles.recovery_rate(), now)
                .map(|a| {
                    if a == 0 {
                        0
                    } else {
                        (a / recovering_keys.len()).max(1)
                    }
                })
        };
        let held = |gated: bool, allowed: Option<usize>| gated && allowed == Some(0);
        let recovery_held = !recovering_keys.is_empty() && recovery_allowance == Some(0);
        let (partitions, gates): (Vec<_>, Vec<(bool, bool)>) = partitions
            .into_iter()
            .zip(throttled.into_iter().zip(recovering))
            .filter(|(_, (t, r))| !held(*t, allowance) && !held(*r, recovery_allowance))
            .unzip();
        if partitions.is_empty() {
            pause(&shutdown, RETRY).await;
            continue;
        }
        let cap = |gated: bool, allowed: Option<usize>| match allowed {
            Some(allowed) if gated => i32::try_from(allowed).unwrap_or(i32::MAX),
            _ => PARTITION_MAX_BYTES,
        };
        let limits: Vec<i32> = gates
            .iter()
            .map(|(t, r)| {
                PARTITION_MAX_BYTES
                    .min(cap(*t, allowance))
                    .min(cap(*r, recovery_allowance))
            })
            .collect();
        // Under flush.mode=sync the fetch offset is what the leader counts this follower as
        // holding for certain: what it wrote as a leader and has not fsynced yet (it just
        // became a follower) is fsynced before it is claimed (found by the simulation).
        for (_, p) in partitions
            .iter()
            .filter(|(_, p)| p.config().flush == FlushMode::Sync)
        {
            let (end, _) = p.fetch_position();
            if p.progress().durable < end {
                tokio::select! {
                    () = shutdown.cancelled() => return,
                    _ = p.wait_durable(end) => {}
                }
            }
        }
        // The epoch each partition is fetched in: answers apply only if it still holds.
        let epochs: Vec<i32> = partitions.iter().map(|(_, p)| p.leader_epoch().0).collect();
        // While the cap holds recovering partitions out, the others' long poll is kept short,
        // so that they are asked for again as soon as the bucket has refilled.
        let max_wait = if recovery_held {
            super::recovery_pace::HELD_WAIT_MS
        } else {
            MAX_WAIT_MS
        };
        let request = fetch_request(me, &partitions, &epochs, &limits, max_wait);
        let response = tokio::select! {
            () = shutdown.cancelled() => return,
            r = conn.call(&request, 12, 12) => r,
        };
        let response = match response {
            Ok(r) => r,
            Err(e) => {
                tracing::debug!(%leader, error = %e, "replica fetch failed");
                connection = None;
                pause(&shutdown, RETRY).await;
                continue;
            }
        };
        if response.error_code != 0 {
            let error = ResponseError::try_from_code(response.error_code);
            // Logged once per change of answer, not once a second.
            if refused != Some(response.error_code) {
                tracing::warn!(
                    %leader,
                    error = ?error,
                    code = response.error_code,
                    "the leader refused this node's replica fetch; retrying every second \
                     (with the authorizer on, the nodes need ClusterAction on the cluster)"
                );
                refused = Some(response.error_code);
            }
            pause(&shutdown, REFUSED_BACKOFF).await;
            continue;
        }
        if refused.take().is_some() {
            tracing::info!(%leader, "the leader serves this node's replica fetch again");
        }
        let mut backoff = false;
        for topic in response.responses {
            for data in topic.partitions {
                let Some(at) = partitions.iter().position(|(name, p)| {
                    **name == *topic.topic.as_str() && p.index == data.partition_index
                }) else {
                    continue;
                };
                let (throttled, recovering) = gates[at];
                let bytes = data.records.as_ref().map_or(0, |r| r.len());
                if throttled {
                    broker.throttles.follower.spend(bytes);
                }
                let (high_watermark, answered) = (data.high_watermark, data.error_code == 0);
                let (name, p) = &partitions[at];
                let before = p.fetch_position().0;
                backoff |= !apply(p, leader, epochs[at], data).await;
                if recovering {
                    pace.spend(bytes);
                    // Records appended (a truncation or a jump to the leader's log start
                    // comes with an error code, or moves the end back: not counted).
                    if answered {
                        let end = p.fetch_position().0 .0;
                        pace.observe((Arc::clone(name), p.index), end - before.0, high_watermark);
                        // The cap (not a smaller KIP-73 limit) bounded this answer, and the
                        // partition is still behind: the cap held the copy back.
                        let cap_bound = recovery_allowance.is_some_and(|a| {
                            i64::try_from(a).unwrap_or(i64::MAX) < i64::from(PARTITION_MAX_BYTES)
                                && (!throttled || allowance.is_none_or(|k| a <= k))
                        });
                        if cap_bound && end < high_watermark {
                            pace.cut_short();
                        }
                    }
                }
            }
        }
        if backoff {
            pause(&shutdown, RETRY).await;
        }
    }
}

async fn pause(shutdown: &CancellationToken, how_long: Duration) {
    tokio::select! {
        () = shutdown.cancelled() => {}
        () = tokio::time::sleep(how_long) => {}
    }
}

fn fetch_request(
    me: i32,
    partitions: &[(Arc<str>, Arc<Partition>)],
    epochs: &[i32],
    limits: &[i32],
    max_wait_ms: i32,
) -> FetchRequest {
    let mut topics: Vec<FetchTopic> = Vec::new();
    for (((name, p), current), limit) in partitions.iter().zip(epochs).zip(limits) {
        let (end, epoch) = p.fetch_position();
        let wanted = FetchPartition::default()
            .with_partition(p.index)
            .with_current_leader_epoch(*current)
            .with_fetch_offset(end.0)
            .with_last_fetched_epoch(epoch.map_or(-1, |e| e.0))
            .with_log_start_offset(p.progress().log_start.0)
            .with_partition_max_bytes(*limit);
        match topics.last_mut() {
            Some(t) if t.topic.as_str() == &**name => t.partitions.push(wanted),
            _ => topics.push(
                FetchTopic::default()
                    .with_topic(TopicName(StrBytes::from_string(name.to_string())))
                    .with_partitions(vec![wanted]),
            ),
        }
    }
    FetchRequest::default()
        .with_replica_id(BrokerId(me))
        .with_max_wait_ms(max_wait_ms)
        .with_min_bytes(1)
        .with_max_bytes(MAX_BYTES)
        .with_isolation_level(0)
        .with_session_id(0)
        .with_session_epoch(-1)
        .with_topics(topics)
}

/// Applies one partition's answer; false when the fetcher should back off a little.
async fn apply(
    p: &Arc<Partition>,
    leader: NodeId,
    epoch: i32,
    data: kafka_protocol::messages::fetch_response::PartitionData,
) -> bool {
    if data.error_code == ResponseError::OffsetOutOfRange.code() {
        let (end, _) = p.fetch_position();
        let leader_start = Offset(data.log_start_offset);
        if data.log_start_offset >= 0 && end < leader_start {
            if let Err(e) = p.restart_at(leader, epoch, leader_start) {
                tracing::error!(partition = ?p, error = %e, "cannot restart the log at the leader's start");
                return false;
            }
            return true;
        }
    }
    if data.error_code != 0 {
        let error = ResponseError::try_from_code(data.error_code);
        tracing::debug!(partition = ?p, ?error, "replica fetch refused");
        // NOT_LEADER, FENCED or UNKNOWN_LEADER_EPOCH: the metadata will catch up.
        return false;
    }
    if data.diverging_epoch.epoch >= 0 {
        let to = sluice_cluster::divergence::truncation_point(
            Offset(data.diverging_epoch.end_offset),
            p.end_offset_for_epoch(LeaderEpoch(data.diverging_epoch.epoch)),
        );
        if let Err(e) = p.truncate_to(leader, epoch, to) {
            tracing::error!(partition = ?p, error = %e, "cannot truncate to the leader's log");
            return false;
        }
        return true;
    }
    let bytes = data.records.unwrap_or_default();
    let high_watermark = Offset(data.high_watermark);
    if let Err(e) = p.append_replicated(leader, epoch, &bytes, high_watermark) {
        tracing::warn!(partition = ?p, error = %e, "cannot append what the leader sent");
        return false;
    }
    if data.log_start_offset > 0 {
        if let Err(e) = p.follow_log_start(leader, epoch, Offset(data.log_start_offset)) {
            tracing::warn!(partition = ?p, error = %e, "cannot move the log start to the leader's");
        }
    }
    if !bytes.is_empty() && p.config().flush == FlushMode::Sync {
        let (end, _) = p.fetch_position();
        if !p.wait_durable(end).await {
            return false;
        }
    }
    true
}
