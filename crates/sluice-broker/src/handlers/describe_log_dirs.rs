//! DescribeLogDirs: the broker's one log directory (`<data dir>/topics`), the size of each
//! partition in it, and (v4) the file system's total and usable bytes. Used by
//! `kafka-log-dirs.sh`, `Admin.describeLogDirs` and management tools to show disk use.
//!
//! As in Kafka, `topics` null means every partition; a named topic or partition this broker
//! does not have is left out of the answer. `offset_lag` is 0: there are no future replicas.

use kafka_protocol::messages::describe_log_dirs_response::{
    DescribeLogDirsPartition, DescribeLogDirsResult, DescribeLogDirsTopic,
};
use kafka_protocol::messages::{DescribeLogDirsRequest, DescribeLogDirsResponse, ResponseKind};
use kafka_protocol::protocol::StrBytes;

use crate::broker::Broker;
use crate::handlers::{Call, Versions};

pub const VERSIONS: Versions = Versions::new(1, 4);

pub fn handle(broker: &Broker, request: DescribeLogDirsRequest, _call: &Call) -> ResponseKind {
    let wanted = |topic: &str, partition: i32| match &request.topics {
        None => true,
        Some(topics) => topics
            .iter()
            .any(|t| t.topic.as_str() == topic && t.partitions.contains(&partition)),
    };
    let topics = broker
        .topics()
        .list()
        .iter()
        .filter_map(|t| {
            let partitions: Vec<DescribeLogDirsPartition> = t
                .partitions()
                .iter()
                .filter(|p| wanted(&t.name, p.index))
                .map(|p| {
                    DescribeLogDirsPartition::default()
                        .with_partition_index(p.index)
                        .with_partition_size(i64::try_from(p.info().size_bytes).unwrap_or(i64::MAX))
                        .with_offset_lag(0)
                        .with_is_future_key(false)
                })
                .collect();
            (!partitions.is_empty()).then(|| {
                DescribeLogDirsTopic::default()
                    .with_name(kafka_protocol::messages::TopicName(StrBytes::from_string(
                        t.name.to_string(),
                    )))
                    .with_partitions(partitions)
            })
        })
        .collect();
    let dir = broker.config().data_dir.join("topics");
    let dir = std::path::absolute(&dir).unwrap_or(dir);
    let (usable, total) = crate::disk::disk_space(&dir).unwrap_or((0, 0));
    let result = DescribeLogDirsResult::default()
        .with_log_dir(StrBytes::from_string(dir.display().to_string()))
        .with_topics(topics)
        .with_total_bytes(i64::try_from(total).unwrap_or(i64::MAX))
        .with_usable_bytes(i64::try_from(usable).unwrap_or(i64::MAX));
    ResponseKind::DescribeLogDirs(DescribeLogDirsResponse::default().with_results(vec![result]))
}
