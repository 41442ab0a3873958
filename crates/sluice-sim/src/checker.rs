//! The invariants, checked as the simulation runs (after the step that could break each) and
//! once more after every fault is healed:
//!
//! - **committed never changes**: whatever a replica exposes below its high watermark (what a
//!   consumer may read there) is the same value at the same offset on every replica, for ever;
//! - **acknowledged is committed**: an acks=all produce is answered only for a record below
//!   the leader's high watermark;
//! - **the ISR holds the committed log**: every replica the metadata lists in sync has, in
//!   what a crash keeps, every committed record (so any of them may be elected);
//! - **one writer per epoch**: one leader epoch writes one value at an offset;
//! - **metadata converges**: every node applies the controller's records as the controller did;
//! - **liveness after healing**: writes are acknowledged again, every replica ends with the
//!   leader's log, and every acknowledged record is in it.

use std::collections::BTreeMap;

use sluice_log::{LeaderEpoch, Offset};

use crate::replica_log::ReplicaLog;

#[derive(Debug, Default)]
pub struct Checker {
    /// Offset → the value every replica must show there once committed.
    committed: Vec<u64>,
    /// Per node: how far its exposed (below high watermark) records were compared.
    exposed: BTreeMap<i32, usize>,
    /// Per node: how far its durable records were compared with `committed`.
    verified: BTreeMap<i32, usize>,
    written: BTreeMap<(LeaderEpoch, Offset), u64>,
    pub acked: BTreeMap<u64, Offset>,
    pub violations: Vec<String>,
}

fn index(offset: Offset) -> usize {
    usize::try_from(offset.0).unwrap_or(0)
}

impl Checker {
    pub fn ok(&self) -> bool {
        self.violations.is_empty()
    }

    fn violation(&mut self, now: i64, what: String) {
        if self.violations.len() < 20 {
            self.violations.push(format!("t={now} ms: {what}"));
        }
    }

    pub fn committed_len(&self) -> usize {
        self.committed.len()
    }

    /// A leader wrote `value` at `at` in `epoch`.
    pub fn written(&mut self, now: i64, node: i32, epoch: LeaderEpoch, at: Offset, value: u64) {
        if let Some(before) = self.written.insert((epoch, at), value) {
            if before != value {
                self.violation(
                    now,
                    format!(
                        "two writers in epoch {}: offset {} holds {before} and, on node {node}, \
                         {value}",
                        epoch.0, at.0
                    ),
                );
            }
        }
    }

    /// `node` exposes its log below `high_watermark`.
    pub fn exposed(&mut self, now: i64, node: i32, log: &ReplicaLog, high_watermark: Offset) {
        let upto = index(high_watermark.min(log.end()));
        let from = self.exposed.get(&node).copied().unwrap_or(0);
        for i in from..upto {
            let Some((_, value)) = log.value(Offset(i as i64)) else {
                break;
            };
            match self.committed.get(i) {
                Some(&c) if c != value => {
                    self.violation(
                        now,
                        format!(
                            "committed offset {i} was {c}; node {node} exposes {value} there \
                             below its high watermark {}",
                            high_watermark.0
                        ),
                    );
                    return;
                }
                Some(_) => {}
                None => self.committed.push(value),
            }
        }
        self.exposed.insert(node, upto.max(from));
    }

    /// `node`'s log was cut at `to` (truncated, or a crash dropped what no fsync covered).
    pub fn cut(&mut self, node: i32, to: Offset) {
        let to = index(to);
        for map in [&mut self.exposed, &mut self.verified] {
            if let Some(at) = map.get_mut(&node) {
                *at = (*at).min(to);
            }
        }
    }

    /// The metadata lists `node` in the ISR: what a crash keeps of its log must hold every
    /// committed record.
    pub fn in_sync(&mut self, now: i64, node: i32, log: &ReplicaLog) {
        let durable = index(log.durable_end());
        if durable < self.committed.len() {
            self.violation(
                now,
                format!(
                    "node {node} is in the ISR but holds {durable} records for certain; {} are \
                     committed",
                    self.committed.len()
                ),
            );
            return;
        }
        let from = self.verified.get(&node).copied().unwrap_or(0);
        for i in from..self.committed.len() {
            let value = log.value(Offset(i as i64)).map(|(_, v)| v);
            if value != Some(self.committed[i]) {
                self.violation(
                    now,
                    format!(
                        "node {node} is in the ISR with {value:?} at committed offset {i} ({})",
                        self.committed[i]
                    ),
                );
                return;
            }
        }
        self.verified.insert(node, self.committed.len());
    }

    /// The client got an acknowledgement of `value` at `at`.
    pub fn acknowledged(&mut self, now: i64, value: u64, at: Offset) {
        if self.committed.get(index(at)) != Some(&value) {
            self.violation(
                now,
                format!(
                    "value {value} acknowledged at offset {} is not committed there ({:?})",
                    at.0,
                    self.committed.get(index(at))
                ),
            );
        }
        self.acked.insert(value, at);
    }

    /// After the drain: the leader's log holds every acknowledged record.
    pub fn final_log(&mut self, now: i64, leader: i32, log: &ReplicaLog) {
        let missing: Vec<(u64, Offset)> = self
            .acked
            .iter()
            .filter(|(value, at)| log.value(**at).map(|(_, v)| v) != Some(**value))
            .map(|(v, at)| (*v, *at))
            .take(5)
            .collect();
        for (value, at) in missing {
            self.violation(
                now,
                format!(
                    "lost write: value {value} acknowledged at offset {} is not in the final \
                     leader {leader}'s log",
                    at.0
                ),
            );
        }
    }

    pub fn fail(&mut self, now: i64, what: String) {
        self.violation(now, what);
    }
}
