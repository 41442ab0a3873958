//! The APIs whose checks concern one resource, checked before the handler runs and refused in
//! each response's own shape (a top-level error, or every item's error where the response has
//! no top-level one):
//!
//! - an operation on the cluster (Kafka's table: ElectLeaders needs Alter, DescribeCluster
//!   Describe, WriteTxnMarkers ClusterAction, ...): CLUSTER_AUTHORIZATION_FAILED;
//! - Read on the group of a classic or KIP-848 group member's request:
//!   GROUP_AUTHORIZATION_FAILED;
//! - Write on the transactional id of InitProducerId, AddOffsetsToTxn (and Read on its group)
//!   and EndTxn: TRANSACTIONAL_ID_AUTHORIZATION_FAILED; an idempotent producer's
//!   InitProducerId needs IdempotentWrite on the cluster or Write on some topic.

use kafka_protocol::messages::alter_user_scram_credentials_response::AlterUserScramCredentialsResult;
use kafka_protocol::messages::elect_leaders_response::{PartitionResult, ReplicaElectionResult};
use kafka_protocol::messages::write_txn_markers_response::{
    WritableTxnMarkerPartitionResult, WritableTxnMarkerResult, WritableTxnMarkerTopicResult,
};
use kafka_protocol::messages::*;
use kafka_protocol::protocol::StrBytes;
use kafka_protocol::ResponseError;

use sluice_auth::acl::{Operation, ResourceType};

use super::str_bytes;
use crate::security::Authz;

const DENIED: ResponseError = ResponseError::ClusterAuthorizationFailed;

/// Whether the gate checks `api`'s requests.
pub fn gated(api: ApiKey) -> bool {
    operation(api).is_some()
        || matches!(
            api,
            ApiKey::Heartbeat
                | ApiKey::JoinGroup
                | ApiKey::SyncGroup
                | ApiKey::LeaveGroup
                | ApiKey::ConsumerGroupHeartbeat
                | ApiKey::InitProducerId
                | ApiKey::AddOffsetsToTxn
                | ApiKey::EndTxn
        )
}

/// The refusal of a request the principal may not make (`Ok(None)`: allowed); `Err` when it
/// is denied and has no refusal here (the connection is then closed: never served).
#[allow(clippy::result_unit_err)]
pub fn check(
    api: ApiKey,
    request: &RequestKind,
    authz: &Authz,
) -> Result<Option<ResponseKind>, ()> {
    let cluster_denied = if api == ApiKey::WriteTxnMarkers {
        // Brokers' markers need ClusterAction; an operator's abort (`kafka-transactions.sh
        // abort`, KIP-664) needs Alter: either will do, as in Kafka.
        Some(!(authz.cluster_quietly(Operation::Alter) || authz.cluster(Operation::ClusterAction)))
    } else {
        operation(api).map(|op| !authz.cluster(op))
    };
    match cluster_denied {
        Some(false) => Ok(None),
        Some(true) => refusal(request).map(Some).ok_or(()),
        None => Ok(resource_refusal(request, authz)),
    }
}

/// Read on the group, Write on the transactional id (see the module's notes).
fn resource_refusal(request: &RequestKind, authz: &Authz) -> Option<ResponseKind> {
    use sluice_auth::acl::Operation::{IdempotentWrite, Read, Write};
    let group = |id: &str| !authz.group(Read, id);
    let txn = |id: &str| !authz.transactional_id(Write, id);
    let g = ResponseError::GroupAuthorizationFailed.code();
    let t = ResponseError::TransactionalIdAuthorizationFailed.code();
    match request {
        RequestKind::Heartbeat(r) if group(&r.group_id) => Some(ResponseKind::Heartbeat(
            HeartbeatResponse::default().with_error_code(g),
        )),
        RequestKind::JoinGroup(r) if group(&r.group_id) => Some(ResponseKind::JoinGroup(
            JoinGroupResponse::default()
                .with_error_code(g)
                .with_generation_id(-1)
                .with_member_id(r.member_id.clone()),
        )),
        RequestKind::SyncGroup(r) if group(&r.group_id) => Some(ResponseKind::SyncGroup(
            SyncGroupResponse::default().with_error_code(g),
        )),
        RequestKind::LeaveGroup(r) if group(&r.group_id) => Some(ResponseKind::LeaveGroup(
            LeaveGroupResponse::default().with_error_code(g),
        )),
        RequestKind::ConsumerGroupHeartbeat(r) if group(&r.group_id) => {
            Some(ResponseKind::ConsumerGroupHeartbeat(
                ConsumerGroupHeartbeatResponse::default()
                    .with_error_code(g)
                    .with_error_message(Some(str_bytes("not authorized to read the group"))),
            ))
        }
        RequestKind::InitProducerId(r) => {
            let refused = match &r.transactional_id {
                Some(id) => txn(id).then_some(t),
                // Kafka (KIP-679): IdempotentWrite on the cluster, or Write on any topic.
                None => (!authz.cluster_quietly(IdempotentWrite)
                    && !authz.any(Write, ResourceType::Topic)
                    && !authz.cluster(IdempotentWrite))
                .then_some(DENIED.code()),
            };
            refused.map(|code| {
                ResponseKind::InitProducerId(
                    InitProducerIdResponse::default()
                        .with_error_code(code)
                        .with_producer_id(ProducerId(-1))
                        .with_producer_epoch(-1),
                )
            })
        }
        RequestKind::AddOffsetsToTxn(r) => {
            let code = if txn(&r.transactional_id) {
                t
            } else if group(&r.group_id) {
                g
            } else {
                return None;
            };
            Some(ResponseKind::AddOffsetsToTxn(
                AddOffsetsToTxnResponse::default().with_error_code(code),
            ))
        }
        RequestKind::EndTxn(r) if txn(&r.transactional_id) => Some(ResponseKind::EndTxn(
            EndTxnResponse::default().with_error_code(t),
        )),
        _ => None,
    }
}

/// The cluster operation `api` needs, for the APIs this gate serves.
pub fn operation(api: ApiKey) -> Option<Operation> {
    Some(match api {
        ApiKey::DescribeCluster
        | ApiKey::DescribeLogDirs
        | ApiKey::DescribeQuorum
        | ApiKey::ListPartitionReassignments
        | ApiKey::DescribeUserScramCredentials => Operation::Describe,
        ApiKey::ElectLeaders
        | ApiKey::AlterPartitionReassignments
        | ApiKey::UnregisterBroker
        | ApiKey::AddRaftVoter
        | ApiKey::RemoveRaftVoter
        | ApiKey::AlterUserScramCredentials => Operation::Alter,
        ApiKey::DescribeClientQuotas => Operation::DescribeConfigs,
        ApiKey::AlterClientQuotas => Operation::AlterConfigs,
        ApiKey::WriteTxnMarkers => Operation::ClusterAction,
        _ => return None,
    })
}

/// The refusal of `request`, shaped as its response.
pub fn refusal(request: &RequestKind) -> Option<ResponseKind> {
    let code = DENIED.code();
    let message = || Some(str_bytes("not authorized on the cluster"));
    Some(match request {
        RequestKind::DescribeCluster(_) => ResponseKind::DescribeCluster(
            DescribeClusterResponse::default()
                .with_error_code(code)
                .with_error_message(message())
                .with_cluster_authorized_operations(i32::MIN),
        ),
        RequestKind::DescribeLogDirs(_) => {
            ResponseKind::DescribeLogDirs(DescribeLogDirsResponse::default().with_error_code(code))
        }
        RequestKind::DescribeQuorum(_) => ResponseKind::DescribeQuorum(
            DescribeQuorumResponse::default()
                .with_error_code(code)
                .with_error_message(message()),
        ),
        RequestKind::ListPartitionReassignments(_) => ResponseKind::ListPartitionReassignments(
            ListPartitionReassignmentsResponse::default()
                .with_error_code(code)
                .with_error_message(message()),
        ),
        RequestKind::AlterPartitionReassignments(_) => ResponseKind::AlterPartitionReassignments(
            AlterPartitionReassignmentsResponse::default()
                .with_error_code(code)
                .with_error_message(message()),
        ),
        RequestKind::UnregisterBroker(_) => ResponseKind::UnregisterBroker(
            UnregisterBrokerResponse::default()
                .with_error_code(code)
                .with_error_message(message()),
        ),
        RequestKind::AddRaftVoter(_) => ResponseKind::AddRaftVoter(
            AddRaftVoterResponse::default()
                .with_error_code(code)
                .with_error_message(message()),
        ),
        RequestKind::RemoveRaftVoter(_) => ResponseKind::RemoveRaftVoter(
            RemoveRaftVoterResponse::default()
                .with_error_code(code)
                .with_error_message(message()),
        ),
        RequestKind::DescribeClientQuotas(_) => ResponseKind::DescribeClientQuotas(
            DescribeClientQuotasResponse::default()
                .with_error_code(code)
                .with_error_message(message()),
        ),
        RequestKind::AlterClientQuotas(r) => ResponseKind::AlterClientQuotas(
            AlterClientQuotasResponse::default().with_entries(
                r.entries
                    .iter()
                    .map(|e| {
                        alter_client_quotas_response::EntryData::default()
                            .with_error_code(code)
                            .with_error_message(message())
                            .with_entity(
                                e.entity
                                    .iter()
                                    .map(|c| {
                                        alter_client_quotas_response::EntityData::default()
                                            .with_entity_type(c.entity_type.clone())
                                            .with_entity_name(c.entity_name.clone())
                                    })
                                    .collect(),
                            )
                    })
                    .collect(),
            ),
        ),
        RequestKind::ElectLeaders(r) => ResponseKind::ElectLeaders(
            ElectLeadersResponse::default()
                .with_error_code(code)
                .with_replica_election_results(
                    r.topic_partitions
                        .iter()
                        .flatten()
                        .map(|t| {
                            ReplicaElectionResult::default()
                                .with_topic(t.topic.clone())
                                .with_partition_result(
                                    t.partitions
                                        .iter()
                                        .map(|p| {
                                            PartitionResult::default()
                                                .with_partition_id(*p)
                                                .with_error_code(code)
                                                .with_error_message(message())
                                        })
                                        .collect(),
                                )
                        })
                        .collect(),
                ),
        ),
        RequestKind::WriteTxnMarkers(r) => ResponseKind::WriteTxnMarkers(
            WriteTxnMarkersResponse::default().with_markers(
                r.markers
                    .iter()
                    .map(|m| {
                        WritableTxnMarkerResult::default()
                            .with_producer_id(m.producer_id)
                            .with_topics(
                                m.topics
                                    .iter()
                                    .map(|t| {
                                        WritableTxnMarkerTopicResult::default()
                                            .with_name(t.name.clone())
                                            .with_partitions(
                                                t.partition_indexes
                                                    .iter()
                                                    .map(|p| {
                                                        WritableTxnMarkerPartitionResult::default()
                                                            .with_partition_index(*p)
                                                            .with_error_code(code)
                                                    })
                                                    .collect(),
                                            )
                                    })
                                    .collect(),
                            )
                    })
                    .collect(),
            ),
        ),
        RequestKind::DescribeUserScramCredentials(_) => ResponseKind::DescribeUserScramCredentials(
            DescribeUserScramCredentialsResponse::default()
                .with_error_code(code)
                .with_error_message(message()),
        ),
        RequestKind::AlterUserScramCredentials(r) => {
            let mut users: Vec<&StrBytes> = r
                .deletions
                .iter()
                .map(|d| &d.name)
                .chain(r.upsertions.iter().map(|u| &u.name))
                .collect();
            users.sort();
            users.dedup();
            ResponseKind::AlterUserScramCredentials(
                AlterUserScramCredentialsResponse::default().with_results(
                    users
                        .into_iter()
                        .map(|u| {
                            AlterUserScramCredentialsResult::default()
                                .with_user(u.clone())
                                .with_error_code(code)
                                .with_error_message(message())
                        })
                        .collect(),
                ),
            )
        }
        _ => return None,
    })
}
