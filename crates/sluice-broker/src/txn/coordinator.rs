//! The transaction coordinator's state machine (KIP-98, hardened by KIP-890): pure, no I/O.
//! Each operation checks a request against a transactional id's state and returns the new
//! state to write to `__transaction_state` (the service writes it and then applies it), or a
//! Kafka error. Ending a transaction goes through a `Prepare*` state that names everything
//! still to do (markers, group offsets), so that a crash at any point can finish it.
//!
//! KIP-890 (transactions version 2): EndTxn v5+ bumps the producer epoch at every commit or
//! abort and the markers carry the bumped epoch, so a delayed write from the finished
//! transaction is fenced; partitions are added by the transactional Produce itself (v12+),
//! group offsets by TxnOffsetCommit v5+. Older clients add partitions with AddPartitionsToTxn,
//! and the broker still verifies every transactional write against the coordinator.

use std::collections::{BTreeSet, HashMap};

use kafka_protocol::error::ResponseError;

use super::state::{LastTxn, PendingOffset, TxnMeta, TxnState};

/// What InitProducerId leads to.
#[derive(Debug)]
pub enum Init {
    /// Write this state and answer with its producer id and epoch.
    Ready(TxnMeta),
    /// The previous producer left a transaction open: write this `PrepareAbort` state, finish
    /// it (markers with the new epoch fence the old producer), then answer with the epoch of
    /// the completed state.
    AbortFirst(TxnMeta),
}

/// What EndTxn leads to.
#[derive(Debug)]
pub enum End {
    /// Nothing to write (a retry of an EndTxn that completed); answer with this id and epoch.
    Done {
        producer_id: i64,
        producer_epoch: i16,
    },
    /// Write this state and answer with its id and epoch (TV2, nothing was in the transaction).
    Write(TxnMeta),
    /// Write this `Prepare*` state, finish it, then answer with the completed state's id/epoch.
    Finish(TxnMeta),
}

/// A partition's open transaction and what start-up should do about it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Heal {
    pub topic: String,
    pub partition: i32,
    pub producer_id: i64,
    pub epoch: i16,
    pub commit: bool,
}

#[derive(Debug)]
pub struct Coordinator {
    txns: HashMap<String, TxnMeta>,
    by_producer: HashMap<i64, String>,
    /// `transaction.max.timeout.ms`.
    pub max_timeout_ms: i32,
    /// Forget ids idle this long (`transactional.id.expiration.ms`).
    pub expiration_ms: i64,
}

fn fenced(current: i16, got: i16) -> ResponseError {
    if got < current {
        ResponseError::ProducerFenced
    } else {
        ResponseError::InvalidProducerEpoch
    }
}

impl Coordinator {
    pub fn new(max_timeout_ms: i32, expiration_ms: i64) -> Coordinator {
        Coordinator {
            txns: HashMap::new(),
            by_producer: HashMap::new(),
            max_timeout_ms,
            expiration_ms,
        }
    }

    pub fn get(&self, id: &str) -> Option<&TxnMeta> {
        self.txns.get(id)
    }

    pub fn by_producer(&self, producer_id: i64) -> Option<&TxnMeta> {
        self.by_producer
            .get(&producer_id)
            .and_then(|id| self.txns.get(id))
    }

    pub fn all(&self) -> impl Iterator<Item = &TxnMeta> {
        self.txns.values()
    }

    /// Makes `meta` the id's state (after it was written, and when replaying the log).
    pub fn apply(&mut self, meta: TxnMeta) {
        if let Some(old) = self.txns.get(&meta.transactional_id) {
            if old.producer_id != meta.producer_id {
                self.by_producer.remove(&old.producer_id);
            }
        }
        self.by_producer
            .insert(meta.producer_id, meta.transactional_id.clone());
        self.txns.insert(meta.transactional_id.clone(), meta);
    }

    /// Forgets every id `unloaded` picks (their partition's coordinator moved elsewhere).
    pub fn unload(&mut self, unloaded: impl Fn(&str) -> bool) {
        let gone: Vec<String> = self
            .txns
            .keys()
            .filter(|id| unloaded(id))
            .cloned()
            .collect();
        for id in gone {
            self.remove(&id);
        }
    }

    /// Forgets an id (expiry, replayed tombstones).
    pub fn remove(&mut self, id: &str) {
        if let Some(old) = self.txns.remove(id) {
            self.by_producer.remove(&old.producer_id);
        }
    }

    fn check_producer(
        &self,
        id: &str,
        producer_id: i64,
        epoch: i16,
    ) -> Result<&TxnMeta, ResponseError> {
        let meta = self
            .txns
            .get(id)
            .filter(|m| m.producer_id == producer_id)
            .ok_or(ResponseError::InvalidProducerIdMapping)?;
        if epoch != meta.producer_epoch {
            return Err(fenced(meta.producer_epoch, epoch));
        }
        Ok(meta)
    }

    /// InitProducerId with a transactional id. `expected` is the producer id and epoch a
    /// KIP-360 client sends to have its epoch bumped after an error; `alloc` hands out a new
    /// producer id.
    pub fn init(
        &self,
        id: &str,
        timeout_ms: i32,
        expected: Option<(i64, i16)>,
        alloc: &mut dyn FnMut() -> Result<i64, ResponseError>,
        now_ms: i64,
    ) -> Result<Init, ResponseError> {
        if id.is_empty() {
            return Err(ResponseError::InvalidRequest);
        }
        if timeout_ms <= 0 || timeout_ms > self.max_timeout_ms {
            return Err(ResponseError::InvalidTransactionTimeout);
        }
        let Some(meta) = self.txns.get(id) else {
            return Ok(Init::Ready(TxnMeta::new(id, alloc()?, timeout_ms, now_ms)));
        };
        if let Some((pid, epoch)) = expected.filter(|(pid, _)| *pid >= 0) {
            // A retry of the InitProducerId that made the current epoch (its answer was lost).
            if meta.bumped_from == Some((pid, epoch)) {
                return if meta.state.is_prepare() || meta.state == TxnState::Ongoing {
                    Err(ResponseError::ConcurrentTransactions)
                } else {
                    Ok(Init::Ready(meta.clone()))
                };
            }
            let current = pid == meta.producer_id && epoch == meta.producer_epoch;
            // A TV2 producer whose EndTxn answer was lost still holds the epoch before the bump
            // — only while that bump is the last one: a new instance's InitProducerId since
            // has fenced it (as Kafka's resets the last epoch it would accept).
            let just_bumped = pid == meta.producer_id
                && i32::from(meta.producer_epoch) == i32::from(epoch) + 1
                && meta
                    .last
                    .as_ref()
                    .is_some_and(|l| l.tv2 && l.ended_by_epoch == Some(epoch));
            if !(current || just_bumped) {
                return Err(ResponseError::ProducerFenced);
            }
        }
        if meta.state.is_prepare() {
            return Err(ResponseError::ConcurrentTransactions);
        }
        // Only a bump the producer asked for (KIP-360) may be asked for again: one made by a
        // new instance fences the old one, which must not get the new epoch by asking.
        // What the producer sent: the current epoch, or (a TV2 producer whose EndTxn answer
        // was lost) the one before the EndTxn's bump, which its retry sends again.
        let asked_from = expected.filter(|(pid, _)| *pid >= 0);
        let mut next = meta.clone();
        next.timeout_ms = timeout_ms;
        next.updated_ms = now_ms;
        if meta.state == TxnState::Ongoing {
            // Fence the previous producer: its transaction is aborted with a newer epoch.
            prepare_end(&mut next, false, true, alloc)?;
            next.bumped_from = asked_from;
            return Ok(Init::AbortFirst(next));
        }
        bump(&mut next, alloc)?;
        next.bumped_from = asked_from;
        next.state = TxnState::Empty;
        next.start_ms = -1;
        next.tv2 = false;
        Ok(Init::Ready(next))
    }

    /// Adds partitions to the transaction (AddPartitionsToTxn, or a TV2 Produce); `None` when
    /// they are already in it.
    pub fn add_partitions(
        &self,
        id: &str,
        producer_id: i64,
        epoch: i16,
        partitions: &[(String, i32)],
        tv2: bool,
        now_ms: i64,
    ) -> Result<Option<TxnMeta>, ResponseError> {
        let meta = self.check_producer(id, producer_id, epoch)?;
        if meta.state.is_prepare() {
            return Err(ResponseError::ConcurrentTransactions);
        }
        if meta.state == TxnState::Ongoing && partitions.iter().all(|p| meta.partitions.contains(p))
        {
            return Ok(None);
        }
        let mut next = begin(meta, now_ms);
        next.tv2 |= tv2;
        next.partitions.extend(partitions.iter().cloned());
        Ok(Some(next))
    }

    /// AddOffsetsToTxn: the transaction will commit offsets of `group`.
    pub fn add_offsets(
        &self,
        id: &str,
        producer_id: i64,
        epoch: i16,
        group: &str,
        now_ms: i64,
    ) -> Result<Option<TxnMeta>, ResponseError> {
        let meta = self.check_producer(id, producer_id, epoch)?;
        if meta.state.is_prepare() {
            return Err(ResponseError::ConcurrentTransactions);
        }
        if meta.state == TxnState::Ongoing && meta.groups.contains(group) {
            return Ok(None);
        }
        let mut next = begin(meta, now_ms);
        next.groups.insert(group.to_string());
        Ok(Some(next))
    }

    /// TxnOffsetCommit: offsets to commit with the transaction. The group must have been added
    /// (AddOffsetsToTxn), unless the client speaks TV2 (v5+), which adds it here.
    pub fn txn_offset_commit(
        &self,
        id: &str,
        producer_id: i64,
        epoch: i16,
        offsets: Vec<PendingOffset>,
        implicit_add: bool,
        now_ms: i64,
    ) -> Result<TxnMeta, ResponseError> {
        let meta = self.check_producer(id, producer_id, epoch)?;
        if meta.state.is_prepare() {
            return Err(ResponseError::ConcurrentTransactions);
        }
        let group = offsets.first().map(|o| o.group.clone()).unwrap_or_default();
        let added = meta.state == TxnState::Ongoing && meta.groups.contains(&group);
        if !added && !implicit_add {
            return Err(ResponseError::InvalidTxnState);
        }
        let mut next = begin(meta, now_ms);
        next.tv2 |= implicit_add;
        next.groups.insert(group);
        for o in offsets {
            next.pending_offsets.retain(|p| {
                !(p.group == o.group && p.topic == o.topic && p.partition == o.partition)
            });
            next.pending_offsets.push(o);
        }
        Ok(next)
    }

    /// EndTxn. `tv2` (v5+) bumps the epoch.
    pub fn end(
        &self,
        id: &str,
        (producer_id, epoch): (i64, i16),
        commit: bool,
        tv2: bool,
        alloc: &mut dyn FnMut() -> Result<i64, ResponseError>,
        now_ms: i64,
    ) -> Result<End, ResponseError> {
        let meta = self
            .txns
            .get(id)
            .filter(|m| m.producer_id == producer_id || m.last.is_some())
            .ok_or(ResponseError::InvalidProducerIdMapping)?;
        let complete = matches!(
            meta.state,
            TxnState::CompleteCommit | TxnState::CompleteAbort
        );
        if complete {
            // A retry of the EndTxn that completed it (not a fenced producer's late EndTxn).
            let retry = meta
                .last
                .as_ref()
                .is_some_and(|l| l.ended_by_epoch == Some(epoch) && l.tv2 == tv2);
            if retry {
                return if (meta.state == TxnState::CompleteCommit) == commit {
                    Ok(End::Done {
                        producer_id: meta.producer_id,
                        producer_epoch: meta.producer_epoch,
                    })
                } else {
                    Err(ResponseError::InvalidTxnState)
                };
            }
        }
        if meta.producer_id != producer_id {
            return Err(ResponseError::InvalidProducerIdMapping);
        }
        let preparing = matches!(meta.state, TxnState::PrepareCommit | TxnState::PrepareAbort);
        if preparing
            && tv2
            && meta.end_requested_epoch == Some(epoch)
            && epoch != meta.producer_epoch
        {
            // A retry of the EndTxn whose decision is still being carried out (it bumped the
            // epoch, KIP-890): retriable, as Kafka answers it, until the transaction completes
            // and the retry is answered from `last` above. Not a fenced producer.
            return if (meta.state == TxnState::PrepareCommit) == commit {
                Err(ResponseError::ConcurrentTransactions)
            } else {
                Err(ResponseError::InvalidTxnState)
            };
        }
        if epoch != meta.producer_epoch {
            return Err(fenced(meta.producer_epoch, epoch));
        }
        let mut next = meta.clone();
        next.updated_ms = now_ms;
        next.end_requested_epoch = Some(epoch);
        match meta.state {
            // The same decision again (a retry): wait until it is carried out. The opposite
            // one cannot be taken any more, as on Kafka.
            TxnState::PrepareCommit | TxnState::PrepareAbort
                if (meta.state == TxnState::PrepareCommit) == commit =>
            {
                Err(ResponseError::ConcurrentTransactions)
            }
            TxnState::PrepareCommit | TxnState::PrepareAbort => Err(ResponseError::InvalidTxnState),
            TxnState::Ongoing => {
                prepare_end(&mut next, commit, tv2, alloc)?;
                Ok(End::Finish(next))
            }
            TxnState::Empty | TxnState::CompleteCommit | TxnState::CompleteAbort if tv2 => {
                // Nothing was written; the epoch still moves on, as the protocol expects.
                next.last = Some(LastTxn {
                    committed: commit,
                    partitions: BTreeSet::new(),
                    marker_producer_id: next.producer_id,
                    marker_epoch: next.producer_epoch,
                    tv2: true,
                    ended_by_epoch: Some(epoch),
                });
                next.end_requested_epoch = None;
                bump(&mut next, alloc)?;
                next.state = if commit {
                    TxnState::CompleteCommit
                } else {
                    TxnState::CompleteAbort
                };
                Ok(End::Write(next))
            }
            _ => Err(ResponseError::InvalidTxnState),
        }
    }

    /// Transactions open past their timeout, as `PrepareAbort` states to write and finish
    /// (with a bumped epoch, fencing their producers), and ids idle past expiry to forget.
    pub fn expired(
        &self,
        alloc: &mut dyn FnMut() -> Result<i64, ResponseError>,
        now_ms: i64,
    ) -> (Vec<TxnMeta>, Vec<String>) {
        let mut aborts = Vec::new();
        let mut forget = Vec::new();
        for meta in self.txns.values() {
            if meta.state == TxnState::Ongoing
                && meta.start_ms >= 0
                && now_ms.saturating_sub(meta.start_ms) > i64::from(meta.timeout_ms)
            {
                let mut next = meta.clone();
                next.updated_ms = now_ms;
                if prepare_end(&mut next, false, true, alloc).is_ok() {
                    aborts.push(next);
                }
            } else if matches!(
                meta.state,
                TxnState::Empty | TxnState::CompleteCommit | TxnState::CompleteAbort
            ) && now_ms.saturating_sub(meta.updated_ms) > self.expiration_ms
            {
                forget.push(meta.transactional_id.clone());
            }
        }
        (aborts, forget)
    }

    /// What to do at start-up about a transaction left open on a partition: finish it as its
    /// transaction ended if a crash lost its marker, abort it if no live transaction owns it,
    /// `None` to leave it to its transaction.
    pub fn heal(&self, topic: &str, partition: i32, producer_id: i64, epoch: i16) -> Option<Heal> {
        let key = (topic.to_string(), partition);
        let mut heal = Heal {
            topic: topic.to_string(),
            partition,
            producer_id,
            epoch,
            commit: false,
        };
        let Some(meta) = self.by_producer(producer_id).or_else(|| {
            // The id may have moved to a new producer id since (an exhausted epoch).
            self.txns.values().find(|m| {
                m.last
                    .as_ref()
                    .is_some_and(|l| l.marker_producer_id == producer_id)
            })
        }) else {
            return Some(heal);
        };
        match meta.state {
            TxnState::Ongoing | TxnState::PrepareCommit | TxnState::PrepareAbort
                if meta.producer_id == producer_id && meta.partitions.contains(&key) =>
            {
                None
            }
            _ => {
                if let Some(last) = &meta.last {
                    // Its marker is missing if the open transaction is older than the marker:
                    // same epoch before KIP-890, an older one with it.
                    let missing = if last.tv2 {
                        epoch < last.marker_epoch
                    } else {
                        epoch == last.marker_epoch
                    };
                    if last.partitions.contains(&key) && missing {
                        heal.commit = last.committed;
                        heal.epoch = last.marker_epoch;
                        return Some(heal);
                    }
                }
                Some(heal)
            }
        }
    }

    pub fn ids(&self) -> Vec<String> {
        let mut ids: Vec<String> = self.txns.keys().cloned().collect();
        ids.sort();
        ids
    }
}

/// Starts (or continues) a transaction from `meta`.
fn begin(meta: &TxnMeta, now_ms: i64) -> TxnMeta {
    let mut next = meta.clone();
    if next.state != TxnState::Ongoing {
        next.state = TxnState::Ongoing;
        next.start_ms = now_ms;
        next.partitions = BTreeSet::new();
        next.groups = BTreeSet::new();
        next.pending_offsets = Vec::new();
        next.tv2 = false;
    }
    next.updated_ms = now_ms;
    next
}

/// The next epoch of the id, or a new producer id when the epoch is exhausted.
fn bump(
    meta: &mut TxnMeta,
    alloc: &mut dyn FnMut() -> Result<i64, ResponseError>,
) -> Result<(), ResponseError> {
    meta.bumped_from = None;
    if meta.producer_epoch >= i16::MAX - 1 {
        meta.producer_id = alloc()?;
        meta.producer_epoch = 0;
    } else {
        meta.producer_epoch += 1;
    }
    Ok(())
}

/// Turns an open transaction into its `Prepare*` state. With `bump_epoch`, the epoch moves on
/// and the markers carry the new one; when it is exhausted, the markers carry the last epoch
/// of the old producer id and the completed state a new producer id.
fn prepare_end(
    meta: &mut TxnMeta,
    commit: bool,
    bump_epoch: bool,
    alloc: &mut dyn FnMut() -> Result<i64, ResponseError>,
) -> Result<(), ResponseError> {
    meta.state = if commit {
        TxnState::PrepareCommit
    } else {
        TxnState::PrepareAbort
    };
    // An abort keeps its offsets until it completes: they stay pending for OffsetFetch's
    // `require_stable` until then (as on Kafka, until the marker), and the finisher tells the
    // groups' coordinators on other nodes that they are dropped.
    if bump_epoch {
        meta.bumped_from = None;
        if meta.producer_epoch >= i16::MAX - 1 {
            meta.next_producer_id = alloc()?;
            meta.producer_epoch = i16::MAX;
        } else {
            meta.producer_epoch += 1;
        }
    }
    // From here on `tv2` says whether the markers carry a bumped epoch (what start-up needs
    // to tell this transaction's data from the next one's), whatever added its partitions.
    meta.tv2 = bump_epoch;
    Ok(())
}

/// The completed state after a `Prepare*` state's markers and offsets are written.
pub fn completed(prepare: &TxnMeta, now_ms: i64) -> TxnMeta {
    let committed = prepare.state == TxnState::PrepareCommit;
    let mut done = prepare.clone();
    done.state = if committed {
        TxnState::CompleteCommit
    } else {
        TxnState::CompleteAbort
    };
    done.last = Some(LastTxn {
        committed,
        partitions: std::mem::take(&mut done.partitions),
        marker_producer_id: prepare.producer_id,
        marker_epoch: prepare.producer_epoch,
        tv2: prepare.tv2,
        ended_by_epoch: prepare.end_requested_epoch,
    });
    done.end_requested_epoch = None;
    done.groups.clear();
    done.pending_offsets.clear();
    done.start_ms = -1;
    done.tv2 = false;
    done.updated_ms = now_ms;
    if done.next_producer_id >= 0 {
        done.producer_id = done.next_producer_id;
        done.producer_epoch = 0;
        done.next_producer_id = -1;
    }
    done
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ended(c: &mut Coordinator, id: &str, tv2: bool, commit: bool) -> TxnMeta {
        let mut alloc = || Ok(999);
        let m = c.get(id).unwrap().clone();
        let partitions = [("t".to_string(), 0)];
        let added = c
            .add_partitions(id, m.producer_id, m.producer_epoch, &partitions, tv2, 1)
            .unwrap()
            .unwrap();
        c.apply(added);
        let End::Finish(prepare) = c
            .end(
                id,
                (m.producer_id, m.producer_epoch),
                commit,
                tv2,
                &mut alloc,
                2,
            )
            .unwrap()
        else {
            panic!("expected a transaction to finish")
        };
        c.apply(prepare.clone());
        let done = completed(&prepare, 3);
        c.apply(done.clone());
        done
    }

    fn fresh(c: &mut Coordinator, id: &str, pid: i64) {
        let mut alloc = || Ok(pid);
        let Init::Ready(m) = c.init(id, 60_000, None, &mut alloc, 0).unwrap() else {
            panic!("a new id is ready at once")
        };
        c.apply(m);
    }

    #[test]
    fn start_up_finishes_lost_markers_and_aborts_orphans() {
        let mut c = Coordinator::new(900_000, i64::MAX);
        // Before KIP-890: the epoch stays; the lost marker's transaction has the same epoch.
        fresh(&mut c, "v1", 10);
        let done = ended(&mut c, "v1", false, true);
        assert_eq!(done.producer_epoch, 0);
        let heal = c.heal("t", 0, 10, 0).unwrap();
        assert!(heal.commit, "a lost commit marker is written again");
        assert!(
            !c.heal("u", 0, 10, 0).unwrap().commit,
            "not its partition: aborted"
        );
        assert!(
            !c.heal("t", 0, 77, 0).unwrap().commit,
            "unknown producer: aborted"
        );
        // Its next transaction (durably added) is left to it.
        let next = c
            .add_partitions("v1", 10, 0, &[("t".to_string(), 0)], false, 4)
            .unwrap()
            .unwrap();
        c.apply(next);
        assert_eq!(c.heal("t", 0, 10, 0), None);

        // KIP-890: the markers carry the bumped epoch; the next transaction's data has it too.
        fresh(&mut c, "v2", 20);
        let done = ended(&mut c, "v2", true, false);
        assert_eq!(done.producer_epoch, 1);
        let lost = c.heal("t", 0, 20, 0).unwrap();
        assert!(
            !lost.commit && lost.epoch == 1,
            "the lost abort marker, with the new epoch"
        );
        let orphan = c.heal("t", 0, 20, 1).unwrap();
        assert!(
            !orphan.commit,
            "the next transaction, never recorded: aborted"
        );

        // A librdkafka-style commit whose partitions were added by Produce v12 but whose EndTxn
        // is v3: no bump, so the lost marker is recognised by its equal epoch.
        fresh(&mut c, "mixed", 30);
        let m = c.get("mixed").unwrap().clone();
        let added = c
            .add_partitions(
                "mixed",
                30,
                m.producer_epoch,
                &[("t".to_string(), 0)],
                true,
                1,
            )
            .unwrap()
            .unwrap();
        c.apply(added);
        let mut alloc = || Ok(999);
        let End::Finish(prepare) = c.end("mixed", (30, 0), true, false, &mut alloc, 2).unwrap()
        else {
            panic!("expected a transaction to finish")
        };
        let done = completed(&prepare, 3);
        c.apply(done);
        assert!(c.heal("t", 0, 30, 0).unwrap().commit);
    }

    #[test]
    fn a_retried_end_while_its_decision_is_carried_out_is_retriable_not_fenced() {
        let mut c = Coordinator::new(900_000, i64::MAX);
        fresh(&mut c, "r", 7);
        let m = c.get("r").unwrap().clone();
        let added = c
            .add_partitions("r", 7, m.producer_epoch, &[("t".to_string(), 0)], true, 1)
            .unwrap()
            .unwrap();
        c.apply(added);
        let mut alloc = || Ok(999);
        let End::Finish(prepare) = c.end("r", (7, 0), true, true, &mut alloc, 2).unwrap() else {
            panic!("expected a transaction to finish")
        };
        assert_eq!(prepare.producer_epoch, 1, "KIP-890 bumps the epoch");
        c.apply(prepare.clone());
        // The client did not get the answer and retries with the epoch it had.
        assert_eq!(
            c.end("r", (7, 0), true, true, &mut alloc, 3).err(),
            Some(ResponseError::ConcurrentTransactions)
        );
        assert_eq!(
            c.end("r", (7, 0), false, true, &mut alloc, 3).err(),
            Some(ResponseError::InvalidTxnState),
            "the opposite decision is not a retry"
        );
        // Once the markers are written, the retry gets the outcome.
        c.apply(completed(&prepare, 4));
        match c.end("r", (7, 0), true, true, &mut alloc, 5).unwrap() {
            End::Done { producer_epoch, .. } => assert_eq!(producer_epoch, 1),
            _ => panic!("expected the completed transaction's answer"),
        }
    }

    #[test]
    fn a_fenced_producers_end_is_not_a_retry() {
        let mut c = Coordinator::new(900_000, i64::MAX);
        fresh(&mut c, "a", 1);
        let done = ended(&mut c, "a", true, true);
        let mut alloc = || Ok(999);
        // The same EndTxn again (its answer was lost): success with the bumped epoch.
        match c.end("a", (1, 0), true, true, &mut alloc, 5).unwrap() {
            End::Done { producer_epoch, .. } => assert_eq!(producer_epoch, done.producer_epoch),
            other => panic!("{other:?}"),
        }
        // A new producer fences it; the old one's EndTxn is now fenced, not a retry.
        let Init::Ready(m) = c.init("a", 60_000, None, &mut alloc, 6).unwrap() else {
            panic!("no open transaction to abort")
        };
        c.apply(m);
        assert!(matches!(
            c.end("a", (1, 1), true, true, &mut alloc, 7),
            Err(ResponseError::ProducerFenced)
        ));
    }

    #[test]
    fn a_retried_epoch_bump_gets_the_epoch_it_made_and_a_fenced_instance_does_not() {
        let mut c = Coordinator::new(900_000, i64::MAX);
        fresh(&mut c, "a", 1);
        let mut alloc = || Ok(999);
        // A KIP-360 bump from epoch 0; its answer is lost.
        let Init::Ready(bumped) = c.init("a", 60_000, Some((1, 0)), &mut alloc, 1).unwrap() else {
            panic!("nothing open")
        };
        assert_eq!(bumped.producer_epoch, 1);
        c.apply(bumped);
        // The retry is given epoch 1 again, without another bump.
        match c.init("a", 60_000, Some((1, 0)), &mut alloc, 2).unwrap() {
            Init::Ready(m) => assert_eq!((m.producer_id, m.producer_epoch), (1, 1)),
            other => panic!("{other:?}"),
        }
        // While a transaction of the new epoch is open, the retry is told to wait, not fenced,
        // and the transaction is left alone.
        let added = c
            .add_partitions("a", 1, 1, &[("t".to_string(), 0)], false, 3)
            .unwrap()
            .unwrap();
        c.apply(added);
        assert!(matches!(
            c.init("a", 60_000, Some((1, 0)), &mut alloc, 4),
            Err(ResponseError::ConcurrentTransactions)
        ));
        assert_eq!(c.get("a").unwrap().state, TxnState::Ongoing);
        // Another epoch that is not the current one is still fenced.
        assert!(matches!(
            c.init("a", 60_000, Some((1, 5)), &mut alloc, 5),
            Err(ResponseError::ProducerFenced)
        ));
        // A new instance fences the producer; the fenced epoch cannot ask its way back in.
        let Init::AbortFirst(prepare) = c.init("a", 60_000, None, &mut alloc, 6).unwrap() else {
            panic!("the open transaction is aborted first")
        };
        c.apply(prepare.clone());
        c.apply(completed(&prepare, 7));
        assert_eq!(c.get("a").unwrap().producer_epoch, 2);
        for stale in [(1, 0), (1, 1)] {
            assert!(
                matches!(
                    c.init("a", 60_000, Some(stale), &mut alloc, 8),
                    Err(ResponseError::ProducerFenced)
                ),
                "{stale:?}"
            );
        }
    }

    #[test]
    fn a_tv2_producer_a_new_instance_fenced_cannot_bump_past_it() {
        let mut c = Coordinator::new(900_000, i64::MAX);
        fresh(&mut c, "a", 1);
        let done = ended(&mut c, "a", true, true);
        assert_eq!(done.producer_epoch, 1);
        let mut alloc = || Ok(999);
        // The producer whose EndTxn answer was lost may still bump from the epoch it held, and
        // its retry of that (answer lost too) gets the same epoch again.
        let Init::Ready(m) = c.init("a", 60_000, Some((1, 0)), &mut alloc, 4).unwrap() else {
            panic!("nothing open")
        };
        assert_eq!(m.producer_epoch, 2);
        c.apply(m);
        match c.init("a", 60_000, Some((1, 0)), &mut alloc, 4).unwrap() {
            Init::Ready(m) => assert_eq!(m.producer_epoch, 2),
            other => panic!("{other:?}"),
        }
        // A new instance takes the id over (epoch 3): the old producer's bump from epoch 0
        // is now fenced, not given epoch 4 over the new instance's head.
        let Init::Ready(m) = c.init("a", 60_000, None, &mut alloc, 5).unwrap() else {
            panic!("nothing open")
        };
        c.apply(m);
        assert_eq!(c.get("a").unwrap().producer_epoch, 3);
        assert!(matches!(
            c.init("a", 60_000, Some((1, 0)), &mut alloc, 6),
            Err(ResponseError::ProducerFenced)
        ));
        assert_eq!(c.get("a").unwrap().producer_epoch, 3);
    }

    #[test]
    fn a_tv1_end_of_the_opposite_decision_while_one_is_carried_out_is_invalid() {
        let mut c = Coordinator::new(900_000, i64::MAX);
        fresh(&mut c, "v", 3);
        let added = c
            .add_partitions("v", 3, 0, &[("t".to_string(), 0)], false, 1)
            .unwrap()
            .unwrap();
        c.apply(added);
        let mut alloc = || Ok(999);
        let End::Finish(prepare) = c.end("v", (3, 0), true, false, &mut alloc, 2).unwrap() else {
            panic!("expected a transaction to finish")
        };
        c.apply(prepare);
        assert_eq!(
            c.end("v", (3, 0), true, false, &mut alloc, 3).err(),
            Some(ResponseError::ConcurrentTransactions),
            "a retry waits"
        );
        assert_eq!(
            c.end("v", (3, 0), false, false, &mut alloc, 3).err(),
            Some(ResponseError::InvalidTxnState),
            "an abort of a transaction being committed is refused, as on Kafka"
        );
    }
}
