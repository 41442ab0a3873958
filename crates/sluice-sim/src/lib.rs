//! `sluice-sim`: a deterministic simulation of partition replication. Many nodes run in one
//! process on one clock and one seeded random generator: messages are delayed, reordered and
//! dropped, links cut, nodes SIGKILLed (losing what no fsync covered), SIGSTOPped and
//! restarted, the metadata leader changes — and the invariants of [`checker`] are checked after
//! every step. A failing seed replays exactly (`sluice-sim --seed N --trace`).
//!
//! The nodes run the replication decisions of the real code — the controller (fencing,
//! elections, ISR changes), the metadata state machine, the leader's high watermark and ISR
//! tracking, the leader-epoch cache and the divergence rules — wired the way `sluice-broker`
//! wires them ([`node`] says where each rule comes from). Not simulated: the metadata Raft
//! group (openraft's; here a linearizable log) and the bytes on disk (a log of values).

pub mod checker;
mod faults;
pub mod message;
pub mod network;
pub mod node;
pub mod replica_log;
pub mod world;

pub use world::{run, Outcome, Settings, Stats};
