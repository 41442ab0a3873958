//! The console's message browser and test producer on any node of a cluster. A partition this
//! node holds no replica of is read on its leader (peer call `Browse`); a record is written by
//! the partition's leader (peer call `Publish`) and answered once it is committed, as an
//! acks=all Produce is, so the console never reports a record that a failover can take back.
//! The audit log's topic writes its queued events the same way, as one batch (`PublishBatch`).

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use serde::{Deserialize, Serialize};
use sluice_cluster::NodeId;

use super::peer::{PeerCall, PeerRefused};
use crate::broker::Broker;
use crate::browse::{BrowsePage, BrowseRequest};
use crate::error::BrokerError;
use crate::publish::NewRecord;

/// How long a console's write waits to be committed before it answers 504.
pub const COMMIT_WAIT: Duration = Duration::from_secs(30);
/// How a node answers a peer call it cannot read (`peer::answer_peer`): a call an earlier
/// version does not know.
pub(super) const OLDER_NODE_REFUSAL: &str = "unreadable peer call";
/// How long a console waits for another node's browse.
const BROWSE_TIMEOUT: Duration = Duration::from_secs(10);

/// A record to write on another node, bytes in base64.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct PublishAsk {
    pub topic: String,
    pub partition: i32,
    pub key: Option<String>,
    pub value: Option<String>,
    pub headers: Vec<(String, Option<String>)>,
}

/// Where a record landed: its partition and offset.
pub type Landed = (i32, i64);

fn b64(bytes: &Option<Bytes>) -> Option<String> {
    use base64::Engine;
    bytes
        .as_ref()
        .map(|b| base64::engine::general_purpose::STANDARD.encode(b))
}

fn unb64(text: Option<String>) -> Result<Option<Bytes>, BrokerError> {
    use base64::Engine;
    text.map(|t| {
        base64::engine::general_purpose::STANDARD
            .decode(t.as_bytes())
            .map(Bytes::from)
            .map_err(|e| BrokerError::InvalidRequest(format!("a record's bytes: {e}")))
    })
    .transpose()
}

impl PublishAsk {
    fn new(topic: &str, partition: i32, record: &NewRecord) -> PublishAsk {
        PublishAsk {
            topic: topic.to_string(),
            partition,
            key: b64(&record.key),
            value: b64(&record.value),
            headers: record
                .headers
                .iter()
                .map(|(k, v)| (k.clone(), b64(v)))
                .collect(),
        }
    }

    pub(crate) fn record(self) -> Result<(String, i32, NewRecord), BrokerError> {
        let headers = self
            .headers
            .into_iter()
            .map(|(k, v)| Ok((k, unb64(v)?)))
            .collect::<Result<Vec<_>, BrokerError>>()?;
        Ok((
            self.topic,
            self.partition,
            NewRecord {
                key: unb64(self.key)?,
                value: unb64(self.value)?,
                headers,
                timestamp_ms: None,
            },
        ))
    }
}

/// The Kafka error another node refused with, as the broker's own error.
pub(crate) fn refused(node: NodeId, refused: PeerRefused) -> BrokerError {
    let message = format!("node {node}: {}", refused.message);
    match refused.code {
        Some(10) => BrokerError::MessageTooLarge(message),
        Some(1) | Some(2) | Some(42) | Some(87) => BrokerError::InvalidRequest(message),
        Some(44) => BrokerError::PolicyViolation(message),
        Some(3) => BrokerError::UnknownTopic(message),
        Some(17) => BrokerError::InvalidTopic(message),
        Some(6) => BrokerError::NotLeader(message),
        Some(7) => BrokerError::TimedOut(message),
        Some(19) => BrokerError::NotEnoughReplicas(message),
        Some(20) => BrokerError::NotEnoughReplicasAfterAppend(message),
        _ => BrokerError::ControllerUnavailable(message),
    }
}

/// Who leads a partition, as this node's metadata has it.
pub(super) enum Leader {
    /// This node (or no cluster: the node alone).
    Me,
    Other(NodeId),
    /// Nobody: the partition is offline.
    Nobody,
}

impl Broker {
    /// Who leads the partition, and whether this node holds a replica of it.
    pub(super) fn placement(
        &self,
        topic: &str,
        partition: i32,
    ) -> Result<(Leader, bool), BrokerError> {
        let Some(replication) = self.replication.get() else {
            return Ok((Leader::Me, true));
        };
        let state = replication.state();
        let (_, p) = state
            .state
            .partition_by_name(topic, partition)
            .ok_or_else(|| {
                BrokerError::UnknownTopic(format!("no partition {partition} of topic '{topic}'"))
            })?;
        let me = replication.me();
        let leader = match p.leader {
            Some(leader) if leader == me => Leader::Me,
            Some(leader) => Leader::Other(leader),
            None => Leader::Nobody,
        };
        Ok((leader, p.replicas.contains(&me)))
    }

    /// The number of partitions of `topic`, from the cluster's metadata in a cluster (this
    /// node may hold none of them).
    pub fn partition_count_of(&self, topic: &str) -> Result<i32, BrokerError> {
        let unknown = || BrokerError::UnknownTopic(format!("no topic '{topic}'"));
        match self.replication.get() {
            Some(replication) => replication
                .state()
                .state
                .topic_by_name(topic)
                .map(|t| i32::try_from(t.partitions.len()).unwrap_or(i32::MAX))
                .ok_or_else(unknown),
            None => self
                .topics
                .get(topic)
                .map(|t| t.partition_count())
                .ok_or_else(unknown),
        }
    }

    /// The message browser: this node's replica when it holds one (a follower's holds only
    /// committed records), else the leader's.
    pub async fn browse_anywhere(
        self: &Arc<Self>,
        request: BrowseRequest,
    ) -> Result<BrowsePage, BrokerError> {
        let leader = match self.placement(&request.topic, request.partition)? {
            (_, true) => {
                let broker = Arc::clone(self);
                return tokio::task::spawn_blocking(move || broker.browse(&request))
                    .await
                    .map_err(|e| BrokerError::InvalidRequest(format!("the browse failed: {e}")))?;
            }
            (Leader::Other(leader), false) => leader,
            (_, false) => return Err(offline(&request.topic, request.partition)),
        };
        let page = self
            .ask_peer(leader, &PeerCall::Browse(request), BROWSE_TIMEOUT)
            .await
            .map_err(|e| refused(leader, e))?;
        serde_json::from_value(page).map_err(|e| {
            BrokerError::ControllerUnavailable(format!("node {leader} answered a bad page: {e}"))
        })
    }

    /// The console's test record: written by the partition's leader, answered once committed
    /// (within [`COMMIT_WAIT`]).
    pub async fn publish_at_leader(
        &self,
        topic: &str,
        partition: i32,
        record: NewRecord,
    ) -> Result<Landed, BrokerError> {
        self.publish_batch_at_leader(topic, partition, vec![record])
            .await
    }

    /// As [`Broker::publish_at_leader`], several records (at least one) as one batch: where the
    /// first landed. A leader of an earlier version cannot read the batch call (a rolling
    /// upgrade): its refusal is told by [`unknown_to_the_leader`], and nothing was written.
    pub async fn publish_batch_at_leader(
        &self,
        topic: &str,
        partition: i32,
        records: Vec<NewRecord>,
    ) -> Result<Landed, BrokerError> {
        let leader = match self.placement(topic, partition)?.0 {
            Leader::Me => return self.publish_committed(topic, partition, records).await,
            Leader::Other(leader) => leader,
            Leader::Nobody => return Err(offline(topic, partition)),
        };
        let mut asks: Vec<PublishAsk> = records
            .iter()
            .map(|r| PublishAsk::new(topic, partition, r))
            .collect();
        let call = if asks.len() == 1 {
            PeerCall::Publish(asks.remove(0))
        } else {
            PeerCall::PublishBatch(asks)
        };
        let landed = self
            .ask_peer(leader, &call, COMMIT_WAIT + Duration::from_secs(5))
            .await
            .map_err(|e| refused(leader, e))?;
        serde_json::from_value(landed)
            .map_err(|e| BrokerError::ControllerUnavailable(format!("node {leader} answered {e}")))
    }

    /// Writes `records` as one batch on a partition this node leads and waits until they are
    /// committed.
    pub(crate) async fn publish_committed(
        &self,
        topic: &str,
        partition: i32,
        records: Vec<NewRecord>,
    ) -> Result<Landed, BrokerError> {
        let published = self.publish_batch(topic, partition, records)?;
        let landed = (published.partition, published.offset);
        match tokio::time::timeout(COMMIT_WAIT, published.committed()).await {
            Ok(outcome) => outcome.map(|()| landed),
            Err(_) => Err(BrokerError::TimedOut(format!(
                "record {topic}-{partition}@{} was not committed within {} s: too few \
                 replicas follow; it may be lost",
                landed.1,
                COMMIT_WAIT.as_secs()
            ))),
        }
    }

    /// A peer's `PublishBatch`: every record names the same partition.
    pub(crate) async fn publish_asked_batch(
        &self,
        asks: Vec<PublishAsk>,
    ) -> Result<Landed, BrokerError> {
        let mut target: Option<(String, i32)> = None;
        let mut records = Vec::with_capacity(asks.len());
        for ask in asks {
            let (topic, partition, record) = ask.record()?;
            match &target {
                None => target = Some((topic, partition)),
                Some((t, p)) if *t == topic && *p == partition => {}
                Some((t, p)) => {
                    return Err(BrokerError::InvalidRequest(format!(
                        "a batch for {t}-{p} holds a record for {topic}-{partition}"
                    )))
                }
            }
            records.push(record);
        }
        let Some((topic, partition)) = target else {
            return Err(BrokerError::InvalidRequest("a batch of no records".into()));
        };
        self.publish_committed(&topic, partition, records).await
    }
}

/// Whether the leader refused a call because its version does not know it (nothing was done):
/// send the records one [`Broker::publish_at_leader`] at a time instead.
pub fn unknown_to_the_leader(e: &BrokerError) -> bool {
    matches!(e, BrokerError::ControllerUnavailable(m) if m.contains(OLDER_NODE_REFUSAL))
}

pub(super) fn offline(topic: &str, partition: i32) -> BrokerError {
    BrokerError::NotLeader(format!("{topic}-{partition} has no leader now (offline)"))
}
