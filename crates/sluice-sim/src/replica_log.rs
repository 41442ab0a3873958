//! A replica's log in memory: one value per offset, each stamped with the leader epoch that
//! wrote it, the real leader-epoch cache beside it, and the part a crash keeps (what an fsync
//! covered).

use sluice_log::{EpochCache, LeaderEpoch, Offset};

#[derive(Debug, Clone, Default)]
pub struct ReplicaLog {
    records: Vec<(LeaderEpoch, u64)>,
    durable: usize,
    epochs: EpochCache,
    /// Bumped by every truncation; `cuts[g]` is where truncation `g + 1` cut the log, so an
    /// fsync begun before it covers nothing past that.
    generation: u64,
    cuts: Vec<usize>,
}

fn offset(index: usize) -> Offset {
    Offset(i64::try_from(index).unwrap_or(i64::MAX))
}

fn index(offset: Offset) -> usize {
    usize::try_from(offset.0).unwrap_or(0)
}

impl ReplicaLog {
    pub fn end(&self) -> Offset {
        offset(self.records.len())
    }

    pub fn durable_end(&self) -> Offset {
        offset(self.durable)
    }

    pub fn generation(&self) -> u64 {
        self.generation
    }

    pub fn latest_epoch(&self) -> Option<LeaderEpoch> {
        self.epochs.latest()
    }

    pub fn value(&self, at: Offset) -> Option<(LeaderEpoch, u64)> {
        self.records.get(index(at)).copied()
    }

    pub fn records_from(&self, from: Offset, max: usize) -> Vec<(LeaderEpoch, u64)> {
        let from = index(from).min(self.records.len());
        let to = (from + max).min(self.records.len());
        self.records[from..to].to_vec()
    }

    /// Where `epoch` ended in this log (OffsetForLeaderEpoch).
    pub fn end_offset_for(&self, epoch: LeaderEpoch) -> Option<(LeaderEpoch, Offset)> {
        self.epochs.end_offset_for(epoch, self.end())
    }

    pub fn append(&mut self, epoch: LeaderEpoch, value: u64) {
        // The cache learns an epoch before its first record, as the real log writes it.
        self.epochs.assign(epoch, self.end());
        self.records.push((epoch, value));
    }

    /// An fsync begun at `generation` when the log ended at `upto` has finished.
    pub fn synced(&mut self, generation: u64, upto: Offset) {
        let from = usize::try_from(generation).unwrap_or(usize::MAX);
        let kept = self.cuts.get(from..).into_iter().flatten().copied().min();
        let covered = kept.map_or(index(upto), |k| k.min(index(upto)));
        self.durable = self.durable.max(covered.min(self.records.len()));
    }

    pub fn truncate(&mut self, to: Offset) {
        let to = index(to);
        if to < self.records.len() {
            self.records.truncate(to);
            self.durable = self.durable.min(to);
            self.epochs.truncate_from_end(offset(to));
            self.generation += 1;
            self.cuts.push(to);
        }
    }

    /// The process died: what no fsync covered is gone.
    pub fn crash(&mut self) {
        self.truncate(offset(self.durable));
    }
}
