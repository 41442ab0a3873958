//! TxnOffsetCommit: offsets a transaction commits for a consumer group, applied to the group
//! only if the transaction commits. The group's coordinator (this node) checks the member; the
//! transaction's coordinator (here or on another node) keeps the offsets until the transaction
//! ends. The group must be in the transaction (AddOffsetsToTxn), except with v5+ (KIP-890),
//! which adds it. From v3 the consumer's generation and member id are checked against the
//! group, so a zombie consumer cannot commit.

use kafka_protocol::error::ResponseError;
use kafka_protocol::messages::txn_offset_commit_response::{
    TxnOffsetCommitResponsePartition, TxnOffsetCommitResponseTopic,
};
use kafka_protocol::messages::{ResponseKind, TxnOffsetCommitRequest, TxnOffsetCommitResponse};
use sluice_wire::Reply;

use crate::broker::Broker;
use crate::group::offset_commit_error;
use crate::handlers::{Call, Versions};
use crate::txn::state::PendingOffset;
use sluice_auth::acl::Operation;

pub const VERSIONS: Versions = Versions::new(0, 5);

pub fn handle(broker: &Broker, mut request: TxnOffsetCommitRequest, call: &Call) -> Reply {
    // Write on the transactional id, Read on the group, Read on each topic (Kafka's order).
    let authz = call.authz(broker);
    let whole = if !authz.transactional_id(Operation::Write, &request.transactional_id) {
        Some(ResponseError::TransactionalIdAuthorizationFailed)
    } else if !authz.group(Operation::Read, &request.group_id) {
        Some(ResponseError::GroupAuthorizationFailed)
    } else {
        None
    };
    let denied = super::take_denied(&mut request.topics, |t| {
        whole.is_none() && authz.topic(Operation::Read, &t.name)
    });
    let error = whole.unwrap_or(ResponseError::TopicAuthorizationFailed);
    let denied: Vec<TxnOffsetCommitResponseTopic> = denied
        .iter()
        .map(|t| {
            TxnOffsetCommitResponseTopic::default()
                .with_name(t.name.clone())
                .with_partitions(
                    t.partitions
                        .iter()
                        .map(|p| {
                            TxnOffsetCommitResponsePartition::default()
                                .with_partition_index(p.partition_index)
                                .with_error_code(error.code())
                        })
                        .collect(),
                )
        })
        .collect();
    if whole.is_some() || (request.topics.is_empty() && !denied.is_empty()) {
        return Reply::Ready(Box::new(ResponseKind::TxnOffsetCommit(
            TxnOffsetCommitResponse::default().with_topics(denied),
        )));
    }
    let reply = handle_authorized(broker, request, call);
    if denied.is_empty() {
        return reply;
    }
    super::map_response(reply, move |r| {
        if let ResponseKind::TxnOffsetCommit(r) = r {
            r.topics.extend(denied);
        }
    })
}

fn handle_authorized(broker: &Broker, request: TxnOffsetCommitRequest, call: &Call) -> Reply {
    let version = call.version;
    let max_metadata = broker.groups.coordinator.lock().config.max_metadata_bytes;
    // Per partition: an error of its own, or the offset to commit.
    let mut offsets = Vec::new();
    let mut own_errors = Vec::new();
    for t in &request.topics {
        for p in &t.partitions {
            let error = offset_commit_error(
                broker,
                &t.name,
                p.partition_index,
                p.committed_metadata.as_deref(),
                max_metadata,
            );
            if error.is_none() {
                offsets.push(PendingOffset {
                    group: request.group_id.to_string(),
                    topic: t.name.to_string(),
                    partition: p.partition_index,
                    offset: p.committed_offset,
                    leader_epoch: p.committed_leader_epoch,
                    metadata: p
                        .committed_metadata
                        .as_deref()
                        .unwrap_or_default()
                        .to_string(),
                });
            }
            own_errors.push(((t.name.clone(), p.partition_index), error));
        }
    }
    let group_error = if request.group_id.is_empty() {
        Err(ResponseError::InvalidGroupId)
    } else if version >= 3 {
        let committed: Vec<(&str, i32)> = request
            .topics
            .iter()
            .flat_map(|t| {
                t.partitions
                    .iter()
                    .map(move |p| (t.name.as_str(), p.partition_index))
            })
            .collect();
        broker
            .groups
            .lock_for(&request.group_id)
            .and_then(|groups| {
                groups.check_commit(
                    &request.group_id,
                    request.generation_id,
                    &request.member_id,
                    request.group_instance_id.as_deref(),
                    &committed,
                    true,
                )
            })
    } else {
        broker.groups.check(&request.group_id)
    };
    let id = request.transactional_id.to_string();
    let (producer_id, producer_epoch) = (request.producer_id.0, request.producer_epoch);
    let tv2 = version >= 5;
    // The offsets go to the transaction's coordinator: kept here (and what to wait for), or
    // handed to the node leading the transactional id's partition.
    let kept = group_error.and_then(|()| match broker.txns.check(&id) {
        _ if offsets.is_empty() => Ok(Kept::Here(Vec::new())),
        Ok(_) => broker
            .txn_offsets_here(&id, producer_id, producer_epoch, offsets, tv2)
            .map(|waits| Kept::Here(broker.txns.before_answer(waits))),
        Err(ResponseError::NotCoordinator) => {
            let (node, _, _) = broker.txn_coordinator(&id)?;
            // Held here before they are handed over, so that no OffsetFetch in between
            // misses them, and so that the transaction's end, told here once it happens,
            // always finds them.
            let hold = broker
                .groups
                .lock_for(&request.group_id)?
                .hold_remote_txn_offsets(
                    &request.group_id,
                    offsets.iter().map(|o| (o.topic.as_str(), o.partition)),
                    producer_id,
                    broker.groups.now_ms(),
                );
            Ok(Kept::Elsewhere(
                hold,
                sluice_cluster::NodeId(node),
                crate::replication::PeerCall::TxnOffsets {
                    transactional_id: id,
                    producer_id,
                    producer_epoch,
                    offsets,
                    tv2,
                },
            ))
        }
        Err(e) => Err(e),
    });
    let group_id = request.group_id.to_string();
    let Some(broker) = broker.arc() else {
        return Reply::Ready(Box::new(ResponseKind::TxnOffsetCommit(
            TxnOffsetCommitResponse::default(),
        )));
    };
    Reply::Later(Box::pin(async move {
        let outcome = match kept {
            Ok(Kept::Here(waits)) => crate::commit::committed(waits).await,
            Ok(Kept::Elsewhere(hold, node, call)) => {
                // A task of its own: a client that goes away mid-way drops this answer, but
                // a hand-over that failed must still take back what it held.
                let owner = std::sync::Arc::clone(&broker);
                tokio::spawn(async move {
                    let handed = owner.call_peer(node, &call).await;
                    if handed.is_err() {
                        // Not taken there: nothing will commit them.
                        if let Ok(mut groups) = owner.groups.lock_for(&group_id) {
                            groups.unhold_remote_txn_offsets(hold);
                        }
                    }
                    handed
                })
                .await
                .unwrap_or(Err(ResponseError::CoordinatorNotAvailable))
            }
            Err(e) => Err(e),
        };
        // The transaction's previous end still being carried out (its EndTxn was answered once
        // the decision was committed): Java's producer takes CONCURRENT_TRANSACTIONS here as
        // fatal, but retries COORDINATOR_LOAD_IN_PROGRESS with the same coordinator.
        let common = outcome.err().map(|e| match e {
            ResponseError::ConcurrentTransactions => ResponseError::CoordinatorLoadInProgress,
            e => e,
        });
        let mut topics: Vec<TxnOffsetCommitResponseTopic> = Vec::new();
        for ((name, partition), own) in own_errors {
            let code = own.or(common).map_or(0, |e| e.code());
            let entry = TxnOffsetCommitResponsePartition::default()
                .with_partition_index(partition)
                .with_error_code(code);
            match topics.iter_mut().find(|t| t.name == name) {
                Some(t) => t.partitions.push(entry),
                None => topics.push(
                    TxnOffsetCommitResponseTopic::default()
                        .with_name(name)
                        .with_partitions(vec![entry]),
                ),
            }
        }
        Some(ResponseKind::TxnOffsetCommit(
            TxnOffsetCommitResponse::default().with_topics(topics),
        ))
    }))
}

/// Where the offsets went.
enum Kept {
    /// To this node's transaction coordinator: what to wait for before answering.
    Here(crate::commit::Waits),
    /// To the transaction coordinator on another node: the call to make, and what this node
    /// holds as pending meanwhile.
    Elsewhere(
        crate::group::coordinator::RemoteHold,
        sluice_cluster::NodeId,
        crate::replication::PeerCall,
    ),
}
