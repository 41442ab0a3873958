//! OffsetFetch: committed offsets of one group (v0-7) or several (v8+); -1 where none. With
//! `require_stable` (v7+, KIP-447) a partition whose offset an open transaction is about to
//! commit answers UNSTABLE_OFFSET_COMMIT, so that a new consumer does not start from an offset
//! that is about to move.

use kafka_protocol::messages::offset_fetch_response::{
    OffsetFetchResponseGroup, OffsetFetchResponsePartition, OffsetFetchResponsePartitions,
    OffsetFetchResponseTopic, OffsetFetchResponseTopics,
};
use kafka_protocol::messages::{OffsetFetchRequest, OffsetFetchResponse, ResponseKind, TopicName};

use kafka_protocol::ResponseError;
use sluice_auth::acl::{Operation, ResourceType};
use sluice_wire::Reply;

use super::{str_bytes, topic_name};
use crate::broker::Broker;
use crate::commit::Waits;
use crate::group::coordinator::Coordinator;
use crate::handlers::{Call, Versions};
use crate::txn::state::TxnState;

/// (topic, [(partition, offset, leader epoch, metadata)]) for the asked topics, or all.
type Fetched = Vec<(String, Vec<(i32, i64, i32, String)>)>;

fn fetch(
    coordinator: &Coordinator,
    group: &str,
    wanted: Option<Vec<(String, Vec<i32>)>>,
) -> Fetched {
    let committed = coordinator.committed(group);
    match wanted {
        Some(topics) => topics
            .into_iter()
            .map(|(topic, partitions)| {
                let rows = partitions
                    .into_iter()
                    .map(
                        |p| match committed.and_then(|c| c.get(&(topic.clone(), p))) {
                            Some(c) => (p, c.offset, c.leader_epoch, c.metadata.clone()),
                            None => (p, -1, -1, String::new()),
                        },
                    )
                    .collect();
                (topic, rows)
            })
            .collect(),
        None => {
            let mut out: Fetched = Vec::new();
            for ((topic, p), c) in committed.into_iter().flatten() {
                let row = (*p, c.offset, c.leader_epoch, c.metadata.clone());
                match out.iter_mut().find(|(t, _)| t == topic) {
                    Some((_, rows)) => rows.push(row),
                    None => out.push((topic.clone(), vec![row])),
                }
            }
            out
        }
    }
}

const UNSTABLE_OFFSET_COMMIT: i16 = 88;

pub const VERSIONS: Versions = Versions::new(1, 9);

pub fn handle(broker: &Broker, request: OffsetFetchRequest, call: &Call) -> Reply {
    // In a cluster the offsets were read from the coordinator's state, which may hold writes
    // no quorum has yet (a commit being replicated, a new leader's log tail): they are
    // answered once what the groups' log partitions held then is committed.
    let (response, waits) = answer(broker, request, call);
    super::after_fence(response, waits, failed)
}

/// `response` with `error` in place of the offsets of every group answered without an error.
fn failed(mut response: ResponseKind, error: ResponseError) -> ResponseKind {
    let ResponseKind::OffsetFetch(r) = &mut response else {
        return response;
    };
    for g in r.groups.iter_mut().filter(|g| g.error_code == 0) {
        g.topics.clear();
        g.error_code = error.code();
    }
    if r.groups.is_empty() && r.error_code == 0 {
        // v1-7: one group; v1 has no top-level error, every partition carries it.
        r.error_code = error.code();
        for p in r.topics.iter_mut().flat_map(|t| t.partitions.iter_mut()) {
            if p.error_code == 0 || p.error_code == UNSTABLE_OFFSET_COMMIT {
                p.committed_offset = -1;
                p.committed_leader_epoch = -1;
                p.metadata = None;
                p.error_code = error.code();
            }
        }
    }
    response
}

/// The response, and what it waits on before it is sent (see
/// [`crate::shards::Shards::settled`]).
fn answer(broker: &Broker, request: OffsetFetchRequest, call: &Call) -> (ResponseKind, Waits) {
    let authz = call.authz(broker);
    if authz.is_unrestricted() {
        return handle_authorized(broker, request, call);
    }
    // Describe on each group (else GROUP_AUTHORIZATION_FAILED and nothing of it), Describe on
    // each topic: a named one one may not describe is TOPIC_AUTHORIZATION_FAILED, and a
    // listing of all the group's offsets leaves such topics out (Kafka's checks).
    let all_topics: Vec<bool> = if call.version >= 8 {
        request.groups.iter().map(|g| g.topics.is_none()).collect()
    } else {
        vec![request.topics.is_none()]
    };
    let group_ok: Vec<bool> = if call.version >= 8 {
        request
            .groups
            .iter()
            .map(|g| authz.group(Operation::Describe, &g.group_id))
            .collect()
    } else {
        vec![authz.group(Operation::Describe, &request.group_id)]
    };
    let denied_topic = ResponseError::TopicAuthorizationFailed.code();
    let denied_group = ResponseError::GroupAuthorizationFailed.code();
    let (mut response, waits) = handle_authorized(broker, request, call);
    let ResponseKind::OffsetFetch(r) = &mut response else {
        return (response, waits);
    };
    if call.version >= 8 {
        for ((g, all), ok) in r.groups.iter_mut().zip(all_topics).zip(group_ok) {
            if !ok {
                g.topics.clear();
                g.error_code = denied_group;
                continue;
            }
            if all {
                g.topics
                    .retain(|t| authz.shows(Operation::Describe, ResourceType::Topic, &t.name));
            }
            for t in &mut g.topics {
                if !authz.topic(Operation::Describe, &t.name) {
                    for p in &mut t.partitions {
                        p.committed_offset = -1;
                        p.committed_leader_epoch = -1;
                        p.metadata = None;
                        p.error_code = denied_topic;
                    }
                }
            }
        }
    } else {
        if !group_ok[0] {
            r.topics.clear();
            r.error_code = denied_group;
            return (response, waits);
        }
        if all_topics[0] {
            r.topics
                .retain(|t| authz.shows(Operation::Describe, ResourceType::Topic, &t.name));
        }
        for t in &mut r.topics {
            if !authz.topic(Operation::Describe, &t.name) {
                for p in &mut t.partitions {
                    p.committed_offset = -1;
                    p.committed_leader_epoch = -1;
                    p.metadata = None;
                    p.error_code = denied_topic;
                }
            }
        }
    }
    (response, waits)
}

fn handle_authorized(
    broker: &Broker,
    request: OffsetFetchRequest,
    call: &Call,
) -> (ResponseKind, Waits) {
    let version = call.version;
    // (group, topic, partition) with offsets pending in an open transaction.
    let pending: std::collections::HashSet<(String, String, i32)> = if request.require_stable {
        broker
            .txns
            .coordinator
            .lock()
            .all()
            // An abort's offsets are settled once it is decided: they will not be committed.
            .filter(|m| matches!(m.state, TxnState::Ongoing | TxnState::PrepareCommit))
            .flat_map(|m| m.pending_offsets.iter())
            .map(|o| (o.group.clone(), o.topic.clone(), o.partition))
            .collect()
    } else {
        Default::default()
    };
    let coordinator = broker.groups.coordinator.lock();
    let now_ms = broker.groups.now_ms();
    // Pending in a transaction coordinated here, or in one on another node that this group's
    // offsets were handed to (a cluster's transaction and group coordinators are apart).
    let unstable = |group: &str, topic: &str, p: i32| {
        let here = pending.contains(&(group.to_string(), topic.to_string(), p));
        if request.require_stable
            && (here || coordinator.remote_txn_pending(group, topic, p, now_ms))
        {
            UNSTABLE_OFFSET_COMMIT
        } else {
            0
        }
    };
    // Taken under the coordinator's lock, with the offsets it answers.
    let fences = |groups: &mut dyn Iterator<Item = &str>| broker.groups.shards.settled_all(groups);
    if version >= 8 {
        let groups = request
            .groups
            .iter()
            .map(|g| {
                if let Err(e) = broker.groups.check(&g.group_id) {
                    return OffsetFetchResponseGroup::default()
                        .with_group_id(g.group_id.clone())
                        .with_error_code(e.code());
                }
                let wanted = g.topics.as_ref().map(|ts| {
                    ts.iter()
                        .map(|t| (t.name.to_string(), t.partition_indexes.clone()))
                        .collect()
                });
                let topics = fetch(&coordinator, &g.group_id, wanted)
                    .into_iter()
                    .map(|(topic, rows)| {
                        OffsetFetchResponseTopics::default()
                            .with_name(topic_name(&topic))
                            .with_partitions(
                                rows.into_iter()
                                    .map(|(p, o, e, m)| {
                                        OffsetFetchResponsePartitions::default()
                                            .with_error_code(unstable(&g.group_id, &topic, p))
                                            .with_partition_index(p)
                                            .with_committed_offset(o)
                                            .with_committed_leader_epoch(e)
                                            .with_metadata(Some(str_bytes(&m)))
                                    })
                                    .collect(),
                            )
                    })
                    .collect();
                OffsetFetchResponseGroup::default()
                    .with_group_id(g.group_id.clone())
                    .with_topics(topics)
            })
            .collect();
        let waits = fences(&mut request.groups.iter().map(|g| g.group_id.as_str()));
        return (
            ResponseKind::OffsetFetch(OffsetFetchResponse::default().with_groups(groups)),
            waits,
        );
    }
    if let Err(e) = broker.groups.check(&request.group_id) {
        // v1 has no top-level error: every asked partition carries it.
        let topics = request
            .topics
            .iter()
            .flatten()
            .map(|t| {
                OffsetFetchResponseTopic::default()
                    .with_name(t.name.clone())
                    .with_partitions(
                        t.partition_indexes
                            .iter()
                            .map(|&p| {
                                OffsetFetchResponsePartition::default()
                                    .with_partition_index(p)
                                    .with_committed_offset(-1)
                                    .with_error_code(e.code())
                            })
                            .collect(),
                    )
            })
            .collect();
        return (
            ResponseKind::OffsetFetch(
                OffsetFetchResponse::default()
                    .with_error_code(e.code())
                    .with_topics(topics),
            ),
            Waits::new(),
        );
    }
    let wanted = request.topics.as_ref().map(|ts| {
        ts.iter()
            .map(|t| (t.name.to_string(), t.partition_indexes.clone()))
            .collect()
    });
    let topics = fetch(&coordinator, &request.group_id, wanted)
        .into_iter()
        .map(|(topic, rows)| {
            OffsetFetchResponseTopic::default()
                .with_name(TopicName(str_bytes(&topic)))
                .with_partitions(
                    rows.into_iter()
                        .map(|(p, o, e, m)| {
                            OffsetFetchResponsePartition::default()
                                .with_error_code(unstable(&request.group_id, &topic, p))
                                .with_partition_index(p)
                                .with_committed_offset(o)
                                .with_committed_leader_epoch(e)
                                .with_metadata(Some(str_bytes(&m)))
                        })
                        .collect(),
                )
        })
        .collect();
    let waits = fences(&mut std::iter::once(request.group_id.as_str()));
    (
        ResponseKind::OffsetFetch(OffsetFetchResponse::default().with_topics(topics)),
        waits,
    )
}
