//! What one broker asks of another over the cluster's internal listener
//! (`sluice_cluster::peer`): the coordinators' calls that cross nodes.
//!
//! ```text
//!   transaction coordinator ── Markers ──────────▶ leader of a partition in the transaction
//!   transaction coordinator ── CommitOffsets ────▶ coordinator of the group (at commit)
//!   group coordinator ──────── TxnOffsets ───────▶ coordinator of the transaction
//!   transaction coordinator ── AbortedTxnOffsets ▶ coordinator of the group (at abort)
//!   partition leader ───────── VerifyTxnWrite ───▶ coordinator of the transaction (KIP-890)
//!   admin console ──────────── Report ───────────▶ every node (its status, followers' lag)
//!   unclean election ───────── LogEnds ──────────▶ every live replica's node (how far it goes)
//!   admin console ──────────── Groups ───────────▶ every live node (the groups it coordinates)
//!   admin console ──────────── Browse ───────────▶ a partition's leader (no replica here)
//!   admin console ──────────── Publish ──────────▶ a partition's leader (answer once committed)
//!   audit log's topic ──────── PublishBatch ─────▶ its partition's leader (answer once committed)
//! ```
//! Each answer comes once its writes are committed, so a coordinator that moves on has nothing
//! a failover could take back. A refused call answers the Kafka error the caller acts on
//! (NOT_LEADER_OR_FOLLOWER, NOT_COORDINATOR: retried after the metadata moves).

use std::sync::Arc;
use std::time::Duration;

use kafka_protocol::error::ResponseError;
use serde::{Deserialize, Serialize};
use sluice_cluster::runtime::ClusterNode;
use sluice_cluster::NodeId;
use sluice_log::Marker;

use super::cluster_messages::{PublishAsk, OLDER_NODE_REFUSAL};
use crate::broker::Broker;
use crate::browse::BrowseRequest;
use crate::txn::state::PendingOffset;

/// How long a call may take: a marker or offset write waits for its commit (5 s at most).
const CALL_TIMEOUT: Duration = Duration::from_secs(8);

#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) enum PeerCall {
    /// Write a transaction's markers on partitions the receiver leads.
    Markers {
        producer_id: i64,
        producer_epoch: i16,
        coordinator_epoch: i32,
        commit: bool,
        partitions: Vec<(String, i32)>,
    },
    /// A committing transaction's offsets for a group the receiver coordinates.
    CommitOffsets {
        group: String,
        offsets: Vec<PendingOffset>,
    },
    /// A transaction that handed offsets of `group` (which the receiver coordinates) to its
    /// coordinator aborted: they are no longer pending there.
    AbortedTxnOffsets {
        group: String,
        producer_id: i64,
        partitions: Vec<(String, i32)>,
    },
    /// A TxnOffsetCommit's offsets, checked against the group by its coordinator, for the
    /// transaction's coordinator to keep until the transaction ends.
    TxnOffsets {
        transactional_id: String,
        producer_id: i64,
        producer_epoch: i16,
        offsets: Vec<PendingOffset>,
        tv2: bool,
    },
    /// Is `topic`-`partition` in this producer epoch's open transaction? Asked by a partition
    /// leader before it takes the partition's first transactional write of a transaction
    /// (KIP-890 part 1), so a late write of an ended transaction cannot open one nobody ends.
    VerifyTxnWrite {
        transactional_id: String,
        producer_id: i64,
        producer_epoch: i16,
        topic: String,
        partition: i32,
        /// Transactions version 2 (Produce v12+): add the partition to the transaction if it
        /// is not in it yet, and answer once that is committed.
        #[serde(default)]
        implicit_add: bool,
    },
    /// The receiver's [`NodeReport`](super::node_report::NodeReport), with its followers'
    /// lag for the partitions of `lag_of`.
    Report { lag_of: Option<String> },
    /// The receiver's client traffic counters, for a console charting the cluster's traffic
    /// (answered with a `traffic_report::TrafficTotals`).
    Traffic,
    /// DeleteRecords on a partition the receiver leads (from another node's admin console);
    /// answered with the new log start.
    DeleteRecords {
        topic: String,
        partition: i32,
        before: i64,
        /// How long to wait for the in-sync followers to follow (30 s when absent).
        #[serde(default)]
        wait_ms: Option<u64>,
    },
    /// How far the receiver's replicas of these partitions go, for an unclean election
    /// (answered with a list of `unclean::LogEnd`).
    LogEnds { partitions: Vec<(String, i32)> },
    /// The consumer groups the receiver coordinates, for a console's list of all groups
    /// (answered with a list of `cluster_groups::GroupReport`).
    Groups,
    /// A partition's log start, end and the offset of a time, for a group's offset reset on
    /// the node coordinating the group (answered with a `cluster_offsets::OffsetBounds`).
    OffsetBounds {
        topic: String,
        partitions: Vec<i32>,
        timestamp_ms: Option<i64>,
    },
    /// The ends a consumer can read to of partitions the receiver leads, for the lag of the
    /// groups the asking node coordinates (answered with a list of `remote_ends::End`).
    VisibleEnds { partitions: Vec<(String, i32)> },
    /// A console's message browser on a partition the asking node holds no replica of
    /// (answered with a `browse::BrowsePage`).
    Browse(BrowseRequest),
    /// A console's test record for a partition the receiver leads, answered with its
    /// (partition, offset) once committed.
    Publish(PublishAsk),
    /// Records for one partition the receiver leads, written as one batch (the audit log's
    /// topic), answered with the first one's (partition, offset) once committed.
    PublishBatch(Vec<PublishAsk>),
}

/// Why a peer gave no answer: the Kafka error it refused with, or none if it was not reached.
#[derive(Debug, Clone, thiserror::Error)]
#[error("{message}")]
pub struct PeerRefused {
    pub code: Option<i16>,
    pub message: String,
}

impl PeerRefused {
    fn unreached(e: impl std::fmt::Display) -> PeerRefused {
        PeerRefused {
            code: None,
            message: e.to_string(),
        }
    }

    /// The node is older than the call: it did not know it, so did nothing.
    pub fn unknown_call(&self) -> bool {
        self.code.is_none() && self.message.contains(OLDER_NODE_REFUSAL)
    }
}

/// A call's answer: done (with what the call asked for, `null` for most), or the Kafka error
/// code and why.
type PeerOutcome = Result<serde_json::Value, (i16, String)>;

/// Lets `node` hand the calls arriving at this node to `broker`.
pub(super) fn install(broker: &Arc<Broker>, node: &ClusterNode) {
    let weak = Arc::downgrade(broker);
    node.set_peer_handler(Arc::new(move |body| {
        let weak = weak.clone();
        Box::pin(async move {
            match weak.upgrade() {
                Some(broker) => broker.answer_peer(body).await,
                None => Err("the broker is shutting down".into()),
            }
        })
    }));
}

impl Broker {
    /// Sends `call` to `node` and waits for its answer.
    pub(crate) async fn call_peer(
        &self,
        node: NodeId,
        call: &PeerCall,
    ) -> Result<(), ResponseError> {
        let Some(replication) = self.replication.get() else {
            return Err(ResponseError::CoordinatorNotAvailable);
        };
        let body = serde_json::to_string(call).map_err(|e| {
            tracing::error!(error = %e, "cannot encode a peer call");
            ResponseError::UnknownServerError
        })?;
        let reply = replication
            .node()
            .call_peer(node, body, CALL_TIMEOUT)
            .await
            .map_err(|e| {
                tracing::info!(%node, error = %e, "peer call failed");
                ResponseError::CoordinatorNotAvailable
            })?;
        let outcome: PeerOutcome = serde_json::from_str(&reply).map_err(|e| {
            tracing::warn!(%node, error = %e, "unreadable peer answer");
            ResponseError::UnknownServerError
        })?;
        outcome.map(drop).map_err(|(code, message)| {
            tracing::info!(%node, code, %message, "peer call refused");
            ResponseError::try_from_code(code).unwrap_or(ResponseError::UnknownServerError)
        })
    }

    /// Sends `call` to `node` and returns what it answered; the error says why there is none.
    pub(crate) async fn ask_peer(
        &self,
        node: NodeId,
        call: &PeerCall,
        timeout: Duration,
    ) -> Result<serde_json::Value, PeerRefused> {
        let replication = self
            .replication
            .get()
            .ok_or_else(|| PeerRefused::unreached("not in a cluster"))?;
        let body = serde_json::to_string(call).map_err(PeerRefused::unreached)?;
        let reply = replication
            .node()
            .call_peer(node, body, timeout)
            .await
            .map_err(|e| PeerRefused::unreached(format!("node {node}: {e}")))?;
        let outcome: PeerOutcome = serde_json::from_str(&reply).map_err(PeerRefused::unreached)?;
        outcome.map_err(|(code, message)| PeerRefused {
            code: Some(code),
            message,
        })
    }

    /// Asks `call` of every live node at once (a fenced node is not asked), this node
    /// answering with `here()` itself (on a single node, only that): each node's answer, or
    /// why it gave none (no answer in `timeout`, or an older node that does not know the call).
    pub(crate) async fn ask_live_nodes<T: serde::de::DeserializeOwned>(
        &self,
        call: &PeerCall,
        timeout: Duration,
        here: impl Fn() -> T,
    ) -> Vec<(i32, Result<T, String>)> {
        let Some(replication) = self.replication.get() else {
            return vec![(self.config.node_id, Ok(here()))];
        };
        let state = replication.state();
        let me = replication.me();
        let here = &here;
        let live = state.state.nodes.values();
        let asks = live
            .filter(|n| !n.fenced || n.registration.node == me)
            .map(|n| {
                let id = n.registration.node;
                async move {
                    let answer = if id == me {
                        Ok(here())
                    } else {
                        match self.ask_peer(id, call, timeout).await {
                            Ok(v) => serde_json::from_value(v).map_err(|e| e.to_string()),
                            Err(e) => Err(e.to_string()),
                        }
                    };
                    (id.0, answer)
                }
            });
        futures::future::join_all(asks).await
    }

    /// Answers a call another node sent here.
    async fn answer_peer(self: Arc<Self>, body: String) -> Result<String, String> {
        let call: PeerCall =
            serde_json::from_str(&body).map_err(|e| format!("{OLDER_NODE_REFUSAL}: {e}"))?;

        let outcome = match call {
            PeerCall::Report { lag_of } => {
                return answered(Ok(self.node_report(lag_of.as_deref())));
            }
            PeerCall::Traffic => return answered(Ok(self.traffic_totals())),
            PeerCall::DeleteRecords {
                topic,
                partition,
                before,
                wait_ms,
            } => {
                let wait = wait_ms.map_or(crate::low_watermark::ADMIN_WAIT, Duration::from_millis);
                let deleted = self
                    .delete_records_here(&topic, partition, before, wait)
                    .await;
                return answered(deleted.map(|start| start.0));
            }
            PeerCall::Browse(request) => {
                let broker = Arc::clone(&self);
                let page = tokio::task::spawn_blocking(move || broker.browse(&request))
                    .await
                    .map_err(|e| format!("the browse failed: {e}"))?;
                return answered(page);
            }
            PeerCall::Publish(ask) => {
                let landed = match ask.record() {
                    Ok((topic, partition, record)) => {
                        self.publish_committed(&topic, partition, vec![record])
                            .await
                    }
                    Err(e) => Err(e),
                };
                return answered(landed);
            }
            PeerCall::PublishBatch(asks) => {
                return answered(self.publish_asked_batch(asks).await);
            }
            PeerCall::Groups => return answered(Ok(self.group_reports_here())),
            PeerCall::VisibleEnds { partitions } => {
                return answered(Ok(self.visible_ends_here(&partitions)));
            }
            PeerCall::OffsetBounds {
                topic,
                partitions,
                timestamp_ms,
            } => return answered(self.offset_bounds_here(&topic, &partitions, timestamp_ms)),
            PeerCall::LogEnds { partitions } => {
                return answered(Ok(self.log_ends_here(&partitions)));
            }
            PeerCall::Markers {
                producer_id,
                producer_epoch,
                coordinator_epoch,
                commit,
                partitions,
            } => {
                let marker = if commit {
                    Marker::Commit
                } else {
                    Marker::Abort
                };
                match self.write_markers_here(
                    marker,
                    producer_id,
                    producer_epoch,
                    coordinator_epoch,
                    &partitions,
                ) {
                    Ok((waits, refused)) => match crate::commit::committed(waits).await {
                        Ok(()) if refused.is_empty() => Ok(()),
                        Ok(()) => Err(ResponseError::NotEnoughReplicas),
                        Err(e) => Err(e),
                    },
                    Err(e) => Err(e),
                }
            }
            PeerCall::CommitOffsets { group, offsets } => {
                self.commit_offsets_here(&group, &offsets).await
            }
            PeerCall::AbortedTxnOffsets {
                group,
                producer_id,
                partitions,
            } => self.aborted_txn_offsets_here(&group, producer_id, &partitions),
            PeerCall::VerifyTxnWrite {
                transactional_id,
                producer_id,
                producer_epoch,
                topic,
                partition,
                implicit_add,
            } => {
                self.verify_txn_write_at_coordinator(
                    &transactional_id,
                    producer_id,
                    producer_epoch,
                    &topic,
                    partition,
                    implicit_add,
                )
                .await
            }
            PeerCall::TxnOffsets {
                transactional_id,
                producer_id,
                producer_epoch,
                offsets,
                tv2,
            } => match self.txn_offsets_here(
                &transactional_id,
                producer_id,
                producer_epoch,
                offsets,
                tv2,
            ) {
                Ok(waits) => crate::commit::committed(waits).await,
                Err(e) => Err(e),
            },
        };
        let outcome: PeerOutcome = outcome
            .map(|()| serde_json::Value::Null)
            .map_err(|e| (e.code(), format!("{e:?}")));
        serde_json::to_string(&outcome).map_err(|e| format!("cannot encode an answer: {e}"))
    }

    /// A partition leader's KIP-890 question ([`PeerCall::VerifyTxnWrite`]), answered by the
    /// transaction's coordinator (this node): the write is allowed, and with `implicit_add`
    /// the partition is in the transaction and that is committed.
    pub(crate) async fn verify_txn_write_at_coordinator(
        &self,
        transactional_id: &str,
        producer_id: i64,
        producer_epoch: i16,
        topic: &str,
        partition: i32,
        implicit_add: bool,
    ) -> Result<(), ResponseError> {
        self.txns.check(transactional_id)?;
        let waits = self
            .verify_txn_write_here(
                Some(transactional_id),
                producer_id,
                producer_epoch,
                topic,
                partition,
                implicit_add,
            )
            .map_err(|(e, message)| {
                tracing::debug!(transactional_id, producer_id, %message, "transactional write refused");
                e
            })?;
        crate::commit::committed(waits).await
    }
}

/// The encoded answer to a call whose outcome is a value: the value, or the Kafka error the
/// broker refused with.
fn answered<T: Serialize>(result: Result<T, crate::error::BrokerError>) -> Result<String, String> {
    let outcome: PeerOutcome = match result {
        Ok(value) => serde_json::to_value(value)
            .map_err(|e| (ResponseError::UnknownServerError.code(), e.to_string())),
        Err(e) => Err((e.code(), e.to_string())),
    };
    serde_json::to_string(&outcome).map_err(|e| format!("cannot encode an answer: {e}"))
}
