//! Transactions: the coordinator's state machine ([`coordinator`]) and the service around it,
//! which keeps every transactional id's state in the compacted `__transaction_state` topic
//! (key: the id; value: its state as JSON), replays it on start, finishes transactions
//! (markers on every partition, then the group offsets, then the completed state), aborts
//! those past their timeout, and at start-up settles any partition whose marker a crash lost.
//!
//! ```text
//!   EndTxn ─► Prepare* written (fsync) ─► markers on each partition ─► group offsets (fsync)
//!                                                                   ─► Complete* written ─► answer
//! ```
//! A crash after `Prepare*` is finished at start-up from that state alone. Markers are not
//! waited on: a marker a crash lost is written again at start-up from the completed state's
//! record of how the transaction ended (`heal_transactions`); and a partition's later writes
//! cannot outlive an earlier marker in its log. On a single node the completed state is not
//! waited on either: a crash that loses it finishes the transaction again from `Prepare*`,
//! and the producer's next transaction appends no data before it is durable
//! ([`TxnService::previous_end`]; AddPartitionsToTxn, which waits, covers it for older
//! clients). AddOffsetsToTxn, TxnOffsetCommit and a TV2 Produce's own addition are not
//! waited on: only the fsynced `Prepare*` state decides a transaction, and a TV2
//! transaction's data is appended only after the previous transaction's end is durable.
//! AddPartitionsToTxn (older clients) is.

pub mod append_turns;
pub mod coordinator;
pub mod state;

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::sync::Arc;

use kafka_protocol::error::ResponseError;
use parking_lot::{Mutex, MutexGuard};
use sluice_log::{validate_produce, Clock, LogError, Marker};

use crate::broker::Broker;
use crate::commit::{committed, Waits, Written};
use crate::error::BrokerError;
use crate::group::coordinator::{offset_record, Committed};
use crate::shards::{Shards, Whereabouts};
use crate::topics::{Topic, Topics};
use coordinator::{completed, Coordinator};
use sluice_cluster::NodeId;
use state::{PendingOffset, TxnMeta, TxnState};

pub const TXN_TOPIC: &str = "__transaction_state";

/// A change to write: an id's new state, or its removal.
#[derive(Debug, Clone)]
pub enum TxnRecord {
    Put(TxnMeta),
    Delete(String),
}

impl TxnRecord {
    fn id(&self) -> &str {
        match self {
            TxnRecord::Put(m) => &m.transactional_id,
            TxnRecord::Delete(id) => id,
        }
    }
}

pub struct TxnService {
    pub coordinator: Mutex<Coordinator>,
    /// The partitions of the transaction state topic this node coordinates.
    pub shards: Shards,
    clock: Arc<dyn Clock>,
    /// Ids whose `Prepare*` state has a finisher (claimed with it, under the coordinator
    /// lock, and released when the finisher ends).
    finishing: Arc<Mutex<HashSet<String>>>,
    /// Single node: per transactional id, the end of its last completed state in the log,
    /// written but perhaps not durable yet (see [`TxnService::previous_end`]).
    unsettled_ends: Mutex<HashMap<String, Written>>,
    /// The partitions that have their marker, per `Prepare*` state being finished here and
    /// not finished yet: an attempt that fails (a partition refuses its marker for want of
    /// in-sync replicas, a peer or a group coordinator does not answer) leaves them out of
    /// the next one, as Kafka's marker writer does.
    markers_written: Mutex<HashMap<MarkersKey, BTreeSet<(String, i32)>>>,
}

/// A `Prepare*` state being finished: transactional id, producer id and epoch, coordinator
/// epoch, and the transaction's start (the producer's next transaction may have the same
/// epoch, before KIP-890).
type MarkersKey = (String, i64, i16, i32, i64);

impl std::fmt::Debug for TxnService {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "TxnService")
    }
}

impl TxnService {
    /// Creates the transaction state topic if needed and replays it.
    pub fn open(
        topics: &Topics,
        partitions: i32,
        max_timeout_ms: i32,
        expiration_ms: i64,
        clock: Arc<dyn Clock>,
    ) -> Result<TxnService, BrokerError> {
        let topic = crate::internal_log::ensure_topic(topics, TXN_TOPIC, partitions)?;
        let mut coordinator = Coordinator::new(max_timeout_ms, expiration_ms);
        for partition in topic.partitions() {
            for (key, value) in crate::internal_log::read_all(&partition, TXN_TOPIC)? {
                apply_record(&mut coordinator, key, value);
            }
        }
        let n = coordinator.ids().len();
        if n > 0 {
            tracing::info!(transactional_ids = n, "loaded transaction state");
        }
        let shards = Shards::standalone(TXN_TOPIC);
        shards.set_topic(topic);
        Ok(TxnService {
            coordinator: Mutex::new(coordinator),
            shards,
            clock,
            finishing: Arc::default(),
            unsettled_ends: Mutex::default(),
            markers_written: Mutex::default(),
        })
    }

    /// A cluster node's service: no transactional id until this node leads a partition of the
    /// transaction state topic, which the cluster creates ([`TxnService::load`]).
    pub fn clustered(max_timeout_ms: i32, expiration_ms: i64, clock: Arc<dyn Clock>) -> TxnService {
        TxnService {
            coordinator: Mutex::new(Coordinator::new(max_timeout_ms, expiration_ms)),
            shards: Shards::clustered(TXN_TOPIC, Arc::clone(&clock)),
            clock,
            finishing: Arc::default(),
            unsettled_ends: Mutex::default(),
            markers_written: Mutex::default(),
        }
    }

    /// The coordinator epoch of `id` here (the leader epoch its partition was loaded in; 0 on
    /// a single node), or `NOT_COORDINATOR` when another node coordinates it
    /// (`COORDINATOR_LOAD_IN_PROGRESS` while this node reads its partition to take it over).
    pub fn check(&self, id: &str) -> Result<i32, ResponseError> {
        self.shards.check(id)
    }

    /// Forgets the markers noted for `Prepare*` states no longer being finished here: an id
    /// this node no longer coordinates (or coordinates in another epoch), or whose state has
    /// moved on. A finish that succeeds forgets its own; these are the rest, which would
    /// otherwise stay for the life of the process. An id whose partition is loading keeps
    /// them: a load that gave up is taken again in the same epoch.
    fn forget_stale_markers(&self) {
        let mut written = self.markers_written.lock();
        if written.is_empty() {
            return;
        }
        // The coordinator's lock, then the shards' (as `still_finishing` takes them).
        let coordinator = self.coordinator.lock();
        written.retain(|(id, producer_id, producer_epoch, epoch, start_ms), _| {
            match self.check(id) {
                Ok(current) => {
                    current == *epoch
                        && coordinator.get(id).is_some_and(|m| {
                            m.state.is_prepare()
                                && m.producer_id == *producer_id
                                && m.producer_epoch == *producer_epoch
                                && m.start_ms == *start_ms
                        })
                }
                Err(ResponseError::CoordinatorLoadInProgress) => true,
                Err(_) => false,
            }
        });
    }

    /// The coordinator, if this node coordinates `id`; as [`TxnService::check`] otherwise.
    pub fn lock_for(&self, id: &str) -> Result<MutexGuard<'_, Coordinator>, ResponseError> {
        self.check(id)?;
        Ok(self.coordinator.lock())
    }

    /// Takes over partition `index` of the transaction state topic (this node now leads it in
    /// `epoch`), after [`Shards::begin_load`]: blocking, for a blocking thread
    /// ([`Shards::load`]). Transactions it finds half-ended (`Prepare*`) or past their timeout
    /// are finished by the next tick.
    pub fn load(&self, topic: &Arc<Topic>, index: i32, epoch: i32) -> Result<(), BrokerError> {
        self.shards.load(
            topic,
            index,
            epoch,
            &self.coordinator,
            |partition, from| crate::internal_log::read_to_log_end(partition, TXN_TOPIC, from),
            |coordinator, owns, records| {
                coordinator.unload(owns);
                for (key, value) in records {
                    apply_record(coordinator, key, value);
                }
            },
        )?;
        Ok(())
    }

    /// Gives up partition `index` of the transaction state topic (another node leads it now).
    pub fn unload(&self, index: i32) {
        let mut coordinator = self.coordinator.lock();
        self.shards.unload(index, |owns| coordinator.unload(owns));
    }

    /// What the answer to a step only the `Prepare*` state decides (AddOffsetsToTxn,
    /// TxnOffsetCommit) waits for: nothing on a single node, where the fsynced `Prepare*` state
    /// carries it; in a cluster the step's own writes, so that a coordinator taking over knows
    /// of everything a client was told.
    pub fn before_answer(&self, waits: Waits) -> Waits {
        if self.shards.is_clustered() {
            waits
        } else {
            Vec::new()
        }
    }

    pub fn now_ms(&self) -> i64 {
        self.clock.now_ms()
    }

    /// Remembers where `id`'s completed state ends in the log, when it was not waited on.
    fn note_end(&self, id: &str, waits: &Waits) {
        if let Some(last) = waits.last() {
            self.unsettled_ends
                .lock()
                .insert(id.to_string(), last.clone());
        }
    }

    /// What the first write of `id`'s next transaction waits for before its append: its last
    /// completed state durable, when the answer to its EndTxn did not wait for that (single
    /// node). Nothing once it is.
    pub fn previous_end(&self, id: &str) -> Waits {
        let mut ends = self.unsettled_ends.lock();
        let Some(last) = ends.get(id) else {
            return Waits::new();
        };
        if last.partition.progress().visible >= last.end {
            ends.remove(id);
            return Waits::new();
        }
        vec![last.clone()]
    }

    /// Forgets the completed states that are durable by now.
    fn sweep_ends(&self) {
        self.unsettled_ends
            .lock()
            .retain(|_, last| last.partition.progress().visible < last.end);
    }

    /// What to wait on until everything written so far to the log partition holding `id`'s
    /// state is committed (durable on a single node); nothing when it already is.
    pub fn written_so_far(&self, id: &str) -> Waits {
        self.shards.written_so_far(id)
    }

    /// What an answer read from `id`'s state (not written by the request) waits on, in a
    /// cluster: see [`Shards::read_fence`]. Nothing on a single node.
    pub fn settled(&self, id: &str) -> Waits {
        self.shards.settled(id)
    }

    /// Appends the records (call with the coordinator locked, so the log's order is the order
    /// they are applied in); returns what to wait on for durability.
    pub fn write(&self, records: &[TxnRecord]) -> Result<Waits, BrokerError> {
        let now = self.clock.now_ms();
        let mut waits = Vec::new();
        for r in records {
            let key = r.id().as_bytes().to_vec();
            let value = match r {
                TxnRecord::Put(meta) => Some(serde_json::to_vec(meta).map_err(|e| {
                    BrokerError::InvalidRequest(format!("encoding a transaction state: {e}"))
                })?),
                TxnRecord::Delete(_) => None,
            };
            let batch = crate::internal_log::encode(&[(key, value)], now)?;
            let validated = validate_produce(&batch, usize::MAX).map_err(LogError::from)?;
            let partition = self.shards.partition(r.id())?;
            // Like Kafka's acks=all: refused when too few replicas are in sync.
            let info = partition.append(validated, true)?;
            waits.push(Written::now(&partition, info.last_offset.plus(1)));
        }
        Ok(waits)
    }

    /// Writes `meta` and applies it under the coordinator's lock (already held by the caller,
    /// passed in); returns the durability waits.
    pub fn put(
        &self,
        coordinator: &mut Coordinator,
        meta: TxnMeta,
    ) -> Result<Waits, ResponseError> {
        let waits = self.write(&[TxnRecord::Put(meta.clone())]).map_err(|e| {
            tracing::warn!(error = %e, "cannot write transaction state");
            crate::commit::coordinator_error(&e)
        })?;
        coordinator.apply(meta);
        Ok(waits)
    }

    /// Writes a `Prepare*` state and claims the right to finish it, in one step under the
    /// coordinator lock (which the caller holds): no other finisher (the clock's tick) can
    /// take a transaction between its decision and its finisher.
    pub(crate) fn put_prepare(
        &self,
        coordinator: &mut Coordinator,
        prepare: TxnMeta,
    ) -> Result<(Waits, FinishClaim), ResponseError> {
        debug_assert!(prepare.state.is_prepare());
        let claim = self
            .claim(&prepare.transactional_id)
            .ok_or(ResponseError::ConcurrentTransactions)?;
        Ok((self.put(coordinator, prepare)?, claim))
    }

    /// The right to finish `id`'s transaction, unless a finisher has it.
    pub(crate) fn claim(&self, id: &str) -> Option<FinishClaim> {
        self.finishing
            .lock()
            .insert(id.to_string())
            .then(|| FinishClaim {
                finishing: Arc::clone(&self.finishing),
                id: id.to_string(),
            })
    }
}

/// Applies one record of the transaction state log: an id's state, or its tombstone.
fn apply_record(coordinator: &mut Coordinator, key: Vec<u8>, value: Option<Vec<u8>>) {
    let Ok(id) = String::from_utf8(key) else {
        return;
    };
    match value.map(|v| serde_json::from_slice::<TxnMeta>(&v)) {
        Some(Ok(meta)) => coordinator.apply(meta),
        Some(Err(e)) => {
            tracing::warn!(transactional_id = %id, error = %e, "skipping unreadable transaction state")
        }
        None => coordinator.remove(&id),
    }
}

/// How long a finisher whose marker a partition refused (too few replicas in sync), or that
/// could not tell a group's coordinator of an abort, waits before it is tried again.
const MARKER_REFUSED_PAUSE: std::time::Duration = std::time::Duration::from_secs(2);

/// What a finisher that could not tell a group's coordinator of an abort fails with: the
/// transaction stays in `PrepareAbort` and is finished again (InitProducerId answers
/// CONCURRENT_TRANSACTIONS meanwhile).
const ABORT_NOT_TOLD: ResponseError = ResponseError::RequestTimedOut;

/// Held by the one finisher of a transaction's `Prepare*` state; released when dropped.
#[derive(Debug)]
pub(crate) struct FinishClaim {
    finishing: Arc<Mutex<HashSet<String>>>,
    id: String,
}

impl Drop for FinishClaim {
    fn drop(&mut self) {
        self.finishing.lock().remove(&self.id);
    }
}

/// A transaction's group offsets, by group.
fn by_group(offsets: &[PendingOffset]) -> BTreeMap<&str, Vec<PendingOffset>> {
    let mut by_group: BTreeMap<&str, Vec<PendingOffset>> = BTreeMap::new();
    for o in offsets {
        by_group.entry(&o.group).or_default().push(o.clone());
    }
    by_group
}

/// A group coordinator's answer that it holds nothing of the group for an abort to release:
/// it is loading the group (a load forgets the holds from before it, and takes no
/// TxnOffsetCommit until it is done). NOT_COORDINATOR is not such an answer: the node asked
/// may have been named by metadata older than the group's move, and the group's current
/// coordinator may hold the offsets; the next attempt asks again, with newer metadata.
fn holds_nothing(e: ResponseError) -> Result<(), ResponseError> {
    match e {
        ResponseError::CoordinatorLoadInProgress => Ok(()),
        e => Err(e),
    }
}

impl Broker {
    /// Finishes a transaction whose `Prepare*` state is written: markers on its partitions,
    /// its group offsets if it commits, then its completed state. Returns the completed state.
    /// Runs as a task of its own, so that a client that goes away mid-way cannot stop it.
    pub(crate) async fn finish_txn(
        self: &Arc<Self>,
        prepare: TxnMeta,
        claim: FinishClaim,
    ) -> Result<TxnMeta, ResponseError> {
        debug_assert_eq!(claim.id, prepare.transactional_id);
        let broker = Arc::clone(self);
        let task = tokio::spawn(async move {
            let finished = broker.finish_txn_inner(prepare).await;
            if finished == Err(ResponseError::NotEnoughReplicas) || finished == Err(ABORT_NOT_TOLD)
            {
                // A partition with too few replicas in sync, or a group coordinator out of
                // reach, may stay so for long: the next attempt (which asks again, and
                // writes only the markers still missing) waits a while instead of coming at
                // the next tick.
                tokio::spawn(async move {
                    tokio::time::sleep(MARKER_REFUSED_PAUSE).await;
                    drop(claim);
                });
            } else {
                drop(claim);
            }
            finished
        });
        task.await
            .unwrap_or(Err(ResponseError::CoordinatorNotAvailable))
    }

    async fn finish_txn_inner(&self, prepare: TxnMeta) -> Result<TxnMeta, ResponseError> {
        let commit = prepare.state == TxnState::PrepareCommit;
        let marker = if commit {
            Marker::Commit
        } else {
            Marker::Abort
        };
        // The coordinator epoch the markers carry; NOT_COORDINATOR once another node took the
        // id over (its own load finishes the transaction).
        let coordinator_epoch = self.txns.check(&prepare.transactional_id)?;
        // An earlier attempt of this finish may have written some markers: not again.
        let key = (
            prepare.transactional_id.clone(),
            prepare.producer_id,
            prepare.producer_epoch,
            coordinator_epoch,
            prepare.start_ms,
        );
        let written = self
            .txns
            .markers_written
            .lock()
            .get(&key)
            .cloned()
            .unwrap_or_default();
        let me = NodeId(self.node_id());
        let mut here = Vec::new();
        let mut elsewhere: BTreeMap<NodeId, Vec<(String, i32)>> = BTreeMap::new();
        for (topic, index) in prepare.partitions.difference(&written) {
            match self.partition_leader(topic, *index)? {
                // A partition deleted since has nothing left to mark.
                None => {}
                Some(node) if node == me => here.push((topic.clone(), *index)),
                Some(node) => elsewhere
                    .entry(node)
                    .or_default()
                    .push((topic.clone(), *index)),
            }
        }
        let mut told = true;
        if !commit {
            // Its group offsets will not be committed: said first, so that a marker that
            // cannot be written yet does not keep them pending for OffsetFetch; only while
            // this finish is still the transaction's (a stale one could release the holds of
            // the producer's next transaction).
            self.still_finishing(
                &*self.txns.lock_for(&prepare.transactional_id)?,
                &prepare,
                coordinator_epoch,
            )?;
            told = self.tell_aborted_txn_offsets(&prepare).await;
        }
        self.write_markers(&prepare, marker, coordinator_epoch, &key, here, elsewhere)
            .await?;
        // A group coordinator out of reach may still hold the offsets as pending: the abort
        // is not complete until it is told (as Kafka's is not until its marker is in the
        // group's offsets partition), or until every hold has expired anyway (all were taken
        // before the `Prepare*` state was written; a minute more for the nodes' clocks).
        let holds_expired = self.txns.now_ms() - prepare.updated_ms
            > crate::group::coordinator::REMOTE_TXN_OFFSETS_MAX_MS + 60_000;
        if !told && !holds_expired {
            return Err(ABORT_NOT_TOLD);
        }
        if commit && !prepare.pending_offsets.is_empty() {
            self.still_finishing(
                &*self.txns.lock_for(&prepare.transactional_id)?,
                &prepare,
                coordinator_epoch,
            )?;
            for (group, offsets) in by_group(&prepare.pending_offsets) {
                match self.groups.shards.locate(group) {
                    Whereabouts::Here(_) => self.commit_offsets_here(group, &offsets).await?,
                    Whereabouts::Loading => return Err(ResponseError::CoordinatorLoadInProgress),
                    Whereabouts::Elsewhere => {
                        let (node, _, _) = self.group_coordinator(group)?;
                        let call = crate::replication::PeerCall::CommitOffsets {
                            group: group.to_string(),
                            offsets,
                        };
                        self.call_peer(NodeId(node), &call).await?;
                    }
                }
            }
        }
        let done = completed(&prepare, self.txns.now_ms());
        let waits = {
            let mut coordinator = self.txns.lock_for(&done.transactional_id)?;
            self.still_finishing(&coordinator, &prepare, coordinator_epoch)?;
            let waits = self.txns.put(&mut coordinator, done.clone())?;
            if !self.config.clustered {
                // Under the lock: a retried EndTxn answered from this state finds it noted.
                self.txns.note_end(&done.transactional_id, &waits);
            }
            waits
        };
        // On a single node the completed state is not waited on: the durable `Prepare*`
        // already decides the transaction, and a crash that loses the completion finishes it
        // again from there. That second finish must find nothing of the producer's next
        // transaction on its partitions, or its marker would end that one too: every write of
        // the next transaction's data first waits until the transaction log holding this
        // completion is durable ([`TxnService::previous_end`]). In a cluster another node
        // may take over from a replica that never saw the completion: it is committed first.
        if self.config.clustered {
            committed(waits).await?;
        }
        self.txns.markers_written.lock().remove(&key);
        tracing::debug!(transactional_id = %done.transactional_id, state = done.state.name(), "transaction finished");
        Ok(done)
    }

    /// Writes the markers of `prepare` on `here`'s partitions and, through their leaders,
    /// `elsewhere`'s, noting under `key` each partition that has its marker. A partition here
    /// that refuses its marker (too few replicas in sync) does not stop the others (their
    /// stable offsets move on); the refusal is answered once they are written.
    async fn write_markers(
        &self,
        prepare: &TxnMeta,
        marker: Marker,
        coordinator_epoch: i32,
        key: &MarkersKey,
        here: Vec<(String, i32)>,
        elsewhere: BTreeMap<NodeId, Vec<(String, i32)>>,
    ) -> Result<(), ResponseError> {
        let note = |partitions: Vec<(String, i32)>| {
            let mut written = self.txns.markers_written.lock();
            written.entry(key.clone()).or_default().extend(partitions);
        };
        // A Prepare* state holds the producer id and epoch its markers carry.
        let (waits, refused) = self.write_markers_here(
            marker,
            prepare.producer_id,
            prepare.producer_epoch,
            coordinator_epoch,
            &here,
        )?;
        if self.config.clustered {
            // A marker a failover could take back would leave the transaction open on that
            // partition after the coordinator completed it.
            committed(waits).await?;
        }
        note(here.into_iter().filter(|p| !refused.contains(p)).collect());
        self.still_finishing(
            &*self.txns.lock_for(&prepare.transactional_id)?,
            prepare,
            coordinator_epoch,
        )?;
        let calls = elsewhere.into_iter().map(|(node, partitions)| {
            let call = crate::replication::PeerCall::Markers {
                producer_id: prepare.producer_id,
                producer_epoch: prepare.producer_epoch,
                coordinator_epoch,
                commit: marker == Marker::Commit,
                partitions: partitions.clone(),
            };
            async move { (self.call_peer(node, &call).await, partitions) }
        });
        let mut failed = None;
        for (answered, partitions) in futures::future::join_all(calls).await {
            match answered {
                Ok(()) => note(partitions),
                Err(e) => failed = failed.or(Some(e)),
            }
        }
        match failed {
            Some(e) => Err(e),
            None if !refused.is_empty() => Err(ResponseError::NotEnoughReplicas),
            None => Ok(()),
        }
    }

    /// Tells the coordinators of the groups an aborting transaction handed offsets to that
    /// they will not be committed (they hold them as pending for OffsetFetch's
    /// `require_stable`). At every attempt of the finisher. Returns whether every one that
    /// may hold them was told: a coordinator that answered that it is loading the group (it
    /// forgot its holds) counts as told; one that did not answer, or answered that it does
    /// not coordinate the group (this node's metadata may be behind the move), does not.
    async fn tell_aborted_txn_offsets(&self, prepare: &TxnMeta) -> bool {
        let mut calls = Vec::new();
        let mut all_told = true;
        for (group, offsets) in by_group(&prepare.pending_offsets) {
            let partitions: Vec<(String, i32)> = offsets
                .into_iter()
                .map(|o| (o.topic, o.partition))
                .collect();
            let told = match self.groups.shards.locate(group) {
                // Not here after all (a race with a move): told at the next attempt, where
                // the group went.
                Whereabouts::Here(_) => self
                    .aborted_txn_offsets_here(group, prepare.producer_id, &partitions)
                    .or_else(holds_nothing),
                // Loading: a load forgets what was held before it.
                Whereabouts::Loading => Ok(()),
                Whereabouts::Elsewhere => self.group_coordinator(group).map(|(node, _, _)| {
                    calls.push((
                        NodeId(node),
                        crate::replication::PeerCall::AbortedTxnOffsets {
                            group: group.to_string(),
                            producer_id: prepare.producer_id,
                            partitions,
                        },
                    ))
                }),
            };
            if let Err(e) = told {
                all_told = false;
                tracing::info!(group, error = ?e, "cannot tell a group coordinator of an aborted transaction's offsets");
            }
        }
        // Side by side, each for a second at most: a group coordinator that does not answer
        // must not hold the abort's markers back for the peer call's whole timeout.
        let told = futures::future::join_all(calls.into_iter().map(|(node, call)| async move {
            let answered = self
                .ask_peer(node, &call, std::time::Duration::from_secs(1))
                .await;
            (node, answered)
        }))
        .await;
        for (node, answered) in told {
            let Err(refused) = answered else {
                continue;
            };
            // An older node does not know the call, and holds nothing for it to release.
            let nothing_held = refused.unknown_call()
                || refused
                    .code
                    .and_then(ResponseError::try_from_code)
                    .is_some_and(|e| holds_nothing(e).is_ok());
            if !nothing_held {
                all_told = false;
                tracing::info!(?node, why = %refused.message, "cannot tell a group coordinator of an aborted transaction's offsets");
            }
        }
        all_told
    }

    /// Whether a finisher may go on: the id is still coordinated here in the coordinator
    /// epoch the finish began in, and still in the state it began from. The id may have moved
    /// to another node and back while markers were written (a peer call waits up to
    /// seconds), and the transaction been finished there and a new one begun, whose partitions
    /// and group offsets a stale finisher must not touch (Kafka's marker writer checks the
    /// coordinator epoch the same way).
    fn still_finishing(
        &self,
        coordinator: &crate::txn::coordinator::Coordinator,
        prepare: &TxnMeta,
        coordinator_epoch: i32,
    ) -> Result<(), ResponseError> {
        let unchanged = coordinator.get(&prepare.transactional_id).is_some_and(|m| {
            m.state == prepare.state
                && m.producer_id == prepare.producer_id
                && m.producer_epoch == prepare.producer_epoch
        });
        if self.txns.check(&prepare.transactional_id)? != coordinator_epoch || !unchanged {
            return Err(ResponseError::NotCoordinator);
        }
        Ok(())
    }

    /// The node leading `topic`-`index` (this node on its own), `None` if the partition is
    /// gone; `COORDINATOR_NOT_AVAILABLE` while it has no live leader (the finisher retries).
    fn partition_leader(&self, topic: &str, index: i32) -> Result<Option<NodeId>, ResponseError> {
        let Some(replication) = self.replication() else {
            let here = self.topics.get(topic).and_then(|t| t.partition(index));
            return Ok(here.map(|_| NodeId(self.node_id())));
        };
        let applied = replication.state();
        let state = &applied.state;
        let Some(info) = state.names.get(topic).and_then(|id| state.topics.get(id)) else {
            return Ok(None);
        };
        let Some(p) = info.partitions.get(index as usize) else {
            return Ok(None);
        };
        p.leader
            .filter(|l| state.is_live(*l))
            .map(Some)
            .ok_or(ResponseError::CoordinatorNotAvailable)
    }

    /// Writes a transaction's markers on partitions this node leads; returns what to wait on
    /// for them to be committed, and the partitions that refused theirs for want of in-sync
    /// replicas (the others are written all the same). A partition that saw a
    /// newer epoch of the producer already had its transaction ended by a newer decision:
    /// nothing to write there.
    pub(crate) fn write_markers_here(
        &self,
        marker: Marker,
        producer_id: i64,
        producer_epoch: i16,
        coordinator_epoch: i32,
        partitions: &[(String, i32)],
    ) -> Result<(Waits, Vec<(String, i32)>), ResponseError> {
        let mut waits = Vec::new();
        // A partition with too few replicas in sync refuses its marker before writing it; the
        // others are still written (their stable offsets move on, as on Kafka), and the
        // finisher retries.
        let mut refused = Vec::new();
        for (topic, index) in partitions {
            let Some(partition) = self.topics.get(topic).and_then(|t| t.partition(*index)) else {
                return Err(ResponseError::NotLeaderOrFollower);
            };
            match partition.append_marker(marker, producer_id, producer_epoch, coordinator_epoch) {
                Ok(info) => waits.push(Written::now(&partition, info.last_offset.plus(1))),
                Err(BrokerError::Log(LogError::Producer(e))) => {
                    tracing::warn!(?partition, error = %e, "transaction marker refused");
                }
                Err(BrokerError::NotLeader(_)) => return Err(ResponseError::NotLeaderOrFollower),
                Err(BrokerError::NotEnoughReplicas(_)) => {
                    refused.push((topic.clone(), *index));
                }
                Err(e) => {
                    tracing::error!(?partition, error = %e, "cannot write a transaction marker");
                    return Err(ResponseError::KafkaStorageError);
                }
            }
        }
        Ok((waits, refused))
    }

    /// Commits a transaction's offsets to `group`, which this node coordinates.
    pub(crate) async fn commit_offsets_here(
        &self,
        group: &str,
        offsets: &[PendingOffset],
    ) -> Result<(), ResponseError> {
        let now = self.txns.now_ms();
        let records: Vec<_> = offsets
            .iter()
            .map(|o| {
                offset_record(
                    &o.group,
                    &o.topic,
                    o.partition,
                    Committed {
                        offset: o.offset,
                        leader_epoch: o.leader_epoch,
                        metadata: o.metadata.clone(),
                        commit_timestamp_ms: now,
                    },
                )
            })
            .collect();
        let waits = {
            let mut groups = self.groups.lock_for(group)?;
            let waits = self.groups.record(&mut groups, &records)?;
            groups.release_remote_txn_offsets(
                group,
                offsets.iter().map(|o| (o.topic.as_str(), o.partition)),
                None,
            );
            waits
        };
        committed(waits).await
    }

    /// A transaction that handed `group`'s offsets over aborted: they are no longer pending
    /// (see `Coordinator::hold_remote_txn_offsets`).
    pub(crate) fn aborted_txn_offsets_here(
        &self,
        group: &str,
        producer_id: i64,
        partitions: &[(String, i32)],
    ) -> Result<(), ResponseError> {
        self.groups.lock_for(group)?.release_remote_txn_offsets(
            group,
            partitions.iter().map(|(t, p)| (t.as_str(), *p)),
            Some(producer_id),
        );
        Ok(())
    }

    /// Keeps a TxnOffsetCommit's offsets in the transaction `id` coordinated here; returns
    /// what to wait on.
    pub(crate) fn txn_offsets_here(
        &self,
        id: &str,
        producer_id: i64,
        producer_epoch: i16,
        offsets: Vec<PendingOffset>,
        tv2: bool,
    ) -> Result<Waits, ResponseError> {
        let now = self.txns.now_ms();
        let mut coordinator = self.txns.lock_for(id)?;
        let meta =
            coordinator.txn_offset_commit(id, producer_id, producer_epoch, offsets, tv2, now)?;
        self.txns.put(&mut coordinator, meta)
    }

    /// One tick of the coordinator's clock: aborts transactions past their timeout, finishes
    /// `Prepare*` states left unfinished (after a restart or a failed write), forgets idle ids.
    pub(crate) fn tick_transactions(self: &Arc<Self>) {
        let now = self.txns.now_ms();
        self.txns.sweep_ends();
        self.txns.forget_stale_markers();
        let mut alloc = || {
            self.producer_ids
                .next()
                .map_err(|_| ResponseError::CoordinatorNotAvailable)
        };
        let (to_finish, forgotten) = {
            let mut coordinator = self.txns.coordinator.lock();
            let (aborts, forget) = coordinator.expired(&mut alloc, now);
            let mut to_finish = Vec::new();
            for meta in aborts {
                tracing::info!(transactional_id = %meta.transactional_id, "aborting a transaction past its timeout");
                match self.txns.put_prepare(&mut coordinator, meta.clone()) {
                    Ok((waits, claim)) => to_finish.push((meta, claim, waits)),
                    Err(e) => tracing::warn!(error = ?e, "cannot abort an expired transaction"),
                }
            }
            // `Prepare*` states nobody is finishing: left by a restart or a failed finisher.
            let left: Vec<TxnMeta> = coordinator
                .all()
                .filter(|meta| meta.state.is_prepare())
                .cloned()
                .collect();
            for meta in left {
                if let Some(claim) = self.txns.claim(&meta.transactional_id) {
                    let waits = self.txns.written_so_far(&meta.transactional_id);
                    to_finish.push((meta, claim, waits));
                }
            }
            let records: Vec<TxnRecord> = forget.iter().cloned().map(TxnRecord::Delete).collect();
            if !records.is_empty() && self.txns.write(&records).is_ok() {
                for id in &forget {
                    coordinator.remove(id);
                }
            }
            (to_finish, forget.len())
        };
        if forgotten > 0 {
            tracing::info!(count = forgotten, "forgot idle transactional ids");
        }
        for (prepare, claim, waits) in to_finish {
            let broker = Arc::clone(self);
            tokio::spawn(async move {
                let id = prepare.transactional_id.clone();
                // No marker before the decision is durable: a marker that outlived a lost
                // `Prepare*` would end a transaction its coordinator still thinks open.
                let finished = match committed(waits).await {
                    Ok(()) => broker.finish_txn(prepare, claim).await.map(drop),
                    Err(e) => Err(e),
                };
                if let Err(e) = finished {
                    tracing::warn!(transactional_id = %id, error = ?e, "finishing a transaction failed; will retry");
                }
            });
        }
    }

    /// Checks a transactional write against the coordinator (KIP-890 part 1): the producer's
    /// epoch must be current and the partition in its open transaction. With `implicit_add`
    /// (Produce v12+, transactions version 2) the partition is added to the transaction here.
    ///
    /// In a cluster, the partition's first write of a transaction was checked before, with
    /// the coordinator wherever it runs (`remote`: its verdict, [`crate::handlers::produce`]);
    /// an implicit add was made there and waited on until the metadata of the transaction
    /// holding the partition was committed, so a coordinator that takes over after a crash
    /// knows the partition. Later writes of the same producer epoch find the partition's
    /// transaction open and are not asked about again (as Kafka's verification guard).
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn verify_txn_write(
        &self,
        transactional_id: Option<&str>,
        producer_id: i64,
        epoch: i16,
        topic: &str,
        partition: i32,
        implicit_add: bool,
        remote: Option<&Result<(), (ResponseError, String)>>,
    ) -> Result<(), (ResponseError, String)> {
        if self.config.clustered {
            if let Some(verdict) = remote {
                return verdict.clone();
            }
            let here = transactional_id.is_some_and(|id| self.txns.check(id).is_ok());
            if !here {
                // Not asked: the partition already holds this epoch's open transaction.
                return Ok(());
            }
        }
        // An add made here is not waited on: on a single node it precedes the data in the
        // log's order, and start-up settles a partition whose add was lost (see
        // `heal_transactions`). In a cluster an add was made, and waited on, before.
        self.verify_txn_write_here(
            transactional_id,
            producer_id,
            epoch,
            topic,
            partition,
            implicit_add,
        )
        .map(drop)
        .map_err(|(e, message)| match e {
            // Retriable for a producer, as in a cluster (a decision being carried out again
            // after a restart holds the partition's transaction for a moment).
            ResponseError::ConcurrentTransactions
            | ResponseError::CoordinatorNotAvailable
            | ResponseError::CoordinatorLoadInProgress
            | ResponseError::NotCoordinator => (ResponseError::NotEnoughReplicas, message),
            e => (e, message),
        })
    }

    /// The coordinator's side of [`Broker::verify_txn_write`]: `producer_id`'s epoch is current
    /// and `topic`-`partition` in its open transaction (or, with `implicit_add`, added now).
    pub(crate) fn verify_txn_write_here(
        &self,
        transactional_id: Option<&str>,
        producer_id: i64,
        epoch: i16,
        topic: &str,
        partition: i32,
        implicit_add: bool,
    ) -> Result<Waits, (ResponseError, String)> {
        let now = self.txns.now_ms();
        let mut coordinator = self.txns.coordinator.lock();
        let Some(meta) = coordinator.by_producer(producer_id) else {
            return Err((
                ResponseError::InvalidProducerIdMapping,
                format!("producer {producer_id} has no transactional id here"),
            ));
        };
        // The request names the transactional id its batches belong to (what it is authorized
        // for, and what a single node's produce waits on before appending).
        if transactional_id != Some(meta.transactional_id.as_str()) {
            return Err((
                ResponseError::InvalidProducerIdMapping,
                format!(
                    "producer {producer_id} belongs to another transactional id than the request's {transactional_id:?}"
                ),
            ));
        }
        if epoch != meta.producer_epoch {
            return Err((
                ResponseError::InvalidProducerEpoch,
                format!(
                    "producer {producer_id} epoch {epoch} is not the current {}",
                    meta.producer_epoch
                ),
            ));
        }
        let key = (topic.to_string(), partition);
        if meta.state == TxnState::Ongoing && meta.partitions.contains(&key) {
            // In a cluster, once the state that holds the partition is committed.
            return Ok(self.txns.settled(&meta.transactional_id));
        }
        if !implicit_add {
            return Err((
                ResponseError::InvalidTxnState,
                format!("{topic}-{partition} is not in producer {producer_id}'s open transaction"),
            ));
        }
        let id = meta.transactional_id.clone();
        let added = coordinator
            .add_partitions(&id, producer_id, epoch, &[key], true, now)
            .map_err(|e| {
                (
                    e,
                    format!("cannot add {topic}-{partition} to the transaction"),
                )
            })?;
        match added {
            Some(meta) => self
                .txns
                .put(&mut coordinator, meta)
                .map_err(|e| (e, "cannot record the transaction's partition".to_string())),
            None => Ok(self.txns.settled(&id)),
        }
    }

    /// At start-up: every partition's open transactions that no live transaction owns are
    /// settled — with the marker a crash lost, or aborted.
    pub(crate) fn heal_transactions(&self) {
        let coordinator = self.txns.coordinator.lock();
        for topic in self.topics.list() {
            for partition in topic.partitions() {
                for open in partition.open_transactions() {
                    let Some(heal) = coordinator.heal(
                        &topic.name,
                        partition.index,
                        open.producer_id,
                        open.producer_epoch,
                    ) else {
                        continue;
                    };
                    let marker = if heal.commit {
                        Marker::Commit
                    } else {
                        Marker::Abort
                    };
                    match partition.append_marker(marker, heal.producer_id, heal.epoch, 0) {
                        Ok(_) => tracing::info!(
                            ?partition,
                            producer_id = heal.producer_id,
                            commit = heal.commit,
                            "settled a transaction left open by a crash"
                        ),
                        Err(e) => {
                            tracing::warn!(?partition, error = %e, "cannot settle an open transaction")
                        }
                    }
                }
            }
        }
    }

    /// Aborts the transaction `producer_id` left open on a partition (an operator's tool for
    /// a hanging transaction, like `kafka-transactions.sh abort`). The marker carries the
    /// producer's current epoch on the partition.
    pub fn abort_open_transaction(
        &self,
        topic: &str,
        partition: i32,
        producer_id: i64,
    ) -> Result<bool, BrokerError> {
        let p = self
            .topics
            .get(topic)
            .and_then(|t| t.partition(partition))
            .ok_or_else(|| BrokerError::UnknownTopic(format!("{topic}-{partition}")))?;
        let Some(open) = p
            .open_transactions()
            .into_iter()
            .find(|o| o.producer_id == producer_id)
        else {
            return Ok(false);
        };
        p.append_marker(Marker::Abort, producer_id, open.producer_epoch, 0)?;
        Ok(true)
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)] // test code: a failed unwrap is a failed test

    use super::coordinator::{End, Init};
    use super::*;

    /// A transaction of `id` in `PrepareAbort`, in the coordinator's state.
    fn prepared(broker: &Broker, id: &str) -> TxnMeta {
        let now = broker.txns.now_ms();
        let mut c = broker.txns.coordinator.lock();
        let mut alloc = || Ok(42);
        let Init::Ready(m) = c.init(id, 60_000, None, &mut alloc, now).unwrap() else {
            panic!("a new id is ready at once")
        };
        c.apply(m.clone());
        let partitions = [("t".to_string(), 0)];
        let added = c
            .add_partitions(id, m.producer_id, m.producer_epoch, &partitions, false, now)
            .unwrap()
            .unwrap();
        c.apply(added);
        let end = c.end(
            id,
            (m.producer_id, m.producer_epoch),
            false,
            false,
            &mut alloc,
            now,
        );
        let Ok(End::Finish(prepare)) = end else {
            panic!("expected a transaction to finish")
        };
        c.apply(prepare.clone());
        prepare
    }

    #[tokio::test]
    async fn the_tick_forgets_the_markers_noted_for_finishes_no_longer_this_nodes() {
        let (_dir, broker) = crate::test_support::broker_with_records("t", 1);
        let prepare = prepared(&broker, "live");
        // Its finisher is busy elsewhere: the tick starts none.
        let _claim = broker.txns.claim("live").unwrap();
        let epoch = broker.txns.check("live").unwrap();
        let key = |m: &TxnMeta, epoch| {
            let id = m.transactional_id.clone();
            (id, m.producer_id, m.producer_epoch, epoch, m.start_ms)
        };
        let changed = |change: fn(&mut TxnMeta)| {
            let mut m = prepare.clone();
            change(&mut m);
            key(&m, epoch)
        };
        let live = key(&prepare, epoch);
        let stale = [
            key(&prepare, epoch - 1),
            changed(|m| m.producer_epoch -= 1),
            changed(|m| m.producer_id += 1),
            changed(|m| m.start_ms -= 1),
            changed(|m| m.transactional_id = "unknown".into()),
        ];
        let note = |k: &MarkersKey| {
            let mut written = broker.txns.markers_written.lock();
            written
                .entry(k.clone())
                .or_default()
                .insert(("t".into(), 0));
        };
        note(&live);
        stale.iter().for_each(note);
        broker.tick_transactions();
        let kept: Vec<MarkersKey> = broker.txns.markers_written.lock().keys().cloned().collect();
        assert_eq!(kept, vec![live.clone()]);

        // Completed (by a finisher elsewhere): its entry goes too.
        let done = completed(&prepare, broker.txns.now_ms());
        broker.txns.coordinator.lock().apply(done);
        broker.tick_transactions();
        assert!(broker.txns.markers_written.lock().is_empty());
    }
}
