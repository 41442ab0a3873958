//! The operations the CLI needs, each one request on one connection (a single-node cluster,
//! or the bootstrap broker of a larger one for admin requests).

use std::collections::BTreeMap;
use std::time::Duration;

use bytes::Bytes;
use kafka_protocol::messages::create_topics_request::{
    CreatableReplicaAssignment, CreatableTopic, CreatableTopicConfig,
};
use kafka_protocol::messages::describe_configs_request::DescribeConfigsResource;
use kafka_protocol::messages::fetch_request::{FetchPartition, FetchTopic};
use kafka_protocol::messages::incremental_alter_configs_request::{
    AlterConfigsResource, AlterableConfig,
};
use kafka_protocol::messages::list_offsets_request::{ListOffsetsPartition, ListOffsetsTopic};
use kafka_protocol::messages::metadata_request::MetadataRequestTopic;
use kafka_protocol::messages::offset_commit_request::{
    OffsetCommitRequestPartition, OffsetCommitRequestTopic,
};
use kafka_protocol::messages::produce_request::{PartitionProduceData, TopicProduceData};
use kafka_protocol::messages::{
    BrokerId, CreateTopicsRequest, DeleteGroupsRequest, DeleteRecordsRequest, DeleteTopicsRequest,
    DescribeConfigsRequest, DescribeGroupsRequest, FetchRequest, GroupId,
    IncrementalAlterConfigsRequest, ListGroupsRequest, ListOffsetsRequest, MetadataRequest,
    MetadataResponse, OffsetCommitRequest, OffsetFetchRequest, ProduceRequest, TopicName,
};
use kafka_protocol::protocol::StrBytes;

use crate::connection::Connection;
use crate::error::ClientError;
use crate::records::{decode_batches, InRecord};

pub(crate) fn s(v: &str) -> StrBytes {
    StrBytes::from_string(v.to_string())
}

pub(crate) fn check(
    context: impl Into<String>,
    code: i16,
    message: Option<&StrBytes>,
) -> Result<(), ClientError> {
    if code == 0 {
        Ok(())
    } else {
        Err(ClientError::kafka(
            context,
            code,
            message.map(|m| m.to_string()),
        ))
    }
}

/// One partition as Metadata describes it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PartitionMeta {
    pub partition: i32,
    pub leader: i32,
    pub replicas: Vec<i32>,
    pub isr: Vec<i32>,
}

/// A config entry as DescribeConfigs reports it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConfigEntry {
    pub name: String,
    pub value: Option<String>,
    /// 1 topic override, 4 broker setting, 5 default.
    pub source: i8,
}

/// A consumer group as DescribeGroups reports it.
#[derive(Debug, Clone)]
pub struct GroupDescription {
    pub group: String,
    pub state: String,
    pub protocol_type: String,
    pub protocol: String,
    pub error_code: i16,
    pub members: Vec<GroupMember>,
}

#[derive(Debug, Clone)]
pub struct GroupMember {
    pub member_id: String,
    pub instance_id: Option<String>,
    pub client_id: String,
    pub client_host: String,
    /// (topic, partitions), decoded from the consumer protocol's assignment.
    pub assignment: Vec<(String, Vec<i32>)>,
}

use sluice_wire::consumer_protocol::decode_assignment;

/// What a fetch of one partition returned.
#[derive(Debug, Clone)]
pub struct Fetched {
    pub records: Vec<InRecord>,
    /// Where the next fetch starts: past the last whole batch returned, which may lie past
    /// the last record (transaction markers, cleaned or emptied batches).
    pub next_offset: i64,
    pub high_watermark: i64,
    pub log_start_offset: i64,
}

pub struct Client {
    conn: Connection,
}

impl std::fmt::Debug for Client {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Client({})", self.conn.addr())
    }
}

impl Client {
    /// Connects to the first of `bootstrap`'s addresses (`host:port`, comma-separated, as
    /// Kafka's `bootstrap.servers`) that answers.
    pub async fn connect(bootstrap: &str, client_id: &str) -> Result<Client, ClientError> {
        let mut failed = None;
        for addr in bootstrap
            .split(',')
            .map(str::trim)
            .filter(|a| !a.is_empty())
        {
            match Connection::connect(addr, client_id, Duration::from_secs(30)).await {
                Ok(conn) => return Ok(Client { conn }),
                Err(e) => failed = Some(e),
            }
        }
        Err(failed.unwrap_or_else(|| ClientError::Protocol("no bootstrap address given".into())))
    }

    pub fn connection(&mut self) -> &mut Connection {
        &mut self.conn
    }

    /// Metadata for `topics` (all when `None`), without auto-creating anything.
    pub async fn metadata(
        &mut self,
        topics: Option<&[String]>,
    ) -> Result<MetadataResponse, ClientError> {
        let request = MetadataRequest::default()
            .with_topics(topics.map(|t| {
                t.iter()
                    .map(|name| MetadataRequestTopic::default().with_name(Some(TopicName(s(name)))))
                    .collect()
            }))
            .with_allow_auto_topic_creation(false);
        self.conn.call(&request, 4, 12).await
    }

    /// The partitions of one topic, sorted.
    pub async fn partitions(&mut self, topic: &str) -> Result<Vec<PartitionMeta>, ClientError> {
        let response = self.metadata(Some(&[topic.to_string()])).await?;
        let t = response
            .topics
            .into_iter()
            .next()
            .ok_or_else(|| ClientError::Protocol("metadata without the topic".into()))?;
        check(format!("topic '{topic}'"), t.error_code, None)?;
        let mut parts: Vec<PartitionMeta> = t
            .partitions
            .into_iter()
            .map(|p| PartitionMeta {
                partition: p.partition_index,
                leader: p.leader_id.0,
                replicas: p.replica_nodes.iter().map(|b| b.0).collect(),
                isr: p.isr_nodes.iter().map(|b| b.0).collect(),
            })
            .collect();
        parts.sort_by_key(|p| p.partition);
        Ok(parts)
    }

    pub async fn create_topic(
        &mut self,
        name: &str,
        partitions: i32,
        replication_factor: i16,
        configs: &BTreeMap<String, String>,
    ) -> Result<(), ClientError> {
        let topic = CreatableTopic::default()
            .with_num_partitions(partitions)
            .with_replication_factor(replication_factor);
        self.create(name, topic, configs).await
    }

    /// Creates a topic whose replicas are named: partition `i` on the nodes `assignment[i]`,
    /// the preferred leader first (kafka-topics.sh's `--replica-assignment`).
    pub async fn create_topic_assigned(
        &mut self,
        name: &str,
        assignment: &[Vec<i32>],
        configs: &BTreeMap<String, String>,
    ) -> Result<(), ClientError> {
        let topic = CreatableTopic::default()
            .with_num_partitions(-1)
            .with_replication_factor(-1)
            .with_assignments(
                assignment
                    .iter()
                    .enumerate()
                    .map(|(i, nodes)| {
                        CreatableReplicaAssignment::default()
                            .with_partition_index(i as i32)
                            .with_broker_ids(nodes.iter().map(|n| BrokerId(*n)).collect())
                    })
                    .collect(),
            );
        self.create(name, topic, configs).await
    }

    async fn create(
        &mut self,
        name: &str,
        topic: CreatableTopic,
        configs: &BTreeMap<String, String>,
    ) -> Result<(), ClientError> {
        let request = CreateTopicsRequest::default()
            .with_topics(vec![topic.with_name(TopicName(s(name))).with_configs(
                configs
                    .iter()
                    .map(|(k, v)| {
                        CreatableTopicConfig::default()
                            .with_name(s(k))
                            .with_value(Some(s(v)))
                    })
                    .collect(),
            )])
            .with_timeout_ms(30_000);
        let response = self.conn.call(&request, 2, 7).await?;
        for t in response.topics {
            check(
                format!("creating topic '{name}'"),
                t.error_code,
                t.error_message.as_ref(),
            )?;
        }
        Ok(())
    }

    pub async fn delete_topic(&mut self, name: &str) -> Result<(), ClientError> {
        let request = DeleteTopicsRequest::default()
            .with_topic_names(vec![TopicName(s(name))])
            .with_timeout_ms(30_000);
        let response = self.conn.call(&request, 1, 5).await?;
        for t in response.responses {
            check(
                format!("deleting topic '{name}'"),
                t.error_code,
                t.error_message.as_ref(),
            )?;
        }
        Ok(())
    }

    /// DeleteRecords: moves each `(partition, before_offset)` log start up (-1: to the high
    /// watermark); returns each partition's new log start.
    pub async fn delete_records(
        &mut self,
        topic: &str,
        partitions: &[(i32, i64)],
    ) -> Result<Vec<(i32, i64)>, ClientError> {
        use kafka_protocol::messages::delete_records_request::{
            DeleteRecordsPartition, DeleteRecordsTopic,
        };
        let request = DeleteRecordsRequest::default()
            .with_topics(vec![DeleteRecordsTopic::default()
                .with_name(TopicName(s(topic)))
                .with_partitions(
                    partitions
                        .iter()
                        .map(|&(partition, offset)| {
                            DeleteRecordsPartition::default()
                                .with_partition_index(partition)
                                .with_offset(offset)
                        })
                        .collect(),
                )])
            .with_timeout_ms(30_000);
        let response = self.conn.call(&request, 2, 5).await?;
        let mut out = Vec::new();
        for p in response.topics.into_iter().flat_map(|t| t.partitions) {
            check(
                format!("deleting records of {topic}-{}", p.partition_index),
                p.error_code,
                None,
            )?;
            out.push((p.partition_index, p.low_watermark));
        }
        Ok(out)
    }

    pub async fn topic_configs(&mut self, name: &str) -> Result<Vec<ConfigEntry>, ClientError> {
        let request = DescribeConfigsRequest::default().with_resources(vec![
            DescribeConfigsResource::default()
                .with_resource_type(2)
                .with_resource_name(s(name))
                .with_configuration_keys(None),
        ]);
        let response = self.conn.call(&request, 1, 4).await?;
        let result = response
            .results
            .into_iter()
            .next()
            .ok_or_else(|| ClientError::Protocol("DescribeConfigs without a result".into()))?;
        check(
            format!("configs of '{name}'"),
            result.error_code,
            result.error_message.as_ref(),
        )?;
        Ok(result
            .configs
            .into_iter()
            .map(|c| ConfigEntry {
                name: c.name.to_string(),
                value: c.value.map(|v| v.to_string()),
                source: c.config_source,
            })
            .collect())
    }

    /// Sets and removes topic config overrides (IncrementalAlterConfigs).
    pub async fn alter_topic_configs(
        &mut self,
        name: &str,
        set: &[(String, String)],
        delete: &[String],
    ) -> Result<(), ClientError> {
        self.alter_configs(2, name, set, delete).await
    }

    /// Sets and removes a node's dynamic configs (IncrementalAlterConfigs on its broker
    /// resource); the connected node must be `node`.
    pub async fn alter_broker_configs(
        &mut self,
        node: i32,
        set: &[(String, String)],
        delete: &[String],
    ) -> Result<(), ClientError> {
        self.alter_configs(4, &node.to_string(), set, delete).await
    }

    async fn alter_configs(
        &mut self,
        resource_type: i8,
        name: &str,
        set: &[(String, String)],
        delete: &[String],
    ) -> Result<(), ClientError> {
        let mut configs: Vec<AlterableConfig> = set
            .iter()
            .map(|(k, v)| {
                AlterableConfig::default()
                    .with_name(s(k))
                    .with_config_operation(0)
                    .with_value(Some(s(v)))
            })
            .collect();
        configs.extend(delete.iter().map(|k| {
            AlterableConfig::default()
                .with_name(s(k))
                .with_config_operation(1)
        }));
        let request = IncrementalAlterConfigsRequest::default().with_resources(vec![
            AlterConfigsResource::default()
                .with_resource_type(resource_type)
                .with_resource_name(s(name))
                .with_configs(configs),
        ]);
        let response = self.conn.call(&request, 0, 1).await?;
        for r in response.responses {
            check(
                format!("altering configs of '{name}'"),
                r.error_code,
                r.error_message.as_ref(),
            )?;
        }
        Ok(())
    }

    /// ListOffsets for each partition: -1 latest, -2 earliest, or a timestamp. Returns
    /// `(partition, offset, timestamp)`; offset -1 when no record is that recent.
    pub async fn list_offsets(
        &mut self,
        topic: &str,
        partitions: &[i32],
        timestamp: i64,
    ) -> Result<Vec<(i32, i64, i64)>, ClientError> {
        let request = ListOffsetsRequest::default()
            .with_replica_id(BrokerId(-1))
            .with_topics(vec![ListOffsetsTopic::default()
                .with_name(TopicName(s(topic)))
                .with_partitions(
                    partitions
                        .iter()
                        .map(|&p| {
                            ListOffsetsPartition::default()
                                .with_partition_index(p)
                                .with_timestamp(timestamp)
                                .with_current_leader_epoch(-1)
                        })
                        .collect(),
                )]);
        let response = self.conn.call(&request, 1, 7).await?;
        let mut out = Vec::new();
        for t in response.topics {
            for p in t.partitions {
                check(
                    format!("offsets of {topic}-{}", p.partition_index),
                    p.error_code,
                    None,
                )?;
                out.push((p.partition_index, p.offset, p.timestamp));
            }
        }
        out.sort_unstable();
        Ok(out)
    }

    /// Produces one encoded batch to one partition; returns its base offset (-1 with acks=0).
    pub async fn produce(
        &mut self,
        topic: &str,
        partition: i32,
        batch: Bytes,
        acks: i16,
    ) -> Result<i64, ClientError> {
        let request = ProduceRequest::default()
            .with_acks(acks)
            .with_timeout_ms(30_000)
            .with_topic_data(vec![TopicProduceData::default()
                .with_name(TopicName(s(topic)))
                .with_partition_data(vec![PartitionProduceData::default()
                    .with_index(partition)
                    .with_records(Some(batch))])]);
        if acks == 0 {
            let version =
                self.conn
                    .version_for(kafka_protocol::messages::ApiKey::Produce, 3, 12)?;
            self.conn.send(&request, version, false).await?;
            return Ok(-1);
        }
        let response = self.conn.call(&request, 3, 12).await?;
        let p = response
            .responses
            .into_iter()
            .flat_map(|t| t.partition_responses)
            .next()
            .ok_or_else(|| {
                ClientError::Protocol("Produce response without the partition".into())
            })?;
        check(
            format!("producing to {topic}-{partition}"),
            p.error_code,
            p.error_message.as_ref(),
        )?;
        Ok(p.base_offset)
    }

    /// Fetches from one partition, waiting up to `max_wait` for at least one byte.
    pub async fn fetch(
        &mut self,
        topic: &str,
        partition: i32,
        offset: i64,
        max_wait: Duration,
        max_bytes: i32,
    ) -> Result<Fetched, ClientError> {
        let request = FetchRequest::default()
            .with_replica_id(BrokerId(-1))
            .with_max_wait_ms(max_wait.as_millis() as i32)
            .with_min_bytes(1)
            .with_max_bytes(max_bytes)
            .with_session_epoch(-1)
            .with_topics(vec![FetchTopic::default()
                .with_topic(TopicName(s(topic)))
                .with_partitions(vec![FetchPartition::default()
                    .with_partition(partition)
                    .with_fetch_offset(offset)
                    .with_current_leader_epoch(-1)
                    .with_log_start_offset(-1)
                    .with_partition_max_bytes(max_bytes)])]);
        let response = self.conn.call(&request, 4, 12).await?;
        check(
            format!("fetching {topic}-{partition}"),
            response.error_code,
            None,
        )?;
        let p = response
            .responses
            .into_iter()
            .flat_map(|t| t.partitions)
            .next()
            .ok_or_else(|| ClientError::Protocol("Fetch response without the partition".into()))?;
        check(
            format!("fetching {topic}-{partition} at {offset}"),
            p.error_code,
            None,
        )?;
        let (records, next_offset) = match &p.records {
            Some(bytes) => (
                decode_batches(bytes)?,
                crate::records::offset_after_batches(bytes, offset),
            ),
            None => (Vec::new(), offset),
        };
        Ok(Fetched {
            records: records.into_iter().filter(|r| r.offset >= offset).collect(),
            next_offset,
            high_watermark: p.high_watermark,
            log_start_offset: p.log_start_offset,
        })
    }

    /// (group, state, protocol type) of every group this node coordinates. Asked again for
    /// up to 5 s while the node is taking over a partition of the offsets topic (its list
    /// lacks that partition's groups until then).
    pub async fn list_groups(&mut self) -> Result<Vec<(String, String, String)>, ClientError> {
        let mut attempt = 0;
        let response = loop {
            attempt += 1;
            let response = self.conn.call(&ListGroupsRequest::default(), 0, 5).await?;
            let loading = response.error_code
                == kafka_protocol::error::ResponseError::CoordinatorLoadInProgress.code();
            if loading && attempt < crate::coordinator::ATTEMPTS {
                tokio::time::sleep(crate::coordinator::PAUSE).await;
                continue;
            }
            break response;
        };
        check("ListGroups", response.error_code, None)?;
        let mut groups: Vec<_> = response
            .groups
            .into_iter()
            .map(|g| {
                (
                    g.group_id.to_string(),
                    g.group_state.to_string(),
                    g.protocol_type.to_string(),
                )
            })
            .collect();
        groups.sort();
        Ok(groups)
    }

    pub async fn describe_group(&mut self, group: &str) -> Result<GroupDescription, ClientError> {
        let request = DescribeGroupsRequest::default().with_groups(vec![GroupId(s(group))]);
        let response = self.conn.call(&request, 0, 5).await?;
        let g = response
            .groups
            .into_iter()
            .next()
            .ok_or_else(|| ClientError::Protocol("DescribeGroups without the group".into()))?;
        Ok(GroupDescription {
            group: g.group_id.to_string(),
            state: g.group_state.to_string(),
            protocol_type: g.protocol_type.to_string(),
            protocol: g.protocol_data.to_string(),
            error_code: g.error_code,
            members: g
                .members
                .into_iter()
                .map(|m| GroupMember {
                    member_id: m.member_id.to_string(),
                    instance_id: m.group_instance_id.map(|i| i.to_string()),
                    client_id: m.client_id.to_string(),
                    client_host: m.client_host.to_string(),
                    assignment: decode_assignment(&m.member_assignment),
                })
                .collect(),
        })
    }

    pub async fn delete_group(&mut self, group: &str) -> Result<(), ClientError> {
        let request = DeleteGroupsRequest::default().with_groups_names(vec![GroupId(s(group))]);
        let response = self.conn.call(&request, 0, 2).await?;
        for r in response.results {
            check(format!("deleting group '{group}'"), r.error_code, None)?;
        }
        Ok(())
    }

    /// Committed offsets of a group: (topic, partition, offset), offset -1 where none.
    pub async fn committed_offsets(
        &mut self,
        group: &str,
    ) -> Result<Vec<(String, i32, i64)>, ClientError> {
        let request = OffsetFetchRequest::default()
            .with_group_id(GroupId(s(group)))
            .with_topics(None);
        let response = self.conn.call(&request, 2, 7).await?;
        check(
            format!("offsets of group '{group}'"),
            response.error_code,
            None,
        )?;
        let mut out = Vec::new();
        for t in response.topics {
            for p in t.partitions {
                check(
                    format!("offset of {}-{}", &*t.name, p.partition_index),
                    p.error_code,
                    None,
                )?;
                out.push((t.name.to_string(), p.partition_index, p.committed_offset));
            }
        }
        out.sort();
        Ok(out)
    }

    /// Commits offsets for a group with no active members (as a standalone consumer would).
    pub async fn commit_offsets(
        &mut self,
        group: &str,
        offsets: &[(String, i32, i64)],
    ) -> Result<(), ClientError> {
        let mut topics: Vec<OffsetCommitRequestTopic> = Vec::new();
        for (topic, partition, offset) in offsets {
            let p = OffsetCommitRequestPartition::default()
                .with_partition_index(*partition)
                .with_committed_offset(*offset)
                .with_committed_leader_epoch(-1);
            match topics.iter_mut().find(|t| *t.name == **topic) {
                Some(t) => t.partitions.push(p),
                None => topics.push(
                    OffsetCommitRequestTopic::default()
                        .with_name(TopicName(s(topic)))
                        .with_partitions(vec![p]),
                ),
            }
        }
        let request = OffsetCommitRequest::default()
            .with_group_id(GroupId(s(group)))
            .with_generation_id_or_member_epoch(-1)
            .with_member_id(StrBytes::default())
            .with_retention_time_ms(-1)
            .with_topics(topics);
        let response = self.conn.call(&request, 2, 7).await?;
        for t in response.topics {
            for p in t.partitions {
                check(
                    format!("committing {}-{}", &*t.name, p.partition_index),
                    p.error_code,
                    None,
                )?;
            }
        }
        Ok(())
    }
}
