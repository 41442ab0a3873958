//! What the benchmark needs to know of the cluster, asked over the Kafka protocol: partition
//! leaders, end offsets, and a topic created when missing.

use std::collections::HashMap;
use std::time::Duration;

use kafka_protocol::messages::create_topics_request::CreatableTopic;
use kafka_protocol::messages::list_offsets_request::{ListOffsetsPartition, ListOffsetsTopic};
use kafka_protocol::messages::metadata_request::MetadataRequestTopic;
use kafka_protocol::messages::{
    BrokerId, CreateTopicsRequest, ListOffsetsRequest, MetadataRequest, TopicName,
};
use kafka_protocol::protocol::StrBytes;
use sluice_client::blocking::BlockingConnection;

use crate::error::BenchError;

pub const CLIENT_ID: &str = "sluice-bench";
pub const TIMEOUT: Duration = Duration::from_secs(30);

/// A topic's partitions and the address of each one's leader.
#[derive(Debug, Clone)]
pub struct TopicLayout {
    pub topic: String,
    pub leaders: Vec<(i32, String)>,
    /// Partitions in Metadata, with a leader or not.
    pub partitions: usize,
}

fn s(v: &str) -> StrBytes {
    StrBytes::from_string(v.to_string())
}

/// Connects to the first broker of a comma-separated bootstrap list that answers.
pub fn connect(bootstrap: &str) -> Result<BlockingConnection, BenchError> {
    let mut last = None;
    for addr in bootstrap
        .split(',')
        .map(str::trim)
        .filter(|a| !a.is_empty())
    {
        match BlockingConnection::connect(addr, CLIENT_ID, TIMEOUT) {
            Ok(conn) => return Ok(conn),
            Err(e) => last = Some(e),
        }
    }
    Err(match last {
        Some(e) => e.into(),
        None => BenchError::Setup(format!("no broker address in '{bootstrap}'")),
    })
}

/// Creates `topic` with `partitions` partitions of `replication_factor` replicas unless it
/// exists; returns its layout and each partition's end offset, read from the leaders it names
/// (a leader that dies between two separate lookups would otherwise end the run before it
/// starts).
pub fn ensure_topic(
    bootstrap: &str,
    topic: &str,
    partitions: i32,
    replication_factor: i16,
    configs: &[(String, String)],
) -> Result<(TopicLayout, HashMap<i32, i64>), BenchError> {
    let mut conn = connect(bootstrap)?;
    if layout(&mut conn, topic).is_err() {
        let request = CreateTopicsRequest::default().with_timeout_ms(30_000).with_topics(vec![CreatableTopic::default()
            .with_name(TopicName(s(topic)))
            .with_num_partitions(partitions)
            .with_replication_factor(replication_factor)
            .with_configs(
                configs
                    .iter()
                    .map(|(k, v)| {
                        kafka_protocol::messages::create_topics_request::CreatableTopicConfig::default()
                            .with_name(s(k))
                            .with_value(Some(s(v)))
                    })
                    .collect(),
            )]);
        let response = conn.call(&request, 2, 7)?;
        for t in response.topics {
            if t.error_code != 0 && t.error_code != 36 {
                return Err(BenchError::Kafka(format!(
                    "creating topic {topic}: error {} {}",
                    t.error_code,
                    t.error_message.map(|m| m.to_string()).unwrap_or_default()
                )));
            }
        }
    }
    // A new topic's leaders can take a moment to appear (Kafka elects them asynchronously),
    // and a leader named in Metadata may not serve the partition yet (a Kafka cluster's
    // brokers learn of it after the controller): ready once every leader answers ListOffsets.
    let clock = crate::clock::RunClock::start();
    let deadline = TIMEOUT.as_nanos() as u64;
    loop {
        match layout(&mut conn, topic) {
            // Every partition (an existing topic may have more or fewer than asked for).
            Ok(l) if l.partitions > 0 && l.leaders.len() == l.partitions => match offsets(&l, -1) {
                Ok(ends) => return Ok((l, ends)),
                Err(e) if clock.now_ns() > deadline => return Err(e),
                Err(_) => {}
            },
            Ok(l) if clock.now_ns() > deadline => {
                let ends = offsets(&l, -1)?;
                return Ok((l, ends));
            }
            Err(e) if clock.now_ns() > deadline => return Err(e),
            _ => {}
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// Waits until the broker at `addr` lists at least `nodes` brokers in Metadata (a cluster's
/// nodes register one by one; a topic with RF = `nodes` cannot be created before).
pub fn wait_for_brokers(addr: &str, nodes: usize) -> Result<(), BenchError> {
    let clock = crate::clock::RunClock::start();
    let deadline = TIMEOUT.as_nanos() as u64;
    loop {
        let listed = connect(addr).and_then(|mut conn| {
            let request = MetadataRequest::default()
                .with_topics(Some(Vec::new()))
                .with_allow_auto_topic_creation(false);
            Ok(conn.call(&request, 4, 12)?.brokers.len())
        });
        match listed {
            Ok(n) if n >= nodes => return Ok(()),
            Ok(n) if clock.now_ns() > deadline => {
                return Err(BenchError::Setup(format!(
                    "{addr} lists {n} brokers after {} s, not {nodes}",
                    TIMEOUT.as_secs()
                )))
            }
            Err(e) if clock.now_ns() > deadline => return Err(e),
            _ => std::thread::sleep(Duration::from_millis(250)),
        }
    }
}

/// The topic's partitions with a known leader.
pub fn layout(conn: &mut BlockingConnection, topic: &str) -> Result<TopicLayout, BenchError> {
    let request = MetadataRequest::default()
        .with_topics(Some(vec![
            MetadataRequestTopic::default().with_name(Some(TopicName(s(topic))))
        ]))
        .with_allow_auto_topic_creation(false);
    let response = conn.call(&request, 4, 12)?;
    let brokers: HashMap<i32, String> = response
        .brokers
        .iter()
        .map(|b| (b.node_id.0, format!("{}:{}", b.host, b.port)))
        .collect();
    let t = response
        .topics
        .into_iter()
        .next()
        .ok_or_else(|| BenchError::Kafka("metadata without the topic".into()))?;
    if t.error_code != 0 {
        return Err(BenchError::Kafka(format!(
            "topic {topic}: metadata error {}",
            t.error_code
        )));
    }
    let mut leaders: Vec<(i32, String)> = t
        .partitions
        .iter()
        .filter(|p| p.error_code == 0 && p.leader_id.0 >= 0)
        .filter_map(|p| {
            brokers
                .get(&p.leader_id.0)
                .map(|a| (p.partition_index, a.clone()))
        })
        .collect();
    leaders.sort();
    Ok(TopicLayout {
        topic: topic.to_string(),
        leaders,
        partitions: t.partitions.len(),
    })
}

/// Latest (-1) or earliest (-2) offset of each partition, asked of its leader.
pub fn offsets(layout: &TopicLayout, which: i64) -> Result<HashMap<i32, i64>, BenchError> {
    let mut out = HashMap::new();
    let mut by_leader: HashMap<&str, Vec<i32>> = HashMap::new();
    for (p, addr) in &layout.leaders {
        by_leader.entry(addr).or_default().push(*p);
    }
    for (addr, partitions) in by_leader {
        let mut conn = connect(addr)?;
        let request = ListOffsetsRequest::default()
            .with_replica_id(BrokerId(-1))
            .with_topics(vec![ListOffsetsTopic::default()
                .with_name(TopicName(s(&layout.topic)))
                .with_partitions(
                    partitions
                        .iter()
                        .map(|&p| {
                            ListOffsetsPartition::default()
                                .with_partition_index(p)
                                .with_timestamp(which)
                                .with_current_leader_epoch(-1)
                        })
                        .collect(),
                )]);
        let response = conn.call(&request, 1, 7)?;
        for t in response.topics {
            for p in t.partitions {
                if p.error_code != 0 {
                    return Err(BenchError::Kafka(format!(
                        "ListOffsets partition {}: error {}",
                        p.partition_index, p.error_code
                    )));
                }
                out.insert(p.partition_index, p.offset);
            }
        }
    }
    Ok(out)
}
