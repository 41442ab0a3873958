//! What travels between the simulated endpoints, and the events of the schedule.

use sluice_cluster::{LeaderEpoch as PartitionLeaderEpoch, NodeId, PartitionEpoch};
use sluice_log::{LeaderEpoch, Offset};

use crate::network::Endpoint;

#[derive(Debug, Clone)]
pub enum Msg {
    /// node → controller; the lease runs from `sent_at`.
    Heartbeat { sent_at: i64, incarnation: u128 },
    /// controller → node: `live` false asks the node to register again. It carries no
    /// metadata: that comes by the metadata log's own replication, as it does in the broker.
    HeartbeatAck { sent_at: i64, live: bool },
    /// node → controller, at every start and whenever it finds itself fenced.
    Register { incarnation: u128, wipes: u32 },
    /// controller → node: the metadata log is `upto` records long (sent at every append and,
    /// as Raft's heartbeats, every 100 ms).
    Metadata { upto: usize },
    /// partition leader → controller (AlterPartition).
    AlterIsr {
        leader_epoch: PartitionLeaderEpoch,
        partition_epoch: PartitionEpoch,
        isr: Vec<NodeId>,
        ask: u64,
    },
    /// controller → leader: granted (`changed`: a new partition epoch follows in the
    /// metadata) or refused.
    AlterIsrReply {
        leader_epoch: PartitionLeaderEpoch,
        ask: u64,
        granted: bool,
        changed: bool,
    },
    /// follower → leader.
    Fetch {
        id: u64,
        fetch_offset: Offset,
        last_fetched_epoch: i32,
        current_leader_epoch: i32,
    },
    /// leader → follower.
    FetchReply { id: u64, answer: FetchAnswer },
    /// client → node: an acks=all produce of one record.
    Produce { id: u64, value: u64 },
    /// node → client: the offset, or why not.
    ProduceReply {
        id: u64,
        value: u64,
        result: Result<Offset, &'static str>,
    },
    /// node → controller: the node's process is gone (its connection was refused).
    Refused { node: i32 },
}

#[derive(Debug, Clone)]
pub enum FetchAnswer {
    Error(&'static str),
    Diverging {
        epoch: LeaderEpoch,
        end: Offset,
    },
    Records {
        from: Offset,
        records: Vec<(LeaderEpoch, u64)>,
        high_watermark: Offset,
    },
}

#[derive(Debug, Clone, Copy)]
pub enum Timer {
    /// Heartbeat, session check, ISR check.
    Tick,
    /// Send the next replica fetch if none is out.
    FetchNow,
    /// An fsync begun at `generation` up to `upto` is done.
    Synced { generation: u64, upto: Offset },
    /// An AlterPartition asked as `ask` got no answer in time.
    AlterTimeout {
        leader_epoch: PartitionLeaderEpoch,
        ask: u64,
    },
}

#[derive(Debug, Clone)]
pub enum Event {
    Deliver {
        from: Endpoint,
        to: Endpoint,
        msg: Msg,
    },
    /// A timer of `node` set in its life `life` (a restart cancels the older ones).
    Timer {
        node: i32,
        life: u32,
        timer: Timer,
    },
    ControllerTick,
    /// A new metadata leader takes over (the old one's Raft term ended).
    ControllerBack,
    ClientProduce,
    Fault,
    Heal,
    Finish,
}
