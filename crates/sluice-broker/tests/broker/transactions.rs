#![allow(clippy::unwrap_used)] // test code: a failed unwrap is a failed test
//! The transaction APIs request by request against a broker, including the requests a client
//! should never send: each gets its Kafka error and leaves the coordinator's state as it was.

use std::sync::Arc;

use kafka_protocol::messages::add_partitions_to_txn_request::AddPartitionsToTxnTopic;
use kafka_protocol::messages::produce_request::{PartitionProduceData, TopicProduceData};
use kafka_protocol::messages::txn_offset_commit_request::{
    TxnOffsetCommitRequestPartition, TxnOffsetCommitRequestTopic,
};
use kafka_protocol::messages::{
    AddOffsetsToTxnRequest, AddPartitionsToTxnRequest, ApiKey, DescribeTransactionsRequest,
    EndTxnRequest, FetchRequest, InitProducerIdRequest, ProduceRequest, ProducerId, RequestHeader,
    RequestKind, ResponseKind, TopicName, TransactionalId, TxnOffsetCommitRequest,
};
use kafka_protocol::protocol::StrBytes;
use sluice_broker::{Broker, BrokerConfig};
use sluice_wire::{Peer, Reply, Request, Service};

const NONE: i16 = 0;
const INVALID_PRODUCER_EPOCH: i16 = 47;
const INVALID_PRODUCER_ID_MAPPING: i16 = 49;
const INVALID_TRANSACTION_TIMEOUT: i16 = 50;
const INVALID_TXN_STATE: i16 = 48;
const INVALID_REQUIRED_ACKS: i16 = 21;
const PRODUCER_FENCED: i16 = 90;
const UNKNOWN_TOPIC_OR_PARTITION: i16 = 3;

struct Fixture {
    _dir: tempfile::TempDir,
    broker: Arc<Broker>,
}

fn fixture() -> Fixture {
    let dir = tempfile::tempdir().unwrap();
    let config = BrokerConfig {
        data_dir: dir.path().to_path_buf(),
        offsets_topic_partitions: 1,
        transaction_state_partitions: 1,
        ..Default::default()
    };
    let broker = Broker::open(config, Arc::new(sluice_log::SystemClock)).unwrap();
    broker
        .topics()
        .create("t", 2, Default::default(), false)
        .unwrap();
    Fixture { _dir: dir, broker }
}

async fn call(broker: &Broker, api_key: ApiKey, version: i16, body: RequestKind) -> ResponseKind {
    let request = Request {
        header: RequestHeader::default()
            .with_request_api_key(api_key as i16)
            .with_request_api_version(version),
        api_key,
        body,
    };
    let peer = Peer::plaintext("127.0.0.1:1".parse().unwrap());
    let session = broker.open_session(&peer);
    match broker.call(request, &peer, &session) {
        Reply::Ready(r) => *r,
        Reply::Later(f) => f.await.unwrap(),
        Reply::Silent => panic!("no response"),
        Reply::Close(reason) => panic!("connection closed: {reason}"),
    }
}

fn tid(s: &str) -> TransactionalId {
    TransactionalId(StrBytes::from_string(s.to_string()))
}

async fn init(broker: &Broker, id: &str, timeout_ms: i32) -> (i16, i64, i16) {
    let r = call(
        broker,
        ApiKey::InitProducerId,
        4,
        RequestKind::InitProducerId(
            InitProducerIdRequest::default()
                .with_transactional_id(Some(tid(id)))
                .with_transaction_timeout_ms(timeout_ms)
                .with_producer_id(ProducerId(-1))
                .with_producer_epoch(-1),
        ),
    )
    .await;
    let ResponseKind::InitProducerId(r) = r else {
        panic!("{r:?}")
    };
    (r.error_code, r.producer_id.0, r.producer_epoch)
}

async fn add_partition(
    broker: &Broker,
    id: &str,
    pid: i64,
    epoch: i16,
    topic: &str,
    p: i32,
) -> i16 {
    let r = call(
        broker,
        ApiKey::AddPartitionsToTxn,
        3,
        RequestKind::AddPartitionsToTxn(
            AddPartitionsToTxnRequest::default()
                .with_v3_and_below_transactional_id(tid(id))
                .with_v3_and_below_producer_id(ProducerId(pid))
                .with_v3_and_below_producer_epoch(epoch)
                .with_v3_and_below_topics(vec![AddPartitionsToTxnTopic::default()
                    .with_name(TopicName(StrBytes::from_string(topic.into())))
                    .with_partitions(vec![p])]),
        ),
    )
    .await;
    let ResponseKind::AddPartitionsToTxn(r) = r else {
        panic!("{r:?}")
    };
    r.results_by_topic_v3_and_below[0].results_by_partition[0].partition_error_code
}

async fn end(
    broker: &Broker,
    id: &str,
    pid: i64,
    epoch: i16,
    commit: bool,
    version: i16,
) -> (i16, i64, i16) {
    let r = call(
        broker,
        ApiKey::EndTxn,
        version,
        RequestKind::EndTxn(
            EndTxnRequest::default()
                .with_transactional_id(tid(id))
                .with_producer_id(ProducerId(pid))
                .with_producer_epoch(epoch)
                .with_committed(commit),
        ),
    )
    .await;
    let ResponseKind::EndTxn(r) = r else {
        panic!("{r:?}")
    };
    (r.error_code, r.producer_id.0, r.producer_epoch)
}

async fn describe(broker: &Broker, id: &str) -> (String, i16, Vec<i32>) {
    let r = call(
        broker,
        ApiKey::DescribeTransactions,
        0,
        RequestKind::DescribeTransactions(
            DescribeTransactionsRequest::default().with_transactional_ids(vec![tid(id)]),
        ),
    )
    .await;
    let ResponseKind::DescribeTransactions(r) = r else {
        panic!("{r:?}")
    };
    let s = &r.transaction_states[0];
    (
        s.transaction_state.to_string(),
        s.producer_epoch,
        s.topics.iter().flat_map(|t| t.partitions.clone()).collect(),
    )
}

/// A transactional write of producer `pid`, whose transactional id is "app".
async fn produce(
    broker: &Broker,
    version: i16,
    partition: i32,
    pid: i64,
    epoch: i16,
    seq: i32,
) -> i16 {
    produce_as(broker, Some("app"), -1, version, partition, pid, epoch, seq).await
}

#[allow(clippy::too_many_arguments)]
async fn produce_as(
    broker: &Broker,
    id: Option<&str>,
    acks: i16,
    version: i16,
    partition: i32,
    pid: i64,
    epoch: i16,
    seq: i32,
) -> i16 {
    let batch = sluice_log::testing::transactional_batch_bytes(pid, epoch, seq, 2);
    let r = call(
        broker,
        ApiKey::Produce,
        version,
        RequestKind::Produce(
            ProduceRequest::default()
                .with_acks(acks)
                .with_timeout_ms(5000)
                .with_transactional_id(id.map(tid))
                .with_topic_data(vec![TopicProduceData::default()
                    .with_name(TopicName(StrBytes::from_static_str("t")))
                    .with_partition_data(vec![PartitionProduceData::default()
                        .with_index(partition)
                        .with_records(Some(batch.into()))])]),
        ),
    )
    .await;
    let ResponseKind::Produce(r) = r else {
        panic!("{r:?}")
    };
    r.responses[0].partition_responses[0].error_code
}

async fn txn_offset_commit(
    broker: &Broker,
    version: i16,
    group: &str,
    pid: i64,
    epoch: i16,
    offset: i64,
) -> i16 {
    let r = call(
        broker,
        ApiKey::TxnOffsetCommit,
        version,
        RequestKind::TxnOffsetCommit(
            TxnOffsetCommitRequest::default()
                .with_transactional_id(tid("app"))
                .with_group_id(StrBytes::from_string(group.to_string()).into())
                .with_producer_id(ProducerId(pid))
                .with_producer_epoch(epoch)
                .with_generation_id(-1)
                .with_topics(vec![TxnOffsetCommitRequestTopic::default()
                    .with_name(TopicName(StrBytes::from_static_str("t")))
                    .with_partitions(vec![TxnOffsetCommitRequestPartition::default()
                        .with_partition_index(0)
                        .with_committed_offset(offset)])]),
        ),
    )
    .await;
    let ResponseKind::TxnOffsetCommit(r) = r else {
        panic!("{r:?}")
    };
    r.topics[0].partitions[0].error_code
}

async fn last_stable(broker: &Broker, partition: i32) -> (i64, i64, usize) {
    use kafka_protocol::messages::fetch_request::{FetchPartition, FetchTopic};
    let r = call(
        broker,
        ApiKey::Fetch,
        12,
        RequestKind::Fetch(
            FetchRequest::default()
                .with_max_wait_ms(0)
                .with_isolation_level(1)
                .with_max_bytes(1 << 20)
                .with_topics(vec![FetchTopic::default()
                    .with_topic(TopicName(StrBytes::from_static_str("t")))
                    .with_partitions(vec![FetchPartition::default()
                        .with_partition(partition)
                        .with_fetch_offset(0)
                        .with_partition_max_bytes(1 << 20)])]),
        ),
    )
    .await;
    let ResponseKind::Fetch(r) = r else {
        panic!("{r:?}")
    };
    let p = &r.responses[0].partitions[0];
    (
        p.high_watermark,
        p.last_stable_offset,
        p.aborted_transactions.as_ref().map_or(0, Vec::len),
    )
}

#[tokio::test]
async fn a_transaction_commits_and_aborts_through_the_apis() {
    let f = fixture();
    let b = &f.broker;
    let (e, pid, epoch) = init(b, "app", 60_000).await;
    assert_eq!((e, epoch), (NONE, 0));
    assert_eq!(add_partition(b, "app", pid, epoch, "t", 0).await, NONE);
    assert_eq!(produce(b, 11, 0, pid, epoch, 0).await, NONE);
    assert_eq!(
        last_stable(b, 0).await,
        (2, 0, 0),
        "the open transaction holds back the LSO"
    );
    assert_eq!(describe(b, "app").await, ("Ongoing".into(), 0, vec![0]));
    assert_eq!(end(b, "app", pid, epoch, false, 3).await, (NONE, pid, 0));
    let (hw, lso, aborted) = last_stable(b, 0).await;
    assert_eq!(
        (hw, lso, aborted),
        (3, 3, 1),
        "the abort marker settles it; one aborted txn"
    );
    // A retried EndTxn of the same outcome succeeds; the other outcome is refused.
    assert_eq!(end(b, "app", pid, epoch, false, 3).await.0, NONE);
    assert_eq!(
        end(b, "app", pid, epoch, true, 3).await.0,
        INVALID_TXN_STATE
    );

    // TV2: Produce v12 adds the partition itself; EndTxn v5 bumps the epoch.
    assert_eq!(produce(b, 12, 1, pid, epoch, 0).await, NONE);
    assert_eq!(describe(b, "app").await.2, vec![1]);
    let (e, pid2, epoch2) = end(b, "app", pid, epoch, true, 5).await;
    assert_eq!((e, pid2, epoch2), (NONE, pid, 1));
    assert_eq!(last_stable(b, 1).await.1, 3);
    // The ended transaction's late write (old epoch) is fenced.
    assert_eq!(produce(b, 12, 1, pid, 0, 2).await, INVALID_PRODUCER_EPOCH);
    assert_eq!(
        describe(b, "app").await,
        ("CompleteCommit".into(), 1, vec![])
    );
}

#[tokio::test]
async fn bad_requests_get_their_errors_and_change_nothing() {
    let f = fixture();
    let b = &f.broker;
    let (_, pid, epoch) = init(b, "app", 60_000).await;
    assert_eq!(add_partition(b, "app", pid, epoch, "t", 0).await, NONE);
    let before = describe(b, "app").await;

    // EndTxn for an unknown transactional id.
    assert_eq!(
        end(b, "nobody", pid, epoch, true, 3).await.0,
        INVALID_PRODUCER_ID_MAPPING
    );
    // AddPartitionsToTxn with a wrong epoch (older: fenced; newer: invalid) or producer id.
    assert_eq!(
        add_partition(b, "app", pid, epoch - 1, "t", 1).await,
        PRODUCER_FENCED
    );
    assert_eq!(
        add_partition(b, "app", pid, epoch + 1, "t", 1).await,
        INVALID_PRODUCER_EPOCH
    );
    assert_eq!(
        add_partition(b, "app", pid + 99, epoch, "t", 1).await,
        INVALID_PRODUCER_ID_MAPPING
    );
    assert_eq!(
        add_partition(b, "app", pid, epoch, "missing", 0).await,
        UNKNOWN_TOPIC_OR_PARTITION
    );
    // TxnOffsetCommit (v3, before KIP-890) for a group the transaction never added.
    assert_eq!(
        txn_offset_commit(b, 3, "never-added", pid, epoch, 5).await,
        INVALID_TXN_STATE
    );
    // A transactional write to a partition not in the transaction (Produce v11).
    assert_eq!(produce(b, 11, 1, pid, epoch, 0).await, INVALID_TXN_STATE);
    // A transactional write naming another transactional id than its producer's, or none,
    // also for a partition in the transaction; one with acks other than all.
    assert_eq!(add_partition(b, "app", pid, epoch, "t", 0).await, NONE);
    for (id, version) in [(Some("idle"), 11), (None, 11), (Some("idle"), 12)] {
        assert_eq!(
            produce_as(b, id, -1, version, 0, pid, epoch, 0).await,
            INVALID_PRODUCER_ID_MAPPING,
            "{id:?} v{version}"
        );
    }
    assert_eq!(
        produce_as(b, Some("app"), 1, 11, 0, pid, epoch, 0).await,
        INVALID_REQUIRED_ACKS
    );
    // A timeout beyond transaction.max.timeout.ms.
    assert_eq!(
        init(b, "slow", 3_600_000).await.0,
        INVALID_TRANSACTION_TIMEOUT
    );
    // EndTxn with nothing open (before KIP-890).
    let (_, other, other_epoch) = init(b, "idle", 60_000).await;
    assert_eq!(
        end(b, "idle", other, other_epoch, true, 3).await.0,
        INVALID_TXN_STATE
    );

    assert_eq!(
        describe(b, "app").await,
        before,
        "the coordinator's state is unharmed"
    );
    // And the transaction still works.
    let r = call(
        b,
        ApiKey::AddOffsetsToTxn,
        3,
        RequestKind::AddOffsetsToTxn(
            AddOffsetsToTxnRequest::default()
                .with_transactional_id(tid("app"))
                .with_producer_id(ProducerId(pid))
                .with_producer_epoch(epoch)
                .with_group_id(StrBytes::from_static_str("g").into()),
        ),
    )
    .await;
    let ResponseKind::AddOffsetsToTxn(r) = r else {
        panic!("{r:?}")
    };
    assert_eq!(r.error_code, NONE);
    assert_eq!(produce(b, 11, 0, pid, epoch, 0).await, NONE);
    assert_eq!(end(b, "app", pid, epoch, true, 3).await.0, NONE);
    assert_eq!(last_stable(b, 0).await, (3, 3, 0));
}

#[tokio::test]
async fn a_new_producer_fences_the_old_and_aborts_its_transaction() {
    let f = fixture();
    let b = &f.broker;
    let (_, pid, epoch) = init(b, "app", 60_000).await;
    assert_eq!(add_partition(b, "app", pid, epoch, "t", 0).await, NONE);
    assert_eq!(produce(b, 11, 0, pid, epoch, 0).await, NONE);
    let (e, pid2, epoch2) = init(b, "app", 60_000).await;
    assert_eq!((e, pid2, epoch2), (NONE, pid, 1));
    assert_eq!(
        last_stable(b, 0).await,
        (3, 3, 1),
        "the zombie's transaction is aborted"
    );
    assert_eq!(end(b, "app", pid, epoch, true, 3).await.0, PRODUCER_FENCED);
    assert_eq!(
        produce(b, 11, 0, pid, epoch, 2).await,
        INVALID_PRODUCER_EPOCH
    );
}

#[tokio::test]
async fn offsets_pending_in_a_transaction_are_unstable_until_it_commits() {
    use kafka_protocol::messages::offset_fetch_request::OffsetFetchRequestTopic;
    use kafka_protocol::messages::OffsetFetchRequest;
    let f = fixture();
    let b = &f.broker;
    let (_, pid, epoch) = init(b, "app", 60_000).await;
    // TxnOffsetCommit v5 (KIP-890) adds the group itself.
    assert_eq!(txn_offset_commit(b, 5, "g", pid, epoch, 7).await, NONE);
    let fetch = |stable: bool| {
        RequestKind::OffsetFetch(
            OffsetFetchRequest::default()
                .with_group_id(StrBytes::from_static_str("g").into())
                .with_require_stable(stable)
                .with_topics(Some(vec![OffsetFetchRequestTopic::default()
                    .with_name(TopicName(StrBytes::from_static_str("t")))
                    .with_partition_indexes(vec![0])])),
        )
    };
    let offset = |r: ResponseKind| {
        let ResponseKind::OffsetFetch(r) = r else {
            panic!("{r:?}")
        };
        let p = &r.topics[0].partitions[0];
        (p.error_code, p.committed_offset)
    };
    assert_eq!(
        offset(call(b, ApiKey::OffsetFetch, 7, fetch(true)).await),
        (88, -1)
    );
    assert_eq!(
        offset(call(b, ApiKey::OffsetFetch, 7, fetch(false)).await),
        (NONE, -1)
    );
    assert_eq!(end(b, "app", pid, epoch, true, 5).await.0, NONE);
    assert_eq!(
        offset(call(b, ApiKey::OffsetFetch, 7, fetch(true)).await),
        (NONE, 7)
    );
}

/// PRODUCER_FENCED (90) exists from InitProducerId v4 and AddPartitionsToTxn, AddOffsetsToTxn
/// and EndTxn v2 (KIP-588); older versions get INVALID_PRODUCER_EPOCH (47), as from Kafka
/// (aiokafka, which speaks AddPartitionsToTxn v0, reported 90 as an unknown error).
#[tokio::test]
async fn a_fenced_producer_gets_the_error_its_request_version_knows() {
    let f = fixture();
    let b = &f.broker;
    let (_, pid, epoch) = init(b, "old", 60_000).await;
    let (_, _, newer) = init(b, "old", 60_000).await;
    assert!(newer > epoch, "a second InitProducerId fences the first");
    for (version, expected) in [
        (0, INVALID_PRODUCER_EPOCH),
        (1, INVALID_PRODUCER_EPOCH),
        (2, PRODUCER_FENCED),
        (3, PRODUCER_FENCED),
    ] {
        let r = call(
            b,
            ApiKey::AddPartitionsToTxn,
            version,
            RequestKind::AddPartitionsToTxn(
                AddPartitionsToTxnRequest::default()
                    .with_v3_and_below_transactional_id(tid("old"))
                    .with_v3_and_below_producer_id(ProducerId(pid))
                    .with_v3_and_below_producer_epoch(epoch)
                    .with_v3_and_below_topics(vec![AddPartitionsToTxnTopic::default()
                        .with_name(TopicName(StrBytes::from_string("t".into())))
                        .with_partitions(vec![0])]),
            ),
        )
        .await;
        let ResponseKind::AddPartitionsToTxn(r) = r else {
            panic!("{r:?}")
        };
        let code = r.results_by_topic_v3_and_below[0].results_by_partition[0].partition_error_code;
        assert_eq!(code, expected, "AddPartitionsToTxn v{version}");
        let (code, _, _) = end(b, "old", pid, epoch, false, version).await;
        assert_eq!(code, expected, "EndTxn v{version}");
    }
}
