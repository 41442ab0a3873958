//! The broker as a node of a cluster (`docs/replication.md`): it follows the metadata the
//! cluster's Raft group applies, holds the replicas assigned to it, leads or follows each, and
//! asks the controller for what only the controller decides.
//!
//! ```text
//!   metadata applied (watch) ──▶ reconcile: create/delete local replicas, set each role
//!   follower partitions ──▶ fetcher per leader node (Kafka Fetch with replica_id = this node)
//!   leader partitions   ◀── followers' fetches: their positions move the high watermark;
//!                            tick: lagging followers leave the ISR (AlterPartition)
//! ```
//! `__consumer_offsets` and `__transaction_state` are cluster topics: the leader of a group's
//! (a transactional id's) partition coordinates it ([`coordinators`]); coordinators reach each
//! other's partitions through [`peer`] calls.

mod admin;
pub mod cluster_groups;
pub mod cluster_messages;
pub mod cluster_offsets;
mod coordinators;
mod fetcher;
mod high_watermarks;
pub mod inter_broker;
pub mod leader_fetch;
pub mod node_report;
pub(crate) mod peer;
mod read_replica;
mod reconcile;
pub mod recovery_pace;
mod remote_ends;
pub mod throttle;
pub mod traffic_report;
mod unclean;

pub(crate) use peer::PeerCall;

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use parking_lot::Mutex;
use sluice_cluster::metadata::ClusterState;
use sluice_cluster::requests::{ControllerReply, ControllerRequest};
use sluice_cluster::runtime::ClusterNode;
use sluice_cluster::NodeId;
use tokio_util::sync::CancellationToken;

use crate::broker::Broker;
use crate::error::BrokerError;
use crate::partition::{IsrChange, Partition};

/// A follower out of touch this long leaves the ISR (`replica.lag.time.max.ms`).
pub const LAG_TIME_MAX_MS: i64 = 10_000;

/// Ask for more producer ids when fewer than this are left.
const PRODUCER_ID_LOW_WATER: i64 = 500;

/// Replication ticks (100 ms each) between saves of the high-watermark checkpoint: 5 s, as
/// Kafka's `replica.high.watermark.checkpoint.interval.ms`.
const HIGH_WATERMARK_CHECKPOINT_TICKS: u64 = 50;
/// How often (in ticks) the coordinators are checked against the metadata outside a change
/// of it: a take-over given up may need to begin again with nothing changed (1 s).
const COORDINATOR_RECHECK_TICKS: u64 = 10;

pub struct Replication {
    node: Arc<ClusterNode>,
    me: NodeId,
    /// The fetcher task per leader node this node follows.
    fetchers: Mutex<HashMap<NodeId, tokio::task::JoinHandle<()>>>,
    /// The internal topics whose creation is in flight (at most one request each at a time).
    creating: Mutex<std::collections::HashSet<String>>,
    /// This node has caught up with the metadata and follows it (set once, never unset).
    following: tokio::sync::watch::Sender<bool>,
    /// Whether the controller session held at the last tick.
    had_session: std::sync::atomic::AtomicBool,
    /// The leader epochs this node's metadata gave it when this process started, before it
    /// registered again: it may have lost what it wrote in them (what no fsync covered), so it
    /// does not write in them again; the controller gives it a new epoch when it registers.
    inherited: Mutex<Option<HashMap<(uuid::Uuid, i32), i32>>>,
    /// Where and how this node's followers fetch.
    inter_broker: Arc<inter_broker::InterBroker>,
    shutdown: CancellationToken,
    /// The high watermarks last saved to the checkpoint file.
    saved_high_watermarks: Mutex<high_watermarks::HighWatermarks>,
    /// The ends of partitions held elsewhere, for the lag of the groups coordinated here.
    pub(crate) remote_ends: remote_ends::RemoteEnds,
}

impl std::fmt::Debug for Replication {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Replication(node {})", self.me)
    }
}

impl Replication {
    /// Whether `epoch` of the partition is one this node led before its process started
    /// (see `inherited`). Decided at the first call, on the state it first follows: if that
    /// state already holds this process's registration, the controller's epochs in it are new.
    fn led_before_start(
        &self,
        state: &ClusterState,
        topic: uuid::Uuid,
        index: i32,
        epoch: sluice_cluster::LeaderEpoch,
    ) -> bool {
        let mut inherited = self.inherited.lock();
        let inherited = inherited.get_or_insert_with(|| {
            let incarnation = self.node.registration().incarnation;
            let registered = state
                .nodes
                .get(&self.me)
                .is_some_and(|n| n.registration.incarnation == incarnation);
            if registered {
                return HashMap::new();
            }
            state
                .partitions()
                .filter(|(_, _, p)| p.leader == Some(self.me))
                .map(|(t, i, p)| ((t.id, i), p.leader_epoch.0))
                .collect()
        });
        inherited.get(&(topic, index)) == Some(&epoch.0)
    }

    pub fn node(&self) -> &Arc<ClusterNode> {
        &self.node
    }

    pub fn me(&self) -> NodeId {
        self.me
    }

    /// Waits until this node's metadata is current: it has applied the metadata leader's read
    /// index (everything committed when it asked). Its own log alone is not enough: after a
    /// restart it holds an old state until the leader's newer entries arrive.
    async fn catch_up(&self, stop: &CancellationToken) {
        let index = loop {
            let asked = tokio::time::timeout(Duration::from_secs(2), self.node.read_index());
            tokio::select! {
                () = stop.cancelled() => return,
                answer = asked => match answer {
                    Ok(Ok(index)) => break index,
                    Ok(Err(e)) => tracing::debug!(error = %e, "no metadata read index yet"),
                    Err(_) => tracing::debug!("the metadata read index did not come in time"),
                },
            }
            tokio::select! {
                () = stop.cancelled() => return,
                () = tokio::time::sleep(Duration::from_millis(50)) => {}
            }
        };
        let mut metrics = self.node.metadata().raft().metrics();
        tokio::select! {
            () = stop.cancelled() => {}
            _ = metrics.wait_for(|m| m.last_applied.is_some_and(|l| l.index >= index)) => {}
        }
    }

    /// Waits until this node has caught up with the metadata leader once (see `catch_up`):
    /// until then its applied metadata may be the one it had before it went down, and `sluice
    /// serve` does not answer Kafka clients from it (as a Kafka broker waits for the metadata
    /// log before it serves).
    pub async fn wait_following(&self) {
        let mut following = self.following.subscribe();
        let _ = following.wait_for(|f| *f).await;
    }

    /// The applied cluster metadata, now.
    pub fn state(&self) -> Arc<sluice_cluster::raft::state_machine::Applied> {
        self.node.state()
    }

    /// Asks the controller and maps its refusal to a broker error.
    pub async fn ask(&self, request: ControllerRequest) -> Result<ControllerReply, BrokerError> {
        use sluice_cluster::requests::ControllerError as E;
        self.node.ask(request).await.map_err(|e| match e {
            E::TopicExists(name) => BrokerError::TopicExists(name),
            E::UnknownTopic(name) => BrokerError::UnknownTopic(name),
            E::InvalidPartitions(m) => BrokerError::InvalidPartitions(m),
            E::InvalidReplicationFactor(m) => BrokerError::InvalidReplicationFactor(m),
            E::InvalidAssignment(a) => BrokerError::InvalidReplicaAssignment(a.to_string()),
            E::NotUnderstood(_) => BrokerError::InvalidRequest(e.to_string()),
            other => BrokerError::ControllerUnavailable(other.to_string()),
        })
    }
}

impl Broker {
    /// Joins the cluster `node` belongs to: from here on the applied metadata decides which
    /// topics and replicas this node holds and whether it leads each. Until the metadata
    /// names a leader, local partitions take no writes. Internal topics stay local.
    pub fn join_cluster(
        self: &Arc<Self>,
        node: Arc<ClusterNode>,
        inter_broker: Arc<inter_broker::InterBroker>,
        shutdown: CancellationToken,
    ) -> Result<(), BrokerError> {
        let checkpoint = high_watermarks::HighWatermarks::read(&self.config.data_dir);
        for topic in self.topics.list() {
            for p in topic.partitions() {
                p.follow(None, sluice_cluster::LeaderEpoch(p.leader_epoch().0));
                p.restart_high_watermark(checkpoint.get(topic.id, p.index));
            }
        }
        self.producer_ids.use_cluster_blocks();
        self.topics.set_clustered();
        let replication = Arc::new(Replication {
            me: node.id(),
            node,
            fetchers: Mutex::new(HashMap::new()),
            creating: Default::default(),
            following: tokio::sync::watch::Sender::new(false),
            had_session: Default::default(),
            inherited: Mutex::new(None),
            inter_broker,
            shutdown: shutdown.clone(),
            saved_high_watermarks: Mutex::new(checkpoint),
            remote_ends: Default::default(),
        });
        self.replication
            .set(Arc::clone(&replication))
            .map_err(|_| BrokerError::InvalidRequest("already joined a cluster".into()))?;
        peer::install(self, &replication.node);
        let broker = Arc::clone(self);
        let stop = shutdown.clone();
        let mut applied = replication.node.metadata().applied();
        let gate = Arc::clone(&replication);
        tokio::spawn(async move {
            // A restarted node replays its metadata log from the start: an old state could
            // name it leader of a partition it no longer leads. Nothing is applied to the
            // replicas until this node has applied the metadata leader's read index.
            gate.catch_up(&stop).await;
            if stop.is_cancelled() {
                return;
            }
            gate.following.send_replace(true);
            tracing::info!("metadata caught up; following it");
            loop {
                let state = Arc::clone(&applied.borrow_and_update());
                broker.reconcile(&state.state);
                tokio::select! {
                    () = stop.cancelled() => return,
                    changed = applied.changed() => if changed.is_err() { return },
                }
            }
        });
        let broker = Arc::clone(self);
        let stop = shutdown.clone();
        tokio::spawn(async move {
            // Apart from the replication tick: a slow peer must not hold that up.
            let mut tick = tokio::time::interval(remote_ends::REFRESH);
            tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            loop {
                tokio::select! {
                    () = stop.cancelled() => return,
                    _ = tick.tick() => {}
                }
                broker.refresh_remote_ends().await;
            }
        });
        let broker = Arc::clone(self);
        tokio::spawn(async move {
            let mut tick = tokio::time::interval(Duration::from_millis(100));
            tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            let mut ticks = 0u64;
            loop {
                tokio::select! {
                    () = shutdown.cancelled() => return,
                    _ = tick.tick() => {}
                }
                broker.tick_replication().await;
                ticks += 1;
                if ticks.is_multiple_of(COORDINATOR_RECHECK_TICKS) {
                    broker.recheck_coordinators();
                }
                if ticks.is_multiple_of(HIGH_WATERMARK_CHECKPOINT_TICKS) {
                    let b = Arc::clone(&broker);
                    let _ = tokio::task::spawn_blocking(move || b.save_high_watermarks()).await;
                }
            }
        });
        Ok(())
    }

    pub fn replication(&self) -> Option<&Arc<Replication>> {
        self.replication.get()
    }

    /// Node `node`'s address for a client connected to `listener` (each listener tells its
    /// clients its own addresses); `None` for a node the metadata does not know.
    pub fn address_for(&self, listener: &str, node: i32) -> Option<(String, i32)> {
        match self.replication.get() {
            Some(r) => r
                .state()
                .state
                .nodes
                .get(&sluice_cluster::NodeId(node))
                .and_then(|n| n.registration.endpoint(listener))
                .map(|(host, port)| (host.to_string(), port)),
            // The first listener's address is `advertised_host:advertised_port` (the settings
            // make them one; embedders may set only those).
            None => (node == self.config.node_id).then(|| {
                let listeners = &self.config.security.listeners;
                match listeners.iter().position(|l| l.name == listener) {
                    Some(i) if i > 0 => (
                        listeners[i].advertised_host.clone(),
                        listeners[i].advertised_port,
                    ),
                    _ => (
                        self.config.advertised_host.clone(),
                        self.config.advertised_port,
                    ),
                }
            }),
        }
    }

    /// The registered nodes: (id, host, port, rack, fenced), with the addresses of
    /// `listener`. Just this one on a single node.
    pub fn cluster_nodes(&self, listener: &str) -> Vec<(i32, String, i32, Option<String>, bool)> {
        match self.replication.get() {
            Some(r) => r
                .state()
                .state
                .nodes
                .values()
                .filter_map(|n| {
                    let r = &n.registration;
                    let (host, port) = r.endpoint(listener)?;
                    Some((r.node.0, host.to_string(), port, r.rack.clone(), n.fenced))
                })
                .collect(),
            None => {
                let (host, port) = self
                    .address_for(listener, self.config.node_id)
                    .unwrap_or_default();
                vec![(self.config.node_id, host, port, None, false)]
            }
        }
    }

    /// The node Kafka's protocol calls the controller: the metadata group's leader (-1 while
    /// there is none), or this node on its own.
    pub fn controller_id(&self) -> i32 {
        match self.replication.get() {
            Some(r) => r
                .node
                .metadata()
                .leader()
                .and_then(|l| i32::try_from(l).ok())
                .unwrap_or(-1),
            None => self.config.node_id,
        }
    }

    /// The controller id Metadata and DescribeCluster answer: this node. Every node takes the
    /// controller's requests (CreateTopics, ElectLeaders, reassignments...) and passes them to
    /// the metadata leader itself, so naming that leader would only strand clients when it dies:
    /// librdkafka's admin client waits for the controller it cached to come back and refreshes
    /// metadata only every `topic.metadata.refresh.interval.ms` (5 min), so every admin call
    /// timed out after a metadata leader was killed. Kafka in KRaft mode likewise names a live
    /// broker, not its active controller; DescribeQuorum names the metadata leader.
    pub fn advertised_controller(&self) -> i32 {
        self.config.node_id
    }

    /// This node's own endpoint, where a single node coordinates every group and transaction:
    /// (id, host, port).
    pub fn coordinator_endpoint(&self) -> (i32, String, i32) {
        (
            self.config.node_id,
            self.config.advertised_host.clone(),
            self.config.advertised_port,
        )
    }

    /// Now on the cluster's liveness clock (ClusterNode::now_ms): what replica lag, the ISR and
    /// the replication throttles are timed with, so a stepped system clock neither drops every
    /// follower from the ISR nor keeps a dead one in it. The wall clock outside a cluster.
    pub fn liveness_ms(&self) -> i64 {
        self.replication
            .get()
            .map_or_else(|| self.clock.now_ms(), |r| r.node.now_ms())
    }

    /// Saves every local partition's high watermark when one moved since the last save
    /// ([`high_watermarks`]); blocking (one fsync). Run every 5 s and when the node stops.
    pub(crate) fn save_high_watermarks(&self) {
        let Some(replication) = self.replication.get() else {
            return;
        };
        // Read under the lock, so that of two saves at once the later one writes last.
        let mut saved = replication.saved_high_watermarks.lock();
        let now = high_watermarks::HighWatermarks::of(&self.topics);
        if *saved == now {
            return;
        }
        match now.write(&self.config.data_dir) {
            Ok(()) => *saved = now,
            Err(e) => {
                tracing::warn!(error = %e, "cannot save the high-watermark checkpoint")
            }
        }
    }

    /// Lagging followers leave the ISR; producer ids are topped up.
    async fn tick_replication(self: &Arc<Self>) {
        let Some(replication) = self.replication.get() else {
            return;
        };
        self.follow_session(replication);
        let now = replication.node.now_ms();
        for topic in self.topics.list() {
            for p in topic.partitions() {
                if let Some(change) = p.tick_replicas(now) {
                    self.send_isr_change(topic.id, &p, change);
                }
            }
        }
        if self
            .producer_ids
            .granted_left()
            .is_some_and(|left| left < PRODUCER_ID_LOW_WATER)
        {
            let me = replication.me;
            match replication
                .ask(ControllerRequest::ProducerIds { node: me })
                .await
            {
                Ok(ControllerReply::ProducerIds { first, count }) => {
                    self.producer_ids.grant(first, count)
                }
                Ok(other) => tracing::warn!(?other, "unexpected answer to a producer id request"),
                Err(e) => tracing::debug!(error = %e, "no producer ids yet"),
            }
        }
    }

    /// A node whose controller session lapsed (paused, cut off) may have been replaced: it
    /// steps down from every partition it leads, so that waiting writes fail, ListOffsets is
    /// refused and clients look for the new leader. Once the session holds again, the
    /// metadata decides anew what it leads.
    fn follow_session(self: &Arc<Self>, replication: &Replication) {
        use std::sync::atomic::Ordering;
        let holds = replication.node.holds_session();
        let had = replication.had_session.swap(holds, Ordering::AcqRel);
        if had && !holds {
            for topic in self.topics.list() {
                for p in topic.partitions() {
                    if p.progress().leading {
                        p.follow(None, sluice_cluster::LeaderEpoch(p.leader_epoch().0));
                    }
                }
            }
            tracing::warn!("controller session lapsed: stepped down from every partition led here");
        } else if !had && holds && *replication.following.borrow() {
            self.reconcile(&replication.state().state);
        }
    }

    /// Asks the controller for a leader's ISR change, in the background. Refused or lost, the
    /// leader may ask again; granted, the new partition epoch reaches the partition through
    /// reconciling (and if the ISR already was that, the change is settled here).
    pub(crate) fn send_isr_change(&self, topic: uuid::Uuid, p: &Arc<Partition>, change: IsrChange) {
        let Some(replication) = self.replication.get() else {
            return;
        };
        let replication = Arc::clone(replication);
        let p = Arc::clone(p);
        tokio::spawn(async move {
            let request = ControllerRequest::AlterPartition {
                node: replication.me,
                topic,
                partition: p.index,
                leader_epoch: change.epochs.0,
                partition_epoch: change.epochs.1,
                isr: change.isr.clone(),
            };
            match replication.ask(request).await {
                Ok(_) => {
                    // Made (a new partition epoch, which reconciling brings here) or already
                    // so (the same epoch): wait until this node's metadata shows which.
                    let asked = change.epochs.1;
                    let index = p.index as usize;
                    let settled = replication
                        .applied_until(|s| {
                            s.topics
                                .get(&topic)
                                .and_then(|t| t.partitions.get(index))
                                .is_none_or(|i| i.partition_epoch != asked || i.isr == change.isr)
                        })
                        .await;
                    let unchanged = replication
                        .state()
                        .state
                        .topics
                        .get(&topic)
                        .and_then(|t| t.partitions.get(index))
                        .is_some_and(|i| i.partition_epoch == asked);
                    if settled.is_err() || unchanged {
                        p.isr_change_settled(&change);
                    }
                    tracing::info!(partition = ?p, isr = ?change.isr, "ISR change granted");
                }
                Err(e) => {
                    tracing::info!(partition = ?p, isr = ?change.isr, error = %e, "ISR change refused");
                    p.isr_change_settled(&change);
                }
            }
        });
    }
}

/// `min.insync.replicas` of a topic: its own setting, or a majority of its replicas.
fn min_insync(configs: &std::collections::BTreeMap<String, String>, replicas: usize) -> usize {
    configs
        .get(crate::topic_config::MIN_INSYNC_REPLICAS)
        .and_then(|v| v.parse::<usize>().ok())
        .unwrap_or(replicas / 2 + 1)
}
