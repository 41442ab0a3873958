//! A partition leader's view of its followers: what each has, the high watermark, and when to
//! ask the controller to take a follower out of the ISR or back in (Kafka's replica manager,
//! KIP-497). Pure: offsets and times come in, decisions come out.
//!
//! ```text
//!   follower fetch(from = N)  ─▶ it has every offset below N ─▶ high watermark =
//!   leader's own end (durable in sync mode)                       min(own end, ISR members' ends)
//!   tick(now): an ISR member not caught up for `lag_time_max_ms` ─▶ ask to shrink the ISR
//!   a follower that reached the high watermark and this epoch   ─▶ ask to expand the ISR
//! ```
//!
//! As in Kafka, the high watermark also waits for a follower outside the ISR that has caught
//! up within `lag_time_max_ms`: else, with the ISR down to the leader and writes that need
//! only the leader (acks=1), the high watermark would run at the leader's end and a follower
//! a round trip behind would never reach it, so never rejoin.
//!
//! While an ISR change is pending (asked, not yet committed in the metadata log) no other is
//! asked, and the high watermark counts the members being added as well as the current ones
//! (the largest ISR it may turn out to be), so that it never passes an offset that the ISR,
//! whichever it becomes, does not hold.

use std::collections::{BTreeMap, BTreeSet};

use sluice_log::Offset;

use crate::ids::{LeaderEpoch, NodeId, PartitionEpoch};
use crate::metadata::PartitionInfo;

/// The number the next ISR change asked in this process gets.
static NEXT_ASK: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1);

#[derive(Debug, Clone)]
struct Follower {
    /// The follower has every offset below this (its last fetch offset); `None` before its
    /// first fetch in this epoch.
    log_end: Option<Offset>,
    /// The last time it had everything the leader had; `None` if not since this leadership
    /// began, or since it was added.
    last_caught_up_ms: Option<i64>,
    /// When this leader began to track it, or last asked for it in the ISR: an ISR member
    /// gets `lag_time_max_ms` from then to catch up before it is asked out.
    grace_from_ms: i64,
    /// Its log start offset, as its last fetch said; `None` before that.
    log_start: Option<Offset>,
    /// The leader's log end when its previous fetch was answered, and when that was.
    last_fetch: Option<(Offset, i64)>,
}

/// What changed after an event.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Update {
    /// The high watermark moved to this.
    pub high_watermark: Option<Offset>,
    /// Ask the controller for this ISR (with [`LeaderReplicas::epochs`]).
    pub alter_isr: Option<Vec<NodeId>>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("{isr} in-sync replicas, fewer than min.insync.replicas = {required}")]
pub struct NotEnoughReplicas {
    pub isr: usize,
    pub required: usize,
}

/// How far behind its leader a follower is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FollowerLag {
    pub node: NodeId,
    /// In the ISR.
    pub in_sync: bool,
    /// Records behind the leader's end; `None` before its first fetch in this epoch.
    pub records: Option<i64>,
    /// Milliseconds since it last had everything the leader had.
    pub ms: i64,
}

#[derive(Debug, Clone)]
pub struct LeaderReplicas {
    me: NodeId,
    leader_epoch: LeaderEpoch,
    partition_epoch: PartitionEpoch,
    isr: Vec<NodeId>,
    pending: Option<Vec<NodeId>>,
    /// The number of the last ISR change asked (0: none yet); numbers are unique in the
    /// process, so that an answer meant for an earlier leadership of the partition (even in
    /// the same epoch, after a step-down) settles nothing here.
    asked: u64,
    followers: BTreeMap<NodeId, Follower>,
    /// The first offset written in this leader epoch: a follower joins the ISR only once it
    /// has reached it (it then holds no record of an older leader that this one lacks).
    epoch_start: Offset,
    local_end: Offset,
    high_watermark: Offset,
    lag_time_max_ms: i64,
    /// The latest time an event brought.
    now_ms: i64,
    /// Replicas on fenced nodes: not asked into the ISR, and not waited for outside it (as
    /// Kafka's `isReplicaIsrEligible`), so that a dead follower that had caught up does not
    /// hold the high watermark once it is fenced.
    ineligible: BTreeSet<NodeId>,
}

impl Follower {
    /// What its lag is counted from: the last time it was caught up, or its grace's start if
    /// later.
    fn lag_from_ms(&self) -> i64 {
        self.last_caught_up_ms
            .map_or(self.grace_from_ms, |t| t.max(self.grace_from_ms))
    }
}

impl LeaderReplicas {
    /// This node became (or stays) leader of a partition described by `p`. `epoch_start` is
    /// its log end (the first offset of its epoch), `local_end` what it holds for certain (the
    /// log end, or the fsynced end under `flush.mode=sync`), `high_watermark` the one it knew;
    /// followers in the ISR get a full `lag_time_max_ms` to show up; the others count as
    /// not caught up until they are.
    pub fn new(
        me: NodeId,
        p: &PartitionInfo,
        epoch_start: Offset,
        local_end: Offset,
        high_watermark: Offset,
        lag_time_max_ms: i64,
        now_ms: i64,
    ) -> LeaderReplicas {
        assert_eq!(p.leader, Some(me), "only the leader tracks its followers");
        let followers = p
            .replicas
            .iter()
            .filter(|r| **r != me)
            .map(|r| {
                (
                    *r,
                    Follower {
                        log_end: None,
                        last_caught_up_ms: None,
                        grace_from_ms: now_ms,
                        log_start: None,
                        last_fetch: None,
                    },
                )
            })
            .collect();
        LeaderReplicas {
            me,
            leader_epoch: p.leader_epoch,
            partition_epoch: p.partition_epoch,
            isr: p.isr.clone(),
            pending: None,
            asked: 0,
            followers,
            epoch_start,
            local_end,
            high_watermark: high_watermark.min(local_end),
            lag_time_max_ms,
            now_ms,
            ineligible: BTreeSet::new(),
        }
    }

    pub fn high_watermark(&self) -> Offset {
        self.high_watermark
    }

    /// Whether the high watermark is still below the log end this leader's epoch started at:
    /// a new leader learns what its predecessor had committed only as its followers fetch.
    pub fn high_watermark_behind_epoch_start(&self) -> bool {
        self.high_watermark < self.epoch_start
    }

    pub fn isr(&self) -> &[NodeId] {
        &self.isr
    }

    /// The in-sync followers known to hold every offset below `offset` and `offset` itself
    /// onwards (their log starts at or below it: retention runs on each replica by itself):
    /// where a consumer reading from `offset` may be sent instead of the leader (KIP-392).
    pub fn followers_holding(&self, offset: Offset) -> Vec<NodeId> {
        self.followers
            .iter()
            .filter(|(node, f)| {
                self.isr.contains(node)
                    && f.log_end.is_some_and(|end| end >= offset)
                    && f.log_start.is_some_and(|start| start <= offset)
            })
            .map(|(node, _)| *node)
            .collect()
    }

    /// Each follower's lag at `now_ms`.
    pub fn lag(&self, now_ms: i64) -> Vec<FollowerLag> {
        self.followers
            .iter()
            .map(|(node, f)| FollowerLag {
                node: *node,
                in_sync: self.isr.contains(node),
                records: f.log_end.map(|end| (self.local_end.0 - end.0).max(0)),
                ms: (now_ms - f.lag_from_ms()).max(0),
            })
            .collect()
    }

    /// The epochs an AlterPartition request must carry.
    pub fn epochs(&self) -> (LeaderEpoch, PartitionEpoch) {
        (self.leader_epoch, self.partition_epoch)
    }

    /// Whether an `acks=all` write may be taken now.
    pub fn check_min_insync(&self, min_insync: usize) -> Result<(), NotEnoughReplicas> {
        if self.isr.len() < min_insync {
            return Err(NotEnoughReplicas {
                isr: self.isr.len(),
                required: min_insync,
            });
        }
        Ok(())
    }

    /// A follower's fetch said where its log starts.
    pub fn on_log_start(&mut self, follower: NodeId, log_start: Offset) {
        if let Some(f) = self.followers.get_mut(&follower) {
            f.log_start = Some(log_start);
        }
    }

    /// The lowest log start among the in-sync followers (the leader's own is the caller's);
    /// `None` while one of them has not said yet. DeleteRecords answers once this reaches
    /// the new start, as Kafka's low watermark.
    pub fn in_sync_followers_log_start(&self) -> Option<Offset> {
        self.followers
            .iter()
            .filter(|(node, _)| self.isr.contains(node))
            .map(|(_, f)| f.log_start)
            .try_fold(Offset(i64::MAX), |low, start| start.map(|s| low.min(s)))
    }

    /// A follower fetched from `fetch_offset`, when the leader's log ended at `leader_end`.
    pub fn on_fetch(
        &mut self,
        follower: NodeId,
        fetch_offset: Offset,
        leader_end: Offset,
        now_ms: i64,
    ) -> Update {
        self.now_ms = self.now_ms.max(now_ms);
        let Some(f) = self.followers.get_mut(&follower) else {
            return Update::default();
        };
        // Its latest fetch says where its log ends, as in Kafka: a follower that restarted
        // within its session (still in the ISR) may have lost what no fsync covered, and must
        // not be counted for the high watermark, or sent consumers, on its old end.
        f.log_end = Some(fetch_offset);
        // Caught up now if it has all the leader has; else, as in Kafka, caught up as of its
        // previous fetch if it now has all the leader had then. Under steady writes a
        // follower that keeps pace is always a round trip behind the leader's end: by the
        // first rule alone it would fall out of the ISR.
        if fetch_offset >= leader_end {
            f.last_caught_up_ms = f.last_caught_up_ms.max(Some(now_ms));
        } else if let Some((_, at)) = f.last_fetch.filter(|(end, _)| fetch_offset >= *end) {
            f.last_caught_up_ms = f.last_caught_up_ms.max(Some(at));
        }
        f.last_fetch = Some((leader_end, now_ms));
        let mut update = Update {
            high_watermark: self.advance_high_watermark(),
            alter_isr: None,
        };
        let can_join = !self.isr.contains(&follower)
            && !self.ineligible.contains(&follower)
            && fetch_offset >= self.high_watermark
            && fetch_offset >= self.epoch_start;
        if can_join && self.pending.is_none() {
            // It holds everything committed: in the ISR it gets a full `lag_time_max_ms` to
            // reach the leader's end (under `flush.mode=sync` the high watermark, the fsynced
            // end, is often below it). Not a catch-up: the high watermark does not wait for
            // it on this account if the change is refused.
            if let Some(f) = self.followers.get_mut(&follower) {
                f.grace_from_ms = f.grace_from_ms.max(now_ms);
            }
            let mut isr = self.isr.clone();
            isr.push(follower);
            update.alter_isr = Some(self.ask(isr));
        }
        update
    }

    /// The leader's own end moved (appended; or, in sync mode, fsynced).
    pub fn on_local_end(&mut self, local_end: Offset) -> Update {
        self.local_end = self.local_end.max(local_end);
        Update {
            high_watermark: self.advance_high_watermark(),
            alter_isr: None,
        }
    }

    /// Takes out of the ISR the followers that have not caught up for too long; the high
    /// watermark moves if it waited for a follower outside the ISR that is no longer caught up.
    pub fn tick(&mut self, now_ms: i64) -> Update {
        self.now_ms = self.now_ms.max(now_ms);
        let high_watermark = self.advance_high_watermark();
        if self.pending.is_some() {
            return Update {
                high_watermark,
                alter_isr: None,
            };
        }
        let lagging: Vec<NodeId> = self
            .isr
            .iter()
            .copied()
            .filter(|r| *r != self.me)
            .filter(|r| {
                self.followers
                    .get(r)
                    .is_some_and(|f| now_ms - f.lag_from_ms() > self.lag_time_max_ms)
            })
            .collect();
        if lagging.is_empty() {
            return Update {
                high_watermark,
                alter_isr: None,
            };
        }
        let isr = self
            .isr
            .iter()
            .copied()
            .filter(|r| !lagging.contains(r))
            .collect();
        Update {
            high_watermark,
            alter_isr: Some(self.ask(isr)),
        }
    }

    /// The committed metadata of the partition changed while this node still leads it (an ISR
    /// change, ours or not). Returns the high watermark if it moved.
    pub fn on_metadata(&mut self, p: &PartitionInfo, now_ms: i64) -> Update {
        self.now_ms = self.now_ms.max(now_ms);
        debug_assert_eq!(p.leader, Some(self.me));
        debug_assert_eq!(p.leader_epoch, self.leader_epoch);
        self.partition_epoch = p.partition_epoch;
        self.isr = p.isr.clone();
        // As Kafka resets a follower's last caught-up time at every partition change: one
        // out of the ISR now (fenced, or dropped for lagging) is not waited for on account of
        // a catch-up from before, nor counted caught up by its next fetch reaching what the
        // leader had at its last one — it may have restarted since, far behind.
        for (r, f) in self.followers.iter_mut() {
            if !p.isr.contains(r) {
                f.last_caught_up_ms = None;
                f.last_fetch = None;
            }
        }
        // A reassignment added or removed replicas: track the new ones from now.
        let me = self.me;
        self.followers.retain(|r, _| p.replicas.contains(r));
        for r in p.replicas.iter().filter(|r| **r != me) {
            self.followers.entry(*r).or_insert(Follower {
                log_end: None,
                last_caught_up_ms: None,
                grace_from_ms: now_ms,
                log_start: None,
                last_fetch: None,
            });
        }
        self.pending = None;
        Update {
            high_watermark: self.advance_high_watermark(),
            alter_isr: None,
        }
    }

    /// The nodes that are fenced now (from the cluster's metadata). Returns the high watermark
    /// if it moved.
    pub fn set_ineligible(&mut self, nodes: &BTreeSet<NodeId>) -> Update {
        if *nodes == self.ineligible {
            return Update::default();
        }
        self.ineligible = nodes.clone();
        Update {
            high_watermark: self.advance_high_watermark(),
            alter_isr: None,
        }
    }

    /// The number of the last ISR change asked, to settle it by.
    pub fn asked(&self) -> u64 {
        self.asked
    }

    /// ISR change number `ask` of `leader_epoch` was refused, or failed without an answer
    /// (e.g. a stale partition epoch, a timeout): a later event may ask again. An answer to
    /// an older change settles nothing: the pending one may still be granted, and until the
    /// metadata says, the high watermark must count the members it adds (found by the
    /// simulation: an old change's timeout let the high watermark pass a follower that the
    /// pending change then put in the ISR).
    pub fn on_alter_failed(&mut self, leader_epoch: LeaderEpoch, ask: u64) {
        if leader_epoch == self.leader_epoch && ask == self.asked {
            self.pending = None;
        }
    }

    fn ask(&mut self, isr: Vec<NodeId>) -> Vec<NodeId> {
        self.pending = Some(isr.clone());
        self.asked = NEXT_ASK.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        isr
    }

    /// The smallest end among the ISR — the current members and any being added — the
    /// followers outside it that are caught up, and the leader's own end; never lower than
    /// before.
    fn advance_high_watermark(&mut self) -> Option<Offset> {
        let members = self.isr.iter().chain(self.pending.iter().flatten());
        let mut low = self.local_end;
        for member in members {
            if *member == self.me {
                continue;
            }
            match self.followers.get(member).and_then(|f| f.log_end) {
                Some(end) => low = low.min(end),
                // A member that has not fetched in this epoch holds the high watermark.
                None => return None,
            }
        }
        let (now_ms, lag_time_max_ms) = (self.now_ms, self.lag_time_max_ms);
        for (node, f) in &self.followers {
            let member =
                self.isr.contains(node) || self.pending.as_ref().is_some_and(|p| p.contains(node));
            let caught_up = f
                .last_caught_up_ms
                .is_some_and(|at| now_ms - at <= lag_time_max_ms);
            let eligible = !self.ineligible.contains(node);
            if let (false, true, true, Some(end)) = (member, caught_up, eligible, f.log_end) {
                low = low.min(end);
            }
        }
        if low > self.high_watermark {
            self.high_watermark = low;
            Some(low)
        } else {
            None
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)] // test code: a failed unwrap is a failed test

    use super::*;
    use crate::testing::node;

    fn partition(isr: &[i32]) -> PartitionInfo {
        PartitionInfo {
            adding: Vec::new(),
            removing: Vec::new(),
            replicas: vec![node(1), node(2), node(3)],
            leader: Some(node(1)),
            leader_epoch: LeaderEpoch(4),
            isr: isr.iter().map(|n| node(*n)).collect(),
            partition_epoch: PartitionEpoch(9),
        }
    }

    /// The partition after an ISR change to `isr` (partition epoch 10).
    fn isr_changed_to(isr: &[i32]) -> PartitionInfo {
        PartitionInfo {
            partition_epoch: PartitionEpoch(10),
            ..partition(isr)
        }
    }

    const LAG_MS: i64 = 1_000;

    /// Node 1 leading an empty partition with ISR `isr`, at time 0.
    fn leading_empty(isr: &[i32]) -> LeaderReplicas {
        LeaderReplicas::new(
            node(1),
            &partition(isr),
            Offset(0),
            Offset(0),
            Offset(0),
            LAG_MS,
            0,
        )
    }

    #[test]
    fn the_high_watermark_is_the_smallest_end_in_the_isr() {
        let mut l = LeaderReplicas::new(
            node(1),
            &partition(&[1, 2, 3]),
            Offset(10),
            Offset(10),
            Offset(10),
            LAG_MS,
            0,
        );
        assert_eq!(
            l.on_local_end(Offset(15)).high_watermark,
            None,
            "followers not heard from"
        );
        assert_eq!(
            l.on_fetch(node(2), Offset(15), Offset(15), 1)
                .high_watermark,
            None
        );
        assert_eq!(
            l.on_fetch(node(3), Offset(12), Offset(15), 1)
                .high_watermark,
            Some(Offset(12))
        );
        assert_eq!(
            l.on_fetch(node(3), Offset(15), Offset(15), 2)
                .high_watermark,
            Some(Offset(15))
        );
        assert_eq!(
            l.on_local_end(Offset(20)),
            Update::default(),
            "waits for followers"
        );
        assert_eq!(l.high_watermark(), Offset(15));
    }

    #[test]
    fn consumers_go_only_to_in_sync_followers_that_hold_their_offset() {
        let mut l = leading_empty(&[1, 2]);
        assert!(l.followers_holding(Offset(0)).is_empty(), "none heard from");
        l.on_local_end(Offset(50));
        l.on_fetch(node(2), Offset(30), Offset(50), 1);
        l.on_fetch(node(3), Offset(50), Offset(50), 1);
        assert!(
            l.followers_holding(Offset(30)).is_empty(),
            "2 has not said where its log starts"
        );
        l.on_log_start(node(2), Offset(10));
        l.on_log_start(node(3), Offset(0));
        assert_eq!(
            l.followers_holding(Offset(30)),
            vec![node(2)],
            "3 is not in the ISR"
        );
        assert!(l.followers_holding(Offset(31)).is_empty());
        assert!(
            l.followers_holding(Offset(9)).is_empty(),
            "retention on 2 removed offset 9 there"
        );
        assert_eq!(l.followers_holding(Offset(10)), vec![node(2)]);
        // 2 restarted and lost what it had not fsynced: its next fetch says so.
        l.on_fetch(node(2), Offset(20), Offset(50), 2);
        assert!(l.followers_holding(Offset(25)).is_empty());
    }

    #[test]
    fn followers_lag_in_records_and_time() {
        let mut l = leading_empty(&[1, 2]);
        l.on_local_end(Offset(50));
        l.on_fetch(node(2), Offset(50), Offset(50), 100);
        l.on_fetch(node(3), Offset(20), Offset(50), 100);
        let lag = |n, in_sync, records, ms| FollowerLag {
            node: node(n),
            in_sync,
            records,
            ms,
        };
        assert_eq!(
            l.lag(400),
            vec![lag(2, true, Some(0), 300), lag(3, false, Some(30), 400)]
        );
    }

    #[test]
    fn a_lagging_follower_leaves_the_isr_and_rejoins_once_caught_up() {
        let mut l = leading_empty(&[1, 2, 3]);
        l.on_local_end(Offset(100));
        l.on_fetch(node(2), Offset(100), Offset(100), 500);
        l.on_fetch(node(3), Offset(40), Offset(100), 500);
        assert_eq!(l.high_watermark(), Offset(40));
        assert_eq!(l.tick(900), Update::default());
        let shrink = l.tick(1_001).alter_isr.unwrap();
        assert_eq!(shrink, vec![node(1), node(2)]);
        assert_eq!(l.tick(5_000), Update::default(), "one change at a time");
        // Still counted until the change is committed.
        assert_eq!(
            l.on_fetch(node(2), Offset(100), Offset(100), 1_100)
                .high_watermark,
            None
        );
        let p = isr_changed_to(&[1, 2]);
        assert_eq!(l.on_metadata(&p, 0).high_watermark, Some(Offset(100)));
        assert_eq!(l.check_min_insync(2), Ok(()));
        assert!(l.check_min_insync(3).is_err());
        // Node 3 catches up to the high watermark: it asks to come back.
        assert_eq!(
            l.on_fetch(node(3), Offset(90), Offset(100), 1_200)
                .alter_isr,
            None
        );
        let expand = l
            .on_fetch(node(3), Offset(100), Offset(100), 1_300)
            .alter_isr
            .unwrap();
        assert_eq!(expand, vec![node(1), node(2), node(3)]);
        assert_eq!(l.epochs(), (LeaderEpoch(4), PartitionEpoch(10)));
    }

    #[test]
    fn a_follower_a_round_trip_behind_under_steady_writes_stays_in_sync() {
        let mut l = leading_empty(&[1, 2]);
        // Every fetch arrives with what the previous answer held, while the leader has taken
        // more writes in between: never at the leader's end, always at its end of last time.
        let mut end = 0;
        for t in (0..5_000).step_by(100) {
            let fetched = end;
            end += 10;
            l.on_local_end(Offset(end));
            l.on_fetch(node(2), Offset(fetched), Offset(end), t);
            assert_eq!(l.tick(t), Update::default(), "dropped at {t} ms");
        }
        // One that stops keeping up (fetches only half of what it was sent) goes.
        let mut fetched = end;
        for t in (5_000..7_000).step_by(100) {
            fetched += 5;
            end += 10;
            l.on_local_end(Offset(end));
            l.on_fetch(node(2), Offset(fetched), Offset(end), t);
        }
        assert_eq!(l.tick(7_000).alter_isr, Some(vec![node(1)]));
    }

    #[test]
    fn with_the_isr_down_to_the_leader_a_follower_a_round_trip_behind_rejoins() {
        // acks=1 writes: only the leader is needed, so without waiting for a caught-up
        // follower the high watermark would run at the leader's end, one round trip ahead of
        // the follower's every fetch, and it would never be asked back.
        let mut l = leading_empty(&[1]);
        let (mut end, mut joined_at) = (0, None);
        for t in (0..1_000).step_by(100) {
            let fetched = end;
            end += 10;
            l.on_local_end(Offset(end));
            let update = l.on_fetch(node(2), Offset(fetched), Offset(end), t);
            if update.alter_isr.is_some() {
                assert_eq!(update.alter_isr, Some(vec![node(1), node(2)]));
                joined_at = Some(t);
                break;
            }
        }
        assert_eq!(
            joined_at,
            Some(200),
            "its third fetch holds the high watermark"
        );
        // Node 3, never heard from and not in the ISR, held nothing meanwhile.
        assert_eq!(l.high_watermark(), Offset(20));
    }

    #[test]
    fn a_caught_up_follower_outside_the_isr_holds_the_high_watermark_only_while_caught_up() {
        let mut l = leading_empty(&[1]);
        l.on_local_end(Offset(10));
        assert_eq!(l.high_watermark(), Offset(10), "nobody else is waited for");
        l.on_fetch(node(2), Offset(10), Offset(10), 100);
        // It asked to join; the controller refused (say, the node is shutting down).
        l.on_alter_failed(LeaderEpoch(4), l.asked());
        assert_eq!(l.on_local_end(Offset(30)), Update::default());
        assert_eq!(l.tick(100 + LAG_MS), Update::default());
        assert_eq!(
            l.tick(100 + LAG_MS + 1).high_watermark,
            Some(Offset(30)),
            "no longer caught up: not waited for"
        );
        assert_eq!(l.on_local_end(Offset(40)).high_watermark, Some(Offset(40)));
    }

    #[test]
    fn a_fenced_follower_is_neither_waited_for_nor_asked_into_the_isr() {
        let mut l = leading_empty(&[1]);
        l.on_local_end(Offset(10));
        assert!(l
            .on_fetch(node(2), Offset(10), Offset(10), 100)
            .alter_isr
            .is_some());
        l.on_alter_failed(LeaderEpoch(4), l.asked());
        assert_eq!(l.on_local_end(Offset(30)), Update::default(), "2 caught up");
        // Node 2 dies and is fenced: the high watermark goes on without it at once.
        let fenced = l.set_ineligible(&[node(2)].into_iter().collect());
        assert_eq!(fenced.high_watermark, Some(Offset(30)));
        assert_eq!(
            l.on_fetch(node(2), Offset(30), Offset(30), 200).alter_isr,
            None,
            "not asked in while fenced"
        );
        l.set_ineligible(&BTreeSet::new());
        assert_eq!(
            l.on_fetch(node(2), Offset(30), Offset(30), 300).alter_isr,
            Some(vec![node(1), node(2)])
        );
    }

    #[test]
    fn a_follower_taken_out_of_the_isr_is_not_waited_for_on_an_old_catch_up() {
        let mut l = leading_empty(&[1, 2]);
        l.on_local_end(Offset(10));
        l.on_fetch(node(2), Offset(10), Offset(10), 100);
        assert_eq!(l.high_watermark(), Offset(10));
        // Node 2 restarts: the controller takes it out of the ISR, and it comes back far
        // behind (its first fetch from 4), within the lag time of its last catch-up.
        let p = isr_changed_to(&[1]);
        l.on_metadata(&p, 200);
        l.on_fetch(node(2), Offset(4), Offset(10), 300);
        assert_eq!(
            l.on_local_end(Offset(30)).high_watermark,
            Some(Offset(30)),
            "not held at 4"
        );
    }

    #[test]
    fn a_follower_back_out_of_the_isr_is_not_caught_up_by_its_fetches_from_before() {
        // Caught up on an empty partition, then fenced out of the ISR by a restart: its first
        // fetch after it (from 0, the leader now at 30) reaches what the leader had at its last
        // fetch before (0), which says nothing of it now.
        let mut l = leading_empty(&[1, 2]);
        l.on_fetch(node(2), Offset(0), Offset(0), 100);
        let p = isr_changed_to(&[1]);
        l.on_metadata(&p, 200);
        l.on_local_end(Offset(30));
        l.on_fetch(node(2), Offset(0), Offset(30), 300);
        assert_eq!(l.on_local_end(Offset(35)).high_watermark, Some(Offset(35)));
    }

    #[test]
    fn a_follower_asked_into_the_isr_is_not_waited_for_if_refused() {
        // flush.mode=sync: the leader's end is 20, its fsynced end (the high watermark) 10.
        let mut l = leading_empty(&[1]);
        l.on_local_end(Offset(10));
        let asked = l.on_fetch(node(2), Offset(10), Offset(20), 100);
        assert_eq!(asked.alter_isr, Some(vec![node(1), node(2)]));
        l.on_alter_failed(LeaderEpoch(4), l.asked());
        assert_eq!(
            l.on_local_end(Offset(20)).high_watermark,
            Some(Offset(20)),
            "it has not caught up: not waited for"
        );
    }

    #[test]
    fn a_new_leader_takes_followers_back_only_from_its_own_epoch() {
        // Became leader alone at offset 50, knowing a high watermark of 30: it alone is the
        // ISR, so everything it has is committed.
        let mut l = LeaderReplicas::new(
            node(1),
            &partition(&[1]),
            Offset(50),
            Offset(50),
            Offset(30),
            LAG_MS,
            0,
        );
        assert_eq!(l.on_local_end(Offset(50)).high_watermark, Some(Offset(50)));
        let early = l.on_fetch(node(2), Offset(45), Offset(50), 1);
        assert_eq!(early.alter_isr, None, "below the epoch start");
        let joined = l.on_fetch(node(2), Offset(50), Offset(50), 2);
        assert_eq!(joined.alter_isr, Some(vec![node(1), node(2)]));
        // The member being added holds the high watermark meanwhile.
        assert_eq!(l.on_local_end(Offset(60)).high_watermark, None);
        assert_eq!(
            l.on_fetch(node(2), Offset(60), Offset(60), 3)
                .high_watermark,
            Some(Offset(60))
        );
    }

    #[test]
    fn the_high_watermark_never_moves_back() {
        let mut l = leading_empty(&[1, 2]);
        l.on_local_end(Offset(10));
        l.on_fetch(node(2), Offset(10), Offset(10), 1);
        assert_eq!(l.high_watermark(), Offset(10));
        // A fetch from an older position (a follower that restarted and lost its unsynced
        // tail) does not lower it; the follower then holds it until it is back at 10.
        assert_eq!(
            l.on_fetch(node(2), Offset(5), Offset(10), 2),
            Update::default()
        );
        assert_eq!(l.high_watermark(), Offset(10));
        l.on_local_end(Offset(20));
        assert_eq!(
            l.on_fetch(node(2), Offset(8), Offset(20), 3).high_watermark,
            None
        );
        assert_eq!(
            l.on_fetch(node(2), Offset(15), Offset(20), 4)
                .high_watermark,
            Some(Offset(15))
        );
    }

    #[test]
    fn a_replica_added_by_a_reassignment_is_tracked_and_joins_once_caught_up() {
        let mut l = leading_empty(&[1, 2, 3]);
        l.on_local_end(Offset(50));
        l.on_fetch(node(2), Offset(50), Offset(50), 10);
        l.on_fetch(node(3), Offset(50), Offset(50), 10);
        assert_eq!(l.high_watermark(), Offset(50));
        let mut p = partition(&[1, 2, 3]);
        p.replicas.push(node(4));
        p.adding = vec![node(4)];
        p.partition_epoch = PartitionEpoch(10);
        assert_eq!(l.on_metadata(&p, 20), Update::default());
        assert!(l.lag(20).iter().any(|f| f.node == node(4) && !f.in_sync));
        assert_eq!(
            l.on_fetch(node(4), Offset(10), Offset(50), 30).alter_isr,
            None
        );
        let expand = l
            .on_fetch(node(4), Offset(50), Offset(50), 40)
            .alter_isr
            .unwrap();
        assert_eq!(expand, vec![node(1), node(2), node(3), node(4)]);
        // The move completes: node 3 is no longer a replica and no longer tracked.
        let mut done = partition(&[1, 2, 4]);
        done.replicas = vec![node(1), node(2), node(4)];
        done.partition_epoch = PartitionEpoch(11);
        l.on_metadata(&done, 50);
        assert_eq!(
            l.lag(50).iter().map(|f| f.node).collect::<Vec<_>>(),
            vec![node(2), node(4)]
        );
    }

    #[test]
    fn the_followers_log_start_is_the_lowest_an_in_sync_follower_reported() {
        let mut l = leading_empty(&[1, 2]);
        assert_eq!(
            l.in_sync_followers_log_start(),
            None,
            "node 2 has not said yet"
        );
        l.on_log_start(node(3), Offset(5));
        assert_eq!(
            l.in_sync_followers_log_start(),
            None,
            "node 3 is not in sync"
        );
        l.on_log_start(node(2), Offset(40));
        assert_eq!(l.in_sync_followers_log_start(), Some(Offset(40)));
        l.on_log_start(node(9), Offset(1));
        assert_eq!(
            l.in_sync_followers_log_start(),
            Some(Offset(40)),
            "not a replica"
        );
    }
}
