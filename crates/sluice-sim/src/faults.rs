//! The fault schedule: until `fault_ms`, every 0.2–2 s one fault drawn from the seed —
//! SIGKILL of a node or a power loss (which also loses what no fsync covered), a restart, SIGSTOP for longer than a session, a node cut off from the
//! others and the controller (or one link cut), every link healed, a node's disk wiped, the
//! partition's replicas moved (a reassignment to random nodes, or its cancellation), a
//! metadata leader change.
//! Then everything heals and the run drains.

use rand::seq::SliceRandom;
use rand::Rng;
use sluice_cluster::reassignment::Reassignment;
use sluice_cluster::NodeId;

use crate::message::{Event, Timer};
use crate::network::CONTROLLER;
use crate::world::{Sim, TOPIC};

impl Sim {
    pub(crate) fn fault(&mut self) {
        if self.now >= self.settings.fault_ms {
            return;
        }
        let ids: Vec<i32> = self.nodes.keys().copied().collect();
        let pick = ids[self.rng.gen_range(0..ids.len())];
        let alive = self.nodes.get(&pick).is_some_and(|n| n.alive);
        self.stats.faults += 1;
        match self.rng.gen_range(0..100) {
            0..=17 => {
                if alive {
                    let power_loss = self.rng.gen_bool(0.5);
                    self.crash_node(pick, power_loss);
                } else {
                    self.start_node(pick);
                }
            }
            18..=35 => {
                if !alive {
                    self.start_node(pick);
                }
            }
            36..=50 => {
                let pause = self.rng.gen_range(300..=3_000);
                if let Some(node) = self.nodes.get_mut(&pick).filter(|n| n.alive) {
                    node.paused_until = self.now + pause;
                }
            }
            51..=65 => {
                // Cut off from everything but its clients.
                for other in ids.iter().filter(|o| **o != pick) {
                    self.network.cut(pick, *other);
                }
                self.network.cut(pick, CONTROLLER);
            }
            66..=75 => {
                let other = if self.rng.gen_bool(0.3) {
                    CONTROLLER
                } else {
                    ids[self.rng.gen_range(0..ids.len())]
                };
                if other != pick {
                    self.network.cut(pick, other);
                }
            }
            76..=83 => self.network.heal(),
            84..=86 => {
                // One disk at a time, and never the last in-sync copy: beyond that no
                // replication keeps a committed record.
                let isr = Sim::partition(&self.ctrl.state)
                    .map(|p| p.isr.clone())
                    .unwrap_or_default();
                if self.wiped.is_empty() && isr.iter().any(|r| r.0 != pick) {
                    self.wiped.insert(pick);
                    self.wipe_node(pick);
                    self.stats.wipes += 1;
                }
            }
            87..=89 => self.reassign(),
            _ => {
                // The metadata leader changes: no controller for a Raft election, then a
                // new one that gives every node a full session.
                let election = self.rng.gen_range(150..=1_500);
                self.ctrl.down_until = self.now + election;
                self.at(election, Event::ControllerBack);
                // Calls to the old metadata leader fail at once (their connections reset),
                // whether or not it decided them first.
                let ids: Vec<i32> = self.nodes.keys().copied().collect();
                for id in ids {
                    if let Some((leader_epoch, ask)) = self.nodes.get(&id).and_then(|n| n.asking) {
                        self.timer(id, 1, Timer::AlterTimeout { leader_epoch, ask });
                    }
                }
            }
        }
        let next = self.rng.gen_range(200..=2_000);
        self.at(next, Event::Fault);
    }
}

impl Sim {
    /// `kafka-reassign-partitions.sh --execute` (or `--cancel`) through the controller.
    fn reassign(&mut self) {
        if self.now < self.ctrl.down_until {
            return;
        }
        let Some(p) = Sim::partition(&self.ctrl.state).cloned() else {
            return;
        };
        let target = if p.reassigning() && self.rng.gen_bool(0.3) {
            None
        } else {
            let mut nodes: Vec<NodeId> = self.nodes.keys().map(|id| NodeId(*id)).collect();
            nodes.shuffle(&mut self.rng);
            nodes.truncate(p.target().len());
            Some(nodes)
        };
        let moves = [Reassignment {
            topic: TOPIC.to_string(),
            partition: 0,
            target,
        }];
        let (records, _) = self
            .ctrl
            .controller
            .reassign(&self.ctrl.state, &moves, false);
        self.stats.reassignments += usize::from(!records.is_empty());
        self.append(records);
    }
}
