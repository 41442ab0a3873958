//! A metadata voter that starts with an empty store while the group already exists (its disk
//! was wiped or replaced) has forgotten its log and its vote. Raft counted both: an entry it
//! helped commit may now be on a minority only, and its vote for a candidate that lacks that
//! entry would elect a leader that loses it. Such a voter votes again only once a leader has
//! brought it up to what the group had committed when it started.
//!
//! ```text
//!   start, store empty, a voter ─▶ ask the other voters (LogState, 1 s)
//!        none has applied past the bootstrap entry ─▶ a new group: bootstrap as before
//!        one has applied up to N ─────────────────▶ no bootstrap; refuse every vote until
//!                                                    this log reaches N (a leader fills it)
//! ```
//! KRaft closes the same hole with voter directory ids (KIP-853). What this does not cover: a
//! wiped voter that reaches none of the others at its start (it bootstraps, as a new group's
//! voter does, and votes), and a node whose `--cluster` lists no other voter.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use openraft::raft::VoteResponse;
use serde::{Deserialize, Serialize};

use super::network::{InternalRequest, InternalResponse};
use super::pool::ConnectionPool;
use super::MetaRaft;

/// How long a starting node waits for the other voters to say how far their logs go.
const PROBE_TIMEOUT: Duration = Duration::from_secs(1);

/// How far a node's metadata log goes (answer to [`InternalRequest::LogState`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct LogState {
    pub last_log_index: Option<u64>,
    pub last_applied_index: Option<u64>,
}

impl LogState {
    pub fn of(raft: &MetaRaft) -> LogState {
        let metrics = raft.metrics().borrow().clone();
        LogState {
            last_log_index: metrics.last_log_index,
            last_applied_index: metrics.last_applied.map(|l| l.index),
        }
    }
}

/// The highest index the other `voters` say they have applied, if any has applied past the
/// bootstrap entry (index 0): then the group exists already and this node, with an empty
/// store, lost its log.
pub async fn group_committed(
    pool: &ConnectionPool,
    me: u64,
    voters: &BTreeMap<u64, String>,
) -> Option<u64> {
    let asks = voters
        .iter()
        .filter(|(id, _)| **id != me)
        .map(|(id, addr)| async move {
            match pool
                .call(addr, &InternalRequest::LogState, PROBE_TIMEOUT)
                .await
            {
                Ok(InternalResponse::LogState(state)) => state.last_applied_index,
                Ok(other) => {
                    tracing::debug!(node = id, ?other, "unexpected answer to LogState");
                    None
                }
                Err(e) => {
                    tracing::debug!(node = id, error = %e, "no answer to LogState");
                    None
                }
            }
        });
    futures::future::join_all(asks)
        .await
        .into_iter()
        .flatten()
        .max()
        .filter(|index| *index >= 1)
}

/// The vote guard of a voter that started with an empty store in an existing group.
#[derive(Debug, Default)]
pub struct VoteGuard {
    /// Votes are refused while this node's log ends before this index; 0: no guard.
    until: AtomicU64,
}

impl VoteGuard {
    pub fn hold_until(&self, index: u64) {
        self.until.store(index, Ordering::Release);
    }

    /// The answer to a vote request while the guard holds (`None` once this node's log has
    /// reached the index, which lifts the guard for good).
    pub fn refusal(&self, raft: &MetaRaft) -> Option<VoteResponse<u64>> {
        let until = self.until.load(Ordering::Acquire);
        if until == 0 {
            return None;
        }
        let metrics = raft.metrics().borrow().clone();
        if metrics.last_log_index.is_some_and(|last| last >= until) {
            self.until.store(0, Ordering::Release);
            tracing::info!(
                index = until,
                "the metadata log is refilled up to what the group had committed: voting again"
            );
            return None;
        }
        Some(VoteResponse {
            vote: metrics.vote,
            vote_granted: false,
            last_log_id: None,
        })
    }
}
