#![allow(clippy::unwrap_used)] // test code: a failed unwrap is a failed test
//! The authorizer's per-API table: with `authorizer = acl` and no ACL, every API that names a
//! topic, group, transactional id or the cluster answers the authorization error Kafka
//! answers (TOPIC_/GROUP_/CLUSTER_/TRANSACTIONAL_ID_AUTHORIZATION_FAILED); once ACLs allow
//! everything, none of them does. Every API ApiVersions advertises must be in the table (or
//! in the short list of APIs Kafka serves to anyone), so an API added later without its check
//! fails here.
//!
//! Requests go through the broker's `Service::call`, as the connection loop calls it, as
//! `User:ANONYMOUS` on a PLAINTEXT listener.

use std::sync::Arc;

use kafka_protocol::messages::add_partitions_to_txn_request::AddPartitionsToTxnTopic;
use kafka_protocol::messages::alter_configs_request::AlterConfigsResource;
use kafka_protocol::messages::create_acls_request::AclCreation;
use kafka_protocol::messages::create_partitions_request::CreatePartitionsTopic;
use kafka_protocol::messages::create_topics_request::CreatableTopic;
use kafka_protocol::messages::delete_acls_request::DeleteAclsFilter;
use kafka_protocol::messages::delete_records_request::{
    DeleteRecordsPartition, DeleteRecordsTopic,
};
use kafka_protocol::messages::describe_configs_request::DescribeConfigsResource;
use kafka_protocol::messages::describe_producers_request::TopicRequest;
use kafka_protocol::messages::fetch_request::{FetchPartition, FetchTopic};
use kafka_protocol::messages::incremental_alter_configs_request::AlterConfigsResource as IncrementalResource;
use kafka_protocol::messages::list_offsets_request::{ListOffsetsPartition, ListOffsetsTopic};
use kafka_protocol::messages::metadata_request::MetadataRequestTopic;
use kafka_protocol::messages::offset_commit_request::{
    OffsetCommitRequestPartition, OffsetCommitRequestTopic,
};
use kafka_protocol::messages::offset_delete_request::{
    OffsetDeleteRequestPartition, OffsetDeleteRequestTopic,
};
use kafka_protocol::messages::offset_for_leader_epoch_request::{
    OffsetForLeaderPartition, OffsetForLeaderTopic,
};
use kafka_protocol::messages::produce_request::{PartitionProduceData, TopicProduceData};
use kafka_protocol::messages::txn_offset_commit_request::{
    TxnOffsetCommitRequestPartition, TxnOffsetCommitRequestTopic,
};
use kafka_protocol::messages::write_txn_markers_request::{
    WritableTxnMarker, WritableTxnMarkerTopic,
};
use kafka_protocol::messages::*;
use kafka_protocol::protocol::StrBytes;
use sluice_auth::acl::{AclBinding, Operation, PatternType, Permission, ResourceType};
use sluice_broker::handlers::api_table;
use sluice_broker::security::{Principal, Session};
use sluice_broker::{Broker, BrokerConfig};
use sluice_wire::{Peer, Reply, Request, Service};

const TOPIC: &str = "orders";
const GROUP: &str = "billing";
const TXN: &str = "payments-tx";

const TOPIC_DENIED: i16 = 29;
const GROUP_DENIED: i16 = 30;
const CLUSTER_DENIED: i16 = 31;
const TXN_DENIED: i16 = 53;

/// APIs that list what one may describe, leaving the rest out (tested below on their own).
const FILTERED: [ApiKey; 2] = [ApiKey::ListGroups, ApiKey::ListTransactions];

/// APIs Kafka serves to anyone: before a login, or about the connection itself.
const UNCHECKED: [ApiKey; 3] = [
    ApiKey::ApiVersions,
    ApiKey::SaslHandshake,
    ApiKey::SaslAuthenticate,
];

fn s(v: &str) -> StrBytes {
    StrBytes::from_string(v.to_string())
}

fn broker(dir: &std::path::Path) -> Arc<Broker> {
    let mut config = BrokerConfig {
        data_dir: dir.to_path_buf(),
        offsets_topic_partitions: 1,
        transaction_state_partitions: 1,
        ..Default::default()
    };
    config.security.authorizer.enabled = true;
    config
        .security
        .authorizer
        .super_users
        .insert("User:admin".into());
    let broker = Broker::open(config, Arc::new(sluice_log::SystemClock)).unwrap();
    if broker.topics().get(TOPIC).is_none() {
        broker
            .topics()
            .create(TOPIC, 1, Default::default(), false)
            .unwrap();
    }
    broker
}

/// Sends one request at the highest version the broker serves and returns the response.
async fn call(broker: &Arc<Broker>, body: RequestKind) -> ResponseKind {
    let api = api_key(&body);
    let version = api_table().get(api).unwrap().max;
    let peer = Peer::plaintext("127.0.0.1:40000".parse().unwrap());
    let session: Session = broker.open_session(&peer);
    assert_eq!(session.principal(), Some(Principal::user("ANONYMOUS")));
    let request = Request {
        header: RequestHeader::default()
            .with_request_api_key(api as i16)
            .with_request_api_version(version)
            .with_client_id(Some(s("authz-test"))),
        api_key: api,
        body,
    };
    match broker.call(request, &peer, &session) {
        Reply::Ready(response) => *response,
        Reply::Later(pending) => pending.await.unwrap(),
        Reply::Silent => panic!("{api:?}: no answer"),
        Reply::Close(reason) => panic!("{api:?}: closed: {reason}"),
    }
}

fn api_key(body: &RequestKind) -> ApiKey {
    macro_rules! keys {
        ($($api:ident),*) => {
            match body {
                $(RequestKind::$api(_) => ApiKey::$api,)*
                other => panic!("no key for {other:?}"),
            }
        };
    }
    keys!(
        Produce,
        Fetch,
        ListOffsets,
        Metadata,
        OffsetCommit,
        OffsetFetch,
        FindCoordinator,
        JoinGroup,
        Heartbeat,
        LeaveGroup,
        SyncGroup,
        DescribeGroups,
        ListGroups,
        CreateTopics,
        DeleteTopics,
        DeleteRecords,
        InitProducerId,
        OffsetForLeaderEpoch,
        AddPartitionsToTxn,
        AddOffsetsToTxn,
        EndTxn,
        WriteTxnMarkers,
        TxnOffsetCommit,
        DescribeAcls,
        CreateAcls,
        DeleteAcls,
        DescribeConfigs,
        AlterConfigs,
        CreatePartitions,
        DeleteGroups,
        ElectLeaders,
        AlterPartitionReassignments,
        ListPartitionReassignments,
        IncrementalAlterConfigs,
        DescribeLogDirs,
        DescribeCluster,
        DescribeQuorum,
        OffsetDelete,
        DescribeProducers,
        DescribeTransactions,
        ListTransactions,
        ConsumerGroupHeartbeat,
        ConsumerGroupDescribe,
        UnregisterBroker,
        AddRaftVoter,
        RemoveRaftVoter,
        DescribeUserScramCredentials,
        AlterUserScramCredentials,
        DescribeClientQuotas,
        AlterClientQuotas
    )
}

/// Every `error_code: N` (and `partition_error_code: N`) in the response.
fn error_codes(response: &ResponseKind) -> Vec<i16> {
    let text = format!("{response:?}");
    text.match_indices("error_code: ")
        .filter_map(|(i, m)| {
            let rest = &text[i + m.len()..];
            let end = rest
                .find(|c: char| c != '-' && !c.is_ascii_digit())
                .unwrap_or(rest.len());
            rest[..end].parse().ok()
        })
        .collect()
}

/// One request per API naming `TOPIC`, `GROUP`, `TXN` or the cluster, with the error Kafka
/// answers when no ACL allows it.
fn table(topic_id: uuid::Uuid) -> Vec<(RequestKind, i16)> {
    let topic = || TopicName(s(TOPIC));
    let group = || GroupId(s(GROUP));
    let txn = || TransactionalId(s(TXN));
    vec![
        (
            RequestKind::Produce(ProduceRequest::default().with_acks(1).with_topic_data(
                vec![TopicProduceData::default()
                        .with_name(topic())
                        .with_topic_id(topic_id)
                        .with_partition_data(vec![PartitionProduceData::default()])],
            )),
            TOPIC_DENIED,
        ),
        (
            RequestKind::Fetch(
                FetchRequest::default()
                    .with_replica_id(BrokerId(-1))
                    .with_max_bytes(1 << 20)
                    .with_topics(vec![FetchTopic::default()
                        .with_topic(topic())
                        .with_topic_id(topic_id)
                        .with_partitions(vec![
                            FetchPartition::default().with_partition_max_bytes(1 << 20)
                        ])]),
            ),
            TOPIC_DENIED,
        ),
        (
            RequestKind::ListOffsets(
                ListOffsetsRequest::default()
                    .with_replica_id(BrokerId(-1))
                    .with_topics(vec![ListOffsetsTopic::default()
                        .with_name(topic())
                        .with_partitions(vec![ListOffsetsPartition::default()])]),
            ),
            TOPIC_DENIED,
        ),
        (
            RequestKind::Metadata(MetadataRequest::default().with_topics(Some(vec![
                MetadataRequestTopic::default().with_name(Some(topic())),
            ]))),
            TOPIC_DENIED,
        ),
        (
            RequestKind::OffsetCommit(
                OffsetCommitRequest::default()
                    .with_group_id(group())
                    .with_topics(vec![OffsetCommitRequestTopic::default()
                        .with_name(topic())
                        .with_partitions(vec![OffsetCommitRequestPartition::default()])]),
            ),
            GROUP_DENIED,
        ),
        (
            RequestKind::OffsetFetch(OffsetFetchRequest::default().with_groups(vec![
                offset_fetch_request::OffsetFetchRequestGroup::default().with_group_id(group()),
            ])),
            GROUP_DENIED,
        ),
        (
            RequestKind::FindCoordinator(
                FindCoordinatorRequest::default().with_coordinator_keys(vec![s(GROUP)]),
            ),
            GROUP_DENIED,
        ),
        (
            RequestKind::JoinGroup(
                JoinGroupRequest::default()
                    .with_group_id(group())
                    .with_protocol_type(s("consumer")),
            ),
            GROUP_DENIED,
        ),
        (
            RequestKind::Heartbeat(HeartbeatRequest::default().with_group_id(group())),
            GROUP_DENIED,
        ),
        (
            RequestKind::LeaveGroup(LeaveGroupRequest::default().with_group_id(group())),
            GROUP_DENIED,
        ),
        (
            RequestKind::SyncGroup(SyncGroupRequest::default().with_group_id(group())),
            GROUP_DENIED,
        ),
        (
            RequestKind::DescribeGroups(
                DescribeGroupsRequest::default().with_groups(vec![group()]),
            ),
            GROUP_DENIED,
        ),
        (
            RequestKind::ConsumerGroupHeartbeat(
                ConsumerGroupHeartbeatRequest::default().with_group_id(group()),
            ),
            GROUP_DENIED,
        ),
        (
            RequestKind::ConsumerGroupDescribe(
                ConsumerGroupDescribeRequest::default().with_group_ids(vec![group()]),
            ),
            GROUP_DENIED,
        ),
        (
            RequestKind::DeleteGroups(
                DeleteGroupsRequest::default().with_groups_names(vec![group()]),
            ),
            GROUP_DENIED,
        ),
        (
            RequestKind::OffsetDelete(
                OffsetDeleteRequest::default()
                    .with_group_id(group())
                    .with_topics(vec![OffsetDeleteRequestTopic::default()
                        .with_name(topic())
                        .with_partitions(vec![OffsetDeleteRequestPartition::default()])]),
            ),
            GROUP_DENIED,
        ),
        (
            RequestKind::CreateTopics(CreateTopicsRequest::default().with_topics(vec![
                CreatableTopic::default()
                    .with_name(TopicName(s("new-topic")))
                    .with_num_partitions(1)
                    .with_replication_factor(1),
            ])),
            TOPIC_DENIED,
        ),
        (
            RequestKind::DeleteTopics(DeleteTopicsRequest::default().with_topics(vec![
                // Another topic (missing: still TOPIC_AUTHORIZATION_FAILED, as Kafka answers),
                // so that the granted pass does not delete the one the others use.
                delete_topics_request::DeleteTopicState::default()
                    .with_name(Some(TopicName(s("doomed")))),
            ])),
            TOPIC_DENIED,
        ),
        (
            RequestKind::DeleteRecords(DeleteRecordsRequest::default().with_topics(vec![
                DeleteRecordsTopic::default()
                    .with_name(topic())
                    .with_partitions(vec![DeleteRecordsPartition::default()]),
            ])),
            TOPIC_DENIED,
        ),
        (
            RequestKind::InitProducerId(
                InitProducerIdRequest::default()
                    .with_transactional_id(Some(txn()))
                    .with_transaction_timeout_ms(60_000)
                    .with_producer_id(ProducerId(-1))
                    .with_producer_epoch(-1),
            ),
            TXN_DENIED,
        ),
        (
            RequestKind::OffsetForLeaderEpoch(
                OffsetForLeaderEpochRequest::default()
                    .with_replica_id(BrokerId(-1))
                    .with_topics(vec![OffsetForLeaderTopic::default()
                        .with_topic(topic())
                        .with_partitions(vec![OffsetForLeaderPartition::default()])]),
            ),
            TOPIC_DENIED,
        ),
        (
            RequestKind::AddPartitionsToTxn(
                AddPartitionsToTxnRequest::default().with_transactions(vec![
                    add_partitions_to_txn_request::AddPartitionsToTxnTransaction::default()
                        .with_transactional_id(txn())
                        .with_topics(vec![AddPartitionsToTxnTopic::default()
                            .with_name(topic())
                            .with_partitions(vec![0])]),
                ]),
            ),
            TXN_DENIED,
        ),
        (
            RequestKind::AddOffsetsToTxn(
                AddOffsetsToTxnRequest::default()
                    .with_transactional_id(txn())
                    .with_group_id(group()),
            ),
            TXN_DENIED,
        ),
        (
            RequestKind::EndTxn(EndTxnRequest::default().with_transactional_id(txn())),
            TXN_DENIED,
        ),
        (
            RequestKind::TxnOffsetCommit(
                TxnOffsetCommitRequest::default()
                    .with_transactional_id(txn())
                    .with_group_id(group())
                    .with_topics(vec![TxnOffsetCommitRequestTopic::default()
                        .with_name(topic())
                        .with_partitions(vec![TxnOffsetCommitRequestPartition::default()])]),
            ),
            TXN_DENIED,
        ),
        (
            RequestKind::DescribeTransactions(
                DescribeTransactionsRequest::default().with_transactional_ids(vec![txn()]),
            ),
            TXN_DENIED,
        ),
        (
            RequestKind::WriteTxnMarkers(WriteTxnMarkersRequest::default().with_markers(vec![
                WritableTxnMarker::default().with_topics(vec![WritableTxnMarkerTopic::default()
                    .with_name(topic())
                    .with_partition_indexes(vec![0])]),
            ])),
            CLUSTER_DENIED,
        ),
        (
            RequestKind::DescribeAcls(
                DescribeAclsRequest::default()
                    .with_resource_type_filter(1)
                    .with_pattern_type_filter(1)
                    .with_operation(1)
                    .with_permission_type(1),
            ),
            CLUSTER_DENIED,
        ),
        (
            RequestKind::CreateAcls(CreateAclsRequest::default().with_creations(vec![
                AclCreation::default()
                    .with_resource_type(2)
                    .with_resource_name(s(TOPIC))
                    .with_resource_pattern_type(3)
                    .with_principal(s("User:ANONYMOUS"))
                    .with_host(s("*"))
                    .with_operation(2)
                    .with_permission_type(3),
            ])),
            CLUSTER_DENIED,
        ),
        (
            // Matches nothing (the granted pass must keep its ACLs).
            RequestKind::DeleteAcls(DeleteAclsRequest::default().with_filters(vec![
                DeleteAclsFilter::default()
                    .with_resource_type_filter(2)
                    .with_resource_name_filter(Some(s("no-such-topic")))
                    .with_pattern_type_filter(3)
                    .with_operation(1)
                    .with_permission_type(1),
            ])),
            CLUSTER_DENIED,
        ),
        (
            RequestKind::DescribeConfigs(DescribeConfigsRequest::default().with_resources(vec![
                DescribeConfigsResource::default()
                    .with_resource_type(2)
                    .with_resource_name(s(TOPIC)),
            ])),
            TOPIC_DENIED,
        ),
        (
            RequestKind::DescribeConfigs(DescribeConfigsRequest::default().with_resources(vec![
                DescribeConfigsResource::default()
                    .with_resource_type(4)
                    .with_resource_name(s("1")),
            ])),
            CLUSTER_DENIED,
        ),
        (
            RequestKind::AlterConfigs(AlterConfigsRequest::default().with_resources(vec![
                AlterConfigsResource::default()
                    .with_resource_type(2)
                    .with_resource_name(s(TOPIC)),
            ])),
            TOPIC_DENIED,
        ),
        (
            RequestKind::IncrementalAlterConfigs(
                IncrementalAlterConfigsRequest::default().with_resources(vec![
                    IncrementalResource::default()
                        .with_resource_type(4)
                        .with_resource_name(s("1")),
                ]),
            ),
            CLUSTER_DENIED,
        ),
        (
            RequestKind::CreatePartitions(CreatePartitionsRequest::default().with_topics(vec![
                CreatePartitionsTopic::default().with_name(topic()).with_count(2),
            ])),
            TOPIC_DENIED,
        ),
        (
            RequestKind::DescribeProducers(DescribeProducersRequest::default().with_topics(vec![
                TopicRequest::default()
                    .with_name(topic())
                    .with_partition_indexes(vec![0]),
            ])),
            TOPIC_DENIED,
        ),
        (
            RequestKind::ElectLeaders(ElectLeadersRequest::default()),
            CLUSTER_DENIED,
        ),
        (
            RequestKind::AlterPartitionReassignments(AlterPartitionReassignmentsRequest::default()),
            CLUSTER_DENIED,
        ),
        (
            RequestKind::ListPartitionReassignments(ListPartitionReassignmentsRequest::default()),
            CLUSTER_DENIED,
        ),
        (
            RequestKind::DescribeLogDirs(DescribeLogDirsRequest::default()),
            CLUSTER_DENIED,
        ),
        (
            RequestKind::DescribeCluster(DescribeClusterRequest::default()),
            CLUSTER_DENIED,
        ),
        (
            RequestKind::DescribeQuorum(DescribeQuorumRequest::default()),
            CLUSTER_DENIED,
        ),
        (
            RequestKind::UnregisterBroker(UnregisterBrokerRequest::default()),
            CLUSTER_DENIED,
        ),
        (
            RequestKind::AddRaftVoter(AddRaftVoterRequest::default()),
            CLUSTER_DENIED,
        ),
        (
            RequestKind::RemoveRaftVoter(RemoveRaftVoterRequest::default()),
            CLUSTER_DENIED,
        ),
        (
            RequestKind::DescribeUserScramCredentials(
                DescribeUserScramCredentialsRequest::default(),
            ),
            CLUSTER_DENIED,
        ),
        (
            RequestKind::AlterUserScramCredentials(
                AlterUserScramCredentialsRequest::default().with_deletions(vec![
                    alter_user_scram_credentials_request::ScramCredentialDeletion::default()
                        .with_name(s("alice"))
                        .with_mechanism(1),
                ]),
            ),
            CLUSTER_DENIED,
        ),
        (
            RequestKind::DescribeClientQuotas(DescribeClientQuotasRequest::default()),
            CLUSTER_DENIED,
        ),
        (
            RequestKind::AlterClientQuotas(AlterClientQuotasRequest::default().with_entries(vec![
                alter_client_quotas_request::EntryData::default()
                    .with_entity(vec![alter_client_quotas_request::EntityData::default()
                        .with_entity_type(s("user"))
                        .with_entity_name(Some(s("alice")))])
                    .with_ops(vec![alter_client_quotas_request::OpData::default()
                        .with_key(s("producer_byte_rate"))
                        .with_value(1e6)]),
            ])),
            CLUSTER_DENIED,
        ),
    ]
}

fn allow_all() -> Vec<AclBinding> {
    [
        (ResourceType::Topic, "*"),
        (ResourceType::Group, "*"),
        (ResourceType::TransactionalId, "*"),
        (ResourceType::Cluster, "kafka-cluster"),
    ]
    .into_iter()
    .map(|(resource_type, name)| AclBinding {
        resource_type,
        resource_name: name.into(),
        pattern_type: PatternType::Literal,
        principal: "User:ANONYMOUS".into(),
        host: "*".into(),
        operation: Operation::All,
        permission: Permission::Allow,
    })
    .collect()
}

#[tokio::test]
async fn every_api_checks_what_kafka_checks() {
    let dir = tempfile::tempdir().unwrap();
    let broker = broker(dir.path());
    let topic_id = broker.topics().get(TOPIC).unwrap().id;
    let rows = table(topic_id);

    // Every advertised API is in the table or served to anyone.
    for range in api_table().advertised() {
        let covered = rows.iter().any(|(r, _)| api_key(r) == range.key);
        assert!(
            covered || UNCHECKED.contains(&range.key) || FILTERED.contains(&range.key),
            "{:?} is advertised but has no row in the authorization table",
            range.key
        );
    }

    for (request, denied) in rows.iter().cloned() {
        let api = api_key(&request);
        let response = call(&broker, request).await;
        let codes = error_codes(&response);
        assert!(
            codes.contains(&denied),
            "{api:?} without ACLs: expected error {denied} in {response:?}"
        );
    }

    // A listing of all topics shows none of them; ListGroups and ListTransactions list none.
    let all = call(
        &broker,
        RequestKind::Metadata(MetadataRequest::default().with_topics(None)),
    )
    .await;
    let ResponseKind::Metadata(m) = all else {
        panic!("not a Metadata response")
    };
    assert!(m.topics.is_empty(), "topics shown without Describe: {m:?}");

    broker.create_acls(allow_all()).await.unwrap();
    for (request, denied) in rows {
        let api = api_key(&request);
        let response = call(&broker, request).await;
        let codes = error_codes(&response);
        assert!(
            !codes.contains(&denied),
            "{api:?} with every ACL granted still answers {denied}: {response:?}"
        );
    }
    let all = call(
        &broker,
        RequestKind::Metadata(MetadataRequest::default().with_topics(None)),
    )
    .await;
    let ResponseKind::Metadata(m) = all else {
        panic!("not a Metadata response")
    };
    let names: Vec<String> = m
        .topics
        .iter()
        .filter_map(|t| t.name.as_ref().map(|n| n.to_string()))
        .collect();
    assert!(names.contains(&TOPIC.to_string()), "{m:?}");
}

#[tokio::test]
async fn a_deny_acl_wins_and_acls_survive_a_restart() {
    let dir = tempfile::tempdir().unwrap();
    {
        let broker = broker(dir.path());
        let mut acls = allow_all();
        acls.push(AclBinding {
            resource_type: ResourceType::Topic,
            resource_name: "ord".into(),
            pattern_type: PatternType::Prefixed,
            principal: "User:*".into(),
            host: "127.0.0.1".into(),
            operation: Operation::Read,
            permission: Permission::Deny,
        });
        broker.create_acls(acls).await.unwrap();
    }
    let broker = broker(dir.path());
    assert_eq!(
        broker.acls().len(),
        5,
        "ACLs are reloaded from data/meta/acls.json"
    );
    let fetch = table(broker.topics().get(TOPIC).unwrap().id)
        .into_iter()
        .find(|(r, _)| api_key(r) == ApiKey::Fetch)
        .unwrap()
        .0;
    let codes = error_codes(&call(&broker, fetch).await);
    assert!(
        codes.contains(&TOPIC_DENIED),
        "denied by the prefixed deny: {codes:?}"
    );
    // Describe is not denied by a deny of Read (Kafka implies nothing from a deny).
    let metadata = table(uuid::Uuid::nil())
        .into_iter()
        .find(|(r, _)| api_key(r) == ApiKey::Metadata)
        .unwrap()
        .0;
    let codes = error_codes(&call(&broker, metadata).await);
    assert!(!codes.contains(&TOPIC_DENIED), "{codes:?}");
}
