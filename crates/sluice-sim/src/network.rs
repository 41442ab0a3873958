//! The simulated network: every message is delivered after a random delay (so messages
//! between two nodes may overtake each other) or dropped, and links can be cut both ways.
//! Clients reach every node: a node cut off from the others keeps its clients, as in the
//! network-namespace tests.

use std::collections::BTreeSet;

use rand::Rng;
use rand_chacha::ChaCha8Rng;

/// An endpoint: a node id (≥ 1), the controller, or the client.
pub type Endpoint = i32;
/// The metadata quorum's leader, where the controller runs. Its Raft group is the library's
/// (openraft) and is not simulated: the metadata log here is linearizable by construction.
pub const CONTROLLER: Endpoint = 0;
pub const CLIENT: Endpoint = -1;

#[derive(Debug, Clone)]
pub struct Network {
    cut: BTreeSet<(Endpoint, Endpoint)>,
    pub min_delay_ms: i64,
    pub max_delay_ms: i64,
    /// Chance in a thousand that a message is lost (a connection reset).
    pub drop_per_mille: u32,
}

impl Network {
    pub fn new(min_delay_ms: i64, max_delay_ms: i64, drop_per_mille: u32) -> Network {
        Network {
            cut: BTreeSet::new(),
            min_delay_ms,
            max_delay_ms,
            drop_per_mille,
        }
    }

    fn pair(a: Endpoint, b: Endpoint) -> (Endpoint, Endpoint) {
        (a.min(b), a.max(b))
    }

    pub fn connected(&self, a: Endpoint, b: Endpoint) -> bool {
        a == CLIENT || b == CLIENT || !self.cut.contains(&Network::pair(a, b))
    }

    pub fn cut(&mut self, a: Endpoint, b: Endpoint) {
        self.cut.insert(Network::pair(a, b));
    }

    pub fn heal(&mut self) {
        self.cut.clear();
    }

    pub fn cuts(&self) -> usize {
        self.cut.len()
    }

    /// When a message sent now arrives, or `None` if it is lost.
    pub fn transit(&self, rng: &mut ChaCha8Rng, from: Endpoint, to: Endpoint) -> Option<i64> {
        if !self.connected(from, to) || rng.gen_range(0..1000) < self.drop_per_mille {
            return None;
        }
        Some(rng.gen_range(self.min_delay_ms..=self.max_delay_ms))
    }
}
