//! A broker node as the simulation runs it: the replication rules of `sluice-broker` for one
//! partition, around the same pure parts the broker uses — the applied metadata
//! ([`ClusterState::apply`]), the leader's view of its followers ([`LeaderReplicas`]: high
//! watermark, ISR changes), the leader-epoch cache and the divergence rules
//! ([`sluice_cluster::divergence`]).
//!
//! What the broker does and this models (each line names the broker code it follows):
//! - heartbeats every 100 ms; a session lasts from the heartbeat's sending while the
//!   controller answers live; a fenced node registers again (`runtime.rs`);
//! - a node answers nothing before its metadata caught up after a start (`mod.rs`);
//! - leads or follows as the applied metadata says; a new leader's high watermark starts at
//!   the one it knew (`reconcile.rs`, `Partition::lead`/`follow`);
//! - a node whose session lapsed steps down from what it leads (`follow_session`), takes no
//!   produce and answers none without a session;
//! - under `flush.mode=sync` the leader counts only fsynced records, a follower asks for
//!   more only once what it copied is fsynced (`fetcher.rs`);
//! - an ISR change refused or unanswered is dropped and may be asked again
//!   (`send_isr_change`).

use rand::Rng;
use sluice_cluster::divergence;
use sluice_cluster::metadata::{ClusterState, PartitionInfo};
use sluice_cluster::replica::{LeaderReplicas, Update};
use sluice_cluster::NodeId;
use sluice_log::{LeaderEpoch, Offset};

use crate::message::{FetchAnswer, Msg, Timer};
use crate::network::{Endpoint, CLIENT, CONTROLLER};
use crate::replica_log::ReplicaLog;
use crate::world::{Sim, HEARTBEAT_MS, LAG_TIME_MAX_MS};

/// How often a node saves its high-watermark checkpoint (the broker's 5 s).
const CHECKPOINT_MS: i64 = 5_000;

const FETCH_TIMEOUT_MS: i64 = 2_000;
const ALTER_TIMEOUT_MS: i64 = 2_000;
const MAX_FETCH_RECORDS: usize = 50;

#[derive(Debug)]
pub enum Role {
    Leader {
        replicas: Box<LeaderReplicas>,
        min_insync: usize,
    },
    Follower {
        leader: NodeId,
    },
    Leaderless,
}

#[derive(Debug)]
pub struct Node {
    pub id: i32,
    pub alive: bool,
    pub paused_until: i64,
    /// Bumped at every start: timers of an earlier life do not fire.
    pub life: u32,
    pub log: ReplicaLog,
    /// The metadata as this node applied it (kept across restarts, as the Raft log is).
    pub state: ClusterState,
    pub applied: usize,
    /// Caught up with the metadata since its start.
    pub ready: bool,
    pub role: Role,
    /// The partition leader epoch this replica is in.
    pub epoch: i32,
    pub high_watermark: Offset,
    /// The high-watermark checkpoint on its disk, and when it was written (every
    /// `CHECKPOINT_MS`, as the broker's): a restart starts from it, not from the log end.
    checkpointed: Offset,
    checkpointed_at: i64,
    confirmed_live: i64,
    had_session: bool,
    /// (id, leader, epoch, sent at) of the fetch that is out.
    fetch: Option<(u64, NodeId, i32, i64)>,
    /// A follower waits for an fsync before it fetches again.
    syncing: bool,
    next_fetch: u64,
    /// The ISR change out (its leader epoch and number), until answered or timed out.
    pub asking: Option<(sluice_cluster::LeaderEpoch, u64)>,
    /// The ISR changes answered (or timed out), by number.
    answered: std::collections::BTreeSet<u64>,
    /// Produces waiting for the high watermark: (offset, request, value).
    waiting: Vec<(Offset, u64, u64)>,
    /// The leader epoch its metadata gave it at its start, before it registered again
    /// (`Replication::led_before_start`): it does not write in it.
    inherited: Option<Option<i32>>,
    /// How many times its disk was wiped (its data directory id changes each time).
    pub wipes: u32,
}

impl Node {
    pub fn new(id: i32) -> Node {
        Node {
            id,
            alive: false,
            paused_until: 0,
            life: 0,
            log: ReplicaLog::default(),
            state: ClusterState::default(),
            applied: 0,
            ready: false,
            role: Role::Leaderless,
            epoch: -1,
            high_watermark: Offset(0),
            checkpointed: Offset(0),
            checkpointed_at: 0,
            confirmed_live: i64::MIN,
            had_session: false,
            fetch: None,
            syncing: false,
            next_fetch: 1,
            answered: std::collections::BTreeSet::new(),
            asking: None,
            waiting: Vec::new(),
            inherited: None,
            wipes: 0,
        }
    }

    fn holds_session(&self, now: i64, session_ms: i64) -> bool {
        self.confirmed_live != i64::MIN && now.saturating_sub(self.confirmed_live) <= session_ms
    }
}

fn min_insync(p: &PartitionInfo) -> usize {
    p.replicas.len() / 2 + 1
}

impl Sim {
    fn node(&mut self, id: i32) -> &mut Node {
        self.nodes.entry(id).or_insert_with(|| Node::new(id))
    }

    /// The process starts (first time or after a crash): it registers and waits for the
    /// metadata.
    pub(crate) fn start_node(&mut self, id: i32) {
        let node = self.node(id);
        node.alive = true;
        node.paused_until = 0;
        node.life += 1;
        node.ready = false;
        node.role = Role::Leaderless;
        node.confirmed_live = i64::MIN;
        node.had_session = false;
        node.fetch = None;
        node.syncing = false;
        node.waiting.clear();
        node.inherited = None;
        // It registers when its first heartbeat finds it not live in this incarnation.
        self.timer(id, 1, Timer::Tick);
    }

    /// The node's disk is wiped while it is down: no log, no metadata, a new directory id.
    pub(crate) fn wipe_node(&mut self, id: i32) {
        self.node(id).wipes += 1;
        if self.node(id).alive {
            self.crash_node(id, true);
        }
        let node = self.node(id);
        node.log = ReplicaLog::default();
        node.state = ClusterState::default();
        node.applied = 0;
        node.high_watermark = Offset(0);
        node.checkpointed = Offset(0);
        node.epoch = -1;
        self.checker.cut(id, Offset(0));
        self.check_isr();
    }

    /// The process dies; the controller hears of it when its heartbeat connection is refused.
    /// A power loss (`power_loss`) also loses what no fsync covered; a SIGKILL does not (the
    /// page cache keeps it).
    pub(crate) fn crash_node(&mut self, id: i32, power_loss: bool) {
        let node = self.node(id);
        node.alive = false;
        if power_loss {
            node.log.crash();
        }
        // What it starts from again (`Partition::restart_high_watermark`): its last
        // checkpoint, within what its log still holds.
        node.high_watermark = node.checkpointed.min(node.log.end());
        let durable = node.log.durable_end();
        node.waiting.clear();
        self.checker.cut(id, durable);
        self.send(id, CONTROLLER, Msg::Refused { node: id });
        self.check_isr();
    }

    pub(crate) fn node_receives(&mut self, id: i32, from: Endpoint, msg: Msg) {
        match msg {
            Msg::HeartbeatAck { sent_at, live } => {
                let node = self.node(id);
                if live {
                    node.confirmed_live = node.confirmed_live.max(sent_at);
                } else {
                    let (incarnation, wipes) = (u128::from(node.life), node.wipes);
                    self.send(id, CONTROLLER, Msg::Register { incarnation, wipes });
                }
            }
            Msg::Metadata { upto } => self.catch_up(id, upto),
            Msg::AlterIsrReply {
                leader_epoch,
                ask,
                granted,
                changed,
            } => {
                // The first of its answer or its timeout settles a change, as the broker's
                // `send_isr_change` task ends once; granted with a new partition epoch, it
                // is settled when the metadata arrives.
                let node = self.node(id);
                if node.answered.insert(ask) && !(granted && changed) {
                    if let Role::Leader { replicas, .. } = &mut node.role {
                        replicas.on_alter_failed(leader_epoch, ask);
                    }
                }
            }
            Msg::Fetch {
                id: fetch,
                fetch_offset,
                last_fetched_epoch,
                current_leader_epoch,
            } => {
                let answer = self.serve_fetch(
                    id,
                    from,
                    fetch_offset,
                    last_fetched_epoch,
                    current_leader_epoch,
                );
                self.send(id, from, Msg::FetchReply { id: fetch, answer });
            }
            Msg::FetchReply { id: fetch, answer } => self.fetched(id, fetch, answer),
            Msg::Produce { id: request, value } => self.produce(id, request, value),
            _ => {}
        }
    }

    pub(crate) fn node_timer(&mut self, id: i32, timer: Timer) {
        match timer {
            Timer::Tick => {
                let now = self.now;
                let incarnation = u128::from(self.node(id).life);
                self.send(
                    id,
                    CONTROLLER,
                    Msg::Heartbeat {
                        sent_at: now,
                        incarnation,
                    },
                );
                self.follow_session(id);
                let node = self.node(id);
                if now - node.checkpointed_at >= CHECKPOINT_MS {
                    node.checkpointed = node.high_watermark;
                    node.checkpointed_at = now;
                }
                let update = match &mut node.role {
                    Role::Leader { replicas, .. } => replicas.tick(now),
                    _ => Update::default(),
                };
                self.updated(id, update);
                let stale = self
                    .node(id)
                    .fetch
                    .is_some_and(|(_, _, _, sent)| now - sent > FETCH_TIMEOUT_MS);
                if stale {
                    self.node(id).fetch = None;
                }
                self.fetch_next(id);
                self.timer(id, HEARTBEAT_MS, Timer::Tick);
            }
            Timer::FetchNow => self.fetch_next(id),
            Timer::Synced { generation, upto } => {
                let node = self.node(id);
                node.log.synced(generation, upto);
                let durable = node.log.durable_end();
                let update = match &mut node.role {
                    Role::Leader { replicas, .. } => replicas.on_local_end(durable),
                    _ => {
                        node.syncing = false;
                        Update::default()
                    }
                };
                self.updated(id, update);
                self.fetch_next(id);
                self.check_isr();
            }
            Timer::AlterTimeout { leader_epoch, ask } => {
                let node = self.node(id);
                if node.answered.insert(ask) {
                    if let Role::Leader { replicas, .. } = &mut node.role {
                        replicas.on_alter_failed(leader_epoch, ask);
                    }
                }
            }
        }
    }

    /// Applies the metadata log up to `upto` and follows what it says.
    fn catch_up(&mut self, id: i32, upto: usize) {
        let upto = upto.min(self.ctrl.log.len());
        let now = self.now;
        let node = self.nodes.entry(id).or_insert_with(|| Node::new(id));
        let mut failed = None;
        for record in &self.ctrl.log[node.applied.min(upto)..upto] {
            if let Err(e) = node.state.apply(record) {
                failed = Some(format!(
                    "node {id} cannot apply a record the controller applied: {e}"
                ));
            }
        }
        node.applied = node.applied.max(upto);
        node.ready = true;
        if let Some(what) = failed {
            self.checker.fail(now, what);
        }
        self.reconcile(id);
    }

    /// Leads or follows as the applied metadata says (the broker's `reconcile`).
    fn reconcile(&mut self, id: i32) {
        let now = self.now;
        let node = self.node(id);
        if !node.ready {
            return;
        }
        let Some(p) = Sim::partition(&node.state).cloned() else {
            return;
        };
        if !p.replicas.contains(&NodeId(id)) {
            // No longer a replica (a reassignment moved it away): the broker deletes it.
            if node.log.end() > Offset(0) || !matches!(node.role, Role::Leaderless) {
                let epoch = node.epoch;
                self.follow(id, None, epoch);
                let node = self.node(id);
                node.log = ReplicaLog::default();
                node.high_watermark = Offset(0);
                node.checkpointed = Offset(0);
                self.checker.cut(id, Offset(0));
            }
            return;
        }
        let incarnation = uuid::Uuid::from_u128(u128::from(node.life));
        let inherited = *node.inherited.get_or_insert_with(|| {
            let registered = node
                .state
                .nodes
                .get(&NodeId(id))
                .is_some_and(|n| n.registration.incarnation == incarnation);
            (!registered && p.leader == Some(NodeId(id))).then_some(p.leader_epoch.0)
        });
        if p.leader == Some(NodeId(id)) && inherited == Some(p.leader_epoch.0) {
            self.follow(id, None, p.leader_epoch.0);
        } else if p.leader == Some(NodeId(id)) {
            match &mut node.role {
                Role::Leader {
                    replicas,
                    min_insync: m,
                } if replicas.epochs().0 == p.leader_epoch => {
                    if replicas.epochs().1 != p.partition_epoch {
                        let update = replicas.on_metadata(&p, now);
                        *m = min_insync(&p);
                        self.updated(id, update);
                    }
                }
                _ => {
                    let replicas = LeaderReplicas::new(
                        NodeId(id),
                        &p,
                        node.log.end(),
                        node.log.durable_end(),
                        node.high_watermark,
                        LAG_TIME_MAX_MS,
                        now,
                    );
                    node.role = Role::Leader {
                        replicas: Box::new(replicas),
                        min_insync: min_insync(&p),
                    };
                    node.epoch = p.leader_epoch.0;
                    node.fetch = None;
                    node.syncing = false;
                    // Whatever it holds that is not fsynced yet is counted once it is.
                    self.sync(id);
                    let durable = self.node(id).log.durable_end();
                    let update = match &mut self.node(id).role {
                        Role::Leader { replicas, .. } => replicas.on_local_end(durable),
                        _ => Update::default(),
                    };
                    self.updated(id, update);
                }
            }
            // As the broker's reconcile does: followers on fenced nodes are not waited for.
            let node = self.node(id);
            let fenced = node.state.fenced_nodes();
            let update = match &mut node.role {
                Role::Leader { replicas, .. } => replicas.set_ineligible(&fenced),
                _ => Update::default(),
            };
            self.updated(id, update);
        } else {
            self.follow(id, p.leader, p.leader_epoch.0);
        }
    }

    fn follow(&mut self, id: i32, leader: Option<NodeId>, epoch: i32) {
        let node = self.node(id);
        let same = match (&node.role, leader) {
            (Role::Follower { leader: l }, Some(new)) => *l == new,
            (Role::Leaderless, None) => true,
            _ => false,
        } && node.epoch == epoch;
        if same {
            return;
        }
        node.role = match leader {
            Some(leader) => Role::Follower { leader },
            None => Role::Leaderless,
        };
        node.epoch = epoch;
        node.fetch = None;
        let waiting: Vec<(Offset, u64, u64)> = node.waiting.drain(..).collect();
        for (_, request, value) in waiting {
            self.answer(id, request, value, Err("not leader or follower"));
        }
        self.fetch_next(id);
    }

    /// The broker's `follow_session`.
    fn follow_session(&mut self, id: i32) {
        let (now, session) = (self.now, self.config.session_timeout_ms);
        let node = self.node(id);
        let holds = node.holds_session(now, session);
        let had = std::mem::replace(&mut node.had_session, holds);
        if had && !holds {
            if let Role::Leader { .. } = node.role {
                let epoch = node.epoch;
                self.follow(id, None, epoch);
            }
        } else if !had && holds {
            self.reconcile(id);
        }
    }

    fn fetch_next(&mut self, id: i32) {
        let now = self.now;
        let node = self.node(id);
        let Role::Follower { leader } = node.role else {
            return;
        };
        if !node.ready || node.fetch.is_some() || node.syncing {
            return;
        }
        // What it wrote as a leader is fsynced before a fetch claims it (`fetcher.rs`).
        if node.log.durable_end() < node.log.end() {
            node.syncing = true;
            self.sync(id);
            return;
        }
        let fetch = node.next_fetch;
        node.next_fetch += 1;
        node.fetch = Some((fetch, leader, node.epoch, now));
        let msg = Msg::Fetch {
            id: fetch,
            fetch_offset: node.log.end(),
            last_fetched_epoch: node.log.latest_epoch().map_or(-1, |e| e.0),
            current_leader_epoch: node.epoch,
        };
        self.send(id, leader.0, msg);
    }

    fn serve_fetch(
        &mut self,
        id: i32,
        follower: Endpoint,
        fetch_offset: Offset,
        last_fetched_epoch: i32,
        current_leader_epoch: i32,
    ) -> FetchAnswer {
        let now = self.now;
        let node = self.node(id);
        if !node.ready {
            return FetchAnswer::Error("not ready");
        }
        if current_leader_epoch != node.epoch {
            return FetchAnswer::Error("fenced or unknown leader epoch");
        }
        let Role::Leader { replicas, .. } = &mut node.role else {
            return FetchAnswer::Error("not leader");
        };
        let epoch_end = (last_fetched_epoch >= 0)
            .then(|| node.log.end_offset_for(LeaderEpoch(last_fetched_epoch)))
            .flatten();
        let latest = || (node.log.end(), node.log.latest_epoch());
        if let Some((epoch, end)) =
            divergence::diverging(last_fetched_epoch, fetch_offset, epoch_end, latest)
        {
            return FetchAnswer::Diverging { epoch, end };
        }
        if fetch_offset > node.log.end() {
            return FetchAnswer::Error("offset out of range");
        }
        let update = replicas.on_fetch(NodeId(follower), fetch_offset, node.log.end(), now);
        let records = node.log.records_from(fetch_offset, MAX_FETCH_RECORDS);
        self.updated(id, update);
        let high_watermark = self.node(id).high_watermark;
        FetchAnswer::Records {
            from: fetch_offset,
            records,
            high_watermark,
        }
    }

    fn fetched(&mut self, id: i32, fetch: u64, answer: FetchAnswer) {
        let now = self.now;
        let node = self.node(id);
        let Some((out, leader, epoch, _)) = node.fetch else {
            return;
        };
        let follows =
            matches!(node.role, Role::Follower { leader: l } if l == leader) && node.epoch == epoch;
        if out != fetch {
            return;
        }
        node.fetch = None;
        if !follows {
            self.fetch_next(id);
            return;
        }
        match answer {
            FetchAnswer::Error(_) => self.timer(id, 100, Timer::FetchNow),
            FetchAnswer::Diverging { epoch, end } => {
                let to = divergence::truncation_point(end, node.log.end_offset_for(epoch));
                if to < node.log.end() {
                    node.log.truncate(to);
                    node.high_watermark = node.high_watermark.min(to);
                    self.stats.truncations += 1;
                    self.checker.cut(id, to);
                    self.check_isr();
                }
                self.fetch_next(id);
            }
            FetchAnswer::Records {
                from,
                records,
                high_watermark,
            } => {
                if from != node.log.end() {
                    self.fetch_next(id);
                    return;
                }
                let copied = !records.is_empty();
                for (epoch, value) in records {
                    node.log.append(epoch, value);
                }
                node.high_watermark = node.high_watermark.max(high_watermark.min(node.log.end()));
                if let Some(node) = self.nodes.get(&id) {
                    self.checker
                        .exposed(now, id, &node.log, node.high_watermark);
                }
                if copied {
                    self.node(id).syncing = true;
                    self.sync(id);
                } else {
                    let poll = self.rng.gen_range(5..=50);
                    self.timer(id, poll, Timer::FetchNow);
                }
            }
        }
    }

    fn produce(&mut self, id: i32, request: u64, value: u64) {
        let (now, session) = (self.now, self.config.session_timeout_ms);
        let node = self.node(id);
        let holds = node.holds_session(now, session);
        let Role::Leader {
            replicas,
            min_insync,
        } = &node.role
        else {
            return self.answer(id, request, value, Err("not leader or follower"));
        };
        if !node.ready || !holds {
            return self.answer(id, request, value, Err("no controller session"));
        }
        if replicas.check_min_insync(*min_insync).is_err() {
            return self.answer(id, request, value, Err("not enough replicas"));
        }
        let epoch = LeaderEpoch(node.epoch);
        let at = node.log.end();
        node.log.append(epoch, value);
        node.waiting.push((at, request, value));
        self.checker.written(now, id, epoch, at, value);
        self.sync(id);
    }

    /// Starts an fsync of what the log holds now.
    fn sync(&mut self, id: i32) {
        let node = self.node(id);
        if node.log.durable_end() >= node.log.end() {
            node.syncing = false;
            return;
        }
        let (generation, upto) = (node.log.generation(), node.log.end());
        let took = self.rng.gen_range(1..=15);
        self.timer(id, took, Timer::Synced { generation, upto });
    }

    /// The leader's view changed: a new high watermark is exposed and answers the produces
    /// below it; an ISR change goes to the controller.
    fn updated(&mut self, id: i32, update: Update) {
        let (now, session) = (self.now, self.config.session_timeout_ms);
        if let Some(hw) = update.high_watermark {
            let node = self.node(id);
            node.high_watermark = node.high_watermark.max(hw);
        }
        if let Some(node) = self.nodes.get(&id) {
            self.checker
                .exposed(now, id, &node.log, node.high_watermark);
        }
        if let Some(isr) = update.alter_isr {
            let node = self.node(id);
            if let Role::Leader { replicas, .. } = &node.role {
                let (leader_epoch, partition_epoch) = replicas.epochs();
                let ask = replicas.asked();
                node.asking = Some((leader_epoch, ask));
                self.send(
                    id,
                    CONTROLLER,
                    Msg::AlterIsr {
                        leader_epoch,
                        partition_epoch,
                        isr,
                        ask,
                    },
                );
                self.timer(
                    id,
                    ALTER_TIMEOUT_MS,
                    Timer::AlterTimeout { leader_epoch, ask },
                );
            }
        }
        let node = self.node(id);
        let hw = node.high_watermark;
        if !matches!(node.role, Role::Leader { .. }) || !node.holds_session(now, session) {
            return;
        }
        let done: Vec<(Offset, u64, u64)> = node
            .waiting
            .iter()
            .copied()
            .filter(|(at, _, _)| *at < hw)
            .collect();
        node.waiting.retain(|(at, _, _)| *at >= hw);
        for (at, request, value) in done {
            self.answer(id, request, value, Ok(at));
        }
    }

    fn answer(&mut self, id: i32, request: u64, value: u64, result: Result<Offset, &'static str>) {
        self.send(
            id,
            CLIENT,
            Msg::ProduceReply {
                id: request,
                value,
                result,
            },
        );
    }
}
