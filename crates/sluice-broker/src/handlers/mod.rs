//! One Kafka API, one file. Each handler turns the wire request into calls on the broker's
//! state and builds the response; error codes come from [`crate::error`].
//!
//! Each handler file declares the versions it serves (`VERSIONS`) beside its `handle`, and the
//! one list in [`apis!`] below builds both the ApiVersions table and the dispatch from them, so
//! an API cannot be advertised without a handler, nor handled without being advertised.

mod acl_codes;
pub mod add_offsets_to_txn;
pub mod add_partitions_to_txn;
pub mod add_raft_voter;
pub mod alter_client_quotas;
pub mod alter_configs;
pub mod alter_partition_reassignments;
pub mod alter_user_scram_credentials;
pub mod api_versions;
mod config_change;
pub mod consumer_group_describe;
pub mod consumer_group_heartbeat;
pub mod create_acls;
pub mod create_partitions;
pub mod create_topics;
pub mod delete_acls;
pub mod delete_groups;
pub mod delete_records;
pub mod delete_topics;
pub mod describe_acls;
pub mod describe_client_quotas;
pub mod describe_cluster;
pub mod describe_configs;
pub mod describe_groups;
pub mod describe_log_dirs;
pub mod describe_producers;
pub mod describe_quorum;
pub mod describe_transactions;
pub mod describe_user_scram_credentials;
pub mod elect_leaders;
pub mod end_txn;
pub mod fetch;
pub mod find_coordinator;
mod gate;
pub mod heartbeat;
pub mod incremental_alter_configs;
pub mod init_producer_id;
pub mod join_group;
pub mod leave_group;
pub mod list_groups;
pub mod list_offsets;
pub mod list_partition_reassignments;
pub mod list_transactions;
pub mod metadata;
pub mod offset_commit;
pub mod offset_delete;
pub mod offset_fetch;
pub mod offset_for_leader_epoch;
pub mod produce;
pub mod remove_raft_voter;
pub mod sasl_authenticate;
pub mod sasl_handshake;
pub mod sync_group;
pub mod txn_offset_commit;
pub mod unregister_broker;
pub mod write_txn_markers;

use kafka_protocol::messages::{ApiKey, RequestKind, TopicName};
use kafka_protocol::protocol::StrBytes;
use sluice_wire::{ApiRange, ApiTable, Peer, Reply};

use crate::broker::Broker;

/// The versions of one API a handler serves, inclusive, and the lowest it advertises.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Versions {
    pub min: i16,
    pub max: i16,
    /// Below `min` only for Kafka's compatibility listings (`ApiTable::advertise_from`).
    pub advertised_min: i16,
}

impl Versions {
    pub const fn new(min: i16, max: i16) -> Self {
        Versions {
            min,
            max,
            advertised_min: min,
        }
    }

    /// Listed in ApiVersions from `min`, but served only from `self.min`.
    pub const fn advertised_from(self, min: i16) -> Self {
        Versions {
            advertised_min: min,
            ..self
        }
    }
}

/// What a handler knows of a request besides its body.
#[derive(Debug, Clone, Copy)]
pub struct Call<'a> {
    pub api: ApiKey,
    pub version: i16,
    pub client_id: &'a str,
    pub peer: &'a Peer,
    /// The connection's authentication.
    pub session: &'a crate::security::Session,
}

impl<'a> Call<'a> {
    /// What this request's principal may do.
    pub fn authz(&self, broker: &'a Broker) -> crate::security::Authz<'a> {
        broker.authz(self)
    }

    /// The client's host as Kafka shows it in group descriptions (`/127.0.0.1`).
    pub fn client_host(&self) -> String {
        format!("/{}", self.peer.addr.ip())
    }
}

/// `response`, read from a coordinator's state, once `waits` (its read fence:
/// [`crate::shards::Shards::settled`]) are committed; `failed(response, error)` if one is not
/// (NOT_COORDINATOR when leadership moved, COORDINATOR_NOT_AVAILABLE after the wait's timeout).
/// At once when there is nothing to wait for (always on a single node).
pub(crate) fn after_fence(
    response: kafka_protocol::messages::ResponseKind,
    waits: crate::commit::Waits,
    failed: impl FnOnce(
            kafka_protocol::messages::ResponseKind,
            kafka_protocol::error::ResponseError,
        ) -> kafka_protocol::messages::ResponseKind
        + Send
        + 'static,
) -> Reply {
    if waits.is_empty() {
        return Reply::Ready(Box::new(response));
    }
    Reply::Later(Box::pin(async move {
        let outcomes =
            futures::future::join_all(waits.into_iter().map(|w| crate::commit::committed(vec![w])))
                .await;
        Some(match outcomes.into_iter().find_map(Result::err) {
            None => response,
            Some(e) => failed(response, e),
        })
    }))
}

/// The one list of served APIs: `RequestKind` variant => handler module.
macro_rules! apis {
    ($($api:ident => $module:ident),* $(,)?) => {
        /// The API versions Sluice implements; ApiVersions advertises exactly these.
        pub fn api_table() -> ApiTable {
            let table = ApiTable::new(vec![$(ApiRange {
                key: ApiKey::$api,
                min: $module::VERSIONS.min,
                max: $module::VERSIONS.max,
            }),*]);
            $(let table = table.advertise_from(ApiKey::$api, $module::VERSIONS.advertised_min);)*
            table
        }

        /// Hands a decoded request to its handler; error codes leave as the request's
        /// version knows them (`error::for_request_version`).
        pub(crate) fn dispatch(broker: &Broker, api: ApiKey, body: RequestKind, call: &Call) -> Reply {
            let refused = if gate::gated(api) {
                match gate::check(api, &body, &call.authz(broker)) {
                    Ok(refusal) => refusal,
                    // Denied, with no refusal this API can carry: closed, never served.
                    Err(()) => return Reply::Close(format!("{api:?} refused: not authorized")),
                }
            } else {
                None
            };
            let reply: Reply = match (refused, body) {
                (Some(refusal), _) => Reply::Ready(Box::new(refusal)),
                $((None, RequestKind::$api(request)) => $module::handle(broker, request, call).into(),)*
                // Decoding admits only the APIs of `api_table`, which lists exactly the arms
                // above; an answer we cannot give closes the connection rather than leave the
                // client waiting.
                _ => return Reply::Close(format!("no handler for {api:?}")),
            };
            let version = call.version;
            if !crate::error::rewrites_errors(api, version) {
                return reply;
            }
            map_response(reply, move |r| crate::error::for_request_version(api, version, r))
        }
    };
}

apis! {
    Produce => produce,
    Fetch => fetch,
    ListOffsets => list_offsets,
    Metadata => metadata,
    ApiVersions => api_versions,
    CreateTopics => create_topics,
    DeleteTopics => delete_topics,
    DeleteRecords => delete_records,
    DescribeConfigs => describe_configs,
    AlterConfigs => alter_configs,
    CreatePartitions => create_partitions,
    ElectLeaders => elect_leaders,
    AlterPartitionReassignments => alter_partition_reassignments,
    ListPartitionReassignments => list_partition_reassignments,
    IncrementalAlterConfigs => incremental_alter_configs,
    DescribeCluster => describe_cluster,
    DescribeLogDirs => describe_log_dirs,
    DescribeQuorum => describe_quorum,
    InitProducerId => init_producer_id,
    FindCoordinator => find_coordinator,
    JoinGroup => join_group,
    SyncGroup => sync_group,
    Heartbeat => heartbeat,
    ConsumerGroupHeartbeat => consumer_group_heartbeat,
    ConsumerGroupDescribe => consumer_group_describe,
    LeaveGroup => leave_group,
    OffsetCommit => offset_commit,
    OffsetFetch => offset_fetch,
    OffsetForLeaderEpoch => offset_for_leader_epoch,
    DescribeGroups => describe_groups,
    ListGroups => list_groups,
    DeleteGroups => delete_groups,
    OffsetDelete => offset_delete,
    AddPartitionsToTxn => add_partitions_to_txn,
    AddOffsetsToTxn => add_offsets_to_txn,
    EndTxn => end_txn,
    WriteTxnMarkers => write_txn_markers,
    TxnOffsetCommit => txn_offset_commit,
    DescribeProducers => describe_producers,
    DescribeTransactions => describe_transactions,
    ListTransactions => list_transactions,
    UnregisterBroker => unregister_broker,
    AddRaftVoter => add_raft_voter,
    RemoveRaftVoter => remove_raft_voter,
    SaslHandshake => sasl_handshake,
    SaslAuthenticate => sasl_authenticate,
    DescribeUserScramCredentials => describe_user_scram_credentials,
    AlterUserScramCredentials => alter_user_scram_credentials,
    DescribeClientQuotas => describe_client_quotas,
    AlterClientQuotas => alter_client_quotas,
    CreateAcls => create_acls,
    DescribeAcls => describe_acls,
    DeleteAcls => delete_acls,
}

pub(crate) fn str_bytes(s: &str) -> StrBytes {
    StrBytes::from_string(s.to_string())
}

pub(crate) fn topic_name(s: &str) -> TopicName {
    TopicName(str_bytes(s))
}

/// Whether the principal may `operation` (DescribeConfigs or AlterConfigs) the config
/// resource: a topic's own, a broker's on the cluster (Kafka's checks).
pub(crate) fn config_access(
    authz: &crate::security::Authz,
    operation: sluice_auth::acl::Operation,
    resource_type: i8,
    name: &str,
) -> Result<(), crate::error::BrokerError> {
    use kafka_protocol::ResponseError;
    let (allowed, error) = match resource_type {
        RESOURCE_TOPIC => (
            authz.topic(operation, name),
            ResponseError::TopicAuthorizationFailed,
        ),
        _ => (
            authz.cluster(operation),
            ResponseError::ClusterAuthorizationFailed,
        ),
    };
    if allowed {
        Ok(())
    } else {
        Err(crate::error::BrokerError::NotAuthorized(
            error,
            format!("{} is needed on the resource", operation.name()),
        ))
    }
}

/// ConfigResource types (KIP-133).
pub(crate) const RESOURCE_TOPIC: i8 = 2;
pub(crate) const RESOURCE_BROKER: i8 = 4;

/// Changes the response a reply ends in (answered now or later); a reply with no response
/// (acks=0, a closed connection) stays as it is.
pub(crate) fn map_response(
    reply: Reply,
    change: impl FnOnce(&mut kafka_protocol::messages::ResponseKind) + Send + 'static,
) -> Reply {
    match reply {
        Reply::Ready(mut response) => {
            change(&mut response);
            Reply::Ready(response)
        }
        Reply::Later(pending) => Reply::Later(Box::pin(futures::FutureExt::map(
            pending,
            move |response| {
                response.map(|mut r| {
                    change(&mut r);
                    r
                })
            },
        ))),
        other => other,
    }
}

/// Takes out of `items` those `allowed` refuses, in order, and returns them.
pub(crate) fn take_denied<T>(items: &mut Vec<T>, mut allowed: impl FnMut(&T) -> bool) -> Vec<T> {
    let mut denied = Vec::new();
    let mut kept = Vec::with_capacity(items.len());
    for item in items.drain(..) {
        if allowed(&item) {
            kept.push(item);
        } else {
            denied.push(item);
        }
    }
    *items = kept;
    denied
}
