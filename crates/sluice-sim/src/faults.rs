//! The fault schedule: until `fault_ms`, every 0.2–2 s one fault drawn from the seed —
//! SIGKILL of a node, a restart, SIGSTOP for longer than a session, a node cut off from the
//! others and the controller (or one link cut), every link healed, a metadata leader change.
//! Then everything heals and the run drains.

use rand::Rng;

use crate::message::{Event, Timer};
use crate::network::CONTROLLER;
use crate::world::Sim;

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
                    self.crash_node(pick);
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
                self.timer(pick, pause, Timer::Resume);
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
            76..=89 => self.network.heal(),
            _ => {
                // The metadata leader changes: no controller for a Raft election, then a
                // new one that gives every node a full session.
                let election = self.rng.gen_range(150..=1_500);
                self.ctrl.down_until = self.now + election;
                self.at(election, Event::ControllerBack);
            }
        }
        let next = self.rng.gen_range(200..=2_000);
        self.at(next, Event::Fault);
    }
}
