//! A transactional id's state as the coordinator keeps it (and writes it, as JSON, to
//! `__transaction_state`).

use std::collections::BTreeSet;

use serde::{Deserialize, Serialize};

/// Transaction states, named as Kafka names them (DescribeTransactions, ListTransactions).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum TxnState {
    Empty,
    Ongoing,
    PrepareCommit,
    PrepareAbort,
    CompleteCommit,
    CompleteAbort,
}

impl TxnState {
    pub fn name(self) -> &'static str {
        match self {
            TxnState::Empty => "Empty",
            TxnState::Ongoing => "Ongoing",
            TxnState::PrepareCommit => "PrepareCommit",
            TxnState::PrepareAbort => "PrepareAbort",
            TxnState::CompleteCommit => "CompleteCommit",
            TxnState::CompleteAbort => "CompleteAbort",
        }
    }

    pub fn is_prepare(self) -> bool {
        matches!(self, TxnState::PrepareCommit | TxnState::PrepareAbort)
    }
}

/// An offset commit inside a transaction, applied to the group when the transaction commits.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PendingOffset {
    pub group: String,
    pub topic: String,
    pub partition: i32,
    pub offset: i64,
    pub leader_epoch: i32,
    pub metadata: String,
}

/// How the previous transaction ended, kept so that start-up can finish a partition whose
/// marker a crash lost.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LastTxn {
    pub committed: bool,
    pub partitions: BTreeSet<(String, i32)>,
    /// The producer id and epoch its markers carry (the id differs from the state's after an
    /// exhausted epoch moved the transactional id to a new producer id).
    #[serde(default = "no_producer")]
    pub marker_producer_id: i64,
    pub marker_epoch: i16,
    /// Ended with the KIP-890 protocol (the markers carry the bumped epoch).
    pub tv2: bool,
    /// The epoch of the EndTxn that ended it (`None`: a new producer or a timeout aborted it),
    /// so that a retried EndTxn is told apart from a fenced producer's.
    #[serde(default)]
    pub ended_by_epoch: Option<i16>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TxnMeta {
    pub transactional_id: String,
    pub producer_id: i64,
    pub producer_epoch: i16,
    pub timeout_ms: i32,
    pub state: TxnState,
    /// Partitions written in the open (or preparing) transaction.
    pub partitions: BTreeSet<(String, i32)>,
    /// Groups whose offsets the transaction commits.
    pub groups: BTreeSet<String>,
    pub pending_offsets: Vec<PendingOffset>,
    /// When the open transaction began (its first partition), ms since the epoch.
    pub start_ms: i64,
    pub updated_ms: i64,
    /// The open transaction uses KIP-890's protocol (partitions added by Produce v12+,
    /// EndTxn v5+ bumps the epoch).
    pub tv2: bool,
    pub last: Option<LastTxn>,
    /// Set in a `Prepare*` state when the epoch is exhausted: the producer id the completed
    /// state moves to (-1 otherwise).
    #[serde(default = "no_producer")]
    pub next_producer_id: i64,
    /// In a `Prepare*` state: the epoch of the EndTxn that asked for it.
    #[serde(default)]
    pub end_requested_epoch: Option<i16>,
    /// The producer id and epoch the last InitProducerId moved the producer on from, while no
    /// other change has moved it since: a KIP-360 client whose answer was lost asks again
    /// with them, and is given the current epoch instead of PRODUCER_FENCED (Kafka's
    /// `lastProducerEpoch`).
    #[serde(default)]
    pub bumped_from: Option<(i64, i16)>,
}

fn no_producer() -> i64 {
    -1
}

impl TxnMeta {
    pub fn new(transactional_id: &str, producer_id: i64, timeout_ms: i32, now_ms: i64) -> TxnMeta {
        TxnMeta {
            transactional_id: transactional_id.to_string(),
            producer_id,
            producer_epoch: 0,
            timeout_ms,
            state: TxnState::Empty,
            partitions: BTreeSet::new(),
            groups: BTreeSet::new(),
            pending_offsets: Vec::new(),
            start_ms: -1,
            updated_ms: now_ms,
            tv2: false,
            last: None,
            next_producer_id: -1,
            end_requested_epoch: None,
            bumped_from: None,
        }
    }
}
