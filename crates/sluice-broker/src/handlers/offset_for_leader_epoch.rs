//! OffsetForLeaderEpoch (KIP-101, KIP-320): where a leader epoch ended in the leader's log — the
//! largest epoch at or below the one asked that wrote to it, and the first offset after it (the
//! log end for the newest). A consumer that saw records of epoch E asks after a leader change:
//! an end offset below its position means the log was truncated under it. Only the leader
//! answers; a `current_leader_epoch` older than the leader's is FENCED_LEADER_EPOCH (the client
//! refreshes its metadata), a newer one UNKNOWN_LEADER_EPOCH (this node has not caught up).

use kafka_protocol::error::ResponseError;
use kafka_protocol::messages::offset_for_leader_epoch_response::{
    EpochEndOffset, OffsetForLeaderTopicResult,
};
use kafka_protocol::messages::{
    OffsetForLeaderEpochRequest, OffsetForLeaderEpochResponse, ResponseKind,
};
use sluice_log::{LeaderEpoch, Offset};

use crate::broker::Broker;
use crate::handlers::{Call, Versions};
use crate::partition::Partition;
use sluice_auth::acl::Operation;

pub const VERSIONS: Versions = Versions::new(2, 4);

pub fn handle(
    broker: &Broker,
    mut request: OffsetForLeaderEpochRequest,
    call: &Call,
) -> ResponseKind {
    // A follower's request (replica id >= 0): ClusterAction; a consumer's: Describe per topic.
    let authz = call.authz(broker);
    let follower = request.replica_id.0 >= 0;
    let follower_denied = follower && !authz.cluster(Operation::ClusterAction);
    let denied: Vec<OffsetForLeaderTopicResult> = super::take_denied(&mut request.topics, |t| {
        !follower_denied && (follower || authz.topic(Operation::Describe, &t.topic))
    })
    .into_iter()
    .map(|t| {
        let error = if follower_denied {
            ResponseError::ClusterAuthorizationFailed
        } else {
            ResponseError::TopicAuthorizationFailed
        };
        OffsetForLeaderTopicResult::default()
            .with_topic(t.topic)
            .with_partitions(
                t.partitions
                    .iter()
                    .map(|p| {
                        EpochEndOffset::default()
                            .with_partition(p.partition)
                            .with_error_code(error.code())
                            .with_leader_epoch(-1)
                            .with_end_offset(-1)
                    })
                    .collect(),
            )
    })
    .collect();
    let mut response = handle_authorized(broker, request);
    if let ResponseKind::OffsetForLeaderEpoch(r) = &mut response {
        r.topics.extend(denied);
    }
    response
}

fn handle_authorized(broker: &Broker, request: OffsetForLeaderEpochRequest) -> ResponseKind {
    let topics = request
        .topics
        .iter()
        .map(|t| {
            let topic = broker.topics().get(&t.topic);
            let partitions = t
                .partitions
                .iter()
                .map(|asked| {
                    let base = EpochEndOffset::default()
                        .with_partition(asked.partition)
                        .with_leader_epoch(-1)
                        .with_end_offset(-1);
                    let answer = match topic.as_ref().and_then(|x| x.partition(asked.partition)) {
                        None if broker.partition_exists(&t.topic, asked.partition) => {
                            Err(ResponseError::NotLeaderOrFollower)
                        }
                        None => Err(ResponseError::UnknownTopicOrPartition),
                        Some(p) if !p.progress().leading => Err(ResponseError::NotLeaderOrFollower),
                        Some(p) => p
                            .check_current_epoch(asked.current_leader_epoch)
                            .map(|()| end_of(&p, asked.leader_epoch)),
                    };
                    match answer {
                        Ok(Some((epoch, end))) => {
                            base.with_leader_epoch(epoch.0).with_end_offset(end.0)
                        }
                        // Older than anything here or newer than the log: Kafka's undefined
                        // epoch and offset.
                        Ok(None) => base,
                        Err(e) => base.with_error_code(e.code()),
                    }
                })
                .collect();
            OffsetForLeaderTopicResult::default()
                .with_topic(t.topic.clone())
                .with_partitions(partitions)
        })
        .collect();
    ResponseKind::OffsetForLeaderEpoch(OffsetForLeaderEpochResponse::default().with_topics(topics))
}

/// Where `epoch` ended in the leader `p`'s log. An epoch of the leader's it has not written in
/// yet (nothing since the one before) ends at the log end.
fn end_of(p: &Partition, epoch: i32) -> Option<(LeaderEpoch, Offset)> {
    let current = p.leader_epoch().0;
    match p.end_offset_for_epoch(LeaderEpoch(epoch)) {
        None if epoch <= current => Some((LeaderEpoch(current), p.fetch_position().0)),
        found => found,
    }
}
