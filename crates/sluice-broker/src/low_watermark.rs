//! DeleteRecords in a cluster answers once the in-sync followers have moved their log start
//! as far as the leader's (Kafka's low watermark), so that a failover right after the answer
//! cannot bring the deleted records back. Shared by the Kafka API's DeleteRecords and the admin
//! API's delete (here or on the leader's node).

use std::time::Duration;

use kafka_protocol::error::ResponseError;
use sluice_log::Offset;

use crate::broker::Broker;
use crate::error::BrokerError;
use crate::partition::Partition;

/// How often a waiting answer looks at the followers' log starts again.
const POLL: Duration = Duration::from_millis(20);

/// How long the admin API's delete waits for the followers unless told otherwise.
pub const ADMIN_WAIT: Duration = Duration::from_secs(30);
/// The longest anyone may ask to wait (the Kafka request and the admin API alike).
pub const MAX_WAIT: Duration = Duration::from_secs(60);

impl Partition {
    /// Waits until the partition's low watermark reaches `start`, at most `timeout`:
    /// REQUEST_TIMED_OUT after it (the leader has deleted the records; the followers follow
    /// when they next fetch), NOT_LEADER_OR_FOLLOWER at once if this replica stops leading.
    pub async fn low_watermark_reaches(
        &self,
        start: Offset,
        timeout: Duration,
    ) -> Result<(), ResponseError> {
        let deadline = tokio::time::Instant::now() + timeout;
        loop {
            if !self.leads() {
                return Err(ResponseError::NotLeaderOrFollower);
            }
            if self.low_watermark().is_some_and(|low| low >= start) {
                return Ok(());
            }
            let now = tokio::time::Instant::now();
            if now >= deadline {
                tracing::info!(partition = ?self, start = start.0, "DeleteRecords: the followers did not follow the new log start in time");
                return Err(ResponseError::RequestTimedOut);
            }
            tokio::time::sleep(POLL.min(deadline - now)).await;
        }
    }
}

impl Broker {
    /// DeleteRecords on a partition this node leads, answered once the in-sync followers have
    /// followed (the admin API's delete, here or asked by another node).
    pub async fn delete_records_here(
        &self,
        topic: &str,
        partition: i32,
        before: i64,
        wait: Duration,
    ) -> Result<Offset, BrokerError> {
        let wait = wait.min(MAX_WAIT);
        let start = self.delete_records(topic, partition, before)?;
        let p = self.partition_of(topic, partition)?;
        match p.low_watermark_reaches(start, wait).await {
            Ok(()) => Ok(start),
            Err(ResponseError::NotLeaderOrFollower) => Err(BrokerError::NotLeader(format!(
                "{topic}-{partition}: the leadership moved before the followers deleted the records"
            ))),
            Err(_) => Err(BrokerError::TimedOut(format!(
                "{topic}-{partition}: records before {} are deleted on the leader; its in-sync \
                 followers did not follow within {} ms",
                start.0,
                wait.as_millis()
            ))),
        }
    }
}
