//! A node of the cluster at run time: its member of the metadata group, the controller while it
//! leads that group, and its own registration and heartbeats.
//!
//! ```text
//!   every node:   heartbeat every heartbeat_interval ──▶ controller (on the metadata leader)
//!                 (refused: fenced or unknown) ──▶ register again
//!   the leader:   tick every tick_interval ──▶ controller.tick ──▶ records ──▶ metadata log
//! ```
//! The controller's decisions are taken one at a time (a lock held from computing the records
//! until they are applied), always against the applied state; a node that just became leader
//! first waits until it has applied everything committed before (`ensure_linearizable`), then
//! starts a controller that gives every node a full session.

use std::sync::Arc;
use std::time::Duration;

use sluice_log::Clock;
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;

use crate::controller::{Controller, ControllerConfig};
use crate::ids::NodeId;
use crate::metadata::{ClusterState, MetadataRecord, NodeRegistration};
use crate::peer::{PeerError, PeerHandler, Peers};
use crate::raft::network::{
    self, InternalHandler, InternalRequest, InternalResponse, ProposeError,
};
use crate::raft::node::{MetadataConfig, MetadataNode, StartError};
use crate::raft::quorum::QuorumInfo;
use crate::requests::{ControllerError, ControllerReply, ControllerRequest};

#[derive(Debug, Clone)]
pub struct ClusterConfig {
    /// This node as it announces itself; `registration.node` is its id.
    pub registration: NodeRegistration,
    pub metadata: MetadataConfig,
    pub controller: ControllerConfig,
    pub heartbeat_interval: Duration,
    pub tick_interval: Duration,
}

pub struct ClusterNode {
    registration: NodeRegistration,
    metadata: Arc<MetadataNode>,
    controller_config: ControllerConfig,
    /// The controller of the leadership term it was made in.
    controller: tokio::sync::Mutex<Option<(u64, Controller)>>,
    /// Times sessions: it must not be stepped with the system clock (`MonotonicClock`), or a
    /// clock set back would keep a dead node's session alive.
    clock: Arc<dyn Clock>,
    /// When the controller last confirmed this node registered and unfenced (ms).
    confirmed_live_ms: std::sync::atomic::AtomicI64,
    peers: Peers,
}

impl std::fmt::Debug for ClusterNode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "ClusterNode({})", self.registration.node)
    }
}

impl ClusterNode {
    /// Starts the metadata group member, serves the internal listener, and runs the heartbeat
    /// and controller loops until `shutdown`.
    pub async fn start(
        config: ClusterConfig,
        listener: TcpListener,
        clock: Arc<dyn Clock>,
        shutdown: CancellationToken,
    ) -> Result<Arc<ClusterNode>, StartError> {
        let transport = Arc::clone(&config.metadata.transport);
        let peers = Peers::new(Arc::clone(&transport));
        let metadata = MetadataNode::start(config.metadata, shutdown.clone()).await?;
        let node = Arc::new(ClusterNode {
            registration: config.registration,
            metadata,
            controller_config: config.controller,
            controller: tokio::sync::Mutex::new(None),
            clock,
            confirmed_live_ms: std::sync::atomic::AtomicI64::new(i64::MIN),
            peers,
        });
        tokio::spawn(network::serve(
            listener,
            transport,
            Arc::clone(&node),
            shutdown.clone(),
        ));
        let beating = Arc::clone(&node);
        let stop = shutdown.clone();
        tokio::spawn(async move {
            let mut tick = tokio::time::interval(config.heartbeat_interval);
            tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            loop {
                tokio::select! {
                    () = stop.cancelled() => return,
                    _ = tick.tick() => beating.heartbeat_once().await,
                }
            }
        });
        let ticking = Arc::clone(&node);
        tokio::spawn(async move {
            let mut tick = tokio::time::interval(config.tick_interval);
            tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            let mut probed_term = None;
            loop {
                tokio::select! {
                    () = shutdown.cancelled() => return,
                    _ = tick.tick() => {}
                }
                if ticking.metadata.is_leader() {
                    let term = ticking.metadata.raft().metrics().borrow().current_term;
                    if probed_term != Some(term) {
                        probed_term = Some(term);
                        ticking.probe_all();
                    }
                    if let Err(e) = ticking.decide(|c, s, now| c.tick(s, now)).await {
                        tracing::debug!(error = %e, "controller tick");
                    }
                }
            }
        });
        Ok(node)
    }

    pub fn id(&self) -> NodeId {
        self.registration.node
    }

    pub fn registration(&self) -> &NodeRegistration {
        &self.registration
    }

    /// This node's liveness clock (ms): the clock sessions are timed with, for every other
    /// duration the replication layer measures (replica lag, rate limits). Not for stamps.
    pub fn now_ms(&self) -> i64 {
        self.clock.now_ms()
    }

    /// Whether the controller confirmed this node live within its session timeout: a leader
    /// that cannot say so may have been replaced (a paused or cut-off node) and must not take
    /// writes.
    pub fn holds_session(&self) -> bool {
        let last = self
            .confirmed_live_ms
            .load(std::sync::atomic::Ordering::Acquire);
        self.clock.now_ms().saturating_sub(last) <= self.controller_config.session_timeout_ms
    }

    /// Installs what answers the brokers' calls that arrive at this node.
    pub fn set_peer_handler(&self, handler: PeerHandler) {
        self.peers.set_handler(handler);
    }

    /// Sends a broker's call to `node`'s internal listener and waits for its answer.
    pub async fn call_peer(
        &self,
        node: NodeId,
        body: String,
        timeout: Duration,
    ) -> Result<String, PeerError> {
        let addr = self
            .state()
            .state
            .nodes
            .get(&node)
            .map(|n| n.registration.internal_addr.clone())
            .ok_or(PeerError::UnknownNode(node))?;
        self.peers.call(node, &addr, body, timeout).await
    }

    pub fn metadata(&self) -> &Arc<MetadataNode> {
        &self.metadata
    }

    /// The applied cluster state, now.
    pub fn state(&self) -> Arc<crate::raft::state_machine::Applied> {
        Arc::clone(&self.metadata.applied().borrow())
    }

    /// Runs one controller decision on this node, which must lead the metadata group: computes
    /// records against the applied state and waits until they are applied.
    pub async fn decide(
        &self,
        decision: impl FnOnce(&mut Controller, &ClusterState, i64) -> Vec<MetadataRecord>,
    ) -> Result<(), ProposeError> {
        self.decide_with(|c, s, now| Ok::<_, ProposeError>((decision(c, s, now), ())))
            .await
    }

    /// Like [`ClusterNode::decide`], for a decision that may be refused and has an answer.
    async fn decide_with<T, E: From<ProposeError>>(
        &self,
        decision: impl FnOnce(
            &mut Controller,
            &ClusterState,
            i64,
        ) -> Result<(Vec<MetadataRecord>, T), E>,
    ) -> Result<T, E> {
        let mut guard = self.controller.lock().await;
        let controller = self.current_controller(&mut guard).await?;
        let (records, answer) = {
            let applied = self.metadata.applied();
            let applied = applied.borrow();
            decision(controller, &applied.state, self.clock.now_ms())?
        };
        if records.is_empty() {
            return Ok(answer);
        }
        let outcome = self
            .metadata
            .propose_local(crate::raft::MetadataCommand { records })
            .await?;
        if let Some(why) = outcome.refused {
            // The controller computed against the applied state under this lock: a refusal
            // is a bug in it, not a race.
            tracing::error!(%why, "a controller decision was refused");
            return Err(ProposeError::Raft(format!("refused: {why}")).into());
        }
        Ok(answer)
    }

    /// Asks the controller, wherever it runs, and waits until its decision is applied on the
    /// metadata leader.
    pub async fn ask(
        &self,
        request: ControllerRequest,
    ) -> Result<ControllerReply, ControllerError> {
        if self.metadata.is_leader() {
            return self.ask_here(request).await;
        }
        match self
            .metadata
            .call_leader(&InternalRequest::Controller(request))
            .await?
        {
            InternalResponse::Controller(r) => r,
            InternalResponse::Undecodable(why) => Err(ControllerError::NotUnderstood(why)),
            _ => Err(ProposeError::Unreachable("unexpected response".into()).into()),
        }
    }

    /// The metadata quorum as its leader sees it, asked there when this node does not lead.
    pub async fn describe_quorum(&self) -> Result<QuorumInfo, ProposeError> {
        if self.metadata.is_leader() {
            return self.metadata.quorum_here();
        }
        match self
            .metadata
            .call_leader(&InternalRequest::DescribeQuorum)
            .await?
        {
            InternalResponse::Quorum(r) => r,
            _ => Err(ProposeError::Unreachable("unexpected response".into())),
        }
    }

    /// The metadata leader's read index (confirmed with a quorum, so a deposed leader cannot
    /// answer it): once this node has applied up to it, its metadata holds everything the
    /// cluster had committed when it asked. A restarted node waits for this before it acts on
    /// its metadata, which may otherwise be an old state replayed from its own log.
    pub async fn read_index(&self) -> Result<u64, ProposeError> {
        if self.metadata.is_leader() {
            return self.metadata.read_index_here().await;
        }
        match self
            .metadata
            .call_leader(&InternalRequest::ReadIndex)
            .await?
        {
            InternalResponse::ReadIndex(r) => r,
            _ => Err(ProposeError::Unreachable("unexpected response".into())),
        }
    }

    async fn ask_here(
        &self,
        request: ControllerRequest,
    ) -> Result<ControllerReply, ControllerError> {
        let ControllerRequest::RemoveNode { node } = request else {
            return self
                .decide_with(|c, s, _| crate::requests::decide(c, s, request))
                .await;
        };
        // A voter stays: the voter set does not change at run time.
        let id = u64::try_from(node.0).unwrap_or(u64::MAX);
        if self.metadata.is_voter(id) {
            return Err(ControllerError::Refused(format!(
                "node {node} is a voter of the metadata group; only nodes that joined with \
                 internal_listen can be removed"
            )));
        }
        let reply = match self
            .decide_with(|c, s, _| crate::requests::decide(c, s, request))
            .await
        {
            // Gone from the cluster state already, but still a learner: an earlier removal
            // stopped between its two steps. Finish it.
            Err(ControllerError::UnknownNode(_)) if self.metadata.is_member(id) => {
                ControllerReply::Done
            }
            decided => decided?,
        };
        // Then it leaves the metadata group: the leader stops sending it the log.
        self.metadata.remove_learner(id).await?;
        Ok(reply)
    }

    /// The controller of the current term, made (after applying everything committed before)
    /// if leadership is new.
    async fn current_controller<'a>(
        &self,
        guard: &'a mut Option<(u64, Controller)>,
    ) -> Result<&'a mut Controller, ProposeError> {
        let (leader, term) = {
            let metrics = self.metadata.raft().metrics();
            let m = metrics.borrow();
            (m.current_leader, m.current_term)
        };
        if leader != Some(self.metadata.id()) {
            return Err(leader.map_or(ProposeError::NoLeader, ProposeError::NotLeader));
        }
        if guard.as_ref().map(|(t, _)| *t) != Some(term) {
            self.metadata
                .raft()
                .ensure_linearizable()
                .await
                .map_err(|e| ProposeError::Raft(e.to_string()))?;
            let applied = self.metadata.applied();
            let controller = Controller::new(
                self.controller_config.clone(),
                &applied.borrow().state,
                self.clock.now_ms(),
            );
            tracing::info!(term, "controller started");
            *guard = Some((term, controller));
        }
        match guard {
            Some((_, controller)) => Ok(controller),
            None => Err(ProposeError::NoLeader),
        }
    }

    async fn register_here(&self, registration: NodeRegistration) -> Result<bool, ProposeError> {
        self.decide(|c, s, now| c.register(s, registration, now))
            .await?;
        Ok(true)
    }

    async fn heartbeat_here(
        &self,
        node: NodeId,
        incarnation: Option<uuid::Uuid>,
    ) -> Result<bool, ProposeError> {
        let mut guard = self.controller.lock().await;
        let controller = self.current_controller(&mut guard).await?;
        let applied = self.metadata.applied();
        let live = controller.heartbeat(
            &applied.borrow().state,
            node,
            incarnation,
            self.clock.now_ms(),
        );
        Ok(live)
    }

    /// Tells the controller this node is alive, registering it if the controller does not
    /// know it as live (first start, a restart, or fenced while it was away).
    async fn heartbeat_once(&self) {
        let node = self.registration.node;
        let incarnation = self.registration.incarnation;
        // The lease runs from before the question: the controller's session began no earlier.
        let before = self.clock.now_ms();
        let live = if self.metadata.is_leader() {
            // A metadata leader that was paused still believes it leads until it hears of a
            // newer term: it confirms its leadership with a quorum before it confirms itself.
            match self.metadata.raft().ensure_linearizable().await {
                Ok(_) => self.heartbeat_here(node, Some(incarnation)).await,
                Err(e) => Err(ProposeError::Raft(e.to_string())),
            }
        } else {
            // Bounded by half a session: a heartbeat stuck on a leader that went away (a cut
            // link drops packets; nothing answers) must not make this node miss the new
            // controller's first session and be fenced.
            let within = Duration::from_millis(
                u64::try_from(self.controller_config.session_timeout_ms / 2)
                    .unwrap_or(500)
                    .max(100),
            );
            match self
                .metadata
                .call_leader_within(
                    &InternalRequest::Heartbeat {
                        node,
                        incarnation: Some(incarnation),
                    },
                    within,
                )
                .await
            {
                Ok(InternalResponse::Registered(r)) => r,
                Ok(_) => Err(ProposeError::Unreachable("unexpected response".into())),
                Err(e) => Err(e),
            }
        };
        let confirm = || {
            self.confirmed_live_ms
                .fetch_max(before, std::sync::atomic::Ordering::AcqRel);
        };
        let registered = match live {
            Ok(true) => return confirm(),
            Ok(false) => {
                if self.metadata.is_leader() {
                    self.register_here(self.registration.clone()).await
                } else {
                    match self
                        .metadata
                        .call_leader(&InternalRequest::Register(self.registration.clone()))
                        .await
                    {
                        Ok(InternalResponse::Registered(r)) => r,
                        Ok(_) => Err(ProposeError::Unreachable("unexpected response".into())),
                        Err(e) => Err(e),
                    }
                }
            }
            Err(e) => Err(e),
        };
        match registered {
            // Registered now: confirmed at the next heartbeat, once the change is applied.
            Ok(_) => {}
            Err(e) => tracing::debug!(error = %e, "heartbeat to the controller failed"),
        }
    }
}

impl InternalHandler for ClusterNode {
    async fn handle(&self, request: InternalRequest) -> InternalResponse {
        match request {
            InternalRequest::Register(registration) => {
                InternalResponse::Registered(self.register_here(registration).await)
            }
            InternalRequest::Heartbeat { node, incarnation } => {
                InternalResponse::Registered(self.heartbeat_here(node, incarnation).await)
            }
            InternalRequest::Controller(request) => {
                InternalResponse::Controller(self.ask_here(request).await)
            }
            InternalRequest::Peer(body) => InternalResponse::Peer(self.peers.answer(body).await),
            other => self.metadata.handle(other).await,
        }
    }

    fn heartbeats_closed(self: Arc<Self>, node: NodeId) {
        if node != self.id() && self.metadata.is_leader() {
            tokio::spawn(async move { self.probe(node).await });
        }
    }
}

impl ClusterNode {
    /// On the controller: whether `node`'s process is gone ([`crate::probe`]). If so, its
    /// session ends at once and it is fenced without waiting for the session timeout.
    async fn probe(&self, node: NodeId) {
        let addr = match self.state().state.nodes.get(&node) {
            Some(n) if !n.fenced => n.registration.internal_addr.clone(),
            _ => return,
        };
        if !crate::probe::refuses_connections(&addr).await {
            return;
        }
        tracing::info!(%node, %addr, "node refuses connections: its session ends now");
        let fenced = self
            .decide(|c, s, now| {
                c.expire(node);
                c.tick(s, now)
            })
            .await;
        if let Err(e) = fenced {
            tracing::debug!(%node, error = %e, "could not fence a node that is gone");
        }
    }

    /// On a new controller: probes every other live node once (a controller that took over
    /// from a dead one has no closed connection to tell it so).
    fn probe_all(self: &Arc<Self>) {
        let me = self.id();
        let nodes: Vec<NodeId> = self
            .state()
            .state
            .live_nodes()
            .map(|n| n.registration.node)
            .filter(|n| *n != me)
            .collect();
        for node in nodes {
            let prober = Arc::clone(self);
            tokio::spawn(async move { prober.probe(node).await });
        }
    }
}
