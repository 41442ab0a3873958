//! One partition on this broker: its log behind a lock, and the progress readers and
//! producers wait on.
//!
//! ```text
//!   append ──► log (page cache) ──► flush job (fsync, off the lock) ──► durable
//!                 │                                                     │
//!                 └─ interval mode: visible at once     sync mode: visible when durable
//! ```
//! `visible` is the high watermark consumers read up to; `durable` is what fsync has covered.
//! Both only move forward and are published on a watch channel that long-polling fetches and
//! sync-mode producers wait on. In sync mode one fsync covers every append made before it
//! started (group commit): while it runs, new appends accumulate for the next one.

use std::sync::atomic::{AtomicBool, AtomicI32, AtomicU64, Ordering};
use std::sync::Arc;

use kafka_protocol::error::ResponseError;
use parking_lot::Mutex;
use sluice_log::{
    AbortedTxn, AppendInfo, FlushMode, LeaderEpoch, Log, LogConfig, LogError, Marker, Offset,
    OpenTxn, ReadPlan, ValidatedBatch,
};
use tokio::sync::watch;

use sluice_cluster::metadata::PartitionChange as Assignment;
use sluice_cluster::replica::{LeaderReplicas, NotEnoughReplicas};
use sluice_cluster::{NodeId, PartitionEpoch};

use crate::error::BrokerError;
use crate::replica_role::Role;

/// An ISR change a leader asks of the controller, with the epochs it is based on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IsrChange {
    pub isr: Vec<NodeId>,
    pub epochs: (sluice_cluster::LeaderEpoch, PartitionEpoch),
    /// Its number in this leadership, to settle exactly this change.
    pub ask: u64,
}

/// Where a partition's readable and durable ends are.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Progress {
    /// The high watermark: consumers see offsets below it.
    pub visible: Offset,
    /// The last stable offset: `read_committed` consumers see offsets below it (the high
    /// watermark, or the first offset of the earliest open transaction if that is lower).
    pub stable: Offset,
    /// Offsets below this are on disk.
    pub durable: Offset,
    pub log_start: Offset,
    /// The log went offline (I/O failure): writes fail, waiters should stop waiting.
    pub failed: bool,
    /// The log end (what a follower fetches up to).
    pub end: Offset,
    /// This replica leads (or is the only one): it takes writes and serves consumers.
    pub leading: bool,
    /// The leader epoch this replica is in (0 on a single node), published with the rest, so
    /// a waiter that wakes after a step-down and a new election tells them from one epoch.
    pub epoch: LeaderEpoch,
}

struct State {
    log: Log,
    flush_in_flight: bool,
    last_flush_ms: i64,
    role: Role,
    /// KIP-890 verification guards of first transactional writes awaiting their coordinator.
    guards: crate::verification_guard::VerificationGuards,
}

/// Produce and fetch traffic of one partition, for metrics (one atomic add on the hot path).
#[derive(Debug, Default)]
pub struct PartitionCounters {
    pub produced_records: AtomicU64,
    pub produced_bytes: AtomicU64,
    pub fetched_bytes: AtomicU64,
    pub fetched_records: AtomicU64,
}

pub struct Partition {
    pub topic: Arc<str>,
    pub index: i32,
    state: Mutex<State>,
    progress: watch::Sender<Progress>,
    /// Appended since the last flush started (for the interval flusher's quick check).
    dirty: AtomicBool,
    /// The leader epoch this replica knows (0 on a single node).
    leader_epoch: AtomicI32,
    counters: PartitionCounters,
    metrics: Arc<crate::metrics::Metrics>,
}

impl std::fmt::Debug for Partition {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Partition({}-{})", self.topic, self.index)
    }
}

/// Facts about a partition for Metadata, ListOffsets and status pages.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PartitionInfo {
    pub log_start: Offset,
    pub log_end: Offset,
    pub high_watermark: Offset,
    pub size_bytes: u64,
    pub segments: usize,
    pub offline: bool,
}

impl Partition {
    pub fn new(
        topic: Arc<str>,
        index: i32,
        log: Log,
        now_ms: i64,
        metrics: Arc<crate::metrics::Metrics>,
    ) -> Arc<Partition> {
        let end = log.next_offset();
        let (progress, _) = watch::channel(Progress {
            visible: end,
            stable: log.first_unstable_offset().map_or(end, |f| f.min(end)),
            durable: log.durable_offset(),
            log_start: log.log_start_offset(),
            failed: log.is_offline(),
            end,
            leading: true,
            epoch: LeaderEpoch(0),
        });
        Arc::new(Partition {
            topic,
            index,
            state: Mutex::new(State {
                log,
                flush_in_flight: false,
                last_flush_ms: now_ms,
                role: Role::Standalone { min_insync: 1 },
                guards: Default::default(),
            }),
            progress,
            dirty: AtomicBool::new(false),
            leader_epoch: AtomicI32::new(0),
            counters: PartitionCounters::default(),
            metrics,
        })
    }

    pub fn counters(&self) -> &PartitionCounters {
        &self.counters
    }

    pub fn leader_epoch(&self) -> LeaderEpoch {
        LeaderEpoch(self.leader_epoch.load(Ordering::Acquire))
    }

    pub fn progress(&self) -> Progress {
        *self.progress.borrow()
    }

    pub fn subscribe(&self) -> watch::Receiver<Progress> {
        self.progress.subscribe()
    }

    pub fn config(&self) -> LogConfig {
        self.state.lock().log.config().clone()
    }

    pub fn set_config(self: &Arc<Self>, config: LogConfig) -> Result<(), LogError> {
        let mut state = self.state.lock();
        state.log.set_config(config)?;
        self.publish(&mut state);
        Ok(())
    }

    pub fn info(&self) -> PartitionInfo {
        let state = self.state.lock();
        PartitionInfo {
            log_start: state.log.log_start_offset(),
            log_end: state.log.next_offset(),
            high_watermark: self.progress().visible,
            size_bytes: state.log.size_bytes(),
            segments: state.log.segment_count(),
            offline: state.log.is_offline(),
        }
    }

    /// Appends a producer's batches; with `acks_all`, only if enough replicas are in sync. In
    /// sync mode this also makes sure an fsync that will cover them is under way; the caller
    /// waits with [`Partition::wait_durable`] or [`Partition::wait_committed`].
    pub fn append(
        self: &Arc<Self>,
        batch: ValidatedBatch,
        acks_all: bool,
    ) -> Result<AppendInfo, BrokerError> {
        self.append_guarded(batch, acks_all, None)
    }

    /// Takes the producer's verification guard before its coordinator is asked about a first
    /// transactional write here (see [`crate::verification_guard`]).
    pub fn take_verification_guard(&self, producer_id: i64) -> u64 {
        self.state.lock().guards.take(producer_id)
    }

    /// [`Partition::append`], refused with INVALID_TXN_STATE when `guard` (taken before the
    /// coordinator's verdict) was dropped by a marker of the producer since: its transaction
    /// ended meanwhile.
    pub fn append_guarded(
        self: &Arc<Self>,
        batch: ValidatedBatch,
        acks_all: bool,
        guard: Option<u64>,
    ) -> Result<AppendInfo, BrokerError> {
        let (records, bytes) = (batch.record_count() as u64, batch.total_bytes() as u64);
        let mut state = self.state.lock();
        self.check_leads(&state)?;
        if acks_all {
            self.check_insync(&state)?;
        }
        if let Some(guard) = guard {
            let producer_id = batch.header().producer_id;
            if !state.guards.holds(producer_id, guard) {
                return Err(BrokerError::InvalidTxnState(format!(
                    "the transaction of producer {producer_id} ended on {}-{} while this write \
                     was being verified",
                    self.topic, self.index
                )));
            }
        }
        let info = state.log.append(batch, self.leader_epoch())?;
        if info.duplicate {
            return Ok(info);
        }
        self.counters
            .produced_records
            .fetch_add(records, Ordering::Relaxed);
        self.counters
            .produced_bytes
            .fetch_add(bytes, Ordering::Relaxed);
        self.after_append(&mut state);
        Ok(info)
    }

    /// Writes a transaction marker for a producer (see [`Log::append_marker`]); in sync mode
    /// wait for it with [`Partition::wait_durable`] like any append.
    pub fn append_marker(
        self: &Arc<Self>,
        marker: Marker,
        producer_id: i64,
        producer_epoch: i16,
        coordinator_epoch: i32,
    ) -> Result<AppendInfo, BrokerError> {
        let mut state = self.state.lock();
        self.check_leads(&state)?;
        // A cluster's markers are acks=all writes, as Kafka's: refused before they are
        // written when too few replicas are in sync (the finisher retries), rather than
        // written again at each retry once their commit answered
        // NOT_ENOUGH_REPLICAS_AFTER_APPEND.
        if matches!(state.role, Role::Leader { .. }) {
            self.check_insync(&state)?;
        }
        state.guards.drop_for(producer_id);
        let info = state.log.append_marker(
            marker,
            producer_id,
            producer_epoch,
            coordinator_epoch,
            self.leader_epoch(),
        )?;
        self.after_append(&mut state);
        Ok(info)
    }

    fn check_leads(&self, state: &State) -> Result<(), BrokerError> {
        if state.role.leads() {
            return Ok(());
        }
        Err(BrokerError::NotLeader(format!(
            "this node does not lead {}-{}",
            self.topic, self.index
        )))
    }

    /// Starts the write-back and flush work an append needs and publishes the new ends.
    fn after_append(self: &Arc<Self>, state: &mut State) {
        if let Some(job) = state.log.take_writeback() {
            tokio::task::spawn_blocking(move || job.run());
        }
        match state.log.config().flush {
            FlushMode::Sync => {
                if !state.flush_in_flight {
                    state.flush_in_flight = true;
                    tokio::spawn(Arc::clone(self).run_flushes());
                }
            }
            FlushMode::Interval { .. } => self.dirty.store(true, Ordering::Release),
        }
        self.publish(state);
    }

    /// Aborted transactions that may have records in `[from, to)` (for `read_committed`).
    pub fn aborted_between(&self, from: Offset, to: Offset) -> Vec<AbortedTxn> {
        self.state.lock().log.aborted_between(from, to)
    }

    /// The transactions open on this partition, oldest first.
    pub fn open_transactions(&self) -> Vec<OpenTxn> {
        self.state.lock().log.open_transactions()
    }

    /// Every idempotent or transactional producer this replica knows (DescribeProducers).
    pub fn active_producers(&self) -> Vec<sluice_log::ActiveProducer> {
        self.state.lock().log.active_producers()
    }

    /// A leader's `acks=1` write under `flush.mode=sync`, made in leader epoch `epoch`:
    /// waits until everything below `end` is on disk. Gives up when the log fails, or this
    /// replica stops leading (its log may be cut back and written again with other records at
    /// those offsets) before the write is on disk.
    pub async fn wait_durable_leading(
        &self,
        end: Offset,
        epoch: LeaderEpoch,
    ) -> Result<(), BrokerError> {
        self.wait_while_leading(epoch, end, |p| p.durable >= end, "on disk")
            .await
    }

    /// Waits until `reached` holds for the write ending at `end`, made in leader epoch
    /// `epoch`; fails if the log fails or this replica stops leading first, or leads in
    /// another epoch with the write no longer in its log. A replica may step down and be
    /// elected again between two of the waiter's wake-ups, its log cut back and written again
    /// at those offsets meanwhile: a high watermark past `end` then says nothing of the write.
    /// The write is still there if the record before `end` is still of the write's epoch (only
    /// that epoch's leader, this replica, wrote in it), as when the epoch moved with the same
    /// leader (a reassignment dropping a replica). `what` ends "before the write was …" in
    /// the error.
    async fn wait_while_leading(
        &self,
        epoch: LeaderEpoch,
        end: Offset,
        reached: impl Fn(&Progress) -> bool,
        what: &str,
    ) -> Result<(), BrokerError> {
        let mut rx = self.progress.subscribe();
        let mut seen = epoch;
        loop {
            let p = match rx
                .wait_for(|p| reached(p) || p.failed || !p.leading || p.epoch != seen)
                .await
            {
                Ok(p) => *p,
                Err(_) => return Err(self.moved_before(what)),
            };
            let ours = p.epoch == epoch || self.holds_write(end, epoch);
            if reached(&p) && ours {
                return Ok(());
            }
            if p.failed {
                return Err(BrokerError::Log(LogError::Offline {
                    path: std::path::PathBuf::from(format!("{}-{}", self.topic, self.index)),
                    reason: format!("the log failed before the write was {what}"),
                }));
            }
            if !(p.leading && ours) {
                return Err(self.moved_before(what));
            }
            seen = p.epoch;
        }
    }

    /// Whether this replica's log still holds the write that ended before `end` in leader
    /// epoch `epoch`: it reaches `end`, and the record before it is of that epoch.
    fn holds_write(&self, end: Offset, epoch: LeaderEpoch) -> bool {
        let state = self.state.lock();
        end.0 > 0
            && end <= state.log.next_offset()
            && state.log.epoch_at(Offset(end.0 - 1)) == Some(epoch)
    }

    fn moved_before(&self, what: &str) -> BrokerError {
        BrokerError::NotLeader(format!(
            "leadership of {}-{} moved before the write was {what}",
            self.topic, self.index
        ))
    }

    /// Waits until everything below `end` is on disk; `false` if the log failed first.
    pub async fn wait_durable(&self, end: Offset) -> bool {
        let mut rx = self.progress.subscribe();
        let reached = match rx.wait_for(|p| p.durable >= end || p.failed).await {
            Ok(p) => p.durable >= end,
            Err(_) => false,
        };
        reached
    }

    /// Plans a read of whole batches from `offset` below the high watermark.
    pub fn read(
        &self,
        offset: Offset,
        max_bytes: usize,
        min_one: bool,
    ) -> Result<(ReadPlan, Progress), LogError> {
        self.read_isolated(offset, max_bytes, min_one, false)
    }

    /// Like [`Partition::read`]; with `committed`, below the last stable offset instead.
    pub fn read_isolated(
        &self,
        offset: Offset,
        max_bytes: usize,
        min_one: bool,
        committed: bool,
    ) -> Result<(ReadPlan, Progress), LogError> {
        let state = self.state.lock();
        let progress = self.progress();
        let upper = if committed {
            progress.stable
        } else {
            progress.visible
        };
        let plan = state.log.read(offset, max_bytes, upper, min_one)?;
        Ok((plan, progress))
    }

    /// Reads the bytes a plan of this partition's names.
    pub fn load(&self, plan: &ReadPlan) -> Result<bytes::Bytes, LogError> {
        plan.load().map_err(|source| LogError::Io {
            op: "read",
            path: std::path::PathBuf::from(format!("{}-{}", self.topic, self.index)),
            source,
        })
    }

    /// The first offset at or after `timestamp` below the high watermark (below the last
    /// stable offset for `committed`, a read_committed consumer's view).
    pub fn offset_for_timestamp(
        &self,
        timestamp: i64,
        committed: bool,
    ) -> Result<Option<(Offset, i64)>, LogError> {
        let upper = self.fetchable_end(committed);
        self.state.lock().log.offset_for_timestamp(timestamp, upper)
    }

    pub fn offset_of_max_timestamp(
        &self,
        committed: bool,
    ) -> Result<Option<(Offset, i64)>, LogError> {
        let upper = self.fetchable_end(committed);
        self.state.lock().log.offset_of_max_timestamp(upper)
    }

    fn fetchable_end(&self, committed: bool) -> Offset {
        let progress = self.progress();
        if committed {
            progress.stable
        } else {
            progress.visible
        }
    }

    /// This replica's progress if its ends are a leader's to tell: it leads, and its high
    /// watermark has reached where its epoch began.
    pub fn leader_progress(&self) -> Option<Progress> {
        let progress = self.progress();
        (progress.leading && !self.high_watermark_behind_epoch_start()).then_some(progress)
    }

    /// Whether this replica leads in an epoch whose high watermark has not yet reached the
    /// log end the epoch started at: until its followers have fetched, the new leader's high
    /// watermark may be below its predecessor's, and ListOffsets answers OFFSET_NOT_AVAILABLE
    /// rather than an end offset that moved backwards (KIP-207).
    pub fn high_watermark_behind_epoch_start(&self) -> bool {
        match &self.state.lock().role {
            Role::Leader { replicas, .. } => replicas.high_watermark_behind_epoch_start(),
            _ => false,
        }
    }

    /// Starts an interval-mode flush if one is due; called by the broker's flush ticker.
    pub fn flush_if_due(self: &Arc<Self>, now_ms: i64) {
        if !self.dirty.load(Ordering::Acquire) {
            return;
        }
        let mut state = self.state.lock();
        let FlushMode::Interval { interval_ms } = state.log.config().flush else {
            return;
        };
        if state.flush_in_flight || now_ms.saturating_sub(state.last_flush_ms) < interval_ms as i64
        {
            return;
        }
        state.flush_in_flight = true;
        state.last_flush_ms = now_ms;
        self.dirty.store(false, Ordering::Release);
        tokio::spawn(Arc::clone(self).run_flushes());
    }

    /// Runs flush jobs: under `flush.mode=sync` until the log is fully durable (writers wait
    /// for it); under interval mode one job, the next one at the next interval. (Looping there
    /// too meant back-to-back fsyncs for as long as writes kept coming — measured ~900 a second
    /// on one partition at 10k msg/s instead of 10 — and appends stalled behind them: P99 8–10
    /// ms instead of ~1 ms.) At most one runs per partition.
    async fn run_flushes(self: Arc<Self>) {
        loop {
            let job = {
                let mut state = self.state.lock();
                match state.log.flush_job() {
                    Some(job) => job,
                    None => {
                        state.flush_in_flight = false;
                        return;
                    }
                }
            };
            let metrics = Arc::clone(&self.metrics);
            let (job, outcome) = match tokio::task::spawn_blocking(move || {
                #[allow(clippy::disallowed_methods)]
                // fsync latency is measured with the real clock
                let started = std::time::Instant::now();
                let outcome = job.run();
                metrics.observe_fsync(started.elapsed().as_secs_f64());
                (job, outcome)
            })
            .await
            {
                Ok(done) => done,
                Err(e) => {
                    tracing::error!(partition = ?self, error = %e, "flush task failed");
                    self.state.lock().flush_in_flight = false;
                    return;
                }
            };
            let mut state = self.state.lock();
            if let Err(e) = state.log.complete_flush(&job, outcome) {
                tracing::error!(partition = ?self, error = %e, "flush failed");
            }
            self.publish(&mut state);
            if state.log.is_offline() || state.log.config().flush != FlushMode::Sync {
                state.flush_in_flight = false;
                return;
            }
        }
    }

    /// Forgets idempotent producers silent since before `cutoff_ms`.
    pub fn expire_producers(&self, cutoff_ms: i64) {
        let expired = self.state.lock().log.expire_producers(cutoff_ms);
        if expired > 0 {
            tracing::debug!(partition = ?self, expired, "expired idempotent producers");
        }
    }

    /// DeleteRecords: moves the log start up to `offset` (-1: the high watermark) and returns
    /// it; an offset past the high watermark is out of range, as in Kafka.
    /// In a cluster only the leader takes it; its followers follow the new start in their
    /// next fetch ([`Partition::follow_log_start`]).
    pub fn delete_records(&self, offset: i64) -> Result<Offset, BrokerError> {
        let mut state = self.state.lock();
        if !state.role.leads() {
            return Err(BrokerError::NotLeader(format!(
                "{}-{}: records are deleted on the partition's leader",
                self.topic, self.index
            )));
        }
        let progress = self.progress();
        let target = if offset == -1 {
            progress.visible
        } else {
            Offset(offset)
        };
        if target < Offset(0) || target > progress.visible {
            return Err(LogError::OffsetOutOfRange {
                requested: target,
                start: progress.log_start,
                end: progress.visible,
            }
            .into());
        }
        let start = state.log.delete_records_before(target)?;
        self.publish(&mut state);
        Ok(start)
    }

    /// A follower moves its log start up to its leader's (`from`, in `epoch`), as far as its
    /// own log reaches: records DeleteRecords or retention removed on the leader go here too,
    /// so a later leader cannot serve them again.
    pub fn follow_log_start(
        &self,
        from: NodeId,
        epoch: i32,
        leader_start: Offset,
    ) -> Result<(), BrokerError> {
        if leader_start <= self.progress().log_start {
            return Ok(());
        }
        let mut state = self.state.lock();
        self.still_follows(&state, from, epoch)?;
        let target = leader_start.min(state.log.next_offset());
        if target > state.log.log_start_offset() {
            state.log.delete_records_before(target)?;
            tracing::debug!(partition = ?self, start = target.0, "log start follows the leader's");
            self.publish(&mut state);
        }
        Ok(())
    }

    /// Deletes segments past retention; returns how many.
    pub fn apply_retention(&self) -> Result<usize, LogError> {
        let mut state = self.state.lock();
        let deleted = state.log.apply_retention(self.progress().visible)?;
        if deleted > 0 {
            self.publish(&mut state);
        }
        Ok(deleted)
    }

    /// Compacts the sealed segments (compacted topics only): plans under the lock, cleans on
    /// this (blocking) thread without it, swaps in under it. `throttle` paces the I/O.
    pub fn compact(
        &self,
        throttle: impl FnMut(u64),
    ) -> Result<sluice_log::compaction::CompactionReport, LogError> {
        let Some(plan) = self.state.lock().log.compaction_plan() else {
            return Ok(Default::default());
        };
        let cleaned = plan.run(throttle)?;
        let report = self.state.lock().log.finish_compaction(cleaned)?;
        if report.segments > 0 {
            tracing::info!(partition = ?self, ?report, "compacted");
        }
        Ok(report)
    }

    /// Flushes and closes the log cleanly (shutdown); later appends fail.
    pub fn close(&self) -> Result<(), LogError> {
        let mut state = self.state.lock();
        state.log.close()
    }

    /// Closes a partition this node no longer holds: writes fail and waiters stop waiting.
    pub fn retire(&self) {
        let mut state = self.state.lock();
        state.role = Role::Leaderless;
        if let Err(e) = state.log.close() {
            tracing::warn!(partition = ?self, error = %e, "closing a retired partition");
        }
        self.publish(&mut state);
    }

    /// This node leads the partition as `info` says: a new leader epoch starts here, or (same
    /// epoch) the ISR changed. `fenced`: the cluster's fenced nodes, whose replicas the high
    /// watermark does not wait for outside the ISR.
    pub fn lead(
        &self,
        me: NodeId,
        info: &Assignment,
        min_insync: usize,
        lag_time_max_ms: i64,
        now_ms: i64,
        fenced: &std::collections::BTreeSet<NodeId>,
    ) {
        let mut state = self.state.lock();
        match &mut state.role {
            Role::Leader {
                replicas,
                min_insync: m,
            } if replicas.epochs().0 == info.leader_epoch => {
                // Only a new partition epoch is news: metadata about other partitions must not
                // settle an ISR change of this one that is still being decided.
                if replicas.epochs().1 != info.partition_epoch {
                    replicas.on_metadata(info, now_ms);
                }
                *m = min_insync;
            }
            _ => {
                let end = state.log.next_offset();
                let held = if state.log.config().flush == FlushMode::Sync {
                    state.log.durable_offset()
                } else {
                    end
                };
                let high_watermark = self.progress().visible;
                state.role = Role::Leader {
                    replicas: LeaderReplicas::new(
                        me,
                        info,
                        end,
                        held,
                        high_watermark,
                        lag_time_max_ms,
                        now_ms,
                    ),
                    min_insync,
                };
                self.leader_epoch
                    .store(info.leader_epoch.0, Ordering::Release);
                tracing::info!(partition = ?self, epoch = info.leader_epoch.0, end = end.0, high_watermark = high_watermark.0, isr = ?info.isr, "leading");
            }
        }
        if let Role::Leader { replicas, .. } = &mut state.role {
            replicas.set_ineligible(fenced);
        }
        self.publish(&mut state);
    }

    /// This node follows `leader` in `epoch` (or, with no leader, waits for one).
    pub fn follow(&self, leader: Option<NodeId>, epoch: sluice_cluster::LeaderEpoch) {
        let mut state = self.state.lock();
        let same = match (&state.role, leader) {
            (Role::Follower { leader: l, .. }, Some(new)) => *l == new,
            (Role::Leaderless, None) => true,
            _ => false,
        } && self.leader_epoch().0 == epoch.0;
        if same {
            return;
        }
        let high_watermark = self.progress().visible;
        state.role = match leader {
            Some(leader) => Role::Follower {
                leader,
                leader_high_watermark: high_watermark,
            },
            None => Role::Leaderless,
        };
        self.leader_epoch.store(epoch.0, Ordering::Release);
        tracing::info!(partition = ?self, epoch = epoch.0, ?leader, "following");
        self.publish(&mut state);
    }

    /// The leader this replica follows, if it follows one.
    pub fn leader(&self) -> Option<NodeId> {
        self.state.lock().role.leader()
    }

    /// Where a follower fetches from: its log end and the newest epoch in it.
    pub fn fetch_position(&self) -> (Offset, Option<LeaderEpoch>) {
        let state = self.state.lock();
        (state.log.next_offset(), state.log.latest_epoch())
    }

    /// A follower's fetch: whole batches from `offset` up to the log end (not the high
    /// watermark: followers copy what is not committed yet). Only a leader serves it.
    pub fn read_for_follower(
        &self,
        offset: Offset,
        max_bytes: usize,
    ) -> Result<(ReadPlan, Progress), BrokerError> {
        let state = self.state.lock();
        self.check_leads(&state)?;
        let end = state.log.next_offset();
        let plan = state.log.read(offset, max_bytes, end, true)?;
        Ok((plan, self.progress()))
    }

    /// Checks the leader epoch a client (or follower) believes current, if it sent one (≥ 0):
    /// an older one is FENCED_LEADER_EPOCH (its metadata is stale), a newer one
    /// UNKNOWN_LEADER_EPOCH (this replica has not caught up).
    pub fn check_current_epoch(&self, current: i32) -> Result<(), ResponseError> {
        let epoch = self.leader_epoch().0;
        if current < 0 || current == epoch {
            Ok(())
        } else if current < epoch {
            Err(ResponseError::FencedLeaderEpoch)
        } else {
            Err(ResponseError::UnknownLeaderEpoch)
        }
    }

    /// The leader epoch that wrote `offset` in this replica's log.
    pub fn epoch_at(&self, offset: Offset) -> Option<LeaderEpoch> {
        self.state.lock().log.epoch_at(offset)
    }

    /// OffsetForLeaderEpoch on this replica's log.
    pub fn end_offset_for_epoch(&self, epoch: LeaderEpoch) -> Option<(LeaderEpoch, Offset)> {
        self.state.lock().log.end_offset_for_epoch(epoch)
    }

    /// Whether this replica still follows `leader` in `epoch` (what a fetch was sent under):
    /// an answer to an older fetch must not touch the log once leadership moved.
    fn still_follows(&self, state: &State, leader: NodeId, epoch: i32) -> Result<(), BrokerError> {
        match &state.role {
            Role::Follower { leader: l, .. } if *l == leader && self.leader_epoch().0 == epoch => {
                Ok(())
            }
            _ => Err(BrokerError::NotLeader(format!(
                "{}-{} no longer follows node {leader} in epoch {epoch}",
                self.topic, self.index
            ))),
        }
    }

    /// A follower copies batches its leader `from` sent in answer to a fetch made in `epoch`
    /// (the leader had `leader_high_watermark`).
    pub fn append_replicated(
        self: &Arc<Self>,
        from: NodeId,
        epoch: i32,
        bytes: &[u8],
        leader_high_watermark: Offset,
    ) -> Result<(), BrokerError> {
        let mut state = self.state.lock();
        self.still_follows(&state, from, epoch)?;
        let Role::Follower {
            leader_high_watermark: hw,
            ..
        } = &mut state.role
        else {
            return Err(BrokerError::NotLeader(format!(
                "{}-{} is not a follower here",
                self.topic, self.index
            )));
        };
        *hw = (*hw).max(leader_high_watermark);
        if bytes.is_empty() {
            self.publish(&mut state);
            return Ok(());
        }
        // An empty log started at the leader's log start, which falls inside the first batch
        // the leader sent (DeleteRecords or retention cut mid-batch): keep the whole batch, as
        // Kafka's followers do, and the log start where it was.
        let start = state.log.next_offset();
        let straddling = sluice_log::BatchHeader::parse(bytes).ok().filter(|h| {
            state.log.log_start_offset() == start
                && h.base_offset < start
                && h.last_offset() >= start
        });
        if let Some(first) = straddling {
            let reset = state.log.reset_to(first.base_offset);
            self.publish_cut(&mut state);
            reset?;
            state.log.append_assigned(bytes)?;
            state.log.delete_records_before(start)?;
        } else {
            state.log.append_assigned(bytes)?;
        }
        self.after_append(&mut state);
        Ok(())
    }

    /// A follower whose log diverged from its leader's (`from`, in `epoch`) drops everything
    /// from `offset` on.
    pub fn truncate_to(
        &self,
        from: NodeId,
        epoch: i32,
        offset: Offset,
    ) -> Result<Offset, BrokerError> {
        let mut state = self.state.lock();
        self.still_follows(&state, from, epoch)?;
        let cut = state.log.truncate_to(offset);
        // Published even when the cut failed part-way (the log is then offline): its end may
        // already be lower, and the high watermark must not stay above it.
        self.publish_cut(&mut state);
        let end = cut?;
        tracing::warn!(partition = ?self, to = end.0, "truncated to the leader's log");
        Ok(end)
    }

    /// A follower whose next offset is below its leader's (`from`, in `epoch`) log start
    /// (retention or DeleteRecords removed those records there) empties its log and starts it
    /// at `leader_start`, then copies on from there.
    pub fn restart_at(
        &self,
        from: NodeId,
        epoch: i32,
        leader_start: Offset,
    ) -> Result<(), BrokerError> {
        let mut state = self.state.lock();
        self.still_follows(&state, from, epoch)?;
        if state.log.next_offset() >= leader_start {
            return Ok(());
        }
        let reset = state.log.reset_to(leader_start);
        self.publish_cut(&mut state);
        reset?;
        tracing::warn!(partition = ?self, start = leader_start.0, "the leader no longer holds what this replica lacks: restarted the log at the leader's start");
        Ok(())
    }

    /// The leader learns a follower's position (its fetch offset) and log start (negative:
    /// not said). Returns an ISR change to ask of the controller, with the epochs it must
    /// carry.
    pub fn on_follower_fetch(
        &self,
        follower: NodeId,
        fetch_offset: Offset,
        log_start: Offset,
        now_ms: i64,
    ) -> Option<IsrChange> {
        let mut state = self.state.lock();
        let end = state.log.next_offset();
        let Role::Leader { replicas, .. } = &mut state.role else {
            return None;
        };
        if log_start >= Offset(0) {
            replicas.on_log_start(follower, log_start);
        }
        let update = replicas.on_fetch(follower, fetch_offset, end, now_ms);
        let change = update.alter_isr.map(|isr| IsrChange {
            isr,
            epochs: replicas.epochs(),
            ask: replicas.asked(),
        });
        if update.high_watermark.is_some() {
            self.publish(&mut state);
        }
        change
    }

    /// Whether this replica leads (or is the only one): it takes writes and serves consumers.
    pub fn leads(&self) -> bool {
        self.state.lock().role.leads()
    }

    /// The partition's low watermark, as a leader knows it: the lowest log start of this
    /// replica and its in-sync followers (`None` while a follower has not said, or when this
    /// node does not lead). A standalone partition's is its own log start.
    pub fn low_watermark(&self) -> Option<Offset> {
        let state = self.state.lock();
        let own = state.log.log_start_offset();
        match &state.role {
            Role::Standalone { .. } => Some(own),
            Role::Leader { replicas, .. } => replicas
                .in_sync_followers_log_start()
                .map(|followers| followers.min(own)),
            Role::Follower { .. } | Role::Leaderless => None,
        }
    }

    /// Where a consumer reading from `offset` could be served instead of here: the in-sync
    /// followers known to hold it. Empty unless this node leads in a cluster.
    pub fn followers_holding(&self, offset: Offset) -> Vec<NodeId> {
        match &self.state.lock().role {
            Role::Leader { replicas, .. } => replicas.followers_holding(offset),
            _ => Vec::new(),
        }
    }

    /// How far behind this leader its followers are; empty unless it leads in a cluster.
    pub fn follower_lag(&self, now_ms: i64) -> Vec<sluice_cluster::replica::FollowerLag> {
        match &self.state.lock().role {
            Role::Leader { replicas, .. } => replicas.lag(now_ms),
            _ => Vec::new(),
        }
    }

    /// Time passed: followers that fell behind for too long leave the ISR, and the high
    /// watermark stops waiting for a follower outside it that is no longer caught up.
    pub fn tick_replicas(&self, now_ms: i64) -> Option<IsrChange> {
        let mut state = self.state.lock();
        let Role::Leader { replicas, .. } = &mut state.role else {
            return None;
        };
        let update = replicas.tick(now_ms);
        let change = update.alter_isr.map(|isr| IsrChange {
            isr,
            epochs: replicas.epochs(),
            ask: replicas.asked(),
        });
        if update.high_watermark.is_some() {
            self.publish(&mut state);
        }
        change
    }

    /// ISR change `change` is settled without a new partition epoch (refused, failed, or the
    /// ISR already was that): a later event may ask again. Only the pending change is.
    pub fn isr_change_settled(&self, change: &IsrChange) {
        if let Role::Leader { replicas, .. } = &mut self.state.lock().role {
            replicas.on_alter_failed(change.epochs.0, change.ask);
        }
    }

    /// Whether an acks=all write may be taken: enough replicas are in sync
    /// (`min.insync.replicas`).
    fn check_insync(&self, state: &State) -> Result<(), BrokerError> {
        let refused = match &state.role {
            Role::Leader {
                replicas,
                min_insync,
            } => replicas.check_min_insync(*min_insync).err(),
            Role::Standalone { min_insync } if *min_insync > 1 => Some(NotEnoughReplicas {
                isr: 1,
                required: *min_insync,
            }),
            _ => None,
        };
        match refused {
            Some(e) => Err(BrokerError::NotEnoughReplicas(format!(
                "{}-{}: {e}",
                self.topic, self.index
            ))),
            None => Ok(()),
        }
    }

    /// Whether an acks=all write whose wait for the high watermark is over may be
    /// acknowledged: enough replicas are still in sync. The high watermark counts the ISR
    /// only, so a write in flight when followers were fenced out of it may have become
    /// committed on fewer copies than `min.insync.replicas`; Kafka answers that write
    /// NOT_ENOUGH_REPLICAS_AFTER_APPEND, and so does this.
    fn check_insync_after_append(&self) -> Result<(), BrokerError> {
        let state = self.state.lock();
        self.check_insync(&state).map_err(|e| match e {
            BrokerError::NotEnoughReplicas(m) => BrokerError::NotEnoughReplicasAfterAppend(m),
            e => e,
        })
    }

    /// Sets the `min.insync.replicas` a single node's partition checks acks=all writes
    /// against (a cluster's leader gets its own with [`Partition::lead`]).
    pub fn set_standalone_min_insync(&self, value: usize) {
        if let Role::Standalone { min_insync } = &mut self.state.lock().role {
            *min_insync = value;
        }
    }

    /// Waits until everything below `end`, written in leader epoch `epoch`, is committed
    /// (below the high watermark). Fails if the log fails, or this node stops leading, or the
    /// write is no longer in its log, first.
    pub async fn wait_committed(&self, end: Offset, epoch: LeaderEpoch) -> Result<(), BrokerError> {
        self.wait_while_leading(epoch, end, |p| p.visible >= end, "committed")
            .await
    }

    /// Waits for an acks=all write as [`Partition::wait_committed`], then checks that enough
    /// replicas are still in sync ([`Partition::check_insync_after_append`]): how every
    /// write is acknowledged (Produce, the coordinators, markers, published records).
    pub async fn wait_committed_write(
        &self,
        end: Offset,
        epoch: LeaderEpoch,
    ) -> Result<(), BrokerError> {
        self.wait_committed(end, epoch).await?;
        self.check_insync_after_append()
    }

    /// A node rejoining its cluster: the high watermark starts at `checkpointed` (the last
    /// one this node saved; the log start when it saved none), not at the log end, which may
    /// hold records no quorum has (a follower's copy of its leader's tail, a leader's own
    /// unreplicated writes). The role then raises it: a follower from its leader's, a
    /// leader once its in-sync followers hold more.
    pub fn restart_high_watermark(&self, checkpointed: Option<Offset>) {
        let mut state = self.state.lock();
        let visible = checkpointed
            .unwrap_or(Offset(0))
            .min(state.log.next_offset());
        // `publish` lifts it to the log start. The stable offset comes down with it, so that
        // no reader between the two sees it above the high watermark.
        self.progress.send_modify(|p| {
            p.visible = visible;
            p.stable = p.stable.min(visible);
        });
        self.publish(&mut state);
    }

    /// Publishes a log that was cut back (a follower's truncation or restart at its leader's
    /// start): the high watermark and the durable end come down to what the log still holds,
    /// the only time they move backwards. A correct high watermark is never above a
    /// truncation point (committed records are never cut); the durable end may be, and
    /// what is written again there is not on disk yet.
    fn publish_cut(&self, state: &mut State) {
        let (end, durable) = (state.log.next_offset(), state.log.durable_offset());
        self.progress.send_modify(|p| {
            p.visible = p.visible.min(end); // `publish` lifts it to the log start
            p.stable = p.stable.min(p.visible);
            p.durable = durable;
        });
        // A follower's copy of its leader's high watermark comes down too, or the next
        // records written again past the cut would bring the old value back.
        if let Role::Follower {
            leader_high_watermark,
            ..
        } = &mut state.role
        {
            *leader_high_watermark = (*leader_high_watermark).min(end);
        }
        self.publish(state);
    }

    /// Publishes the log's current ends; the high watermark and durable end only ever move
    /// forward (see [`Partition::publish_cut`] for the exception).
    fn publish(&self, state: &mut State) {
        let log = &state.log;
        let local_end = if log.config().flush == FlushMode::Sync {
            log.durable_offset()
        } else {
            log.next_offset()
        };
        let current = self.progress.borrow().visible;
        let high_watermark = state.role.high_watermark(local_end, current);
        let leading = state.role.leads();
        self.progress.send_if_modified(|p| {
            // Never below the log start (retention and DeleteRecords move it on their own; a
            // restarted replica's high watermark may start below it), as in Kafka.
            let visible = p.visible.max(high_watermark).max(log.log_start_offset());
            let next = Progress {
                visible,
                stable: log
                    .first_unstable_offset()
                    .map_or(visible, |f| f.min(visible)),
                durable: p.durable.max(log.durable_offset()),
                log_start: log.log_start_offset(),
                failed: log.is_offline(),
                end: log.next_offset(),
                leading,
                epoch: LeaderEpoch(self.leader_epoch.load(Ordering::Acquire)),
            };
            let changed = next != *p;
            *p = next;
            changed
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use sluice_cluster::LeaderEpoch as Epoch;

    fn leader_of(dir: &std::path::Path) -> Arc<Partition> {
        let clock: Arc<dyn sluice_log::Clock> = Arc::new(sluice_log::SystemClock);
        let (log, _) = Log::open(dir, LogConfig::default(), clock).unwrap();
        Partition::new(Arc::from("t"), 0, log, 0, Arc::default())
    }

    /// Node 1 leads `p` as `info` says, with no node fenced.
    fn lead_as_1(p: &Partition, info: &Assignment, min_insync: usize, now_ms: i64) {
        p.lead(
            NodeId(1),
            info,
            min_insync,
            10_000,
            now_ms,
            &Default::default(),
        );
    }

    fn assignment(isr: &[i32], partition_epoch: i32) -> Assignment {
        Assignment {
            replicas: vec![NodeId(1), NodeId(2)],
            leader: Some(NodeId(1)),
            leader_epoch: Epoch(3),
            isr: isr.iter().map(|n| NodeId(*n)).collect(),
            partition_epoch: PartitionEpoch(partition_epoch),
            adding: Vec::new(),
            removing: Vec::new(),
        }
    }

    #[test]
    fn a_single_node_refuses_acks_all_when_min_insync_replicas_is_above_one() {
        let dir = tempfile::tempdir().unwrap();
        let p = leader_of(dir.path());
        let batch = || {
            let bytes = sluice_log::testing::batch_bytes(0, 1, 1_000, 8, 0);
            sluice_log::validate_produce(&bytes, 1 << 20).unwrap()
        };
        p.set_standalone_min_insync(2);
        let refused = p.append(batch(), true).unwrap_err();
        assert!(
            matches!(&refused, BrokerError::NotEnoughReplicas(m) if m.contains("= 2")),
            "{refused}"
        );
        assert_eq!(p.progress().end, Offset(0));
        p.append(batch(), false).unwrap();
        p.set_standalone_min_insync(1);
        p.append(batch(), true).unwrap();
        assert_eq!(p.progress().end, Offset(2));
    }

    #[test]
    fn a_transaction_that_ends_during_verification_refuses_the_verified_write() {
        let dir = tempfile::tempdir().unwrap();
        let p = leader_of(dir.path());
        let batch = |seq| {
            let bytes = sluice_log::testing::transactional_batch_bytes(7, 0, seq, 2);
            sluice_log::validate_produce(&bytes, 1 << 20).unwrap()
        };
        // The guard is taken, the coordinator is asked; meanwhile the transaction is aborted
        // and its marker written here: the verified write is refused, nothing is appended.
        let guard = p.take_verification_guard(7);
        p.append_marker(Marker::Abort, 7, 0, 0).unwrap();
        let end = p.progress().end;
        let refused = p.append_guarded(batch(0), false, Some(guard)).unwrap_err();
        assert!(
            matches!(refused, BrokerError::InvalidTxnState(_)),
            "{refused}"
        );
        assert_eq!(p.progress().end, end);
        assert!(p.open_transactions().is_empty());
        // A new question takes a new guard, which holds while no marker comes.
        let guard = p.take_verification_guard(7);
        p.append_guarded(batch(0), false, Some(guard)).unwrap();
        assert_eq!(p.open_transactions().len(), 1);
    }

    #[test]
    fn an_isr_change_stays_pending_until_its_partition_epoch_arrives() {
        let dir = tempfile::tempdir().unwrap();
        let p = leader_of(dir.path());
        lead_as_1(&p, &assignment(&[1], 0), 1, 0);
        let asked = p
            .on_follower_fetch(NodeId(2), Offset(0), Offset(0), 1)
            .unwrap();
        assert_eq!(asked.isr, vec![NodeId(1), NodeId(2)]);
        // Metadata about something else arrives: the same partition epoch settles nothing.
        lead_as_1(&p, &assignment(&[1], 0), 1, 2);
        assert_eq!(
            p.on_follower_fetch(NodeId(2), Offset(0), Offset(0), 3),
            None
        );
        // The change is made: the new epoch settles it, and there is nothing left to ask.
        lead_as_1(&p, &assignment(&[1, 2], 1), 1, 4);
        assert_eq!(
            p.on_follower_fetch(NodeId(2), Offset(0), Offset(0), 5),
            None
        );
        // A refused change is settled by hand, and the leader may ask again.
        lead_as_1(&p, &assignment(&[1], 2), 1, 6);
        let asked = p
            .on_follower_fetch(NodeId(2), Offset(0), Offset(0), 7)
            .unwrap();
        assert_eq!(
            p.on_follower_fetch(NodeId(2), Offset(0), Offset(0), 8),
            None
        );
        // An older change's answer settles nothing.
        p.isr_change_settled(&IsrChange {
            ask: asked.ask - 1,
            ..asked.clone()
        });
        assert_eq!(
            p.on_follower_fetch(NodeId(2), Offset(0), Offset(0), 8),
            None
        );
        p.isr_change_settled(&asked);
        assert!(p
            .on_follower_fetch(NodeId(2), Offset(0), Offset(0), 9)
            .is_some());
    }

    #[tokio::test]
    async fn a_coordinators_read_fence_waits_for_the_leaders_log_end_and_fails_off_the_leader() {
        let dir = tempfile::tempdir().unwrap();
        let p = leader_of(dir.path());
        lead_as_1(&p, &assignment(&[1, 2], 0), 1, 0);
        p.on_follower_fetch(NodeId(2), Offset(0), Offset(0), 1);
        assert!(
            crate::commit::fence(&p).is_none(),
            "nothing written: nothing to wait for"
        );
        let bytes = sluice_log::testing::batch_bytes(0, 3, 1_000, 8, 0);
        p.append(sluice_log::validate_produce(&bytes, 1 << 20).unwrap(), true)
            .unwrap();
        // Written, not committed: an answer read from a state holding it waits for the end.
        let wait = crate::commit::fence(&p).unwrap();
        assert_eq!(wait.end, Offset(3));
        let waiting = tokio::spawn(crate::commit::committed(vec![wait]));
        tokio::task::yield_now().await;
        assert!(
            !waiting.is_finished(),
            "answered before the follower held it"
        );
        p.on_follower_fetch(NodeId(2), Offset(3), Offset(0), 2);
        assert_eq!(waiting.await.unwrap(), Ok(()));
        assert!(crate::commit::fence(&p).is_none());
        // A replica that stepped down answers nothing from its state, even with nothing
        // pending: another node may lead, and take writes, by now.
        p.follow(None, Epoch(4));
        assert_eq!(
            crate::commit::committed(crate::commit::fence(&p).into_iter().collect()).await,
            Err(ResponseError::NotCoordinator)
        );
    }

    #[tokio::test]
    async fn a_write_committed_after_the_isr_fell_below_min_insync_is_not_acknowledged() {
        let dir = tempfile::tempdir().unwrap();
        let p = leader_of(dir.path());
        lead_as_1(&p, &assignment(&[1, 2], 0), 2, 0);
        p.on_follower_fetch(NodeId(2), Offset(0), Offset(0), 1);
        let bytes = sluice_log::testing::batch_bytes(0, 3, 1_000, 8, 0);
        p.append(sluice_log::validate_produce(&bytes, 1 << 20).unwrap(), true)
            .unwrap();
        let waiting = tokio::spawn(crate::commit::committed(vec![crate::commit::Written::now(
            &p,
            Offset(3),
        )]));
        tokio::task::yield_now().await;
        assert!(!waiting.is_finished());
        // The follower's node is fenced before it fetched the write: the ISR is the leader
        // alone, and the high watermark passes the write on its one copy.
        p.lead(
            NodeId(1),
            &assignment(&[1], 1),
            2,
            10_000,
            2,
            &[NodeId(2)].into_iter().collect(),
        );
        assert_eq!(p.progress().visible, Offset(3));
        assert_eq!(
            waiting.await.unwrap(),
            Err(ResponseError::CoordinatorNotAvailable)
        );
        let refused = p.check_insync_after_append().unwrap_err();
        assert_eq!(
            refused.response_error(),
            ResponseError::NotEnoughReplicasAfterAppend
        );
        // Back in sync, a write committed on both copies is acknowledged.
        p.on_follower_fetch(NodeId(2), Offset(3), Offset(3), 3);
        lead_as_1(&p, &assignment(&[1, 2], 2), 2, 4);
        assert_eq!(p.check_insync_after_append().ok(), Some(()));
    }

    #[test]
    fn a_cluster_leader_refuses_a_marker_before_writing_it_below_min_insync() {
        let dir = tempfile::tempdir().unwrap();
        let p = leader_of(dir.path());
        lead_as_1(&p, &assignment(&[1], 0), 2, 0);
        let refused = p.append_marker(Marker::Abort, 7, 0, 0).unwrap_err();
        assert!(
            matches!(refused, BrokerError::NotEnoughReplicas(_)),
            "{refused}"
        );
        assert_eq!(p.progress().end, Offset(0), "nothing written");
        lead_as_1(&p, &assignment(&[1], 1), 1, 1);
        p.append_marker(Marker::Abort, 7, 0, 0).unwrap();
        assert_eq!(p.progress().end, Offset(1));
    }

    /// A leader in epoch 3 with a follower that has fetched nothing, holding three records of
    /// its own, and a task waiting for them to be committed.
    async fn waiting_leader(
        dir: &std::path::Path,
    ) -> (
        Arc<Partition>,
        tokio::task::JoinHandle<Result<(), BrokerError>>,
    ) {
        let p = leader_of(dir);
        lead_as_1(&p, &assignment(&[1, 2], 0), 1, 0);
        let bytes = sluice_log::testing::batch_bytes(0, 3, 1_000, 8, 0);
        p.append(sluice_log::validate_produce(&bytes, 1 << 20).unwrap(), true)
            .unwrap();
        let epoch = p.progress().epoch;
        assert_eq!(epoch, LeaderEpoch(3));
        let waiter = Arc::clone(&p);
        let waiting = tokio::spawn(async move { waiter.wait_committed(Offset(3), epoch).await });
        tokio::task::yield_now().await;
        assert!(
            !waiting.is_finished(),
            "committed before the follower held it"
        );
        (p, waiting)
    }

    #[tokio::test]
    async fn a_write_cut_back_is_not_acknowledged_by_a_later_epochs_high_watermark() {
        let dir = tempfile::tempdir().unwrap();
        let (p, waiting) = waiting_leader(dir.path()).await;
        // Between two of the waiter's wake-ups (this test's thread does not yield): the
        // replica steps down, its log is cut back to the new leader's and written again there
        // with that leader's records of epoch 4, and it is elected again in epoch 5, in which
        // its high watermark passes the offsets the write had.
        p.follow(Some(NodeId(2)), Epoch(4));
        p.truncate_to(NodeId(2), 4, Offset(0)).unwrap();
        let mut theirs = sluice_log::testing::batch_bytes(0, 3, 2_000, 8, 0);
        theirs[12..16].copy_from_slice(&4i32.to_be_bytes()); // the partition leader epoch
        p.append_replicated(NodeId(2), 4, &theirs, Offset(0))
            .unwrap();
        let again = Assignment {
            leader_epoch: Epoch(5),
            ..assignment(&[1], 1)
        };
        lead_as_1(&p, &again, 1, 1);
        assert!(p.progress().leading && p.progress().visible >= Offset(3));
        let outcome = waiting.await.unwrap();
        assert!(
            matches!(outcome, Err(BrokerError::NotLeader(_))),
            "{outcome:?}"
        );
        // A write made in the new epoch is acknowledged by it.
        let bytes = sluice_log::testing::batch_bytes(3, 1, 1_000, 8, 0);
        p.append(sluice_log::validate_produce(&bytes, 1 << 20).unwrap(), true)
            .unwrap();
        let epoch = p.progress().epoch;
        assert_eq!(epoch, LeaderEpoch(5));
        let committed = tokio::time::timeout(
            std::time::Duration::from_secs(5),
            p.wait_committed(Offset(4), epoch),
        );
        assert!(matches!(committed.await, Ok(Ok(()))));
    }

    #[tokio::test]
    async fn a_write_still_held_is_acknowledged_when_the_epoch_moves_with_the_same_leader() {
        let dir = tempfile::tempdir().unwrap();
        let (p, waiting) = waiting_leader(dir.path()).await;
        // A reassignment drops the follower: a new epoch, the same leader, nothing cut back.
        let dropped = Assignment {
            leader_epoch: Epoch(4),
            replicas: vec![NodeId(1)],
            ..assignment(&[1], 1)
        };
        lead_as_1(&p, &dropped, 1, 1);
        let outcome = tokio::time::timeout(std::time::Duration::from_secs(5), waiting).await;
        assert!(matches!(outcome, Ok(Ok(Ok(())))), "{outcome:?}");
    }

    fn with_records(dir: &std::path::Path, count: usize) -> Arc<Partition> {
        let clock: Arc<dyn sluice_log::Clock> = Arc::new(sluice_log::SystemClock);
        let (mut log, _) = Log::open(dir, LogConfig::default(), clock).unwrap();
        let bytes = sluice_log::testing::batch_bytes(0, count, 1_000, 8, 0);
        log.append_assigned(&bytes).unwrap();
        Partition::new(Arc::from("t"), 0, log, 0, Arc::default())
    }

    #[test]
    fn a_replica_rejoining_its_cluster_starts_from_its_checkpointed_high_watermark() {
        let dir = tempfile::tempdir().unwrap();
        let p = with_records(dir.path(), 10);
        assert_eq!(
            p.progress().visible,
            Offset(10),
            "a single node's is its log end"
        );
        // Rejoining: the log's last 6 records may be on no other replica.
        p.follow(None, Epoch(3));
        p.restart_high_watermark(Some(Offset(4)));
        assert_eq!(
            (p.progress().visible, p.progress().stable),
            (Offset(4), Offset(4))
        );
        // Leading again, in a new epoch, with follower 2 in the ISR: nothing more is
        // committed until 2 has fetched, and ListOffsets says so.
        lead_as_1(&p, &assignment(&[1, 2], 0), 1, 0);
        assert_eq!(p.progress().visible, Offset(4));
        assert!(p.high_watermark_behind_epoch_start());
        p.on_follower_fetch(NodeId(2), Offset(7), Offset(0), 1);
        assert_eq!(p.progress().visible, Offset(7));
        assert!(p.high_watermark_behind_epoch_start());
        p.on_follower_fetch(NodeId(2), Offset(10), Offset(0), 2);
        assert_eq!(p.progress().visible, Offset(10));
        assert!(!p.high_watermark_behind_epoch_start());

        // No checkpoint: the log start. A checkpoint past the log end: the log end.
        let dir = tempfile::tempdir().unwrap();
        let p = with_records(dir.path(), 10);
        p.follow(None, Epoch(3));
        p.restart_high_watermark(None);
        assert_eq!(p.progress().visible, Offset(0));
        p.restart_high_watermark(Some(Offset(50)));
        assert_eq!(p.progress().visible, Offset(10));
    }

    #[test]
    fn a_follower_cut_back_publishes_no_high_watermark_or_durable_end_past_its_log() {
        let dir = tempfile::tempdir().unwrap();
        let p = leader_of(dir.path());
        p.follow(Some(NodeId(2)), Epoch(3));
        let bytes = sluice_log::testing::batch_bytes(0, 6, 1_000, 8, 0);
        p.append_replicated(NodeId(2), 3, &bytes, Offset(6))
            .unwrap();
        let bytes = sluice_log::testing::batch_bytes(6, 4, 1_000, 8, 0);
        p.append_replicated(NodeId(2), 3, &bytes, Offset(10))
            .unwrap();
        let job = p.state.lock().log.flush_job().unwrap();
        let outcome = job.run();
        p.state.lock().log.complete_flush(&job, outcome).unwrap();
        p.publish(&mut p.state.lock());
        assert_eq!(
            (p.progress().visible, p.progress().durable),
            (Offset(10), Offset(10))
        );
        // (A correct high watermark is never past a truncation point; an unclean election
        // or a restart that took its log end as committed could leave it there.)
        p.truncate_to(NodeId(2), 3, Offset(6)).unwrap();
        let progress = p.progress();
        assert_eq!(
            (progress.visible, progress.durable, progress.end),
            (Offset(6), Offset(6), Offset(6))
        );
        // Written again: not durable until fsynced, and not committed until the leader says.
        let bytes = sluice_log::testing::batch_bytes(6, 4, 1_000, 8, 0);
        p.append_replicated(NodeId(2), 3, &bytes, Offset(6))
            .unwrap();
        let progress = p.progress();
        assert_eq!(
            (progress.visible, progress.durable, progress.end),
            (Offset(6), Offset(6), Offset(10))
        );
        p.append_replicated(NodeId(2), 3, &[], Offset(8)).unwrap();
        assert_eq!(p.progress().visible, Offset(8));
    }
}
