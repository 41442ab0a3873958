//! A metadata voter that starts with an empty store while the group already exists (its disk
//! was wiped or replaced) has forgotten its log and its vote. Raft counted both: an entry it
//! helped commit may now be on a minority only, and its vote for a candidate that lacks that
//! entry would elect a leader that loses it. Such a voter votes again, and stands as a
//! candidate again, only once a leader elected without it has brought it up to what that
//! leader had applied. (Its own candidacy: with a log refilled part of the way, a lagging
//! voter's vote and its own would make it leader without the entries it lost.)
//!
//! ```text
//!   start, store empty, `--cluster` names only this node ─▶ refuse every vote for a few
//!        seconds (`node::ALONE_GRACE`): asked for a vote, or a leader's append ─▶ held as
//!        below ("one has applied past..."); nothing ─▶ a new group: bootstrap, vote
//!   start, store empty, a voter ─▶ ask the other voters (LogState, 1 s)
//!        none answers ──────────────────────────────▶ refuse every vote; ask again every
//!                                                      500 ms until one answers
//!        all that answer are empty ─────────────────▶ a new group: bootstrap, vote
//!        one has applied past the bootstrap entry ───▶ no bootstrap; refuse every vote until
//!                                                      a leader is known, then until this log
//!                                                      reaches what that leader had applied
//!   at any time: this node follows a leader whose election it saw and refused to vote in
//!   (since it started), and has applied an entry of that leader's term
//!                                                  ───▶ vote again, for good
//! ```
//! The last rule: that leader was elected by a quorum without this node, so by Raft's leader
//! completeness its log holds every entry committed with this node's help before the wipe
//! (such an entry's quorum and the electing quorum share a node that still has it); its own
//! entries follow them, and an applied entry of its term proves this log matches it that far.
//! A leader elected before this node started (perhaps with its vote, and then acknowledged by
//! it in the same term) proves nothing: entries of that term after the applied one may have
//! been committed with this node's lost acknowledgements. Without the rule, a node that
//! started first on a new cluster (nobody answered its probe, so it could not tell a new group
//! from one it was wiped out of) waited to ask the first leader how far it had applied; when
//! that leader died before it asked (seen in CI, 300 ms after the election), it refused every
//! vote, and the two left could never elect anyone.
//! Every node that starts with an empty store does this, not only the voters its `--cluster`
//! lists: a node made a voter at run time (AddRaftVoter) is a voter in the group's membership,
//! which a wiped node no longer knows. Learners never vote, so the guard costs them nothing; a
//! node that a leader reaches while it waits for answers knows the group exists.
//!
//! The guard lasts across restarts: a node that stops while it holds (its log refilled part of
//! the way, so no longer empty) finds a marker file at its next start and is guarded again.
//!
//! A new group forms only with a majority of its voters up, so waiting for one of them to
//! answer costs a first start nothing but the wait. KRaft closes the same hole with voter
//! directory ids (KIP-853). A node whose `--cluster` lists no other voter has nobody to ask:
//! on its first start it waits a few seconds to be called on instead (`node::ALONE_GRACE`): a
//! vote request or a leader's append in that time means it was wiped out of a group that grew
//! from it; nothing means a new cluster. Not covered: such a node restarted wiped while every
//! other voter of its group stays unreachable for longer than that wait.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use openraft::raft::VoteResponse;
use openraft::{LogId, Vote};
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

/// What the other voters said about the group when a voter with an empty store asked.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Probe {
    /// One has applied up to this index, past the bootstrap entry: the group exists.
    Exists(u64),
    /// Every voter that answered is empty too: a new group.
    New,
    /// None answered.
    Unreached,
}

/// Asks the other `voters` how far their metadata logs go.
pub async fn probe(pool: &ConnectionPool, me: u64, voters: &BTreeMap<u64, String>) -> Probe {
    let asks = voters
        .iter()
        .filter(|(id, _)| **id != me)
        .map(|(id, addr)| async move { log_state(pool, *id, addr).await });
    let answers: Vec<LogState> = futures::future::join_all(asks)
        .await
        .into_iter()
        .flatten()
        .collect();
    match answers.iter().filter_map(|a| a.last_applied_index).max() {
        Some(index) if index >= 1 => Probe::Exists(index),
        _ if answers.is_empty() => Probe::Unreached,
        _ => Probe::New,
    }
}

/// Node `id`'s answer to LogState, if it gave one.
pub async fn log_state(pool: &ConnectionPool, id: u64, addr: &str) -> Option<LogState> {
    match pool
        .call(addr, &InternalRequest::LogState, PROBE_TIMEOUT)
        .await
    {
        Ok(InternalResponse::LogState(state)) => Some(state),
        Ok(other) => {
            tracing::debug!(node = id, ?other, "unexpected answer to LogState");
            None
        }
        Err(e) => {
            tracing::debug!(node = id, error = %e, "no answer to LogState");
            None
        }
    }
}

/// The file whose presence in the metadata directory says the guard held when the node
/// stopped: a node restarted before its log was refilled is guarded again, though its store
/// is no longer empty.
const MARKER: &str = "vote-guard";

/// Where the marker file is (for messages).
pub fn marker_path(dir: &Path) -> std::path::PathBuf {
    dir.join(MARKER)
}

pub fn marked(dir: &Path) -> bool {
    dir.join(MARKER).exists()
}

/// Writes the marker, durably (file and directory synced).
pub fn mark(dir: &Path) -> std::io::Result<()> {
    let path = dir.join(MARKER);
    let file = std::fs::File::create(&path)?;
    file.sync_all()?;
    std::fs::File::open(dir)?.sync_all()
}

/// Removes the marker, durably.
pub fn unmark(dir: &Path) -> std::io::Result<()> {
    match std::fs::remove_file(dir.join(MARKER)) {
        Ok(()) => std::fs::File::open(dir)?.sync_all(),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(e),
    }
}

/// The vote guard of a voter that started with an empty store.
#[derive(Debug, Default)]
pub struct VoteGuard {
    /// Nobody has answered yet: whether the group exists is unknown.
    undecided: AtomicBool,
    /// Votes are refused while this node's log ends before this index; 0: no guard.
    until: AtomicU64,
    /// A leader (elected without this node's vote) has said how far it had applied, and
    /// `until` covers it.
    leader_heard: AtomicBool,
    /// The terms of the vote requests refused since this node started (the newest
    /// [`REFUSED_TERMS_KEPT`]): elections held without this node.
    refused_terms: parking_lot::Mutex<BTreeSet<u64>>,
    /// The last candidate refused, and its term.
    last_refused: parking_lot::Mutex<Option<(u64, u64)>>,
    /// Lifted for good: nothing raises the guard again (the guard task and the vote handler
    /// run at once; a probe answer that arrives after a lift must not undo it).
    lifted: AtomicBool,
    /// Held by every change of the fields above, so that a change and a lift do not
    /// interleave.
    changing: parking_lot::Mutex<()>,
}

/// How many refused terms [`VoteGuard`] remembers.
const REFUSED_TERMS_KEPT: usize = 64;

impl VoteGuard {
    /// Refuses every vote until another voter answers (unless lifted already).
    pub fn undecided(&self) {
        let _changing = self.changing.lock();
        if !self.lifted.load(Ordering::Acquire) {
            self.undecided.store(true, Ordering::Release);
        }
    }

    /// The group exists and had applied up to `index` (as far as the voters that answered
    /// know): hold votes until a leader is heard from and this log reaches both (unless
    /// lifted already).
    pub fn hold_until(&self, index: u64) {
        let _changing = self.changing.lock();
        if !self.lifted.load(Ordering::Acquire) {
            self.until.fetch_max(index.max(1), Ordering::AcqRel);
            self.undecided.store(false, Ordering::Release);
        }
    }

    /// A new group, or a log that holds the group's (see [`holds_the_groups_log`]): vote
    /// freely, for good.
    pub fn open(&self) {
        let _changing = self.changing.lock();
        self.lift();
    }

    fn lift(&self) {
        self.lifted.store(true, Ordering::Release);
        self.until.store(0, Ordering::Release);
        self.undecided.store(false, Ordering::Release);
    }

    /// The current leader had applied up to `index` when asked.
    pub fn leader_applied(&self, index: u64) {
        let _changing = self.changing.lock();
        if !self.lifted.load(Ordering::Acquire) {
            self.until.fetch_max(index.max(1), Ordering::AcqRel);
            self.leader_heard.store(true, Ordering::Release);
        }
    }

    /// Whether votes (and this node's own candidacy) are held back.
    pub fn holds(&self) -> bool {
        self.undecided.load(Ordering::Acquire) || self.until.load(Ordering::Acquire) != 0
    }

    /// Lifts the guard for good if a leader has said how far it had applied and this log
    /// (ending at `last_log_index`) reaches that; whether it is lifted now.
    pub fn lift_if_refilled(&self, last_log_index: Option<u64>) -> bool {
        let _changing = self.changing.lock();
        let until = self.until.load(Ordering::Acquire);
        if until == 0 {
            return !self.undecided.load(Ordering::Acquire);
        }
        if !self.leader_heard.load(Ordering::Acquire)
            || last_log_index.is_none_or(|last| last < until)
        {
            return false;
        }
        self.lift();
        tracing::info!(
            index = until,
            "the metadata log is refilled up to what the group's leader had applied: voting again"
        );
        true
    }

    /// The last candidate (node, term) that asked this node for its vote since it started and
    /// was refused: an election of a group that counts this node as a voter.
    pub fn last_refused_candidate(&self) -> Option<(u64, u64)> {
        *self.last_refused.lock()
    }

    pub fn is_undecided(&self) -> bool {
        self.undecided.load(Ordering::Acquire)
    }

    /// Whether votes are held back until a leader is heard from.
    pub fn waits_for_leader(&self) -> bool {
        self.until.load(Ordering::Acquire) != 0 && !self.leader_heard.load(Ordering::Acquire)
    }

    /// Whether this log holds every entry the group committed (the module's last rule).
    pub fn holds_the_groups_log(
        &self,
        vote: &Vote<u64>,
        last_applied: Option<&LogId<u64>>,
    ) -> bool {
        applied_in_the_leaders_term(vote, last_applied)
            && self.refused_terms.lock().contains(&vote.leader_id.term)
    }

    /// Lifts the guard for good if [`VoteGuard::holds_the_groups_log`]; whether it did.
    pub fn lift_if_it_holds_the_groups_log(
        &self,
        vote: &Vote<u64>,
        last_applied: Option<&LogId<u64>>,
    ) -> bool {
        if !self.holds_the_groups_log(vote, last_applied) {
            return false;
        }
        self.open();
        tracing::info!(
            "this node has applied an entry of the term of a leader elected without it: voting again"
        );
        true
    }

    /// The answer to a vote request for `term` while the guard holds (`None` once it is
    /// lifted, for good).
    pub fn refusal(&self, raft: &MetaRaft, candidate: u64, term: u64) -> Option<VoteResponse<u64>> {
        if !self.holds() {
            return None; // the common case: no copy of the metrics
        }
        let metrics = raft.metrics().borrow().clone();
        let refuse = || {
            let mut terms = self.refused_terms.lock();
            terms.insert(term);
            while terms.len() > REFUSED_TERMS_KEPT {
                terms.pop_first();
            }
            *self.last_refused.lock() = Some((candidate, term));
            Some(VoteResponse {
                vote: metrics.vote,
                vote_granted: false,
                last_log_id: None,
            })
        };
        let until = self.until.load(Ordering::Acquire);
        let undecided = self.undecided.load(Ordering::Acquire);
        if !undecided && until == 0 {
            return None;
        }
        if self.lift_if_it_holds_the_groups_log(&metrics.vote, metrics.last_applied.as_ref()) {
            return None;
        }
        if undecided {
            return refuse();
        }
        if self.lift_if_refilled(metrics.last_log_index) {
            return None;
        }
        refuse()
    }
}

/// Half of the module's last rule: `vote` is a leader's, granted by a quorum (committed), and
/// the applied entry was appended by that leader in its term. (The other half: this node saw
/// that leader's election and did not vote in it.)
pub fn applied_in_the_leaders_term(vote: &Vote<u64>, last_applied: Option<&LogId<u64>>) -> bool {
    vote.is_committed() && last_applied.is_some_and(|applied| applied.leader_id == vote.leader_id)
}

#[cfg(test)]
mod tests {
    use openraft::{CommittedLeaderId, LogId, Vote};

    use super::{applied_in_the_leaders_term as holds_the_groups_log, VoteGuard};

    fn entry(term: u64, leader: u64, index: u64) -> LogId<u64> {
        LogId::new(CommittedLeaderId::new(term, leader), index)
    }

    #[test]
    fn an_entry_of_the_followed_leaders_term_shows_the_log_is_the_groups() {
        assert!(holds_the_groups_log(
            &Vote::new_committed(3, 2),
            Some(&entry(3, 2, 9))
        ));
    }

    #[test]
    fn anything_less_does_not() {
        // Nothing applied; only entries of an older term (they may lack later commits); a
        // vote not (yet) granted by a quorum; an entry of another leader of the same term
        // cannot exist, but would not count either.
        assert!(!holds_the_groups_log(&Vote::new_committed(3, 2), None));
        assert!(!holds_the_groups_log(
            &Vote::new_committed(3, 2),
            Some(&entry(2, 1, 9))
        ));
        assert!(!holds_the_groups_log(
            &Vote::new(3, 2),
            Some(&entry(3, 2, 9))
        ));
        assert!(!holds_the_groups_log(
            &Vote::new_committed(3, 2),
            Some(&entry(3, 1, 9))
        ));
    }

    /// A leader elected before this node started (no refused vote request of its term) does
    /// not count: this node may have acknowledged entries of that term before its wipe.
    #[test]
    fn only_a_leader_elected_without_this_node_counts() {
        let guard = VoteGuard::default();
        let vote = Vote::new_committed(3, 2);
        let applied = LogId::new(CommittedLeaderId::new(3, 2), 9);
        assert!(!guard.holds_the_groups_log(&vote, Some(&applied)));
        guard.refused_terms.lock().insert(2);
        assert!(!guard.holds_the_groups_log(&vote, Some(&applied)));
        guard.refused_terms.lock().insert(3);
        assert!(guard.holds_the_groups_log(&vote, Some(&applied)));
    }

    /// Refilled means: a leader has answered, and this log reaches both what it had applied
    /// and what the voters said at the start.
    #[test]
    fn the_guard_lifts_once_a_leader_answered_and_the_log_reaches_its_applied_index() {
        let guard = VoteGuard::default();
        assert!(!guard.holds());
        guard.undecided();
        assert!(guard.holds());
        assert!(!guard.lift_if_refilled(Some(100)));
        guard.hold_until(5);
        assert!(guard.holds());
        // No leader has answered yet: the voters' answers at the start may all be stale.
        assert!(!guard.lift_if_refilled(Some(100)));
        guard.leader_applied(9);
        assert!(!guard.lift_if_refilled(None));
        assert!(!guard.lift_if_refilled(Some(8)));
        assert!(guard.holds());
        assert!(guard.lift_if_refilled(Some(9)));
        assert!(!guard.holds());
    }

    /// Once lifted, an answer that arrives late (a probe's, a leader's) raises nothing again.
    #[test]
    fn a_lifted_guard_stays_lifted() {
        let guard = VoteGuard::default();
        guard.undecided();
        guard.open();
        guard.hold_until(7);
        guard.undecided();
        guard.leader_applied(9);
        assert!(!guard.holds());
        assert!(!guard.waits_for_leader());
        let refilled = VoteGuard::default();
        refilled.hold_until(3);
        refilled.leader_applied(5);
        assert!(refilled.lift_if_refilled(Some(5)));
        refilled.hold_until(8);
        assert!(!refilled.holds());
    }

    #[test]
    fn the_marker_outlives_a_restart_until_removed() {
        let dir = tempfile::tempdir().expect("a temporary directory");
        assert!(!super::marked(dir.path()));
        super::mark(dir.path()).expect("marked");
        assert!(super::marked(dir.path()));
        super::unmark(dir.path()).expect("unmarked");
        assert!(!super::marked(dir.path()));
        super::unmark(dir.path()).expect("removing a missing marker is not an error");
    }
}
