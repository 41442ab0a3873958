//! Produce: validate each partition's batches, append them on the leader, and answer per
//! `acks`: 0 → no response; 1 → once the leader has the batch (fsynced, in sync mode, where
//! concurrent producers share fsyncs); -1 → once it is committed: below the high watermark,
//! which every in-sync replica has reached (`min.insync.replicas` of them at least, else
//! NOT_ENOUGH_REPLICAS). A single node is the whole ISR, so 1 and -1 coincide there.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use kafka_protocol::error::ResponseError;
use kafka_protocol::messages::produce_response::{PartitionProduceResponse, TopicProduceResponse};
use kafka_protocol::messages::{ProduceRequest, ProduceResponse, ResponseKind, TopicName};
use sluice_auth::acl::Operation;
use sluice_log::{validate_produce, BatchHeader, FlushMode, LogError};
use sluice_wire::Reply;

use super::str_bytes;
use crate::broker::Broker;
use crate::commit::Written;
use crate::error::{log_error, BrokerError};
use crate::handlers::{Call, Versions};
use crate::partition::Partition;
use crate::quotas::throttle::QuotaKind;
use crate::replication::peer::PeerCall;
use crate::shards::Whereabouts;

/// What an answer waits for, for the write (with the leader epoch it was made in).
enum Wait {
    /// The leader's fsync (acks=1, sync mode).
    Durable(Written),
    /// The high watermark (acks=all).
    Committed(Written),
}

impl Wait {
    /// Waits, for at most `timeout`; the error to answer if it did not happen. In a cluster,
    /// `lease` is this node's controller session: a commit is answered only while it holds,
    /// checked when the answer goes out, not only when the request came in — a leader paused
    /// past its session may, on waking, see its high watermark move from its followers'
    /// stale fetches before it learns it was replaced.
    /// `deadline`: the request's timeout from when its waits began (one for all its
    /// partitions, as Kafka's delayed produce has; the waits run one after another).
    async fn outcome(
        self,
        deadline: tokio::time::Instant,
        timeout: Duration,
        lease: Option<&sluice_cluster::runtime::ClusterNode>,
    ) -> Result<(), (ResponseError, String)> {
        match self {
            Wait::Durable(w) => {
                match tokio::time::timeout_at(
                    deadline,
                    w.partition.wait_durable_leading(w.end, w.epoch),
                )
                .await
                {
                    Ok(Ok(())) => Ok(()),
                    Ok(Err(BrokerError::NotLeader(m))) => {
                        Err((ResponseError::NotLeaderOrFollower, m))
                    }
                    Ok(Err(_)) => Err((ResponseError::KafkaStorageError, "fsync failed".into())),
                    Err(_) => Err((
                        ResponseError::RequestTimedOut,
                        format!("not on disk within the request timeout of {timeout:?}"),
                    )),
                }
            }
            Wait::Committed(w) => {
                let committed = w.partition.wait_committed_write(w.end, w.epoch);
                match tokio::time::timeout_at(deadline, committed).await {
                    Ok(Ok(())) if lease.is_some_and(|l| !l.holds_session()) => Err((
                        ResponseError::NotLeaderOrFollower,
                        "this node lost touch with the cluster's controller before the write \
                         was committed"
                            .into(),
                    )),
                    Ok(Ok(())) => Ok(()),
                    Ok(Err(e)) => Err((e.response_error(), e.to_string())),
                    Err(_) => Err((
                        ResponseError::RequestTimedOut,
                        format!(
                            "not replicated to the in-sync replicas within the request timeout of {timeout:?}"
                        ),
                    )),
                }
            }
        }
    }
}

/// A partition's answer, possibly still waiting.
struct Pending {
    response: PartitionProduceResponse,
    wait_for: Option<Wait>,
}

fn failed(index: i32, error: ResponseError, message: String) -> Pending {
    Pending {
        response: PartitionProduceResponse::default()
            .with_index(index)
            .with_error_code(error.code())
            .with_base_offset(-1)
            .with_log_append_time_ms(-1)
            .with_log_start_offset(-1)
            .with_error_message(Some(str_bytes(&message))),
        wait_for: None,
    }
}

/// v3–13 served (record batches v2). Listed from v0 as Kafka 4 lists it (KAFKA-18659), because
/// librdkafka before 2.11 sends gzip, snappy and lz4 batches uncompressed to a broker that does
/// not list v0; a v0–2 request (message sets v0/v1) closes the connection.
pub const VERSIONS: Versions = Versions::new(3, 13).advertised_from(0);

pub fn handle(broker: &Broker, mut request: ProduceRequest, call: &Call) -> Reply {
    let denied = authorize(broker, call, &mut request);
    // The producer's byte-rate quota counts what it sent (KIP-219: answered at once with
    // the throttle time, the connection muted for it).
    let throttle = broker.throttle_call(call, QuotaKind::Produce, || {
        request
            .topic_data
            .iter()
            .flat_map(|t| &t.partition_data)
            .map(|p| p.records.as_ref().map_or(0, |r| r.len() as u64))
            .sum()
    });
    let reply = handle_authorized(broker, request, call);
    if denied.is_empty() && throttle == 0 {
        return reply;
    }
    super::map_response(reply, move |response| {
        if let ResponseKind::Produce(r) = response {
            r.responses.extend(denied);
            r.throttle_time_ms = r.throttle_time_ms.max(throttle);
        }
    })
}

/// Takes out of the request the topics the principal may not write (or auto-create), and
/// answers them: TRANSACTIONAL_ID_AUTHORIZATION_FAILED for every topic when the transactional
/// id is not writable, else TOPIC_AUTHORIZATION_FAILED per topic without Write; a topic that
/// does not exist and may not be created is UNKNOWN_TOPIC_OR_PARTITION.
fn authorize(
    broker: &Broker,
    call: &Call,
    request: &mut ProduceRequest,
) -> Vec<TopicProduceResponse> {
    let authz = call.authz(broker);
    if authz.is_unrestricted() {
        return Vec::new();
    }
    let txn_denied = request
        .transactional_id
        .as_ref()
        .is_some_and(|id| !authz.transactional_id(Operation::Write, id));
    let mut denied = Vec::new();
    request.topic_data.retain(|t| {
        // By id (v13): a topic unknown here and in the cluster is left to the handler
        // (UNKNOWN_TOPIC_ID), as Fetch does; it is never auto-created.
        let (name, exists) = if call.version >= 13 {
            match broker.topic_name_of(t.topic_id) {
                Some(name) => (name, true),
                None if !txn_denied => return true,
                None => (String::new(), true),
            }
        } else {
            (t.name.to_string(), broker.topics().get(&t.name).is_some())
        };
        let error = if txn_denied {
            ResponseError::TransactionalIdAuthorizationFailed
        } else if !authz.topic(Operation::Write, &name) {
            ResponseError::TopicAuthorizationFailed
        } else if !exists && !authz.may_create_topic(&name) {
            ResponseError::UnknownTopicOrPartition
        } else {
            return true;
        };
        denied.push(
            TopicProduceResponse::default()
                .with_name(t.name.clone())
                .with_topic_id(t.topic_id)
                .with_partition_responses(
                    t.partition_data
                        .iter()
                        .map(|p| {
                            PartitionProduceResponse::default()
                                .with_index(p.index)
                                .with_error_code(error.code())
                                .with_base_offset(-1)
                                .with_log_append_time_ms(-1)
                                .with_log_start_offset(-1)
                        })
                        .collect(),
                ),
        );
        false
    });
    denied
}

fn handle_authorized(broker: &Broker, request: ProduceRequest, call: &Call) -> Reply {
    let version = call.version;
    if !broker.config().clustered {
        return handle_here(broker, request, version);
    }
    let (asks, open) = remote_checks(broker, &request, version);
    if asks.is_empty() && open.is_empty() {
        return handle_verified(broker, request, version, &Verdicts::new());
    }
    let Some(owner) = broker.arc() else {
        return handle_verified(broker, request, version, &Verdicts::new());
    };
    // Turns are taken now, as the request arrives, so pipelined produces append in order: on
    // the partitions it asks about, and on those it does not ask about while an earlier
    // produce there still waits for its verdict.
    let asked = asks.iter().map(|a| (a.topic.clone(), a.partition));
    let Some(mut turn) = broker.append_turns.take(asked, open) else {
        return handle_verified(broker, request, version, &Verdicts::new());
    };
    Reply::Later(Box::pin(async move {
        let verdicts = ask_coordinator(&owner, asks).await;
        turn.wait().await;
        let reply = handle_verified(&owner, request, version, &verdicts);
        drop(turn);
        match reply {
            Reply::Ready(body) => Some(*body),
            Reply::Later(pending) => pending.await,
            Reply::Silent | Reply::Close(_) => None,
        }
    }))
}

/// A single node's produce. A transactional write first waits until the end of the
/// producer's previous transaction is durable, when its EndTxn was answered before that (see
/// `finish_txn`): a crash must not leave the previous transaction's decision to be carried out
/// again over this one's data. Its later batches to the same partitions queue behind it.
fn handle_here(broker: &Broker, request: ProduceRequest, version: i16) -> Reply {
    let Some(id) = request.transactional_id.as_ref() else {
        return handle_verified(broker, request, version, &Verdicts::new());
    };
    if request.acks != -1 {
        // Refused partition by partition (transactional writes need acks=all), and an acks=0
        // request gets no answer, which a deferred reply cannot express.
        return handle_verified(broker, request, version, &Verdicts::new());
    }
    let barrier = broker.txns.previous_end(id.as_str());
    if barrier.is_empty() && broker.append_turns.is_idle() {
        // The usual case: nothing to wait for, nobody ahead (a connection's requests are
        // handled in order, so an earlier produce of this producer already holds its turn).
        return handle_verified(broker, request, version, &Verdicts::new());
    }
    let keys: Vec<(String, i32)> = request
        .topic_data
        .iter()
        .filter_map(|t| {
            let name = if version >= 13 {
                broker.topics().get_by_id(t.topic_id)?.name.to_string()
            } else {
                t.name.to_string()
            };
            Some(
                t.partition_data
                    .iter()
                    .map(move |p| (name.clone(), p.index)),
            )
        })
        .flatten()
        .collect();
    let (first, behind) = if barrier.is_empty() {
        (Vec::new(), keys)
    } else {
        (keys, Vec::new())
    };
    let (Some(mut turn), Some(owner)) = (broker.append_turns.take(first, behind), broker.arc())
    else {
        return handle_verified(broker, request, version, &Verdicts::new());
    };
    Reply::Later(Box::pin(async move {
        if let Err(e) = crate::commit::committed(barrier).await {
            return Some(refuse_all(
                request,
                version,
                ResponseError::NotEnoughReplicas,
                format!("the end of this producer's previous transaction is not on disk yet ({e:?}); retry"),
            ));
        }
        turn.wait().await;
        let reply = handle_verified(&owner, request, version, &Verdicts::new());
        drop(turn);
        match reply {
            Reply::Ready(body) => Some(*body),
            Reply::Later(pending) => pending.await,
            Reply::Silent | Reply::Close(_) => None,
        }
    }))
}

/// The same error for every partition of `request`.
fn refuse_all(
    request: ProduceRequest,
    version: i16,
    error: ResponseError,
    message: String,
) -> ResponseKind {
    ResponseKind::Produce(
        ProduceResponse::default().with_responses(
            request
                .topic_data
                .into_iter()
                .map(|t| {
                    TopicProduceResponse::default()
                        .with_name(if version >= 13 {
                            TopicName::default()
                        } else {
                            t.name
                        })
                        .with_topic_id(t.topic_id)
                        .with_partition_responses(
                            t.partition_data
                                .iter()
                                .map(|p| failed(p.index, error, message.clone()).response)
                                .collect(),
                        )
                })
                .collect(),
        ),
    )
}

/// The transaction coordinator's answers for the partitions it was asked about, with the
/// verification guard each took before asking.
type Verdicts = HashMap<(String, i32), Verdict>;

/// The guard a verified write took, and the coordinator's answer.
type Verdict = (u64, Result<(), (ResponseError, String)>);

/// One partition's first transactional write of a transaction, to verify with its
/// coordinator before the append (KIP-890 part 1), and with transactions version 2 to add the
/// partition to the transaction there (part 2).
struct Ask {
    transactional_id: String,
    producer_id: i64,
    producer_epoch: i16,
    topic: String,
    partition: i32,
    implicit_add: bool,
    /// The partition's verification guard, taken before the question.
    guard: u64,
}

/// The transactional writes of `request` that must be checked with the coordinator before
/// the append, in a cluster: a partition's first write of this producer epoch's transaction
/// (a late write of an ended transaction finds none open, and is asked about). A coordinator
/// on this node checks a classic write in place; an implicit add (Produce v12+) goes through
/// the asking path wherever the coordinator is, so the append waits until the add is
/// committed. None on a single node.
///
/// Also returned: the transactional writes not asked about (their partition holds the open
/// transaction already), which must still wait for an earlier produce there that was.
fn remote_checks(
    broker: &Broker,
    request: &ProduceRequest,
    version: i16,
) -> (Vec<Ask>, Vec<(String, i32)>) {
    let Some(id) = request.transactional_id.as_ref().map(|s| s.as_str()) else {
        return (Vec::new(), Vec::new());
    };
    let implicit_add = version >= 12;
    if !broker.config().clustered || (broker.txns.check(id).is_ok() && !implicit_add) {
        return (Vec::new(), Vec::new());
    }
    let mut asks = Vec::new();
    let mut open_already = Vec::new();
    for topic_data in &request.topic_data {
        let topic = if version >= 13 {
            broker.topics().get_by_id(topic_data.topic_id)
        } else {
            broker.topics().get(&topic_data.name)
        };
        let Some(topic) = topic else { continue };
        for data in &topic_data.partition_data {
            let Some(partition) = topic.partition(data.index) else {
                continue;
            };
            let Ok(h) = BatchHeader::parse(data.records.as_deref().unwrap_or_default()) else {
                continue;
            };
            let open = partition
                .open_transactions()
                .iter()
                .any(|t| t.producer_id == h.producer_id && t.producer_epoch == h.producer_epoch);
            if h.is_transactional() && !open {
                asks.push(Ask {
                    transactional_id: id.to_string(),
                    producer_id: h.producer_id,
                    producer_epoch: h.producer_epoch,
                    topic: topic.name.to_string(),
                    partition: data.index,
                    implicit_add,
                    guard: partition.take_verification_guard(h.producer_id),
                });
            } else if h.is_transactional() {
                open_already.push((topic.name.to_string(), data.index));
            }
        }
    }
    (asks, open_already)
}

/// Asks the coordinator about each partition, concurrently (in place when it runs here). Its
/// node moving or not answering becomes NOT_ENOUGH_REPLICAS, the retriable error every
/// producer knows (Kafka answers the same for a verification that could not be made).
async fn ask_coordinator(broker: &Broker, asks: Vec<Ask>) -> Verdicts {
    let calls = asks.into_iter().map(|ask| async move {
        let key = (ask.topic.clone(), ask.partition);
        let guard = ask.guard;
        let outcome = match broker.txns.shards.locate(&ask.transactional_id) {
            Whereabouts::Here(_) => {
                broker
                    .verify_txn_write_at_coordinator(
                        &ask.transactional_id,
                        ask.producer_id,
                        ask.producer_epoch,
                        &ask.topic,
                        ask.partition,
                        ask.implicit_add,
                    )
                    .await
            }
            Whereabouts::Loading => Err(ResponseError::CoordinatorLoadInProgress),
            Whereabouts::Elsewhere => match broker.txn_coordinator(&ask.transactional_id) {
                Ok((node, _, _)) => {
                    let call = PeerCall::VerifyTxnWrite {
                        transactional_id: ask.transactional_id,
                        producer_id: ask.producer_id,
                        producer_epoch: ask.producer_epoch,
                        topic: ask.topic,
                        partition: ask.partition,
                        implicit_add: ask.implicit_add,
                    };
                    broker.call_peer(sluice_cluster::NodeId(node), &call).await
                }
                Err(e) => Err(e),
            },
        };
        let verdict = outcome.map_err(|e| match e {
            ResponseError::NotCoordinator
            | ResponseError::CoordinatorNotAvailable
            | ResponseError::CoordinatorLoadInProgress
            | ResponseError::ConcurrentTransactions => (
                ResponseError::NotEnoughReplicas,
                format!(
                    "the transaction's coordinator could not verify this write yet ({e:?}); retry"
                ),
            ),
            e => (
                e,
                format!("the transaction's coordinator refused this write: {e:?}"),
            ),
        });
        (key, (guard, verdict))
    });
    futures::future::join_all(calls).await.into_iter().collect()
}

fn handle_verified(
    broker: &Broker,
    request: ProduceRequest,
    version: i16,
    verdicts: &Verdicts,
) -> Reply {
    let acks = request.acks;
    // A leader the controller has not confirmed within its session may already be replaced
    // (paused, or cut off from the majority): it takes no writes until confirmed again.
    let fenced = broker
        .replication()
        .is_some_and(|r| !r.node().holds_session());
    let mut topics: Vec<(TopicName, uuid::Uuid, Vec<Pending>)> =
        Vec::with_capacity(request.topic_data.len());
    for topic_data in request.topic_data {
        let topic = if version >= 13 {
            broker
                .topics()
                .get_by_id(topic_data.topic_id)
                .ok_or(BrokerError::UnknownTopicId(topic_data.topic_id))
        } else {
            broker.topic_or_auto_create(&topic_data.name, true)
        };
        let partitions = topic_data
            .partition_data
            .into_iter()
            .map(|data| {
                if !matches!(acks, -1..=1) {
                    return failed(
                        data.index,
                        ResponseError::InvalidRequiredAcks,
                        format!("acks must be -1, 0 or 1, not {acks}"),
                    );
                }
                let topic = match &topic {
                    Ok(topic) => topic,
                    Err(e) => return failed(data.index, e.response_error(), e.to_string()),
                };
                if fenced {
                    return failed(
                        data.index,
                        ResponseError::NotLeaderOrFollower,
                        "this node has lost touch with the cluster's controller".into(),
                    );
                }
                if crate::topics::is_internal(&topic.name) {
                    return failed(
                        data.index,
                        ResponseError::InvalidTopicException,
                        format!("{} is internal; only the broker writes to it", topic.name),
                    );
                }
                let Some(partition) = topic.partition(data.index) else {
                    let error = topic.missing_partition_error(data.index);
                    let message = if error == ResponseError::NotLeaderOrFollower {
                        format!(
                            "this node holds no replica of {}-{}",
                            topic.name, data.index
                        )
                    } else {
                        format!("topic '{}' has no partition {}", topic.name, data.index)
                    };
                    return failed(data.index, error, message);
                };
                append(
                    broker,
                    &partition,
                    data.records.as_deref().unwrap_or_default(),
                    version,
                    acks,
                    request.transactional_id.as_ref().map(|s| s.as_str()),
                    verdicts.get(&(topic.name.to_string(), data.index)),
                )
            })
            .collect();
        topics.push((topic_data.name, topic_data.topic_id, partitions));
    }
    if acks == 0 {
        return Reply::Silent;
    }
    let respond = move |topics: Vec<(TopicName, uuid::Uuid, Vec<PartitionProduceResponse>)>| {
        ResponseKind::Produce(
            ProduceResponse::default().with_responses(
                topics
                    .into_iter()
                    .map(|(name, id, partitions)| {
                        TopicProduceResponse::default()
                            .with_name(if version >= 13 {
                                TopicName::default()
                            } else {
                                name
                            })
                            .with_topic_id(if version >= 13 { id } else { uuid::Uuid::nil() })
                            .with_partition_responses(partitions)
                    })
                    .collect(),
            ),
        )
    };
    if topics
        .iter()
        .all(|(_, _, ps)| ps.iter().all(|p| p.wait_for.is_none()))
    {
        return Reply::Ready(Box::new(respond(
            topics
                .into_iter()
                .map(|(n, id, ps)| (n, id, ps.into_iter().map(|p| p.response).collect()))
                .collect(),
        )));
    }
    let timeout = Duration::from_millis(u64::try_from(request.timeout_ms).unwrap_or(0).max(1));
    let lease = broker.replication().map(|r| Arc::clone(r.node()));
    Reply::Later(Box::pin(async move {
        // The partitions' waits side by side under one deadline, as Kafka's delayed produce:
        // each is checked as soon as its own write is committed.
        let deadline = tokio::time::Instant::now() + timeout;
        let lease = lease.as_deref();
        let answered = futures::future::join_all(topics.into_iter().map(
            |(name, id, partitions)| async move {
                let responses = futures::future::join_all(partitions.into_iter().map(
                    |Pending {
                         mut response,
                         wait_for,
                     }| async move {
                        if let Some(wait) = wait_for {
                            if let Err((error, message)) =
                                wait.outcome(deadline, timeout, lease).await
                            {
                                response = failed(response.index, error, message).response;
                            }
                        }
                        response
                    },
                ))
                .await;
                (name, id, responses)
            },
        ))
        .await;
        Some(respond(answered))
    }))
}

fn append(
    broker: &Broker,
    partition: &Arc<Partition>,
    records: &[u8],
    version: i16,
    acks: i16,
    transactional_id: Option<&str>,
    verdict: Option<&Verdict>,
) -> Pending {
    let guard = verdict.map(|(guard, _)| *guard);
    let verdict = verdict.map(|(_, outcome)| outcome);
    let index = partition.index;
    let config = partition.config();
    let validated = match validate_produce(records, config.max_message_bytes) {
        // Compacted topics keep the newest record per key, so every record needs one.
        Ok(v) if config.compact && !v.every_record_has_a_key() => {
            return failed(
                index,
                ResponseError::InvalidRecord,
                "a compacted topic needs a key on every record".into(),
            );
        }
        Ok(v) if v.header().is_transactional() && acks != -1 => {
            return failed(
                index,
                ResponseError::InvalidRequiredAcks,
                format!("a transactional write needs acks=all (-1), not {acks}"),
            );
        }
        Ok(v) if v.header().is_transactional() => {
            let h = v.header();
            // KIP-890: the coordinator must know this partition is in the producer's open
            // transaction (Produce v12+ adds it, as transactions version 2 does).
            if let Err((error, message)) = broker.verify_txn_write(
                transactional_id,
                h.producer_id,
                h.producer_epoch,
                &partition.topic,
                index,
                version >= 12,
                verdict,
            ) {
                return failed(index, error, message);
            }
            v
        }
        Ok(v) => v,
        Err(e) => {
            let e = LogError::Batch(e);
            tracing::debug!(?partition, error = %e, "rejected produce");
            return failed(index, log_error(&e), e.to_string());
        }
    };
    match partition.append_guarded(validated, acks == -1, guard) {
        Ok(info) => {
            let end = info.last_offset.plus(1);
            let progress = partition.progress();
            // With the epoch the write was made in: the wait may begin only after another
            // partition's (they are answered in order).
            let written = || Written {
                partition: Arc::clone(partition),
                end,
                epoch: progress.epoch,
                write: true,
            };
            let wait_for = if acks == -1 {
                (progress.visible < end).then(|| Wait::Committed(written()))
            } else {
                (config.flush == FlushMode::Sync && progress.durable < end)
                    .then(|| Wait::Durable(written()))
            };
            Pending {
                response: PartitionProduceResponse::default()
                    .with_index(index)
                    .with_base_offset(info.base_offset.0)
                    .with_log_append_time_ms(info.log_append_time_ms)
                    .with_log_start_offset(progress.log_start.0),
                wait_for,
            }
        }
        Err(e) => {
            if e.is_storage() {
                tracing::warn!(?partition, error = %e, "append failed");
            }
            failed(index, e.response_error(), e.to_string())
        }
    }
}
