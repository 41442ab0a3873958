//! AlterPartitionReassignments (KIP-455): move partitions' replicas to other nodes, as
//! `kafka-reassign-partitions.sh --execute` and `sluice topic reassign` ask. The controller
//! adds the new replicas first; they copy the log from the leader, and once every target
//! replica is in sync the old ones are dropped (see `sluice_cluster::reassignment`). A
//! partition named with no replicas has its running reassignment cancelled. The answer comes
//! once the move has started (not finished): ListPartitionReassignments follows it.
//!
//! Per partition: UNKNOWN_TOPIC_OR_PARTITION, INVALID_REPLICA_ASSIGNMENT (an unknown or
//! repeated node, an empty list, or a move that would keep no in-sync replica),
//! INVALID_REPLICATION_FACTOR (v1 with `allow_replication_factor_change` false and a target of
//! another size), NO_REASSIGNMENT_IN_PROGRESS (a cancel with none running).

use kafka_protocol::error::ResponseError;
use kafka_protocol::messages::alter_partition_reassignments_response::{
    ReassignablePartitionResponse, ReassignableTopicResponse,
};
use kafka_protocol::messages::{
    AlterPartitionReassignmentsRequest, AlterPartitionReassignmentsResponse, ResponseKind,
};
use sluice_cluster::reassignment::{ReassignError, Reassignment};
use sluice_cluster::NodeId;
use sluice_wire::Reply;

use super::{str_bytes, topic_name};
use crate::broker::Broker;
use crate::handlers::{Call, Versions};

pub const VERSIONS: Versions = Versions::new(0, 1);

type Outcome = (String, i32, Result<(), (i16, String)>);

pub fn handle(broker: &Broker, request: AlterPartitionReassignmentsRequest, call: &Call) -> Reply {
    let version = call.version;
    // v0 has no such field: a v0 client may change the replication factor, as before KIP-860.
    let allow_rf_change = version < 1 || request.allow_replication_factor_change;
    let moves: Vec<Reassignment> = request
        .topics
        .iter()
        .flat_map(|t| {
            t.partitions.iter().map(|p| Reassignment {
                topic: t.name.to_string(),
                partition: p.partition_index,
                target: p
                    .replicas
                    .as_ref()
                    .map(|r| r.iter().map(|b| NodeId(b.0)).collect()),
            })
        })
        .collect();
    let Some(replication) = broker.replication().cloned() else {
        let outcomes = moves.iter().map(|m| single_node(broker, m)).collect();
        return Reply::Ready(Box::new(answer(version, allow_rf_change, Ok(()), outcomes)));
    };
    Reply::Later(Box::pin(async move {
        Some(
            match replication.reassign(moves.clone(), allow_rf_change).await {
                Ok(outcomes) => answer(
                    version,
                    allow_rf_change,
                    Ok(()),
                    outcomes
                        .into_iter()
                        .map(|(t, p, r)| (t, p, r.map_err(|e| (code(&e), e.to_string()))))
                        .collect(),
                ),
                Err(e) => {
                    let failed = (e.code(), e.to_string());
                    let outcomes = moves
                        .into_iter()
                        .map(|m| (m.topic, m.partition, Err(failed.clone())))
                        .collect();
                    answer(version, allow_rf_change, Err(failed), outcomes)
                }
            },
        )
    }))
}

/// One node, no cluster: the only possible assignment is this node, which it has already.
fn single_node(broker: &Broker, m: &Reassignment) -> Outcome {
    let known = broker
        .topics()
        .get(&m.topic)
        .is_some_and(|t| t.partition(m.partition).is_some());
    let me = NodeId(broker.node_id());
    let outcome = match &m.target {
        _ if !known => Err((
            ResponseError::UnknownTopicOrPartition.code(),
            "unknown topic or partition".into(),
        )),
        None => Err((
            ResponseError::NoReassignmentInProgress.code(),
            ReassignError::NoReassignmentInProgress.to_string(),
        )),
        Some(target) if *target == [me] => Ok(()),
        Some(_) => Err((
            ResponseError::InvalidReplicaAssignment.code(),
            format!(
                "this broker runs as a single node ({me}); start it with --cluster to move \
                 replicas between nodes"
            ),
        )),
    };
    (m.topic.clone(), m.partition, outcome)
}

fn code(e: &ReassignError) -> i16 {
    match e {
        ReassignError::UnknownPartition => ResponseError::UnknownTopicOrPartition,
        ReassignError::InvalidAssignment(_) => ResponseError::InvalidReplicaAssignment,
        ReassignError::InvalidReplicationFactor(_) => ResponseError::InvalidReplicationFactor,
        ReassignError::NoReassignmentInProgress => ResponseError::NoReassignmentInProgress,
        ReassignError::InvalidRequest(_) => ResponseError::InvalidRequest,
    }
    .code()
}

/// The response: a request-wide error and each partition's outcome, grouped by topic.
fn answer(
    version: i16,
    allow_rf_change: bool,
    whole: Result<(), (i16, String)>,
    outcomes: Vec<Outcome>,
) -> ResponseKind {
    let mut topics: Vec<ReassignableTopicResponse> = Vec::new();
    for (topic, index, outcome) in outcomes {
        let mut entry = ReassignablePartitionResponse::default().with_partition_index(index);
        if let Err((code, message)) = outcome {
            entry = entry
                .with_error_code(code)
                .with_error_message(Some(str_bytes(&message)));
        }
        match topics.iter_mut().find(|t| t.name.as_str() == topic) {
            Some(t) => t.partitions.push(entry),
            None => topics.push(
                ReassignableTopicResponse::default()
                    .with_name(topic_name(&topic))
                    .with_partitions(vec![entry]),
            ),
        }
    }
    let mut response = AlterPartitionReassignmentsResponse::default().with_responses(topics);
    if version >= 1 {
        response = response.with_allow_replication_factor_change(allow_rf_change);
    }
    if let Err((code, message)) = whole {
        response = response
            .with_error_code(code)
            .with_error_message(Some(str_bytes(&message)));
    }
    ResponseKind::AlterPartitionReassignments(response)
}
