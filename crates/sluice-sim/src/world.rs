//! The simulated world: nodes, the controller, a client, the network and the schedule of
//! events, all driven by one seeded random generator and one clock, so a seed replays exactly.
//!
//! ```text
//!   event queue (time, seq) ──▶ deliver a message / fire a timer / inject a fault
//!        ▲                            │
//!        └── messages and timers ◀────┘      checker: after every step that could break it
//! ```

use std::cmp::Reverse;
use std::collections::{BTreeMap, BTreeSet, BinaryHeap};

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use sluice_cluster::controller::{Controller, ControllerConfig};
use sluice_cluster::metadata::{ClusterState, MetadataRecord, NodeRegistration, PartitionInfo};
use sluice_cluster::NodeId;
use sluice_log::Offset;
use uuid::Uuid;

use crate::checker::Checker;
use crate::message::{Event, Msg, Timer};
use crate::network::{Endpoint, Network, CLIENT, CONTROLLER};
use crate::node::Node;

pub const TOPIC: &str = "sim";
pub fn topic_id() -> Uuid {
    Uuid::from_u128(0x0515_51CE)
}

/// What a run does.
#[derive(Debug, Clone)]
pub struct Settings {
    pub nodes: i32,
    /// Replicas of the partition; `None`: 3, or drawn from the seed (3 or every node) when
    /// there are more than 3 nodes.
    pub replication_factor: Option<i32>,
    /// Faults are injected until then; then every fault heals and the run drains.
    pub fault_ms: i64,
    pub drain_ms: i64,
    /// Print every event.
    pub trace: bool,
}

impl Default for Settings {
    fn default() -> Self {
        Settings {
            nodes: 3,
            replication_factor: None,
            fault_ms: 20_000,
            drain_ms: 15_000,
            trace: false,
        }
    }
}

#[derive(Debug, Clone, Default)]
pub struct Stats {
    pub events: u64,
    pub acked: usize,
    pub acked_after_heal: usize,
    pub produce_errors: usize,
    pub faults: usize,
    pub elections: usize,
    pub truncations: usize,
    pub wipes: usize,
    /// Reassignments started, and completed (the leaving replicas dropped).
    pub reassignments: usize,
    pub reassignments_done: usize,
    /// The run ended with the partition offline after a wiped disk (see `finish`).
    pub offline_after_wipe: bool,
    pub committed: usize,
}

#[derive(Debug)]
pub struct Outcome {
    pub seed: u64,
    pub violations: Vec<String>,
    pub stats: Stats,
}

pub(crate) struct ControllerSide {
    pub controller: Controller,
    pub state: ClusterState,
    pub log: Vec<MetadataRecord>,
    /// Down until this time (a metadata election); messages to it are lost meanwhile.
    pub down_until: i64,
}

pub struct Sim {
    pub(crate) rng: ChaCha8Rng,
    pub(crate) now: i64,
    seq: u64,
    queue: BinaryHeap<Reverse<(i64, u64)>>,
    events: BTreeMap<u64, Event>,
    pub(crate) settings: Settings,
    pub(crate) network: Network,
    pub(crate) nodes: BTreeMap<i32, Node>,
    pub(crate) ctrl: ControllerSide,
    pub(crate) checker: Checker,
    pub(crate) stats: Stats,
    pub(crate) config: ControllerConfig,
    next_value: u64,
    next_request: u64,
    in_flight: usize,
    client_answered: BTreeSet<u64>,
    /// Nodes whose disk was wiped and that have not registered their new directory yet: they
    /// hold none of what the ISR still counts on them for (one at a time, see `faults.rs`).
    pub(crate) wiped: BTreeSet<i32>,
    pub(crate) healed_at: Option<i64>,
}

/// Replica lag allowed before a follower leaves the ISR (the broker's `LAG_TIME_MAX_MS`).
pub const LAG_TIME_MAX_MS: i64 = 10_000;
pub const HEARTBEAT_MS: i64 = 100;
const MAX_IN_FLIGHT: usize = 5;

/// Node `node`'s registration in its `incarnation`th process, after `wipes` wiped disks.
pub fn registration(node: i32, incarnation: u128, wipes: u32) -> NodeRegistration {
    NodeRegistration {
        node: NodeId(node),
        incarnation: Uuid::from_u128(incarnation),
        kafka_host: "127.0.0.1".into(),
        kafka_port: 9092 + node,
        listeners: Vec::new(),
        internal_addr: format!("127.0.0.1:{}", 9192 + node),
        rack: None,
        directory: Some(Uuid::from_u128(
            (u128::try_from(node).unwrap_or(0) << 32) | u128::from(wipes),
        )),
    }
}

/// Runs one seed to the end.
pub fn run(seed: u64, settings: &Settings) -> Outcome {
    let mut sim = Sim::new(seed, settings.clone());
    sim.run();
    Outcome {
        seed,
        violations: sim.checker.violations.clone(),
        stats: sim.stats.clone(),
    }
}

impl Sim {
    fn new(seed: u64, settings: Settings) -> Sim {
        let mut rng = ChaCha8Rng::seed_from_u64(seed);
        let network = Network::new(1, rng.gen_range(5..=40), rng.gen_range(0..=5));
        let config = ControllerConfig {
            leader_balance_interval_ms: if rng.gen_bool(0.5) { 5_000 } else { 0 },
            ..ControllerConfig::default()
        };
        // The cluster as it is once formed: every node registered, one topic placed.
        let mut state = ClusterState::default();
        let mut controller = Controller::new(config.clone(), &state, 0);
        let mut log = Vec::new();
        let mut formed = Vec::new();
        for id in 1..=settings.nodes {
            formed.extend(controller.register(&state, registration(id, 1, 0), 0));
            for r in formed.drain(..) {
                if state.apply(&r).is_ok() {
                    log.push(r);
                }
            }
        }
        let rf = settings.replication_factor.unwrap_or_else(|| {
            if settings.nodes > 3 && rng.gen_bool(0.5) {
                3
            } else {
                settings.nodes
            }
        });
        let topic = controller.create_topic(&state, TOPIC, topic_id(), 1, rf, BTreeMap::new());
        for r in topic.into_iter().flatten() {
            if state.apply(&r).is_ok() {
                log.push(r);
            }
        }
        let nodes = (1..=settings.nodes).map(|id| (id, Node::new(id))).collect();
        let mut sim = Sim {
            rng,
            now: 0,
            seq: 0,
            queue: BinaryHeap::new(),
            events: BTreeMap::new(),
            network,
            nodes,
            ctrl: ControllerSide {
                controller,
                state,
                log,
                down_until: 0,
            },
            checker: Checker::default(),
            stats: Stats::default(),
            config,
            next_value: 1,
            next_request: 1,
            in_flight: 0,
            client_answered: BTreeSet::new(),
            wiped: BTreeSet::new(),
            healed_at: None,
            settings,
        };
        for id in 1..=sim.settings.nodes {
            sim.start_node(id);
        }
        sim.at(50, Event::ControllerTick);
        sim.at(200, Event::ClientProduce);
        sim.at(500, Event::Fault);
        sim.at(sim.settings.fault_ms, Event::Heal);
        sim.at(sim.settings.fault_ms + sim.settings.drain_ms, Event::Finish);
        sim
    }

    pub(crate) fn at(&mut self, after_ms: i64, event: Event) {
        self.seq += 1;
        self.queue.push(Reverse((self.now + after_ms, self.seq)));
        self.events.insert(self.seq, event);
    }

    pub(crate) fn send(&mut self, from: Endpoint, to: Endpoint, msg: Msg) {
        if let Some(delay) = self.network.transit(&mut self.rng, from, to) {
            self.at(delay, Event::Deliver { from, to, msg });
        }
    }

    pub(crate) fn timer(&mut self, node: i32, after_ms: i64, timer: Timer) {
        let life = self.nodes.get(&node).map_or(0, |n| n.life);
        self.at(after_ms, Event::Timer { node, life, timer });
    }

    fn run(&mut self) {
        while let Some(Reverse((time, seq))) = self.queue.pop() {
            let Some(event) = self.events.remove(&seq) else {
                continue;
            };
            self.now = time;
            // A SIGSTOPped node does nothing until SIGCONT: what reaches it waits.
            let target = match &event {
                Event::Deliver { to, .. } => Some(*to),
                Event::Timer { node, .. } => Some(*node),
                _ => None,
            };
            if let Some(paused_until) = target
                .and_then(|t| self.nodes.get(&t))
                .filter(|n| n.alive)
                .map(|n| n.paused_until)
                .filter(|until| *until > time)
            {
                self.at(paused_until - time, event);
                continue;
            }
            self.stats.events += 1;
            if self.settings.trace {
                eprintln!("{time:>6} {event:?}");
            }
            if matches!(event, Event::Finish) {
                self.finish();
                return;
            }
            self.step(event);
            if !self.checker.ok() {
                return;
            }
        }
    }

    fn step(&mut self, event: Event) {
        match event {
            Event::Deliver { from, to, msg } => {
                if to == CONTROLLER {
                    self.controller_receives(from, msg);
                } else if to == CLIENT {
                    self.client_receives(msg);
                } else if self.nodes.get(&to).is_some_and(|n| n.alive) {
                    self.node_receives(to, from, msg);
                }
            }
            Event::Timer { node, life, timer } => {
                if self
                    .nodes
                    .get(&node)
                    .is_some_and(|n| n.alive && n.life == life)
                {
                    self.node_timer(node, timer);
                }
            }
            Event::ControllerTick => {
                if self.now >= self.ctrl.down_until {
                    let records = self.ctrl.controller.tick(&self.ctrl.state, self.now);
                    self.append(records);
                    // The metadata log's replication reaches every node that missed an append.
                    let upto = self.ctrl.log.len();
                    let ids: Vec<i32> = self.nodes.keys().copied().collect();
                    for id in ids {
                        self.send(CONTROLLER, id, Msg::Metadata { upto });
                    }
                }
                self.at(100, Event::ControllerTick);
            }
            Event::ControllerBack => {
                self.ctrl.controller =
                    Controller::new(self.config.clone(), &self.ctrl.state, self.now);
            }
            Event::ClientProduce => self.client_produce(),
            Event::Fault => self.fault(),
            Event::Heal => self.heal(),
            Event::Finish => {}
        }
    }

    /// The controller appends records; each node hears of them after a network delay.
    pub(crate) fn append(&mut self, records: Vec<MetadataRecord>) {
        if records.is_empty() {
            return;
        }
        let before = self.leader_of(&self.ctrl.state);
        let was_moving = Sim::partition(&self.ctrl.state).is_some_and(|p| p.reassigning());
        for r in records {
            if self.settings.trace {
                eprintln!("{:>6} metadata {r:?}", self.now);
            }
            match self.ctrl.state.apply(&r) {
                Ok(()) => self.ctrl.log.push(r),
                Err(e) => self.checker.fail(
                    self.now,
                    format!("the controller decided a record that does not apply: {e} ({r:?})"),
                ),
            }
        }
        if self.leader_of(&self.ctrl.state) != before {
            self.stats.elections += 1;
        }
        let moving = Sim::partition(&self.ctrl.state).is_some_and(|p| p.reassigning());
        if was_moving && !moving {
            self.stats.reassignments_done += 1;
        }
        let upto = self.ctrl.log.len();
        let ids: Vec<i32> = self.nodes.keys().copied().collect();
        for id in ids {
            self.send(CONTROLLER, id, Msg::Metadata { upto });
        }
        self.check_isr();
    }

    pub(crate) fn partition(state: &ClusterState) -> Option<&PartitionInfo> {
        state.partition_by_name(TOPIC, 0).map(|(_, p)| p)
    }

    fn leader_of(&self, state: &ClusterState) -> Option<NodeId> {
        Sim::partition(state).and_then(|p| p.leader)
    }

    /// Every replica the committed metadata lists in sync holds every committed record.
    pub(crate) fn check_isr(&mut self) {
        let state = &self.ctrl.state;
        let nodes = &self.nodes;
        self.wiped.retain(|id| {
            let now = nodes
                .get(id)
                .map(|n| registration(*id, 0, n.wipes).directory);
            state
                .nodes
                .get(&NodeId(*id))
                .map(|n| n.registration.directory)
                != now
        });
        let isr = Sim::partition(&self.ctrl.state)
            .map(|p| p.isr.clone())
            .unwrap_or_default();
        for r in isr.into_iter().filter(|r| !self.wiped.contains(&r.0)) {
            if let Some(node) = self.nodes.get(&r.0) {
                self.checker.in_sync(self.now, r.0, &node.log);
            }
        }
    }

    fn controller_receives(&mut self, from: Endpoint, msg: Msg) {
        if self.now < self.ctrl.down_until {
            return;
        }
        match msg {
            Msg::Heartbeat {
                sent_at,
                incarnation,
            } => {
                let live = self.ctrl.controller.heartbeat(
                    &self.ctrl.state,
                    NodeId(from),
                    Some(Uuid::from_u128(incarnation)),
                    self.now,
                );
                self.send(CONTROLLER, from, Msg::HeartbeatAck { sent_at, live });
            }
            Msg::Register { incarnation, wipes } => {
                let records = self.ctrl.controller.register(
                    &self.ctrl.state,
                    registration(from, incarnation, wipes),
                    self.now,
                );
                self.append(records);
            }
            Msg::AlterIsr {
                leader_epoch,
                partition_epoch,
                isr,
                ask,
            } => {
                let decided = self.ctrl.controller.alter_partition(
                    &self.ctrl.state,
                    NodeId(from),
                    topic_id(),
                    0,
                    leader_epoch,
                    partition_epoch,
                    isr,
                );
                let reply = match decided {
                    Ok(records) => {
                        let changed = !records.is_empty();
                        self.append(records);
                        Msg::AlterIsrReply {
                            leader_epoch,
                            ask,
                            granted: true,
                            changed,
                        }
                    }
                    Err(_) => Msg::AlterIsrReply {
                        leader_epoch,
                        ask,
                        granted: false,
                        changed: false,
                    },
                };
                self.send(CONTROLLER, from, reply);
            }
            Msg::Refused { node } => self.ctrl.controller.expire(NodeId(node)),
            _ => {}
        }
    }

    fn client_produce(&mut self) {
        let producing = self.now < self.settings.fault_ms + self.settings.drain_ms - 5_000;
        if !producing {
            return;
        }
        if self.in_flight < MAX_IN_FLIGHT {
            // The client's metadata: what a random live node last told it.
            let live: Vec<i32> = self
                .nodes
                .iter()
                .filter(|(_, n)| n.alive)
                .map(|(id, _)| *id)
                .collect();
            if !live.is_empty() {
                let asked = live[self.rng.gen_range(0..live.len())];
                let target = self
                    .nodes
                    .get(&asked)
                    .and_then(|n| Sim::partition(&n.state))
                    .and_then(|p| p.leader)
                    .map_or(asked, |l| l.0);
                let (id, value) = (self.next_request, self.next_value);
                self.next_request += 1;
                self.next_value += 1;
                self.in_flight += 1;
                self.send(CLIENT, target, Msg::Produce { id, value });
                // A request whose answer is lost times out.
                self.at(
                    3_000,
                    Event::Deliver {
                        from: target,
                        to: CLIENT,
                        msg: Msg::ProduceReply {
                            id,
                            value,
                            result: Err("request timed out"),
                        },
                    },
                );
            }
        }
        let next = self.rng.gen_range(2..=15);
        self.at(next, Event::ClientProduce);
    }

    fn client_receives(&mut self, msg: Msg) {
        let Msg::ProduceReply { id, value, result } = msg else {
            return;
        };
        // The first answer counts (the answer or its timeout).
        if !self.answered(id) {
            return;
        }
        self.in_flight = self.in_flight.saturating_sub(1);
        match result {
            Ok(at) => {
                self.checker.acknowledged(self.now, value, at);
                self.stats.acked += 1;
                if self.healed_at.is_some() {
                    self.stats.acked_after_heal += 1;
                }
            }
            Err(_) => self.stats.produce_errors += 1,
        }
    }

    fn answered(&mut self, id: u64) -> bool {
        self.client_answered.insert(id)
    }

    fn heal(&mut self) {
        self.network.heal();
        // Lost messages are faults too: a run of them costs a fetch timeout each, and the
        // drain would measure that instead of convergence.
        self.network.drop_per_mille = 0;
        self.ctrl.down_until = self.ctrl.down_until.min(self.now);
        let ids: Vec<i32> = self.nodes.keys().copied().collect();
        for id in ids {
            let Some(node) = self.nodes.get_mut(&id) else {
                continue;
            };
            if node.paused_until > self.now {
                node.paused_until = self.now;
            }
            if !node.alive {
                self.start_node(id);
            }
        }
        self.healed_at = Some(self.now);
    }

    fn finish(&mut self) {
        self.stats.committed = self.checker.committed_len();
        let partition = Sim::partition(&self.ctrl.state).cloned();
        if self.settings.trace {
            eprintln!("final partition: {partition:?}");
        }
        // Beyond what clean elections survive: the in-sync replicas left were wiped, and the
        // replicas that hold the data were fenced out of the ISR before (Kafka's KIP-966
        // eligible leader replicas would let one of those lead; not built). The partition
        // stays offline, as Kafka's without an unclean election: counted, not a violation.
        if self.stats.wipes > 0 && partition.as_ref().is_some_and(|p| p.isr.is_empty()) {
            self.stats.offline_after_wipe = true;
            return;
        }
        if self.stats.acked_after_heal == 0 {
            self.checker.fail(
                self.now,
                "no produce was acknowledged after every fault healed".into(),
            );
        }
        let Some(leader) = partition.and_then(|p| p.leader) else {
            self.checker
                .fail(self.now, "no leader after every fault healed".into());
            return;
        };
        let Some(leader_log) = self.nodes.get(&leader.0).map(|n| n.log.clone()) else {
            return;
        };
        self.checker.final_log(self.now, leader.0, &leader_log);
        let replicas = Sim::partition(&self.ctrl.state)
            .map(|p| p.replicas.clone())
            .unwrap_or_default();
        for (id, node) in self
            .nodes
            .iter()
            .filter(|(id, _)| replicas.contains(&NodeId(**id)))
        {
            if node.log.end() != leader_log.end()
                || (0..leader_log.end().0)
                    .any(|o| node.log.value(Offset(o)) != leader_log.value(Offset(o)))
            {
                let what = format!(
                    "node {id} ends at {} with a log unlike its leader {}'s (ends at {})",
                    node.log.end().0,
                    leader.0,
                    leader_log.end().0
                );
                self.checker.fail(self.now, what);
            }
        }
    }
}
