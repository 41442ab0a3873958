//! `raft-idle GROUPS SECONDS HEARTBEAT_MS`: starts GROUPS openraft groups of three replicas in
//! one process (3 × GROUPS replicas, all of them in memory, RPCs as direct calls), waits for
//! every group to elect a leader, then measures the process's CPU time over SECONDS with no
//! writes. Prints CPU as a share of one core, per 1,000 replicas too.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use openraft::error::{InstallSnapshotError, RPCError, RaftError, RemoteError};
use openraft::network::{RPCOption, RaftNetwork, RaftNetworkFactory};
use openraft::raft::{
    AppendEntriesRequest, AppendEntriesResponse, InstallSnapshotRequest, InstallSnapshotResponse,
    VoteRequest, VoteResponse,
};
use openraft::storage::Adaptor;
use openraft::{Config, Raft};
use openraft_memstore::{MemNodeId, MemStore, TypeConfig};

type R = Raft<TypeConfig>;

/// Every replica of every group, by (group, node).
#[derive(Clone, Default)]
struct Router {
    rafts: Arc<Mutex<BTreeMap<(usize, MemNodeId), R>>>,
}

struct Client {
    router: Router,
    group: usize,
    target: MemNodeId,
}

impl Client {
    fn raft(&self) -> R {
        self.router.rafts.lock().unwrap()[&(self.group, self.target)].clone()
    }
}

impl RaftNetworkFactory<TypeConfig> for Router {
    type Network = Client;
    async fn new_client(&mut self, target: MemNodeId, _node: &()) -> Client {
        // The group is encoded in the node id's high bits (see `node_id`).
        Client { router: self.clone(), group: (target >> 8) as usize, target }
    }
}

fn remote<E: std::error::Error>(target: MemNodeId, e: RaftError<MemNodeId, E>) -> RPCError<MemNodeId, (), RaftError<MemNodeId, E>> {
    RPCError::RemoteError(RemoteError::new(target, e))
}

impl RaftNetwork<TypeConfig> for Client {
    async fn append_entries(
        &mut self,
        rpc: AppendEntriesRequest<TypeConfig>,
        _option: RPCOption,
    ) -> Result<AppendEntriesResponse<MemNodeId>, RPCError<MemNodeId, (), RaftError<MemNodeId>>> {
        self.raft().append_entries(rpc).await.map_err(|e| remote(self.target, e))
    }

    async fn install_snapshot(
        &mut self,
        rpc: InstallSnapshotRequest<TypeConfig>,
        _option: RPCOption,
    ) -> Result<InstallSnapshotResponse<MemNodeId>, RPCError<MemNodeId, (), RaftError<MemNodeId, InstallSnapshotError>>> {
        self.raft().install_snapshot(rpc).await.map_err(|e| remote(self.target, e))
    }

    async fn vote(
        &mut self,
        rpc: VoteRequest<MemNodeId>,
        _option: RPCOption,
    ) -> Result<VoteResponse<MemNodeId>, RPCError<MemNodeId, (), RaftError<MemNodeId>>> {
        self.raft().vote(rpc).await.map_err(|e| remote(self.target, e))
    }
}

/// Node ids are unique per group so one router serves every group: group << 8 | replica.
fn node_id(group: usize, replica: u64) -> MemNodeId {
    ((group as u64) << 8) | replica
}

fn cpu_seconds() -> f64 {
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut usage) };
    let t = |tv: libc::timeval| tv.tv_sec as f64 + tv.tv_usec as f64 / 1e6;
    t(usage.ru_utime) + t(usage.ru_stime)
}

#[tokio::main(worker_threads = 2)]
async fn main() {
    let args: Vec<u64> = std::env::args().skip(1).map(|a| a.parse().expect("numbers")).collect();
    let (groups, seconds, heartbeat_ms) = (args[0] as usize, args[1], args.get(2).copied().unwrap_or(50));
    let config = Arc::new(
        Config {
            heartbeat_interval: heartbeat_ms,
            election_timeout_min: heartbeat_ms * 3,
            election_timeout_max: heartbeat_ms * 6,
            ..Default::default()
        }
        .validate()
        .expect("valid config"),
    );
    let router = Router::default();
    for g in 0..groups {
        for r in 1..=3 {
            let id = node_id(g, r);
            let (log, sm) = Adaptor::new(MemStore::new_async().await);
            let raft = Raft::new(id, Arc::clone(&config), router.clone(), log, sm).await.expect("raft");
            router.rafts.lock().unwrap().insert((g, id), raft);
        }
        let leader = router.rafts.lock().unwrap()[&(g, node_id(g, 1))].clone();
        let members: BTreeMap<MemNodeId, ()> = (1..=3).map(|r| (node_id(g, r), ())).collect();
        leader.initialize(members).await.expect("initialize");
    }
    let started = Instant::now();
    loop {
        let rafts: Vec<R> = router.rafts.lock().unwrap().values().cloned().collect();
        let mut leaders = 0;
        for raft in &rafts {
            if raft.metrics().borrow().current_leader == Some(raft.metrics().borrow().id) {
                leaders += 1;
            }
        }
        if leaders == groups {
            break;
        }
        assert!(started.elapsed() < Duration::from_secs(120), "only {leaders} of {groups} leaders after 120 s");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    // Let elections and catch-up settle, then measure.
    tokio::time::sleep(Duration::from_secs(2)).await;
    let (cpu0, t0) = (cpu_seconds(), Instant::now());
    tokio::time::sleep(Duration::from_secs(seconds)).await;
    let (cpu, wall) = (cpu_seconds() - cpu0, t0.elapsed().as_secs_f64());
    let share = cpu / wall;
    let replicas = 3 * groups;
    println!(
        "openraft 0.9.25 groups={groups} replicas={replicas} heartbeat_ms={heartbeat_ms} idle_cpu={:.1}% of a core ({:.2}% per 1000 replicas)",
        share * 100.0,
        share * 100.0 * 1000.0 / replicas as f64
    );
}
