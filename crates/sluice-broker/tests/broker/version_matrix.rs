#![allow(clippy::unwrap_used)] // test code: a failed unwrap is a failed test
//! Every API at every version that ApiVersions advertises, over TCP to a running broker.
//!
//! The versions come from the same table ApiVersions answers with (`handlers::api_table`), so
//! a version advertised tomorrow is tested without anyone remembering to. Each request is
//! encoded with the `kafka-protocol` crate at its version (only the fields that version has),
//! and each response is decoded at that version: a response the broker cannot encode shows
//! up here as an error response or a closed connection, never as a wait.
//!
//! Three passes, and checks of ApiVersions itself:
//! - every (API, version) served with a small valid request: answered, decodable, and no
//!   UNKNOWN_SERVER_ERROR anywhere in it (Produce v0–2, listed as Kafka 4 lists them but not
//!   served, close the connection: their own test below);
//! - the data path at every version: Produce appends, ListOffsets finds the earliest, latest
//!   and by-timestamp offsets, Fetch returns the records, Metadata lists the topic;
//! - a consumer group's whole life at every version of each group API: join, sync, heartbeat,
//!   commit, fetch the commit, describe, list, leave.

use std::sync::Arc;

use bytes::{Buf, BufMut, Bytes, BytesMut};
use kafka_protocol::messages::fetch_request::{FetchPartition, FetchTopic};
use kafka_protocol::messages::join_group_request::JoinGroupRequestProtocol;
use kafka_protocol::messages::leave_group_request::MemberIdentity;
use kafka_protocol::messages::list_offsets_request::{ListOffsetsPartition, ListOffsetsTopic};
use kafka_protocol::messages::metadata_request::MetadataRequestTopic;
use kafka_protocol::messages::offset_commit_request::{
    OffsetCommitRequestPartition, OffsetCommitRequestTopic,
};
use kafka_protocol::messages::offset_fetch_request::{
    OffsetFetchRequestGroup, OffsetFetchRequestTopic, OffsetFetchRequestTopics,
};
use kafka_protocol::messages::produce_request::{PartitionProduceData, TopicProduceData};
use kafka_protocol::messages::sync_group_request::SyncGroupRequestAssignment;
use kafka_protocol::messages::*;
use kafka_protocol::protocol::{Decodable, Encodable, StrBytes};
use kafka_protocol::records::RecordBatchDecoder;
use sluice_broker::handlers::api_table;
use sluice_broker::{Broker, BrokerConfig};
use sluice_log::Clock;
use sluice_wire::{ApiRange, Limits};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio_util::sync::CancellationToken;

const NONE: i16 = 0;
const UNKNOWN_SERVER_ERROR: i16 = -1;
const MEMBER_ID_REQUIRED: i16 = 79;
const TOPIC: &str = "matrix";

fn s(v: &str) -> StrBytes {
    StrBytes::from_string(v.to_string())
}

fn topic_name() -> TopicName {
    TopicName(s(TOPIC))
}

/// A client connection that speaks one request at a time.
struct Wire {
    stream: TcpStream,
    correlation_id: i32,
}

impl Wire {
    async fn connect(addr: std::net::SocketAddr) -> Wire {
        Wire {
            stream: TcpStream::connect(addr).await.unwrap(),
            correlation_id: 0,
        }
    }

    /// Sends `body` as `api` at `version` and decodes the answer at that version; panics if
    /// the connection closes or the answer does not decode.
    async fn call(&mut self, api: ApiKey, version: i16, body: RequestKind) -> ResponseKind {
        self.correlation_id += 1;
        let mut frame = BytesMut::new();
        frame.put_i32(0);
        RequestHeader::default()
            .with_request_api_key(api as i16)
            .with_request_api_version(version)
            .with_correlation_id(self.correlation_id)
            .with_client_id(Some(s("version-matrix")))
            .encode(&mut frame, api.request_header_version(version))
            .unwrap();
        body.encode(&mut frame, version)
            .unwrap_or_else(|e| panic!("test bug: {api:?} v{version} request: {e:#}"));
        let size = (frame.len() - 4) as i32;
        frame[..4].copy_from_slice(&size.to_be_bytes());
        self.stream.write_all(&frame).await.unwrap();

        let read = async {
            let size = self.stream.read_i32().await? as usize;
            let mut buf = vec![0; size];
            self.stream.read_exact(&mut buf).await?;
            Ok::<_, std::io::Error>(buf)
        };
        let buf = tokio::time::timeout(std::time::Duration::from_secs(10), read)
            .await
            .unwrap_or_else(|_| panic!("{api:?} v{version}: no answer within 10 s"))
            .unwrap_or_else(|e| panic!("{api:?} v{version}: connection closed ({e})"));
        let mut buf = Bytes::from(buf);
        let header =
            ResponseHeader::decode(&mut buf, api.response_header_version(version)).unwrap();
        assert_eq!(header.correlation_id, self.correlation_id);
        let response = ResponseKind::decode(api, &mut buf, version)
            .unwrap_or_else(|e| panic!("{api:?} v{version}: undecodable response: {e:#}"));
        assert!(
            !buf.has_remaining(),
            "{api:?} v{version}: {} bytes after the response",
            buf.remaining()
        );
        response
    }
}

struct Fixture {
    _dir: tempfile::TempDir,
    broker: Arc<Broker>,
    addr: std::net::SocketAddr,
    shutdown: CancellationToken,
}

impl Drop for Fixture {
    fn drop(&mut self) {
        self.shutdown.cancel();
    }
}

async fn fixture() -> Fixture {
    let dir = tempfile::tempdir().unwrap();
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let mut config = BrokerConfig {
        data_dir: dir.path().to_path_buf(),
        advertised_host: "127.0.0.1".into(),
        advertised_port: i32::from(addr.port()),
        offsets_topic_partitions: 1,
        transaction_state_partitions: 1,
        ..Default::default()
    };
    config.groups.initial_rebalance_delay_ms = 0;
    let broker = Broker::open(config, Arc::new(sluice_log::SystemClock)).unwrap();
    broker
        .topics()
        .create(TOPIC, 1, Default::default(), false)
        .unwrap();
    let shutdown = CancellationToken::new();
    broker.start_background(shutdown.clone());
    tokio::spawn(sluice_wire::serve(
        vec![sluice_wire::Endpoint {
            listener,
            name: Arc::from("PLAINTEXT"),
            tls: None,
        }],
        Arc::clone(&broker),
        Limits::default(),
        shutdown.clone(),
    ));
    Fixture {
        _dir: dir,
        broker,
        addr,
        shutdown,
    }
}

fn range(api: ApiKey) -> ApiRange {
    api_table()
        .get(api)
        .unwrap_or_else(|| panic!("{api:?} is not advertised"))
}

/// The `i`-th version of `api`'s range, wrapping, so that a loop of `i` over the longest
/// range visits every version of every API in it.
fn pick(api: ApiKey, i: i16) -> i16 {
    let r = range(api);
    r.min + i % (r.max - r.min + 1)
}

fn versions(api: ApiKey) -> std::ops::RangeInclusive<i16> {
    let r = range(api);
    r.min..=r.max
}

/// A small request that every version of `api` can carry; for most APIs the defaults are
/// already one (an empty list of topics, groups or ids).
fn sample_request(api: ApiKey, version: i16, topic_id: uuid::Uuid) -> RequestKind {
    macro_rules! default_for {
        ($($api:ident => $request:ident),* $(,)?) => {
            match api {
                $(ApiKey::$api => RequestKind::$api($request::default()),)*
                other => panic!("test has no sample request for {other:?}: add it"),
            }
        };
    }
    match api {
        ApiKey::Metadata if version >= 1 => {
            RequestKind::Metadata(MetadataRequest::default().with_topics(Some(vec![
                MetadataRequestTopic::default().with_name(Some(topic_name())),
            ])))
        }
        ApiKey::ListOffsets => RequestKind::ListOffsets(
            ListOffsetsRequest::default()
                .with_replica_id(BrokerId(-1))
                .with_topics(vec![ListOffsetsTopic::default()
                    .with_name(topic_name())
                    .with_partitions(vec![
                        ListOffsetsPartition::default().with_timestamp(-1)
                    ])]),
        ),
        ApiKey::Fetch => RequestKind::Fetch(fetch_request(version, topic_id, 0)),
        ApiKey::FindCoordinator if version < 4 => {
            RequestKind::FindCoordinator(FindCoordinatorRequest::default().with_key(s("g")))
        }
        ApiKey::FindCoordinator => RequestKind::FindCoordinator(
            FindCoordinatorRequest::default().with_coordinator_keys(vec![s("g")]),
        ),
        ApiKey::DescribeGroups => RequestKind::DescribeGroups(
            DescribeGroupsRequest::default().with_groups(vec![GroupId(s("nobody"))]),
        ),
        ApiKey::DescribeQuorum => {
            use kafka_protocol::messages::describe_quorum_request::{PartitionData, TopicData};
            RequestKind::DescribeQuorum(
                kafka_protocol::messages::DescribeQuorumRequest::default().with_topics(vec![
                    TopicData::default()
                        .with_topic_name(TopicName(s("__cluster_metadata")))
                        .with_partitions(vec![PartitionData::default()]),
                ]),
            )
        }
        // The default acks=0 takes no answer.
        ApiKey::Produce => RequestKind::Produce(ProduceRequest::default().with_acks(1)),
        _ => default_for! {
            Metadata => MetadataRequest,
            ApiVersions => ApiVersionsRequest,
            DescribeCluster => DescribeClusterRequest,
            CreateTopics => CreateTopicsRequest,
            DeleteTopics => DeleteTopicsRequest,
            DeleteRecords => DeleteRecordsRequest,
            DescribeConfigs => DescribeConfigsRequest,
            AlterConfigs => AlterConfigsRequest,
            CreatePartitions => CreatePartitionsRequest,
            ElectLeaders => ElectLeadersRequest,
            AlterPartitionReassignments => AlterPartitionReassignmentsRequest,
            ListPartitionReassignments => ListPartitionReassignmentsRequest,
            IncrementalAlterConfigs => IncrementalAlterConfigsRequest,
            DescribeLogDirs => DescribeLogDirsRequest,
            InitProducerId => InitProducerIdRequest,
            JoinGroup => JoinGroupRequest,
            SyncGroup => SyncGroupRequest,
            Heartbeat => HeartbeatRequest,
            ConsumerGroupHeartbeat => ConsumerGroupHeartbeatRequest,
            ConsumerGroupDescribe => ConsumerGroupDescribeRequest,
            LeaveGroup => LeaveGroupRequest,
            OffsetCommit => OffsetCommitRequest,
            OffsetFetch => OffsetFetchRequest,
            OffsetForLeaderEpoch => OffsetForLeaderEpochRequest,
            ListGroups => ListGroupsRequest,
            DeleteGroups => DeleteGroupsRequest,
            OffsetDelete => OffsetDeleteRequest,
            AddPartitionsToTxn => AddPartitionsToTxnRequest,
            AddOffsetsToTxn => AddOffsetsToTxnRequest,
            EndTxn => EndTxnRequest,
            WriteTxnMarkers => WriteTxnMarkersRequest,
            TxnOffsetCommit => TxnOffsetCommitRequest,
            DescribeProducers => DescribeProducersRequest,
            DescribeTransactions => DescribeTransactionsRequest,
            ListTransactions => ListTransactionsRequest,
            UnregisterBroker => UnregisterBrokerRequest,
            AddRaftVoter => AddRaftVoterRequest,
            RemoveRaftVoter => RemoveRaftVoterRequest,
            // On this PLAINTEXT listener: ILLEGAL_SASL_STATE, answered.
            SaslHandshake => SaslHandshakeRequest,
            SaslAuthenticate => SaslAuthenticateRequest,
            DescribeUserScramCredentials => DescribeUserScramCredentialsRequest,
            AlterUserScramCredentials => AlterUserScramCredentialsRequest,
            DescribeClientQuotas => DescribeClientQuotasRequest,
            AlterClientQuotas => AlterClientQuotasRequest,
            // The authorizer is off: SECURITY_DISABLED, answered.
            CreateAcls => CreateAclsRequest,
            DescribeAcls => DescribeAclsRequest,
            DeleteAcls => DeleteAclsRequest,
        },
    }
}

fn fetch_request(version: i16, topic_id: uuid::Uuid, offset: i64) -> FetchRequest {
    let mut topic = FetchTopic::default().with_partitions(vec![FetchPartition::default()
        .with_fetch_offset(offset)
        .with_partition_max_bytes(1 << 20)]);
    // Fetch names topics by id from v13 (KIP-516).
    topic = if version >= 13 {
        topic.with_topic_id(topic_id)
    } else {
        topic.with_topic(topic_name())
    };
    FetchRequest::default()
        .with_replica_id(BrokerId(-1))
        .with_max_bytes(1 << 20)
        .with_topics(vec![topic])
}

#[tokio::test]
async fn every_advertised_version_is_answered_and_decodes() {
    let f = fixture().await;
    let topic_id = f.broker.topics().get(TOPIC).unwrap().id;
    let mut wire = Wire::connect(f.addr).await;
    for r in api_table().ranges() {
        for version in r.min..=r.max {
            let response = wire
                .call(r.key, version, sample_request(r.key, version, topic_id))
                .await;
            let shown = format!("{response:?}");
            assert!(
                !shown.contains(&format!("error_code: {UNKNOWN_SERVER_ERROR},")),
                "{:?} v{version} answered UNKNOWN_SERVER_ERROR: {shown}",
                r.key
            );
        }
    }
    let metrics = f.broker.metrics_text();
    assert!(
        !metrics.contains("sluice_unencodable_responses_total{"),
        "some responses could not be encoded: {metrics}"
    );
}

#[tokio::test]
async fn the_data_path_works_at_every_version() {
    let f = fixture().await;
    let topic_id = f.broker.topics().get(TOPIC).unwrap().id;
    let mut wire = Wire::connect(f.addr).await;
    // Recent timestamps, so that retention (7 days by default) keeps them.
    let base_ts = sluice_log::SystemClock.now_ms() - 3_600_000;

    // Produce: one batch of 3 records per version, timestamps 1000 apart per batch.
    let mut end = 0;
    for (i, version) in versions(ApiKey::Produce).enumerate() {
        let batch = sluice_log::testing::batch_bytes(0, 3, base_ts + 1000 * i as i64, 8, 0);
        let mut data =
            TopicProduceData::default().with_partition_data(vec![PartitionProduceData::default()
                .with_index(0)
                .with_records(Some(Bytes::from(batch)))]);
        // Produce names topics by id from v13 (KIP-516).
        data = if version >= 13 {
            data.with_topic_id(topic_id)
        } else {
            data.with_name(topic_name())
        };
        let request = ProduceRequest::default()
            .with_acks(-1)
            .with_timeout_ms(5000)
            .with_topic_data(vec![data]);
        let ResponseKind::Produce(r) = wire
            .call(ApiKey::Produce, version, RequestKind::Produce(request))
            .await
        else {
            panic!("not a produce response")
        };
        let p = &r.responses[0].partition_responses[0];
        assert_eq!(
            (p.error_code, p.base_offset),
            (NONE, end),
            "Produce v{version}"
        );
        end += 3;
    }
    let batches = end / 3;

    // ListOffsets: earliest, latest, by timestamp (the 2nd batch's 2nd record), and (v7+)
    // the record with the largest timestamp.
    for version in versions(ApiKey::ListOffsets) {
        let mut cases = vec![
            (-2, 0, -1),
            (-1, end, -1),
            (base_ts + 1001, 4, base_ts + 1001),
        ];
        if version >= 7 {
            let last_ts = base_ts + 1000 * (batches - 1) + 2;
            cases.push((-3, end - 1, last_ts));
        }
        for (timestamp, offset, found_ts) in cases {
            let request = ListOffsetsRequest::default()
                .with_replica_id(BrokerId(-1))
                .with_topics(vec![ListOffsetsTopic::default()
                    .with_name(topic_name())
                    .with_partitions(vec![
                        ListOffsetsPartition::default().with_timestamp(timestamp)
                    ])]);
            let ResponseKind::ListOffsets(r) = wire
                .call(
                    ApiKey::ListOffsets,
                    version,
                    RequestKind::ListOffsets(request),
                )
                .await
            else {
                panic!("not a list offsets response")
            };
            let p = &r.topics[0].partitions[0];
            assert_eq!(
                (p.error_code, p.offset, p.timestamp),
                (NONE, offset, found_ts),
                "ListOffsets v{version} timestamp {timestamp}"
            );
            let epoch = if version >= 4 { 0 } else { -1 };
            assert_eq!(p.leader_epoch, epoch, "ListOffsets v{version} leader epoch");
        }
    }

    // Fetch from offset 0 and from the middle: every record after it comes back.
    for version in versions(ApiKey::Fetch) {
        for from in [0, 4] {
            let ResponseKind::Fetch(r) = wire
                .call(
                    ApiKey::Fetch,
                    version,
                    RequestKind::Fetch(fetch_request(version, topic_id, from)),
                )
                .await
            else {
                panic!("not a fetch response")
            };
            let p = &r.responses[0].partitions[0];
            assert_eq!(
                (p.error_code, p.high_watermark),
                (NONE, end),
                "Fetch v{version}"
            );
            let mut records = p.records.clone().unwrap_or_default();
            let mut offsets = Vec::new();
            while records.has_remaining() {
                for set in RecordBatchDecoder::decode_all(&mut records).unwrap() {
                    offsets.extend(set.records.iter().map(|r| r.offset));
                }
            }
            offsets.retain(|o| *o >= from);
            assert_eq!(
                offsets,
                (from..end).collect::<Vec<_>>(),
                "Fetch v{version} from {from}"
            );
        }
    }

    // Metadata lists the topic, this node as its leader, and (v10+) its id.
    for version in versions(ApiKey::Metadata) {
        let topics = vec![MetadataRequestTopic::default().with_name(Some(topic_name()))];
        let ResponseKind::Metadata(r) = wire
            .call(
                ApiKey::Metadata,
                version,
                RequestKind::Metadata(MetadataRequest::default().with_topics(Some(topics))),
            )
            .await
        else {
            panic!("not a metadata response")
        };
        assert_eq!(r.brokers.len(), 1, "Metadata v{version} brokers");
        assert_eq!(r.brokers[0].port, i32::from(f.addr.port()));
        let t = &r.topics[0];
        assert_eq!(t.name.as_ref().map(|n| n.as_str()), Some(TOPIC));
        assert_eq!(t.error_code, NONE, "Metadata v{version}");
        assert_eq!(t.partitions.len(), 1);
        assert_eq!(t.partitions[0].leader_id, r.brokers[0].node_id);
        if version >= 10 {
            assert_eq!(t.topic_id, topic_id, "Metadata v{version} topic id");
        }
    }
}

#[tokio::test]
async fn a_consumer_group_lives_at_every_version() {
    let f = fixture().await;
    let mut wire = Wire::connect(f.addr).await;
    let longest = [
        ApiKey::JoinGroup,
        ApiKey::SyncGroup,
        ApiKey::Heartbeat,
        ApiKey::OffsetCommit,
        ApiKey::OffsetFetch,
        ApiKey::DescribeGroups,
        ApiKey::ListGroups,
        ApiKey::LeaveGroup,
    ]
    .iter()
    .map(|api| {
        let r = range(*api);
        r.max - r.min + 1
    })
    .max()
    .unwrap();
    for i in 0..longest {
        let group = format!("group-{i}");
        let gid = || GroupId(s(&group));

        // JoinGroup; from v4 the first join is answered MEMBER_ID_REQUIRED with an id (KIP-394).
        let v = pick(ApiKey::JoinGroup, i);
        let join = |member: &str| {
            RequestKind::JoinGroup(
                JoinGroupRequest::default()
                    .with_group_id(gid())
                    .with_session_timeout_ms(30_000)
                    .with_rebalance_timeout_ms(if v >= 1 { 30_000 } else { -1 })
                    .with_member_id(s(member))
                    .with_protocol_type(s("consumer"))
                    .with_protocols(vec![JoinGroupRequestProtocol::default()
                        .with_name(s("range"))
                        .with_metadata(Bytes::from_static(b"subscription"))]),
            )
        };
        let ResponseKind::JoinGroup(mut joined) = wire.call(ApiKey::JoinGroup, v, join("")).await
        else {
            panic!("not a join response")
        };
        if v >= 4 {
            assert_eq!(joined.error_code, MEMBER_ID_REQUIRED, "JoinGroup v{v}");
            let member = joined.member_id.to_string();
            let ResponseKind::JoinGroup(again) =
                wire.call(ApiKey::JoinGroup, v, join(&member)).await
            else {
                panic!("not a join response")
            };
            joined = again;
        }
        assert_eq!(joined.error_code, NONE, "JoinGroup v{v}");
        assert_eq!(
            joined.leader, joined.member_id,
            "JoinGroup v{v}: sole member leads"
        );
        let (member, generation) = (joined.member_id.clone(), joined.generation_id);
        assert_eq!(generation, 1);

        let v = pick(ApiKey::SyncGroup, i);
        let mut sync = SyncGroupRequest::default()
            .with_group_id(gid())
            .with_generation_id(generation)
            .with_member_id(member.clone())
            .with_assignments(vec![SyncGroupRequestAssignment::default()
                .with_member_id(member.clone())
                .with_assignment(Bytes::from_static(b"assignment"))]);
        if v >= 5 {
            sync = sync
                .with_protocol_type(Some(s("consumer")))
                .with_protocol_name(Some(s("range")));
        }
        let ResponseKind::SyncGroup(synced) = wire
            .call(ApiKey::SyncGroup, v, RequestKind::SyncGroup(sync))
            .await
        else {
            panic!("not a sync response")
        };
        assert_eq!(synced.error_code, NONE, "SyncGroup v{v}");
        assert_eq!(synced.assignment, Bytes::from_static(b"assignment"));

        let v = pick(ApiKey::Heartbeat, i);
        let heartbeat = HeartbeatRequest::default()
            .with_group_id(gid())
            .with_generation_id(generation)
            .with_member_id(member.clone());
        let ResponseKind::Heartbeat(beat) = wire
            .call(ApiKey::Heartbeat, v, RequestKind::Heartbeat(heartbeat))
            .await
        else {
            panic!("not a heartbeat response")
        };
        assert_eq!(beat.error_code, NONE, "Heartbeat v{v}");

        let v = pick(ApiKey::OffsetCommit, i);
        let committed = 40 + i64::from(i);
        let commit = OffsetCommitRequest::default()
            .with_group_id(gid())
            .with_generation_id_or_member_epoch(generation)
            .with_member_id(member.clone())
            .with_topics(vec![OffsetCommitRequestTopic::default()
                .with_name(topic_name())
                .with_partitions(vec![OffsetCommitRequestPartition::default()
                    .with_committed_offset(committed)
                    .with_committed_metadata(Some(s("m")))])]);
        let ResponseKind::OffsetCommit(r) = wire
            .call(ApiKey::OffsetCommit, v, RequestKind::OffsetCommit(commit))
            .await
        else {
            panic!("not a commit response")
        };
        assert_eq!(
            r.topics[0].partitions[0].error_code, NONE,
            "OffsetCommit v{v}"
        );

        // OffsetFetch asks for one group by its fields up to v7, in a list of groups from v8.
        let v = pick(ApiKey::OffsetFetch, i);
        let fetch = if v >= 8 {
            OffsetFetchRequest::default().with_groups(vec![OffsetFetchRequestGroup::default()
                .with_group_id(gid())
                .with_topics(Some(vec![OffsetFetchRequestTopics::default()
                    .with_name(topic_name())
                    .with_partition_indexes(vec![0])]))])
        } else {
            OffsetFetchRequest::default()
                .with_group_id(gid())
                .with_topics(Some(vec![OffsetFetchRequestTopic::default()
                    .with_name(topic_name())
                    .with_partition_indexes(vec![0])]))
        };
        let ResponseKind::OffsetFetch(r) = wire
            .call(ApiKey::OffsetFetch, v, RequestKind::OffsetFetch(fetch))
            .await
        else {
            panic!("not an offset fetch response")
        };
        let (error, offset) = if v >= 8 {
            let p = &r.groups[0].topics[0].partitions[0];
            (p.error_code, p.committed_offset)
        } else {
            let p = &r.topics[0].partitions[0];
            (p.error_code, p.committed_offset)
        };
        assert_eq!((error, offset), (NONE, committed), "OffsetFetch v{v}");

        let v = pick(ApiKey::DescribeGroups, i);
        let ResponseKind::DescribeGroups(r) = wire
            .call(
                ApiKey::DescribeGroups,
                v,
                RequestKind::DescribeGroups(
                    DescribeGroupsRequest::default().with_groups(vec![gid()]),
                ),
            )
            .await
        else {
            panic!("not a describe response")
        };
        let g = &r.groups[0];
        assert_eq!(
            (g.error_code, g.group_state.as_str(), g.members.len()),
            (NONE, "Stable", 1),
            "DescribeGroups v{v}"
        );

        let v = pick(ApiKey::ListGroups, i);
        let ResponseKind::ListGroups(r) = wire
            .call(
                ApiKey::ListGroups,
                v,
                RequestKind::ListGroups(ListGroupsRequest::default()),
            )
            .await
        else {
            panic!("not a list groups response")
        };
        assert_eq!(r.error_code, NONE, "ListGroups v{v}");
        assert!(
            r.groups.iter().any(|g| g.group_id.as_str() == group),
            "ListGroups v{v} lists {group}"
        );

        // LeaveGroup names the member in its fields up to v2, in a list of members from v3.
        let v = pick(ApiKey::LeaveGroup, i);
        let leave = if v >= 3 {
            LeaveGroupRequest::default()
                .with_group_id(gid())
                .with_members(vec![
                    MemberIdentity::default().with_member_id(member.clone())
                ])
        } else {
            LeaveGroupRequest::default()
                .with_group_id(gid())
                .with_member_id(member.clone())
        };
        let ResponseKind::LeaveGroup(r) = wire
            .call(ApiKey::LeaveGroup, v, RequestKind::LeaveGroup(leave))
            .await
        else {
            panic!("not a leave response")
        };
        assert_eq!(r.error_code, NONE, "LeaveGroup v{v}");
    }
}

/// ApiVersions lists `transaction.version` (supported from 0) only to v4+ requests: the Java
/// client up to 3.8 sends v3 and drops the connection on a 0 minimum (KIP-1022, KAFKA-17492).
/// The finalized level is shown from v3 on.
#[tokio::test]
async fn api_versions_shows_zero_minimum_features_only_from_v4() {
    let f = fixture().await;
    let mut wire = Wire::connect(f.addr).await;
    for version in versions(ApiKey::ApiVersions) {
        let ResponseKind::ApiVersions(r) = wire
            .call(
                ApiKey::ApiVersions,
                version,
                RequestKind::ApiVersions(ApiVersionsRequest::default()),
            )
            .await
        else {
            panic!("not an ApiVersions response")
        };
        assert_eq!(r.error_code, NONE);
        assert_eq!(r.api_keys.len(), api_table().ranges().len());
        let supported: Vec<_> = r
            .supported_features
            .iter()
            .map(|f| (f.name.as_str(), f.min_version, f.max_version))
            .collect();
        let finalized: Vec<_> = r
            .finalized_features
            .iter()
            .map(|f| (f.name.as_str(), f.max_version_level))
            .collect();
        match version {
            0..=2 => assert!(supported.is_empty() && finalized.is_empty()),
            3 => {
                assert!(supported.is_empty(), "v3 sees {supported:?}");
                assert_eq!(finalized, [("transaction.version", 2)]);
            }
            _ => {
                assert_eq!(supported, [("transaction.version", 0, 2)]);
                assert_eq!(finalized, [("transaction.version", 2)]);
            }
        }
    }
}

/// Produce is listed from v0 as Kafka 4 lists it (KAFKA-18659: librdkafka before 2.11 compresses
/// only for brokers that list v0) but served from v3: a v0–2 request closes the connection
/// instead of waiting for an answer that never comes.
#[tokio::test]
async fn produce_is_listed_from_v0_and_older_requests_close_the_connection() {
    let f = fixture().await;
    let mut wire = Wire::connect(f.addr).await;
    let ResponseKind::ApiVersions(r) = wire
        .call(
            ApiKey::ApiVersions,
            3,
            RequestKind::ApiVersions(ApiVersionsRequest::default()),
        )
        .await
    else {
        panic!("not an ApiVersions response")
    };
    let produce = r
        .api_keys
        .iter()
        .find(|k| k.api_key == ApiKey::Produce as i16)
        .unwrap();
    assert_eq!((produce.min_version, produce.max_version), (0, 13));
    for version in 0..=2i16 {
        // A v0–2 body is a message set the codec does not speak: the header alone is enough,
        // the broker refuses the version before reading further.
        let mut stream = TcpStream::connect(f.addr).await.unwrap();
        let mut frame = BytesMut::new();
        frame.put_i32(0);
        RequestHeader::default()
            .with_request_api_key(ApiKey::Produce as i16)
            .with_request_api_version(version)
            .with_correlation_id(9)
            .with_client_id(Some(s("old-client")))
            .encode(&mut frame, 1)
            .unwrap();
        frame.put_i16(1); // acks
        let size = (frame.len() - 4) as i32;
        frame[..4].copy_from_slice(&size.to_be_bytes());
        stream.write_all(&frame).await.unwrap();
        let mut rest = Vec::new();
        let read = tokio::time::timeout(
            std::time::Duration::from_secs(10),
            stream.read_to_end(&mut rest),
        )
        .await
        .expect("the connection closes");
        assert!(
            read.is_ok() && rest.is_empty(),
            "Produce v{version}: {rest:?}"
        );
    }
}

/// CreateTopics at every version creates the topic and, on success, carries no error message
/// (null, as Kafka answers; aiokafka checks it).
#[tokio::test]
async fn create_topics_succeeds_without_a_message_at_every_version() {
    use kafka_protocol::messages::create_topics_request::CreatableTopic;
    let f = fixture().await;
    let mut wire = Wire::connect(f.addr).await;
    for version in versions(ApiKey::CreateTopics) {
        let name = format!("created-v{version}");
        let request = CreateTopicsRequest::default()
            .with_timeout_ms(5_000)
            .with_topics(vec![CreatableTopic::default()
                .with_name(TopicName(s(&name)))
                .with_num_partitions(2)
                .with_replication_factor(1)]);
        let ResponseKind::CreateTopics(r) = wire
            .call(
                ApiKey::CreateTopics,
                version,
                RequestKind::CreateTopics(request),
            )
            .await
        else {
            panic!("not a CreateTopics response")
        };
        let t = &r.topics[0];
        assert_eq!(
            (t.error_code, t.error_message.as_ref()),
            (NONE, None),
            "CreateTopics v{version}"
        );
        assert_eq!(f.broker.topics().get(&name).unwrap().partition_count(), 2);
    }
}
