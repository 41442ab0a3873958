//! One node's member of the metadata group: its Raft, its storage, the internal listener, and
//! `propose`, which any node may call (a node that does not lead forwards to the one that does).

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use openraft::error::{ClientWriteError, RaftError};
use openraft::{BasicNode, Config};
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

use super::log_store::LogStore;
use super::network::{InternalHandler, InternalRequest, InternalResponse, Network, ProposeError};
use super::pool::ConnectionPool;
use super::state_machine::{Applied, StateMachine};
use super::wiped_voter::Probe;
use super::{CommandOutcome, MetaRaft, MetadataCommand};
use crate::metadata::MetadataRecord;

#[derive(Debug, Clone)]
pub struct MetadataConfig {
    pub node_id: u64,
    /// The voters: node id → internal listener address. A node not listed here is a learner
    /// (not yet supported: every node of `--cluster` is a voter).
    pub voters: BTreeMap<u64, String>,
    /// Where the Raft log, vote and snapshot live (`data/meta/raft`).
    pub dir: PathBuf,
    pub heartbeat_interval_ms: u64,
    pub election_timeout_min_ms: u64,
    pub election_timeout_max_ms: u64,
    /// How long a forwarded proposal may take.
    pub propose_timeout: Duration,
    /// This node's internal listener when it is not a voter: it joins as a learner.
    pub learner_addr: Option<String>,
    /// How connections to the other nodes are made (and the internal listener's are taken).
    pub transport: Arc<super::transport::Transport>,
}

impl MetadataConfig {
    pub fn new(node_id: u64, voters: BTreeMap<u64, String>, dir: PathBuf) -> MetadataConfig {
        MetadataConfig {
            node_id,
            voters,
            dir,
            heartbeat_interval_ms: 100,
            election_timeout_min_ms: 400,
            election_timeout_max_ms: 800,
            propose_timeout: Duration::from_secs(5),
            learner_addr: None,
            transport: Arc::default(),
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum StartError {
    #[error("metadata storage: {0}")]
    Storage(#[from] std::io::Error),
    #[error("metadata Raft config: {0}")]
    Config(String),
    #[error("metadata Raft: {0}")]
    Raft(String),
}

pub struct MetadataNode {
    id: u64,
    raft: MetaRaft,
    applied: watch::Receiver<Arc<Applied>>,
    voters: BTreeMap<u64, String>,
    propose_timeout: Duration,
    /// Connections to the other nodes, shared with openraft's RPCs.
    pool: Arc<ConnectionPool>,
    /// Holds this node's votes back after it started with an empty store in an existing group.
    vote_guard: super::wiped_voter::VoteGuard,
    /// The metadata directory (for the guard's marker file).
    dir: PathBuf,
    /// The guard's marker file is there (see [`super::wiped_voter::mark`]).
    marked: AtomicBool,
    /// A voter whose `--cluster` names only itself, started with an empty store: until when
    /// it waits to be called on by the group it may have been wiped out of.
    alone_until: Option<tokio::time::Instant>,
}

/// How long at least a voter whose `--cluster` names only itself waits, on a start with an
/// empty store, before it starts a new cluster (and at least 4 election timeouts: 3.2 s by
/// default). A node that started
/// a cluster alone and grew it is still named alone in its own `--cluster`; wiped and
/// restarted, it would start a second group of the same first term and leader id, whose log
/// ids match the old group's (a wiped node 1, elected in term 1 of the old group, again leads
/// term 1): Raft's log matching then took its own entries for the group's, and its metadata
/// diverged. The old group's voters call on it within an election or a heartbeat (they keep it
/// in their membership): a vote request or a leader's append in that time means the group
/// exists, and the node is guarded like any wiped voter. Only a start with an empty store pays
/// the wait (plus up to one 500 ms tick of the guard task).
const ALONE_GRACE: Duration = Duration::from_secs(3);

impl std::fmt::Debug for MetadataNode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "MetadataNode({})", self.id)
    }
}

impl MetadataNode {
    /// Opens the storage and starts Raft, until `shutdown`. On a fresh data directory the voters
    /// are bootstrapped; every voter may do so, with the same member list. The internal
    /// listener is served by the caller (`network::serve`), with this node or a handler that
    /// wraps it.
    pub async fn start(
        config: MetadataConfig,
        shutdown: CancellationToken,
    ) -> Result<Arc<MetadataNode>, StartError> {
        let log = LogStore::open(&config.dir)?;
        let (state_machine, applied) = StateMachine::open(&config.dir)?;
        let fresh = {
            let mut probe = log.clone();
            use openraft::storage::RaftLogStorage;
            let state = probe
                .get_log_state()
                .await
                .map_err(|e| StartError::Raft(e.to_string()))?;
            state.last_log_id.is_none() && applied.borrow().last_applied.is_none()
        };
        // A node that stopped while its guard held (its log refilled part of the way) is
        // guarded again: that log may still lack entries the group committed with its lost
        // acknowledgements.
        let marked = super::wiped_voter::marked(&config.dir);
        let guarded = fresh || marked;
        let raft_config = Config {
            cluster_name: "sluice-metadata".into(),
            heartbeat_interval: config.heartbeat_interval_ms,
            election_timeout_min: config.election_timeout_min_ms,
            election_timeout_max: config.election_timeout_max_ms,
            // An empty store may be a wiped one: no candidacy until the vote guard (below)
            // has settled that it is not, or that this log holds the group's again.
            enable_elect: !guarded,
            ..Default::default()
        }
        .validate()
        .map_err(|e| StartError::Config(e.to_string()))?;
        let pool = Arc::new(ConnectionPool::new(Arc::clone(&config.transport)));
        let raft = MetaRaft::new(
            config.node_id,
            Arc::new(raft_config),
            Network::new(Arc::clone(&pool)),
            log,
            state_machine,
        )
        .await
        .map_err(|e| StartError::Raft(e.to_string()))?;
        let voter = config.voters.contains_key(&config.node_id);
        let vote_guard = super::wiped_voter::VoteGuard::default();
        // Every node with an empty store, voter or not: a node made a voter at run time
        // (AddRaftVoter) is one in the group's membership though `--cluster` does not list it.
        let alone = voter && config.voters.keys().all(|id| *id == config.node_id);
        // How long a lone voter with an empty store waits to be called on (see `ALONE_GRACE`).
        let alone_grace =
            ALONE_GRACE.max(Duration::from_millis(4 * config.election_timeout_max_ms));
        if guarded && alone {
            if fresh {
                tracing::info!(
                    node = config.node_id,
                    wait_ms = alone_grace.as_millis() as u64,
                    "this node's --cluster names only itself and its metadata store is empty: \
                     before it starts a new cluster it waits for the voters of one it may have \
                     grown into (a wiped disk?) to call on it"
                );
                vote_guard.undecided();
            } else if own_bootstrap(&raft, config.node_id).await {
                // Stopped after its own bootstrap, before the marker file was removed.
                tracing::info!(
                    node = config.node_id,
                    "the metadata group is this node's own"
                );
            } else {
                tracing::warn!(
                    node = config.node_id,
                    marker = %super::wiped_voter::marker_path(&config.dir).display(),
                    "this node stopped while its metadata log was being refilled by the group \
                     that called on it: it does not vote until a leader has brought its log up \
                     to the group's"
                );
                vote_guard.hold_until(1);
            }
        } else if guarded {
            let probe = super::wiped_voter::probe(&pool, config.node_id, &config.voters).await;
            match probe {
                Probe::Exists(index) if fresh => {
                    tracing::warn!(
                        node = config.node_id,
                        committed = index,
                        "this node's metadata store is empty but the group exists (a wiped \
                         disk?): it does not vote until a leader has brought its log up to the \
                         group's"
                    );
                    vote_guard.hold_until(index);
                }
                Probe::Exists(index) => {
                    tracing::warn!(
                        node = config.node_id,
                        committed = index,
                        "this node stopped while its vote guard held (its metadata log was \
                         being refilled): it does not vote until a leader has brought its log \
                         up to the group's"
                    );
                    vote_guard.hold_until(index);
                }
                Probe::New if voter && fresh => initialize(&raft, &config.voters).await?,
                Probe::New => {}
                Probe::Unreached => {
                    tracing::info!(
                        node = config.node_id,
                        "no other metadata voter answered: waiting for one before \
                         bootstrapping or voting (an empty store may be a wiped one)"
                    );
                    vote_guard.undecided();
                }
            }
        }
        let learner_addr = match (&config.learner_addr, voter) {
            (_, true) => None,
            (Some(addr), false) => Some(addr.clone()),
            (None, false) => {
                return Err(StartError::Config(format!(
                    "node {} is not a voter and has no internal listener to join with",
                    config.node_id
                )))
            }
        };
        let settle = vote_guard.holds();
        if settle {
            // Written (and synced) before the internal listener serves anything.
            super::wiped_voter::mark(&config.dir)?;
        } else {
            if marked {
                super::wiped_voter::unmark(&config.dir)?;
            }
            raft.runtime_config().elect(true);
        }
        let node = Arc::new(MetadataNode {
            id: config.node_id,
            raft,
            applied,
            voters: config.voters,
            propose_timeout: config.propose_timeout,
            pool,
            vote_guard,
            dir: config.dir.clone(),
            marked: AtomicBool::new(settle),
            alone_until: (alone && fresh).then(|| tokio::time::Instant::now() + alone_grace),
        });
        if settle {
            tokio::spawn(Arc::clone(&node).settle_vote_guard(shutdown.clone()));
        }
        if let Some(addr) = learner_addr {
            tokio::spawn(Arc::clone(&node).join_as_learner(addr, shutdown.clone()));
        }
        if alone {
            tokio::spawn(Arc::clone(&node).warn_unlisted_voters(shutdown.clone()));
        }
        let stopping = Arc::clone(&node);
        tokio::spawn(async move {
            shutdown.cancelled().await;
            let _ = stopping.raft.shutdown().await;
        });
        Ok(node)
    }

    /// For a voter that started with an empty store: asks the other voters every 500 ms until
    /// one answers (then bootstraps a new group or holds its votes), and, holding, asks the
    /// leader how far it has applied as soon as one is known, then lifts the guard as soon as
    /// this log reaches that (see [`super::wiped_voter`]). Only then may this node stand as a
    /// candidate: the Raft node starts with elections off when its store is empty.
    ///
    /// "As soon as": the leader may be reachable only briefly (a node added and made a voter
    /// that stalls a moment later, while the leader dies). Asked on a 500 ms timer, that window
    /// was missed, the guard stayed up after the leader was gone, and the group had no majority
    /// to elect a new one with. The task now waits on the node's Raft metrics, which openraft
    /// sends on every pass of its core loop (so also right after a leader's first append), or
    /// 100 ms at most. (While undecided, before any voter answered, it still probes every
    /// 500 ms.) At every change it first checks whether this log already holds the group's
    /// (an applied entry of the followed leader's term), or is refilled: then the guard is
    /// lifted for good.
    async fn settle_vote_guard(self: Arc<Self>, shutdown: CancellationToken) {
        self.hold_until_settled(&shutdown).await;
        if !self.vote_guard.holds() {
            self.guard_lifted();
        }
    }

    /// For a voter whose `--cluster` names only itself: says so (once per set of voters) when
    /// the metadata group has other voters, as, wiped, this node would have nobody to ask
    /// whether a group exists, and after a short wait it starts one of its own (see
    /// `ALONE_GRACE`). The common way in: a cluster started from one node and grown with
    /// `add-voter`, its first node still started with `--cluster` naming only itself. Looks
    /// only when the membership changed (metrics change on every pass of openraft's loop).
    async fn warn_unlisted_voters(self: Arc<Self>, shutdown: CancellationToken) {
        let mut metrics = self.raft.metrics();
        let mut warned: Option<Vec<u64>> = None;
        let mut seen = None;
        loop {
            let unlisted = {
                let m = metrics.borrow_and_update();
                let at = *m.membership_config.log_id();
                if seen == Some(at) {
                    None
                } else {
                    seen = Some(at);
                    let others: Vec<u64> = m
                        .membership_config
                        .membership()
                        .voter_ids()
                        .filter(|v| *v != self.id)
                        .collect();
                    (!others.is_empty()).then_some(others)
                }
            };
            if unlisted.is_some() && unlisted != warned {
                let voters = unlisted.as_deref().unwrap_or_default();
                tracing::warn!(
                    ?voters,
                    "the metadata group's other voters are not in this node's --cluster: list \
                     them there (id@internal-address, every voter), or a restart of this node \
                     with a wiped data directory has nobody to ask and may start a new cluster"
                );
                warned = unlisted;
            }
            tokio::select! {
                _ = shutdown.cancelled() => return,
                changed = metrics.changed() => {
                    if changed.is_err() {
                        return; // the Raft node stopped
                    }
                }
            }
        }
    }

    /// The end of a lone node's wait, nobody having called on it: bootstraps a new group and
    /// lifts the guard (whether it did). The marker file goes first, so that a crash after the
    /// bootstrap does not guard the node's own group at its next start. A leader's append that
    /// arrived meanwhile makes openraft refuse the bootstrap: the group exists after all.
    async fn start_alone(&self) -> bool {
        if self.marked.swap(false, Ordering::AcqRel) {
            if let Err(e) = super::wiped_voter::unmark(&self.dir) {
                tracing::warn!(error = %e, "cannot remove the vote guard's marker file");
                self.marked.store(true, Ordering::Release);
                return false;
            }
        }
        let remark = |why: &str| {
            self.marked.store(true, Ordering::Release);
            if let Err(e) = super::wiped_voter::mark(&self.dir) {
                tracing::warn!(error = %e, "cannot write the vote guard's marker file");
            }
            tracing::warn!(reason = why, "not starting a new metadata group");
        };
        match self.raft.initialize(members(&self.voters)).await {
            Ok(()) => {
                if let Some((candidate, term)) = self.vote_guard.last_refused_candidate() {
                    tracing::warn!(
                        candidate,
                        term,
                        "another node asked for this one's vote while it started a new metadata \
                         group: if this node was wiped out of a cluster, stop it and start it \
                         again with an empty data directory while the others run"
                    );
                }
                self.vote_guard.open();
                tracing::info!("no other node called on this one: a new cluster");
                true
            }
            Err(RaftError::APIError(openraft::error::InitializeError::NotAllowed(e))) => {
                remark(&format!("a leader reached this node first ({e})"));
                self.vote_guard.hold_until(1);
                false
            }
            Err(e) => {
                remark(&format!("bootstrapping failed ({e}); trying again"));
                false
            }
        }
    }

    /// The guard no longer holds: this node may stand as a candidate, and a restart no longer
    /// guards it.
    fn guard_lifted(&self) {
        self.raft.runtime_config().elect(true);
        if self.marked.swap(false, Ordering::AcqRel) {
            if let Err(e) = super::wiped_voter::unmark(&self.dir) {
                // Only costs a guarded restart (it asks a leader again).
                tracing::warn!(error = %e, "cannot remove the vote guard's marker file");
            }
        }
    }

    async fn hold_until_settled(&self, shutdown: &CancellationToken) {
        let guard = &self.vote_guard;
        let mut metrics = self.raft.metrics();
        let mut tick = tokio::time::interval(Duration::from_millis(500));
        loop {
            // Checked on every change of the metrics, not only when a vote request comes: by
            // then this node may have left the leader's term (another's candidacy).
            let lifted = {
                let m = metrics.borrow_and_update();
                guard.lift_if_it_holds_the_groups_log(&m.vote, m.last_applied.as_ref())
                    || guard.lift_if_refilled(m.last_log_index)
            };
            if lifted || !guard.holds() {
                return;
            }
            if guard.is_undecided() {
                let ticked = tokio::select! {
                    _ = shutdown.cancelled() => return,
                    _ = tick.tick() => true,
                    changed = metrics.changed() => {
                        if changed.is_err() {
                            return; // the Raft node stopped
                        }
                        false
                    }
                };
                // Checked on every change too, not only at the tick: a leader's first append
                // changes the metrics, and the guard then asks it how far to refill at once.
                let leader = self.raft.metrics().borrow().current_leader;
                if let Some(leader) = leader.filter(|l| *l != self.id) {
                    tracing::info!(
                        leader,
                        "a metadata leader reached this node: the group exists; this node does \
                         not start one, and does not vote until its log is refilled"
                    );
                    guard.hold_until(1);
                    continue;
                }
                if !ticked {
                    continue;
                }
                if let Some(until) = self.alone_until {
                    if let Some((candidate, term)) = guard.last_refused_candidate() {
                        tracing::warn!(
                            candidate,
                            term,
                            "another node asked this one for its vote: this node belongs to an \
                             existing metadata group though its store is empty (a wiped disk?); \
                             it does not start a new one, and does not vote until a leader has \
                             brought its log up to the group's"
                        );
                        guard.hold_until(1);
                    } else if tokio::time::Instant::now() >= until && self.start_alone().await {
                        return;
                    }
                } else {
                    match super::wiped_voter::probe(&self.pool, self.id, &self.voters).await {
                        Probe::Unreached => continue,
                        Probe::New => {
                            if self.voters.contains_key(&self.id) {
                                if let Err(e) = initialize(&self.raft, &self.voters).await {
                                    tracing::warn!(error = %e, "bootstrapping the metadata group failed");
                                }
                            }
                            guard.open();
                            tracing::info!(
                                "the voters that answered are as empty as this node: a new group"
                            );
                            return;
                        }
                        Probe::Exists(index) => {
                            tracing::warn!(
                                committed = index,
                                "this node's metadata store is empty but the group exists (a \
                                 wiped disk?): it does not vote until a leader has brought its \
                                 log up to the group's"
                            );
                            guard.hold_until(index);
                        }
                    }
                }
            }
            if guard.waits_for_leader() {
                let leader = metrics
                    .borrow_and_update()
                    .current_leader
                    .filter(|l| *l != self.id);
                let asked = match leader.and_then(|l| Some((l, self.address_of(l)?))) {
                    Some((leader, addr)) => {
                        super::wiped_voter::log_state(&self.pool, leader, &addr)
                            .await
                            .and_then(|s| s.last_applied_index)
                            .map(|applied| (leader, applied))
                    }
                    None => None,
                };
                if let Some((leader, applied)) = asked {
                    tracing::info!(
                        leader,
                        applied,
                        "the metadata leader is known: voting again once this log reaches its applied index"
                    );
                    guard.leader_applied(applied);
                    continue;
                }
            }
            // No leader yet, it did not answer, or the log is still being refilled: wait for
            // the next change (a leader's append changes the metrics), at most 100 ms.
            tokio::select! {
                _ = shutdown.cancelled() => return,
                changed = metrics.changed() => {
                    if changed.is_err() {
                        return; // the Raft node stopped
                    }
                }
                _ = tokio::time::sleep(Duration::from_millis(100)) => {}
            }
        }
    }

    /// Asks the voters, in turn, to add this node as a learner until one (the leader, or one
    /// that forwards to it) says it is in. Also on every restart: adding a member again is a
    /// no-op.
    async fn join_as_learner(self: Arc<Self>, addr: String, shutdown: CancellationToken) {
        let request = InternalRequest::AddLearner {
            node: self.id,
            addr,
        };
        loop {
            // `--cluster`'s voters, and the members this node knows of (a restarted node that
            // joined before: voters may have changed since, and `--cluster`'s may be down).
            let mut targets: Vec<String> = self.voters.values().cloned().collect();
            let known = self.raft.metrics().borrow().membership_config.clone();
            for (id, node) in known.membership().nodes() {
                if *id != self.id && !targets.contains(&node.addr) {
                    targets.push(node.addr.clone());
                }
            }
            for voter in &targets {
                if shutdown.is_cancelled() {
                    return;
                }
                match self.pool.call(voter, &request, self.propose_timeout).await {
                    Ok(InternalResponse::AddLearner(Ok(()))) => {
                        tracing::info!(node = self.id, "joined the metadata group as a learner");
                        return;
                    }
                    Ok(other) => tracing::debug!(?other, %voter, "not added as a learner yet"),
                    Err(e) => tracing::debug!(error = %e, %voter, "cannot ask to join"),
                }
            }
            tokio::select! {
                () = shutdown.cancelled() => return,
                () = tokio::time::sleep(Duration::from_millis(500)) => {}
            }
        }
    }

    /// Whether `node` votes in the metadata group (as this node's membership says).
    pub fn is_voter(&self, node: u64) -> bool {
        self.raft
            .metrics()
            .borrow()
            .membership_config
            .membership()
            .voter_ids()
            .any(|v| v == node)
    }

    /// Whether `node` is in the metadata group, voting or not.
    pub fn is_member(&self, node: u64) -> bool {
        self.raft
            .metrics()
            .borrow()
            .membership_config
            .membership()
            .get_node(&node)
            .is_some()
    }

    /// On the leader: `node`, a learner, leaves the metadata group (a no-op if it is not in it).
    pub async fn remove_learner(&self, node: u64) -> Result<(), ProposeError> {
        if !self.is_member(node) {
            return Ok(());
        }
        let remove = openraft::ChangeMembers::RemoveNodes([node].into_iter().collect());
        self.raft
            .change_membership(remove, false)
            .await
            .map_err(|e| ProposeError::Raft(e.to_string()))?;
        tracing::info!(node, "node left the metadata group");
        Ok(())
    }

    /// On the leader: adds `node` as a learner (not waiting for it to catch up: it applies the
    /// log like any member and registers when it has). Elsewhere: forwarded to the leader.
    async fn add_learner(&self, node: u64, addr: String) -> Result<(), ProposeError> {
        let metrics = self.raft.metrics().borrow().clone();
        match metrics.current_leader {
            Some(leader) if leader == self.id => {}
            Some(_) => {
                let forwarded = self
                    .call_leader(&InternalRequest::AddLearner { node, addr })
                    .await?;
                return match forwarded {
                    InternalResponse::AddLearner(result) => result,
                    _ => Err(ProposeError::Unreachable("unexpected response".into())),
                };
            }
            None => return Err(ProposeError::NoLeader),
        }
        let membership = metrics.membership_config.membership();
        let known = membership.get_node(&node).is_some_and(|n| n.addr == addr);
        if known {
            return Ok(());
        }
        if self.voters.contains_key(&node) {
            return Err(ProposeError::Raft(format!(
                "node {node} is a voter: it cannot join again as a learner"
            )));
        }
        self.raft
            .add_learner(node, BasicNode::new(&addr), false)
            .await
            .map(|_| ())
            .map_err(|e| ProposeError::Raft(e.to_string()))
    }

    pub fn id(&self) -> u64 {
        self.id
    }

    /// The applied metadata, as it changes.
    pub fn applied(&self) -> watch::Receiver<Arc<Applied>> {
        self.applied.clone()
    }

    /// The metadata leader this node knows of.
    pub fn leader(&self) -> Option<u64> {
        self.raft.metrics().borrow().current_leader
    }

    pub fn is_leader(&self) -> bool {
        self.leader() == Some(self.id)
    }

    pub fn raft(&self) -> &MetaRaft {
        &self.raft
    }

    /// Sends `request` to the metadata leader's internal listener.
    pub async fn call_leader(
        &self,
        request: &InternalRequest,
    ) -> Result<InternalResponse, ProposeError> {
        self.call_leader_within(request, self.propose_timeout).await
    }

    /// [`MetadataNode::call_leader`], waiting at most `timeout`.
    pub async fn call_leader_within(
        &self,
        request: &InternalRequest,
        timeout: Duration,
    ) -> Result<InternalResponse, ProposeError> {
        let leader = self.leader().ok_or(ProposeError::NoLeader)?;
        self.call_peer(leader, request, timeout)
            .await
            .map_err(|e| ProposeError::Unreachable(e.to_string()))
    }

    /// Sends `request` to node `to` on a connection of the pool.
    async fn call_peer(
        &self,
        to: u64,
        request: &InternalRequest,
        timeout: Duration,
    ) -> std::io::Result<InternalResponse> {
        let addr = self.address_of(to).ok_or_else(|| {
            std::io::Error::other(format!("node {to} is not in the metadata group"))
        })?;
        self.pool.call(&addr, request, timeout).await
    }

    /// `node`'s internal listener: from the membership (voters added at run time are there
    /// only), else from `--cluster`.
    fn address_of(&self, node: u64) -> Option<String> {
        let from_membership = self
            .raft
            .metrics()
            .borrow()
            .membership_config
            .membership()
            .get_node(&node)
            .map(|n| n.addr.clone());
        from_membership.or_else(|| self.voters.get(&node).cloned())
    }

    /// Appends `records` as one command and waits until it is committed and applied here
    /// (on the leader) — from any node: one that does not lead forwards to the one that does.
    pub async fn propose(
        &self,
        records: Vec<MetadataRecord>,
    ) -> Result<CommandOutcome, ProposeError> {
        let command = MetadataCommand { records };
        match self.propose_local(command.clone()).await {
            Err(ProposeError::NotLeader(_)) | Err(ProposeError::NoLeader) => {}
            done => return done,
        }
        let leader = self.leader().ok_or(ProposeError::NoLeader)?;
        match self
            .call_peer(
                leader,
                &InternalRequest::Propose(command),
                self.propose_timeout,
            )
            .await
        {
            Ok(InternalResponse::Propose(result)) => result,
            Ok(_) => Err(ProposeError::Unreachable("unexpected response".into())),
            Err(e) => Err(ProposeError::Unreachable(e.to_string())),
        }
    }

    /// Proposes on this node, which must lead (no forwarding).
    pub async fn propose_local(
        &self,
        command: MetadataCommand,
    ) -> Result<CommandOutcome, ProposeError> {
        match self.raft.client_write(command).await {
            Ok(response) => Ok(response.data),
            Err(RaftError::APIError(ClientWriteError::ForwardToLeader(f))) => match f.leader_id {
                Some(leader) => Err(ProposeError::NotLeader(leader)),
                None => Err(ProposeError::NoLeader),
            },
            Err(e) => Err(ProposeError::Raft(e.to_string())),
        }
    }
}

impl MetadataNode {
    /// This leader's read index, confirmed with a quorum (a deposed leader fails here).
    pub async fn read_index_here(&self) -> Result<u64, ProposeError> {
        let read = self
            .raft
            .ensure_linearizable()
            .await
            .map_err(|e| ProposeError::Raft(e.to_string()))?;
        Ok(read.map_or(0, |log_id| log_id.index))
    }
}

impl InternalHandler for MetadataNode {
    async fn handle(&self, request: InternalRequest) -> InternalResponse {
        match request {
            InternalRequest::Append(rpc) => {
                InternalResponse::Append(self.raft.append_entries(rpc).await)
            }
            InternalRequest::Vote(rpc) => {
                match self.vote_guard.refusal(
                    &self.raft,
                    rpc.vote.leader_id.node_id,
                    rpc.vote.leader_id.term,
                ) {
                    Some(refused) => {
                        tracing::debug!(candidate = ?rpc.vote, "vote refused: this node's metadata log is still being refilled");
                        InternalResponse::Vote(Ok(refused))
                    }
                    None => {
                        // Lifted by this request: this node may stand as a candidate again.
                        if self.marked.load(Ordering::Acquire) && !self.vote_guard.holds() {
                            self.guard_lifted();
                        }
                        InternalResponse::Vote(self.raft.vote(rpc).await)
                    }
                }
            }
            InternalRequest::LogState => {
                InternalResponse::LogState(super::wiped_voter::LogState::of(&self.raft))
            }
            InternalRequest::Snapshot(rpc) => {
                InternalResponse::Snapshot(self.raft.install_snapshot(rpc).await)
            }
            // Forwarded proposals are not forwarded again (no loops while leadership moves).
            InternalRequest::Propose(command) => {
                InternalResponse::Propose(self.propose_local(command).await)
            }
            InternalRequest::Register(_) | InternalRequest::Heartbeat { .. } => {
                InternalResponse::Registered(Err(ProposeError::Raft(
                    "no controller runs here".into(),
                )))
            }
            InternalRequest::Controller(_) => InternalResponse::Controller(Err(
                ProposeError::Raft("no controller runs here".into()).into(),
            )),
            InternalRequest::ReadIndex => InternalResponse::ReadIndex(self.read_index_here().await),
            InternalRequest::DescribeQuorum => InternalResponse::Quorum(self.quorum_here()),
            InternalRequest::Peer(_) => {
                InternalResponse::Peer(Err("no broker answers here".into()))
            }
            InternalRequest::AddLearner { node, addr } => {
                InternalResponse::AddLearner(self.add_learner(node, addr).await)
            }
            InternalRequest::ChangeVoter { node, add } => {
                InternalResponse::ChangeVoter(self.change_voter(node, add).await)
            }
        }
    }
}

/// Whether this node's stored metadata group is one it bootstrapped alone: only this node
/// votes in it, and the stored vote is none yet or this node's own (a node being refilled by
/// another group holds that group's leader's vote: its own candidacy is off and it refuses
/// every vote).
async fn own_bootstrap(raft: &MetaRaft, me: u64) -> bool {
    // The metrics start empty and are filled once the Raft core has loaded the stored state.
    let loaded = raft
        .wait(Some(Duration::from_secs(5)))
        .metrics(
            |m| m.last_log_index.is_some(),
            "the stored metadata log loaded",
        )
        .await;
    let Ok(metrics) = loaded else {
        return false; // held: a leader, if any, refills it
    };
    let voters: Vec<u64> = metrics.membership_config.membership().voter_ids().collect();
    let vote = metrics.vote.leader_id;
    voters == [me] && (vote.term == 0 || vote.node_id == me)
}

/// The group's first membership: `voters` with their internal addresses.
fn members(voters: &BTreeMap<u64, String>) -> BTreeMap<u64, BasicNode> {
    voters
        .iter()
        .map(|(id, addr)| (*id, BasicNode::new(addr)))
        .collect()
}

/// Bootstraps the metadata group with `voters`; another voter's bootstrap may have reached this
/// node first, which is fine.
async fn initialize(raft: &MetaRaft, voters: &BTreeMap<u64, String>) -> Result<(), StartError> {
    match raft.initialize(members(voters)).await {
        Ok(()) => Ok(()),
        Err(RaftError::APIError(openraft::error::InitializeError::NotAllowed(_))) => Ok(()),
        Err(e) => Err(StartError::Raft(e.to_string())),
    }
}
