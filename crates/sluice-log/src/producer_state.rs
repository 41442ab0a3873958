//! Idempotent producers (KIP-98): per partition, for each producer id, its epoch and the
//! sequence numbers and offsets of its last five batches. A retried batch is recognised and
//! answered with its original offsets instead of being written twice; a gap in sequences is
//! refused; an older epoch is fenced.
//!
//! Transactions (KIP-98): a producer's first transactional batch opens a transaction on this
//! partition and its marker (a control batch) closes it. The earliest open transaction's first
//! offset bounds what `read_committed` consumers may see (the last stable offset); an abort
//! marker yields an [`AbortedTxn`] for the partition's aborted-transaction index.
//!
//! The state is a function of the log: it is rebuilt by replaying batch headers, starting from
//! the newest snapshot (`<offset>.snapshot`, written when a segment rolls and at shutdown) so
//! that start-up replays only the tail.

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::fs;
use std::path::{Path, PathBuf};

use crate::batch::BatchHeader;
use crate::control::{marker_of, Marker};
use crate::error::LogError;
use crate::offset::Offset;
use crate::txn_index::AbortedTxn;

/// Batches remembered per producer: clients keep at most five in flight per partition.
pub const CACHED_BATCHES: usize = 5;

/// Why an idempotent batch is refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ProducerError {
    #[error("producer {producer_id}: epoch {epoch} is older than the current {current}")]
    StaleEpoch {
        producer_id: i64,
        epoch: i16,
        current: i16,
    },
    #[error("producer {producer_id}: sequence {got} does not follow {expected_after}")]
    OutOfOrder {
        producer_id: i64,
        got: i32,
        expected_after: i32,
    },
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct CachedBatch {
    first_sequence: i32,
    last_sequence: i32,
    base_offset: Offset,
    last_offset: Offset,
}

#[derive(Debug, Clone, PartialEq, Eq)]
struct ProducerEntry {
    epoch: i16,
    batches: VecDeque<CachedBatch>,
    /// The newest max timestamp of this producer's batches, for expiry.
    last_timestamp: i64,
    /// The first offset of its open transaction on this partition.
    txn_first_offset: Option<Offset>,
}

/// What to do with an incoming batch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SequenceCheck {
    /// New data: append it.
    Append,
    /// Already in the log at these offsets (a retry): do not append again.
    Duplicate {
        base_offset: Offset,
        last_offset: Offset,
    },
}

/// The sequence number `n` after `sequence`, wrapping at `i32::MAX` as Kafka's do.
pub(crate) fn sequence_after(sequence: i32, n: i32) -> i32 {
    if sequence > i32::MAX - n {
        n - (i32::MAX - sequence) - 1
    } else {
        sequence + n
    }
}

/// How many sequence numbers from `from` to `to`, going forwards (wrapping at `i32::MAX`).
fn sequence_distance(from: i32, to: i32) -> i64 {
    (i64::from(to) - i64::from(from)).rem_euclid(i64::from(i32::MAX) + 1)
}

fn last_sequence(header: &BatchHeader) -> i32 {
    sequence_after(header.base_sequence, header.last_offset_delta)
}

#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ProducerStates {
    producers: HashMap<i64, ProducerEntry>,
    /// Open transactions by first offset (→ producer id).
    ongoing: BTreeMap<Offset, i64>,
}

/// A producer the partition knows, as DescribeProducers shows it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ActiveProducer {
    pub producer_id: i64,
    pub producer_epoch: i16,
    /// The last sequence of its newest batch here (-1: none since its epoch began).
    pub last_sequence: i32,
    pub last_timestamp: i64,
    /// The first offset of its open transaction here, if one is open.
    pub txn_first_offset: Option<Offset>,
}

/// A producer's open transaction on a partition.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OpenTxn {
    pub producer_id: i64,
    pub producer_epoch: i16,
    pub first_offset: Offset,
    pub last_timestamp: i64,
}

impl ProducerStates {
    pub fn len(&self) -> usize {
        self.producers.len()
    }

    pub fn is_empty(&self) -> bool {
        self.producers.is_empty()
    }

    /// Checks a batch against the producer's state without changing it.
    pub fn check(&self, header: &BatchHeader) -> Result<SequenceCheck, ProducerError> {
        if header.producer_id < 0 {
            return Ok(SequenceCheck::Append);
        }
        let producer_id = header.producer_id;
        // A producer unknown here (expired after `producer.id.expiration.ms`, or whose batches
        // retention, DeleteRecords or a truncation took away) may start at any sequence, as
        // on Kafka since KIP-360: refusing it (UNKNOWN_PRODUCER_ID) leaves a Java producer
        // retrying until its delivery timeout.
        let Some(entry) = self.producers.get(&producer_id) else {
            return Ok(SequenceCheck::Append);
        };
        if header.producer_epoch < entry.epoch {
            return Err(ProducerError::StaleEpoch {
                producer_id,
                epoch: header.producer_epoch,
                current: entry.epoch,
            });
        }
        if header.producer_epoch > entry.epoch {
            // A new epoch starts its sequences again.
            return if header.base_sequence == 0 {
                Ok(SequenceCheck::Append)
            } else {
                Err(ProducerError::OutOfOrder {
                    producer_id,
                    got: header.base_sequence,
                    expected_after: -1,
                })
            };
        }
        let last = last_sequence(header);
        // A retry of a batch in the log. The log's copy may be shorter at the front (the
        // cleaner re-encodes a batch that lost its first records from its first survivor on,
        // keeping its last offset and sequence): a cached batch that ends where the retry
        // ends and is its tail is a duplicate, whose first offset is the retry's length
        // before its last — unless another cached batch holds part of the retry's front (the
        // retry then spans two batches, which no client sends: refused, as on Kafka).
        let delta = header.last_offset_delta;
        let front_elsewhere = |tail: &CachedBatch| {
            entry.batches.iter().any(|b| {
                b != tail
                    && sequence_distance(header.base_sequence, b.last_sequence)
                        < sequence_distance(header.base_sequence, tail.first_sequence)
            })
        };
        if let Some(cached) = entry.batches.iter().find(|b| {
            let span = b.last_offset.0 - b.base_offset.0;
            b.last_sequence == last
                && (0..=i64::from(delta)).contains(&span)
                && b.first_sequence == sequence_after(header.base_sequence, delta - span as i32)
                && (span == i64::from(delta) || !front_elsewhere(b))
        }) {
            return Ok(SequenceCheck::Duplicate {
                base_offset: Offset(cached.last_offset.0 - i64::from(delta)),
                last_offset: cached.last_offset,
            });
        }
        // A known producer with no batch in this epoch (its epoch was moved on by a
        // transaction marker) starts at sequence 0.
        let expected_after = entry.batches.back().map_or(-1, |b| b.last_sequence);
        if header.base_sequence == sequence_after(expected_after, 1) {
            Ok(SequenceCheck::Append)
        } else {
            Err(ProducerError::OutOfOrder {
                producer_id,
                got: header.base_sequence,
                expected_after,
            })
        }
    }

    /// Checks a transaction marker for `producer_id` at `epoch`: a marker from an older epoch
    /// than the producer's (a stale coordinator's) is refused.
    pub fn check_marker(&self, producer_id: i64, epoch: i16) -> Result<(), ProducerError> {
        match self.producers.get(&producer_id) {
            Some(entry) if epoch < entry.epoch => Err(ProducerError::StaleEpoch {
                producer_id,
                epoch,
                current: entry.epoch,
            }),
            _ => Ok(()),
        }
    }

    /// The first offset of the earliest open transaction (the last stable offset is the
    /// smaller of it and the high watermark).
    pub fn first_unstable_offset(&self) -> Option<Offset> {
        self.ongoing.keys().next().copied()
    }

    /// Every open transaction, oldest first.
    pub fn open_transactions(&self) -> Vec<OpenTxn> {
        self.ongoing
            .iter()
            .filter_map(|(&first_offset, pid)| {
                let e = self.producers.get(pid)?;
                Some(OpenTxn {
                    producer_id: *pid,
                    producer_epoch: e.epoch,
                    first_offset,
                    last_timestamp: e.last_timestamp,
                })
            })
            .collect()
    }

    /// Every producer known here, by producer id.
    pub fn active_producers(&self) -> Vec<ActiveProducer> {
        let mut out: Vec<ActiveProducer> = self
            .producers
            .iter()
            .map(|(pid, e)| ActiveProducer {
                producer_id: *pid,
                producer_epoch: e.epoch,
                last_sequence: e.batches.back().map_or(-1, |b| b.last_sequence),
                last_timestamp: e.last_timestamp,
                txn_first_offset: e.txn_first_offset,
            })
            .collect();
        out.sort_by_key(|p| p.producer_id);
        out
    }

    /// Records a batch now in the log (its header carries its assigned offsets; `batch` is its
    /// bytes). An abort marker that closes an open transaction returns it.
    pub fn record(&mut self, header: &BatchHeader, batch: &[u8]) -> Option<AbortedTxn> {
        if header.producer_id < 0 {
            return None;
        }
        let entry = self
            .producers
            .entry(header.producer_id)
            .or_insert_with(|| ProducerEntry {
                epoch: header.producer_epoch,
                batches: VecDeque::with_capacity(CACHED_BATCHES),
                last_timestamp: header.max_timestamp,
                txn_first_offset: None,
            });
        if header.is_control() {
            if header.producer_epoch > entry.epoch {
                entry.epoch = header.producer_epoch;
                entry.batches.clear();
            }
            entry.last_timestamp = entry.last_timestamp.max(header.max_timestamp);
            let first = entry.txn_first_offset.take()?;
            self.ongoing.remove(&first);
            return (marker_of(batch) == Some(Marker::Abort)).then_some(AbortedTxn {
                producer_id: header.producer_id,
                first_offset: first,
                last_offset: header.base_offset,
            });
        }
        if header.is_transactional() && entry.txn_first_offset.is_none() {
            entry.txn_first_offset = Some(header.base_offset);
            self.ongoing.insert(header.base_offset, header.producer_id);
        }
        if header.producer_epoch != entry.epoch {
            entry.epoch = header.producer_epoch;
            entry.batches.clear();
        }
        if entry.batches.len() == CACHED_BATCHES {
            entry.batches.pop_front();
        }
        entry.batches.push_back(CachedBatch {
            first_sequence: header.base_sequence,
            last_sequence: last_sequence(header),
            base_offset: header.base_offset,
            last_offset: header.last_offset(),
        });
        entry.last_timestamp = entry.last_timestamp.max(header.max_timestamp);
        None
    }

    /// Each producer's newest data batch, by its last offset: what the cleaner must keep (if
    /// need be without its records) so that a replica or a recovery reading the cleaned log
    /// rebuilds the same sequence numbers.
    pub(crate) fn last_batches(&self) -> HashMap<i64, Offset> {
        self.producers
            .iter()
            .filter_map(|(pid, e)| Some((*pid, e.batches.back()?.last_offset)))
            .collect()
    }

    /// Forgets producers silent since before `cutoff_timestamp` (`producer.id.expiration.ms`),
    /// except those with an open transaction.
    pub fn expire(&mut self, cutoff_timestamp: i64) -> usize {
        let before = self.producers.len();
        self.producers
            .retain(|_, e| e.last_timestamp >= cutoff_timestamp || e.txn_first_offset.is_some());
        before - self.producers.len()
    }

    fn encode(&self) -> Vec<u8> {
        let mut body = Vec::with_capacity(16 + self.producers.len() * 64);
        body.extend_from_slice(&(self.producers.len() as u32).to_be_bytes());
        let mut ids: Vec<_> = self.producers.keys().copied().collect();
        ids.sort_unstable();
        for id in ids {
            let e = &self.producers[&id];
            body.extend_from_slice(&id.to_be_bytes());
            body.extend_from_slice(&e.epoch.to_be_bytes());
            body.extend_from_slice(&e.last_timestamp.to_be_bytes());
            body.extend_from_slice(&e.txn_first_offset.map_or(-1, |o| o.0).to_be_bytes());
            body.push(e.batches.len() as u8);
            for b in &e.batches {
                body.extend_from_slice(&b.first_sequence.to_be_bytes());
                body.extend_from_slice(&b.last_sequence.to_be_bytes());
                body.extend_from_slice(&b.base_offset.0.to_be_bytes());
                body.extend_from_slice(&b.last_offset.0.to_be_bytes());
            }
        }
        let mut out = Vec::with_capacity(body.len() + 6);
        out.extend_from_slice(&SNAPSHOT_VERSION.to_be_bytes());
        out.extend_from_slice(&crc32c::crc32c(&body).to_be_bytes());
        out.extend_from_slice(&body);
        out
    }

    fn decode(bytes: &[u8]) -> Option<ProducerStates> {
        let mut r = Reader(bytes);
        let version = r.u16()?;
        if version != SNAPSHOT_VERSION && version != 1 {
            return None;
        }
        let crc = r.u32()?;
        if crc32c::crc32c(r.0) != crc {
            return None;
        }
        let count = r.u32()?;
        let mut producers = HashMap::new();
        for _ in 0..count {
            let id = r.i64()?;
            let epoch = r.u16()? as i16;
            let last_timestamp = r.i64()?;
            let txn_first_offset = if version >= 2 {
                Some(r.i64()?).filter(|o| *o >= 0).map(Offset)
            } else {
                None
            };
            let n = r.u8()?;
            let mut batches = VecDeque::with_capacity(CACHED_BATCHES);
            for _ in 0..n.min(CACHED_BATCHES as u8) {
                batches.push_back(CachedBatch {
                    first_sequence: r.u32()? as i32,
                    last_sequence: r.u32()? as i32,
                    base_offset: Offset(r.i64()?),
                    last_offset: Offset(r.i64()?),
                });
            }
            producers.insert(
                id,
                ProducerEntry {
                    epoch,
                    batches,
                    last_timestamp,
                    txn_first_offset,
                },
            );
        }
        let ongoing = producers
            .iter()
            .filter_map(|(id, e)| Some((e.txn_first_offset?, *id)))
            .collect();
        r.0.is_empty()
            .then_some(ProducerStates { producers, ongoing })
    }
}

/// 2 added each producer's open transaction; version 1 files are still read.
const SNAPSHOT_VERSION: u16 = 2;
/// Snapshots kept per partition; older ones are deleted when a new one is written.
const SNAPSHOTS_KEPT: usize = 2;

struct Reader<'a>(&'a [u8]);

impl Reader<'_> {
    fn take<const N: usize>(&mut self) -> Option<[u8; N]> {
        let (head, rest) = self.0.split_first_chunk::<N>()?;
        self.0 = rest;
        Some(*head)
    }
    fn u8(&mut self) -> Option<u8> {
        self.take::<1>().map(|b| b[0])
    }
    fn u16(&mut self) -> Option<u16> {
        self.take::<2>().map(u16::from_be_bytes)
    }
    fn u32(&mut self) -> Option<u32> {
        self.take::<4>().map(u32::from_be_bytes)
    }
    fn i64(&mut self) -> Option<i64> {
        self.take::<8>().map(i64::from_be_bytes)
    }
}

fn snapshot_path(dir: &Path, offset: Offset) -> PathBuf {
    dir.join(format!("{:020}.snapshot", offset.0))
}

/// Offsets of the snapshot files in `dir`, ascending.
fn snapshot_offsets(dir: &Path) -> Vec<Offset> {
    let mut offsets: Vec<Offset> = fs::read_dir(dir)
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| {
            let name = e.file_name();
            let stem = name.to_str()?.strip_suffix(".snapshot")?.to_string();
            stem.parse::<i64>().ok().filter(|v| *v >= 0).map(Offset)
        })
        .collect();
    offsets.sort();
    offsets
}

/// Writes the state as of `offset` (everything below it applied) and prunes old snapshots.
pub(crate) fn write_snapshot(
    dir: &Path,
    offset: Offset,
    states: &ProducerStates,
) -> Result<(), LogError> {
    let path = snapshot_path(dir, offset);
    let tmp = path.with_extension("snapshot.tmp");
    fs::write(&tmp, states.encode())
        .map_err(|e| LogError::io("write producer snapshot", &tmp, e))?;
    fs::File::open(&tmp)
        .and_then(|f| f.sync_all())
        .map_err(|e| LogError::io("fsync producer snapshot", &tmp, e))?;
    fs::rename(&tmp, &path).map_err(|e| LogError::io("rename producer snapshot", &path, e))?;
    let offsets = snapshot_offsets(dir);
    for old in offsets
        .iter()
        .take(offsets.len().saturating_sub(SNAPSHOTS_KEPT))
    {
        crate::segment::remove_if_exists(&snapshot_path(dir, *old))?;
    }
    Ok(())
}

/// Removes the snapshots taken past `at_most` (the log no longer reaches them).
pub(crate) fn remove_snapshots_above(dir: &Path, at_most: Offset) -> Result<(), LogError> {
    for offset in snapshot_offsets(dir).into_iter().filter(|o| *o > at_most) {
        crate::segment::remove_if_exists(&snapshot_path(dir, offset))?;
    }
    Ok(())
}

/// The newest readable snapshot at or below `at_most`, as `(offset, state)`; snapshots past
/// it (the log was cut shorter) are deleted.
pub(crate) fn load_snapshot(
    dir: &Path,
    at_most: Offset,
) -> Result<Option<(Offset, ProducerStates)>, LogError> {
    remove_snapshots_above(dir, at_most)?;
    let offsets = snapshot_offsets(dir);
    for offset in offsets.iter().rev().filter(|o| **o <= at_most) {
        match fs::read(snapshot_path(dir, *offset))
            .ok()
            .and_then(|b| ProducerStates::decode(&b))
        {
            Some(states) => return Ok(Some((*offset, states))),
            None => {
                tracing::warn!(dir = %dir.display(), offset = offset.0, "ignoring unreadable producer snapshot")
            }
        }
    }
    Ok(None)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::offset::LeaderEpoch;

    fn header(pid: i64, epoch: i16, seq: i32, count: i32, base: i64) -> BatchHeader {
        BatchHeader {
            base_offset: Offset(base),
            batch_length: 100,
            partition_leader_epoch: LeaderEpoch(0),
            magic: 2,
            crc: 0,
            attributes: 0,
            last_offset_delta: count - 1,
            base_timestamp: 0,
            max_timestamp: 1_000,
            producer_id: pid,
            producer_epoch: epoch,
            base_sequence: seq,
            record_count: count,
        }
    }

    fn apply(s: &mut ProducerStates, h: BatchHeader) -> Result<SequenceCheck, ProducerError> {
        let c = s.check(&h)?;
        if c == SequenceCheck::Append {
            s.record(&h, &[]);
        }
        Ok(c)
    }

    #[test]
    fn retries_are_recognised_and_gaps_refused() {
        let mut s = ProducerStates::default();
        assert_eq!(
            apply(&mut s, header(7, 0, 0, 3, 0)),
            Ok(SequenceCheck::Append)
        );
        assert_eq!(
            apply(&mut s, header(7, 0, 3, 2, 3)),
            Ok(SequenceCheck::Append)
        );
        assert_eq!(
            apply(&mut s, header(7, 0, 0, 3, 99)),
            Ok(SequenceCheck::Duplicate {
                base_offset: Offset(0),
                last_offset: Offset(2)
            })
        );
        assert!(matches!(
            apply(&mut s, header(7, 0, 6, 1, 5)),
            Err(ProducerError::OutOfOrder {
                got: 6,
                expected_after: 4,
                ..
            })
        ));
        assert_eq!(
            apply(&mut s, header(7, 0, 5, 1, 5)),
            Ok(SequenceCheck::Append)
        );
        // A producer unknown here (expired, or its batches deleted) may start anywhere.
        assert_eq!(
            apply(&mut s, header(8, 0, 4, 1, 6)),
            Ok(SequenceCheck::Append)
        );
        assert_eq!(
            apply(&mut s, header(8, 0, 5, 1, 7)),
            Ok(SequenceCheck::Append)
        );
        assert_eq!(
            apply(&mut s, header(-1, -1, -1, 1, 6)),
            Ok(SequenceCheck::Append)
        );
    }

    #[test]
    fn a_marker_that_moves_the_epoch_on_makes_the_next_batch_start_at_zero() {
        let mut s = ProducerStates::default();
        assert_eq!(
            apply(&mut s, header(7, 0, 0, 3, 0)),
            Ok(SequenceCheck::Append)
        );
        // A KIP-890 commit marker carries the bumped epoch.
        let mut marker = header(7, 1, -1, 1, 3);
        marker.attributes = 0x30;
        assert_eq!(s.record(&marker, &[]), None);
        assert!(matches!(
            s.check(&header(7, 1, 5, 5, 4)),
            Err(ProducerError::OutOfOrder {
                got: 5,
                expected_after: -1,
                ..
            })
        ));
        assert_eq!(
            apply(&mut s, header(7, 1, 0, 5, 4)),
            Ok(SequenceCheck::Append)
        );
    }

    #[test]
    fn a_retry_of_a_batch_the_cleaner_shortened_is_a_duplicate() {
        let mut s = ProducerStates::default();
        // Sequences 0-4 were written at offsets 10-14; the cleaner kept 12-14 (sequences 2-4).
        let mut shortened = header(7, 0, 2, 3, 12);
        shortened.record_count = 1;
        assert_eq!(s.record(&shortened, &[]), None);
        for (seq, count, base) in [(0, 5, 10), (1, 4, 11), (2, 3, 12)] {
            assert_eq!(
                s.check(&header(7, 0, seq, count, 99)),
                Ok(SequenceCheck::Duplicate {
                    base_offset: Offset(base),
                    last_offset: Offset(14)
                }),
                "sequences {seq}-4"
            );
        }
        // Shorter than what the log holds, or ending elsewhere: not that batch.
        assert!(matches!(
            s.check(&header(7, 0, 3, 2, 99)),
            Err(ProducerError::OutOfOrder { .. })
        ));
        assert!(matches!(
            s.check(&header(7, 0, 0, 4, 99)),
            Err(ProducerError::OutOfOrder { .. })
        ));
        assert_eq!(s.check(&header(7, 0, 5, 1, 99)), Ok(SequenceCheck::Append));
        // A "retry" spanning two batches in the log (sequences 5-6 and 7-9 at 20-21 and
        // 30-32) is no retry of either: refused, as on Kafka.
        let mut s = ProducerStates::default();
        assert_eq!(s.record(&header(7, 0, 5, 2, 20), &[]), None);
        assert_eq!(s.record(&header(7, 0, 7, 3, 30), &[]), None);
        assert!(matches!(
            s.check(&header(7, 0, 5, 5, 99)),
            Err(ProducerError::OutOfOrder { .. })
        ));
        assert_eq!(
            s.check(&header(7, 0, 7, 3, 99)),
            Ok(SequenceCheck::Duplicate {
                base_offset: Offset(30),
                last_offset: Offset(32)
            })
        );
        // Across the wrap at i32::MAX: sequences MAX-1, MAX, 0, 1 written at 40-43, the
        // cleaner kept 42-43 (0-1).
        let mut s = ProducerStates::default();
        let mut shortened = header(7, 0, 0, 2, 42);
        shortened.record_count = 1;
        assert_eq!(s.record(&shortened, &[]), None);
        assert_eq!(
            s.check(&header(7, 0, i32::MAX - 1, 4, 99)),
            Ok(SequenceCheck::Duplicate {
                base_offset: Offset(40),
                last_offset: Offset(43)
            })
        );
    }

    #[test]
    fn only_the_last_five_batches_are_remembered() {
        let mut s = ProducerStates::default();
        for i in 0..7 {
            apply(&mut s, header(1, 0, i, 1, i as i64)).unwrap();
        }
        assert!(matches!(
            apply(&mut s, header(1, 0, 2, 1, 10)),
            Ok(SequenceCheck::Duplicate { .. })
        ));
        assert!(matches!(
            apply(&mut s, header(1, 0, 1, 1, 10)),
            Err(ProducerError::OutOfOrder { .. })
        ));
    }

    #[test]
    fn epochs_fence_and_restart_sequences() {
        let mut s = ProducerStates::default();
        apply(&mut s, header(1, 3, 0, 5, 0)).unwrap();
        assert!(matches!(
            apply(&mut s, header(1, 2, 5, 1, 5)),
            Err(ProducerError::StaleEpoch { .. })
        ));
        assert!(matches!(
            apply(&mut s, header(1, 4, 5, 1, 5)),
            Err(ProducerError::OutOfOrder { .. })
        ));
        assert_eq!(
            apply(&mut s, header(1, 4, 0, 1, 5)),
            Ok(SequenceCheck::Append)
        );
        assert!(matches!(
            apply(&mut s, header(1, 3, 5, 1, 6)),
            Err(ProducerError::StaleEpoch { .. })
        ));
    }

    #[test]
    fn sequences_wrap_at_i32_max() {
        assert_eq!(sequence_after(i32::MAX, 1), 0);
        assert_eq!(sequence_after(i32::MAX - 1, 3), 1);
        let mut s = ProducerStates::default();
        s.producers.insert(
            1,
            ProducerEntry {
                epoch: 0,
                batches: VecDeque::from([CachedBatch {
                    first_sequence: i32::MAX - 2,
                    last_sequence: i32::MAX,
                    base_offset: Offset(0),
                    last_offset: Offset(2),
                }]),
                last_timestamp: 0,
                txn_first_offset: None,
            },
        );
        assert_eq!(
            apply(&mut s, header(1, 0, 0, 2, 3)),
            Ok(SequenceCheck::Append)
        );
    }

    #[test]
    fn snapshots_round_trip_expire_and_prune() {
        let dir = tempfile::tempdir().unwrap();
        let mut s = ProducerStates::default();
        for pid in 0..20 {
            for i in 0..7 {
                apply(&mut s, header(pid, 1, i * 2, 2, pid * 100 + i as i64)).unwrap();
            }
        }
        for at in [10, 20, 30] {
            write_snapshot(dir.path(), Offset(at), &s).unwrap();
        }
        assert_eq!(snapshot_offsets(dir.path()), vec![Offset(20), Offset(30)]);
        let (at, loaded) = load_snapshot(dir.path(), Offset(25)).unwrap().unwrap();
        assert_eq!((at, &loaded), (Offset(20), &s));
        assert_eq!(
            snapshot_offsets(dir.path()),
            vec![Offset(20)],
            "a snapshot past the log end is dropped"
        );
        fs::write(snapshot_path(dir.path(), Offset(20)), b"\x00\x01garbage").unwrap();
        assert!(load_snapshot(dir.path(), Offset(25)).unwrap().is_none());
        assert_eq!(s.expire(1_001), 20);
        assert!(s.is_empty());
    }
}
