//! DescribeQuorum (KIP-595, KIP-853): the metadata group, for `kafka-metadata-quorum.sh
//! describe --status / --replication`. Kafka answers it for the `__cluster_metadata` topic's one
//! partition; so does Sluice, for its metadata Raft group. Any node answers: one that does not
//! lead the group asks the leader, which alone knows how far each voter's log matches its own.
//!
//! What Sluice does not know it reports as unknown (-1): when a follower last fetched (Raft
//! pushes entries to followers instead), and any timestamp of a voter that is behind. A voter
//! whose log holds everything committed is "caught up" at the time of the answer. The single
//! node, which runs no metadata log, reports itself as the only voter and leader with unknown
//! offsets.

use kafka_protocol::error::ResponseError;
use kafka_protocol::messages::describe_quorum_response::{
    Listener, Node, PartitionData, ReplicaState, TopicData,
};
use kafka_protocol::messages::{
    BrokerId, DescribeQuorumRequest, DescribeQuorumResponse, ResponseKind,
};
use sluice_cluster::raft::network::ProposeError;
use sluice_cluster::raft::quorum::{QuorumInfo, ReplicaProgress};
use sluice_wire::Reply;

use super::{str_bytes, topic_name};
use crate::broker::Broker;
use crate::handlers::{Call, Versions};

pub const VERSIONS: Versions = Versions::new(0, 2);

/// The topic name Kafka's tools ask about; Sluice's metadata group answers for it.
pub const METADATA_TOPIC: &str = "__cluster_metadata";
/// The name the voters' internal listeners are reported under (v2), as Kafka names its own.
const LISTENER: &str = "CONTROLLER";

pub fn handle(broker: &Broker, request: DescribeQuorumRequest, call: &Call) -> Reply {
    let version = call.version;
    let asked: Vec<(String, i32)> = request
        .topics
        .iter()
        .flat_map(|t| {
            t.partitions
                .iter()
                .map(|p| (t.topic_name.to_string(), p.partition_index))
        })
        .collect();
    let known = |(topic, index): &(String, i32)| topic == METADATA_TOPIC && *index == 0;
    if !asked.iter().any(known) {
        return Reply::Ready(Box::new(answer(
            version,
            &asked,
            Err(unknown()),
            broker.now_ms(),
        )));
    }
    let Some(replication) = broker.replication().cloned() else {
        let me = u64::try_from(broker.node_id()).unwrap_or_default();
        let single = QuorumInfo {
            leader: me,
            term: 0,
            high_watermark: -1,
            voters: vec![ReplicaProgress {
                id: me,
                address: String::new(),
                log_end: -1,
            }],
            observers: Vec::new(),
        };
        return Reply::Ready(Box::new(answer(
            version,
            &asked,
            Ok(single),
            broker.now_ms(),
        )));
    };
    let now = broker.now_ms();
    Reply::Later(Box::pin(async move {
        let quorum = replication.node().describe_quorum().await.map_err(|e| {
            let code = match e {
                ProposeError::NoLeader
                | ProposeError::NotLeader(_)
                | ProposeError::Unreachable(_) => ResponseError::NotLeaderOrFollower.code(),
                _ => ResponseError::UnknownServerError.code(),
            };
            (
                code,
                format!("the metadata group's leader did not answer: {e}"),
            )
        });
        Some(answer(version, &asked, quorum, now))
    }))
}

fn unknown() -> (i16, String) {
    (
        ResponseError::UnknownTopicOrPartition.code(),
        format!("Sluice describes only the metadata quorum, {METADATA_TOPIC} partition 0"),
    )
}

/// One partition answer per partition asked: the quorum for `__cluster_metadata`-0, an
/// unknown-partition error for anything else.
fn answer(
    version: i16,
    asked: &[(String, i32)],
    quorum: Result<QuorumInfo, (i16, String)>,
    now: i64,
) -> ResponseKind {
    let mut topics: Vec<TopicData> = Vec::new();
    for (topic, index) in asked {
        let data = if topic == METADATA_TOPIC && *index == 0 {
            partition(*index, &quorum, now)
        } else {
            failed(*index, unknown())
        };
        match topics.iter_mut().find(|t| t.topic_name.as_str() == topic) {
            Some(t) => t.partitions.push(data),
            None => topics.push(
                TopicData::default()
                    .with_topic_name(topic_name(topic))
                    .with_partitions(vec![data]),
            ),
        }
    }
    let mut response = DescribeQuorumResponse::default().with_topics(topics);
    if let (Ok(q), true) = (&quorum, version >= 2) {
        response = response.with_nodes(
            q.voters
                .iter()
                .chain(&q.observers)
                .filter_map(node)
                .collect(),
        );
    }
    ResponseKind::DescribeQuorum(response)
}

fn failed(index: i32, (code, message): (i16, String)) -> PartitionData {
    PartitionData::default()
        .with_partition_index(index)
        .with_error_code(code)
        .with_error_message(Some(str_bytes(&message)))
        .with_leader_id(BrokerId(-1))
        .with_leader_epoch(-1)
        .with_high_watermark(-1)
}

fn partition(index: i32, quorum: &Result<QuorumInfo, (i16, String)>, now: i64) -> PartitionData {
    let q = match quorum {
        Ok(q) => q,
        Err(e) => return failed(index, e.clone()),
    };
    let state = |r: &ReplicaProgress| {
        let leader = r.id == q.leader;
        let caught_up = q.high_watermark >= 0 && r.caught_up(q.high_watermark);
        ReplicaState::default()
            .with_replica_id(BrokerId(id(r.id)))
            .with_log_end_offset(r.log_end)
            .with_last_fetch_timestamp(if leader { now } else { -1 })
            .with_last_caught_up_timestamp(if leader || caught_up { now } else { -1 })
    };
    PartitionData::default()
        .with_partition_index(index)
        .with_leader_id(BrokerId(id(q.leader)))
        .with_leader_epoch(i32::try_from(q.term).unwrap_or(i32::MAX))
        .with_high_watermark(q.high_watermark)
        .with_current_voters(q.voters.iter().map(state).collect())
        .with_observers(q.observers.iter().map(state).collect())
}

fn id(node: u64) -> i32 {
    i32::try_from(node).unwrap_or(-1)
}

/// A voter's endpoint (v2): its internal listener, where the metadata group's traffic goes.
fn node(r: &ReplicaProgress) -> Option<Node> {
    let (host, port) = r.address.rsplit_once(':')?;
    Some(
        Node::default()
            .with_node_id(BrokerId(id(r.id)))
            .with_listeners(vec![Listener::default()
                .with_name(str_bytes(LISTENER))
                .with_host(str_bytes(host))
                .with_port(port.parse().ok()?)]),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn quorum() -> QuorumInfo {
        let voter = |id, log_end| ReplicaProgress {
            id,
            address: format!("127.0.0.{id}:9093"),
            log_end,
        };
        QuorumInfo {
            leader: 2,
            term: 7,
            high_watermark: 40,
            voters: vec![voter(1, 40), voter(2, 41), voter(3, -1)],
            observers: Vec::new(),
        }
    }

    fn partitions(
        response: ResponseKind,
    ) -> (DescribeQuorumResponse, Vec<(String, PartitionData)>) {
        let ResponseKind::DescribeQuorum(r) = response else {
            panic!("not a DescribeQuorum response");
        };
        let parts = r
            .topics
            .iter()
            .flat_map(|t| {
                t.partitions
                    .iter()
                    .map(|p| (t.topic_name.to_string(), p.clone()))
            })
            .collect();
        (r, parts)
    }

    #[test]
    fn the_metadata_partition_gets_the_quorum_and_others_unknown_partition() {
        let asked = vec![
            (METADATA_TOPIC.to_string(), 0),
            (METADATA_TOPIC.to_string(), 1),
            ("orders".to_string(), 0),
        ];
        let (response, parts) = partitions(answer(2, &asked, Ok(quorum()), 1_000));
        let (_, q) = &parts[0];
        assert_eq!(q.error_code, 0);
        assert_eq!(
            (q.leader_id.0, q.leader_epoch, q.high_watermark),
            (2, 7, 40)
        );
        let voters: Vec<(i32, i64, i64, i64)> = q
            .current_voters
            .iter()
            .map(|v| {
                (
                    v.replica_id.0,
                    v.log_end_offset,
                    v.last_fetch_timestamp,
                    v.last_caught_up_timestamp,
                )
            })
            .collect();
        // The leader fetched and caught up now; a caught-up follower's fetch time is unknown; a
        // voter the leader has not matched is unknown throughout.
        assert_eq!(
            voters,
            vec![(1, 40, -1, 1_000), (2, 41, 1_000, 1_000), (3, -1, -1, -1)]
        );
        for (_, other) in &parts[1..] {
            assert_eq!(
                other.error_code,
                ResponseError::UnknownTopicOrPartition.code()
            );
            assert_eq!(other.leader_id.0, -1);
        }
        // v2 lists each voter's endpoint.
        let nodes: Vec<(i32, String, u16)> = response
            .nodes
            .iter()
            .map(|n| {
                (
                    n.node_id.0,
                    n.listeners[0].host.to_string(),
                    n.listeners[0].port,
                )
            })
            .collect();
        assert_eq!(nodes[0], (1, "127.0.0.1".to_string(), 9093));
        assert_eq!(nodes.len(), 3);
    }

    #[test]
    fn a_leader_that_cannot_be_asked_is_not_leader_or_follower() {
        let asked = vec![(METADATA_TOPIC.to_string(), 0)];
        let failed = Err((
            ResponseError::NotLeaderOrFollower.code(),
            "no leader".to_string(),
        ));
        let (response, parts) = partitions(answer(1, &asked, failed, 1_000));
        assert_eq!(
            parts[0].1.error_code,
            ResponseError::NotLeaderOrFollower.code()
        );
        assert!(response.nodes.is_empty());
    }
}
