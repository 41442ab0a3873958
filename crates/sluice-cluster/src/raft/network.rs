//! The internal listener's protocol: length-prefixed JSON frames, one request and its response
//! at a time per connection. It carries the metadata group's Raft RPCs and what nodes ask of
//! the metadata leader, and the brokers' own calls to each other ([`crate::peer`]). (Partition
//! data does not travel here: followers use the Kafka Fetch API.) The bytes go over plain TCP
//! or mutual TLS ([`super::transport`]).

use std::sync::Arc;
use std::time::Duration;

use openraft::error::{
    InstallSnapshotError, NetworkError, RPCError, RaftError, RemoteError, Unreachable,
};
use openraft::network::{RPCOption, RaftNetwork, RaftNetworkFactory};
use openraft::raft::{
    AppendEntriesRequest, AppendEntriesResponse, InstallSnapshotRequest, InstallSnapshotResponse,
    VoteRequest, VoteResponse,
};
use openraft::BasicNode;
use serde::{Deserialize, Serialize};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::TcpListener;

use super::pool::ConnectionPool;
use super::transport::{looks_like_tls, InternalStream, Transport};
use super::{CommandOutcome, MetaTypes, MetadataCommand};
use crate::ids::NodeId;
use crate::metadata::NodeRegistration;

/// Frames larger than this close the connection.
const MAX_FRAME_BYTES: usize = 64 << 20;

#[derive(Debug, Serialize, Deserialize)]
pub enum InternalRequest {
    Append(AppendEntriesRequest<MetaTypes>),
    Vote(VoteRequest<u64>),
    Snapshot(InstallSnapshotRequest<MetaTypes>),
    /// A command for the metadata leader, from a node that is not it.
    Propose(MetadataCommand),
    /// A node (re)starting, for the controller.
    Register(NodeRegistration),
    /// A node is alive, for the controller.
    Heartbeat {
        node: NodeId,
        /// The process's incarnation: a restarted node is live only once it registered
        /// again (absent from nodes that predate it: not checked).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        incarnation: Option<uuid::Uuid>,
    },
    /// A request for the controller (topic administration, ISR changes, producer ids).
    Controller(crate::requests::ControllerRequest),
    /// The metadata leader's read index: the log index a node must have applied to have seen
    /// everything committed before it asked.
    ReadIndex,
    /// The metadata quorum as its leader sees it (DescribeQuorum).
    DescribeQuorum,
    /// A broker-to-broker call (see [`crate::peer`]), as the broker's JSON.
    Peer(String),
    /// A node outside the voters asks to join the metadata group as a learner (a non-voting
    /// member that applies the log and hosts replicas).
    AddLearner {
        node: u64,
        addr: String,
    },
    /// A learner becomes a voter (`add`), or a voter a learner (AddRaftVoter, RemoveRaftVoter).
    ChangeVoter {
        node: u64,
        add: bool,
    },
    /// How far the receiver's metadata log goes (asked by a voter starting with an empty store:
    /// [`super::wiped_voter`]).
    LogState,
}

#[derive(Debug, Serialize, Deserialize)]
pub enum InternalResponse {
    Append(Result<AppendEntriesResponse<u64>, RaftError<u64>>),
    Vote(Result<VoteResponse<u64>, RaftError<u64>>),
    Snapshot(Result<InstallSnapshotResponse<u64>, RaftError<u64, InstallSnapshotError>>),
    Propose(Result<CommandOutcome, ProposeError>),
    /// To Register and Heartbeat: whether the node is registered and unfenced now.
    Registered(Result<bool, ProposeError>),
    Controller(Result<crate::requests::ControllerReply, crate::requests::ControllerError>),
    ReadIndex(Result<u64, ProposeError>),
    Quorum(Result<super::quorum::QuorumInfo, ProposeError>),
    Peer(Result<String, String>),
    AddLearner(Result<(), ProposeError>),
    ChangeVoter(Result<(), super::voters::VoterChangeError>),
    LogState(super::wiped_voter::LogState),
    /// To a request this node could not decode (a newer node's request it does not know):
    /// answered so the connection, and the heartbeats it may carry, go on.
    Undecodable(String),
}

/// A whole frame whose JSON this node could not decode: the stream is still in step.
#[derive(Debug, thiserror::Error)]
#[error("undecodable internal request: {0}")]
struct Undecodable(serde_json::Error);

fn undecodable(e: &std::io::Error) -> Option<&Undecodable> {
    e.get_ref()
        .and_then(|inner| inner.downcast_ref::<Undecodable>())
}

/// Why a proposal did not commit.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, thiserror::Error)]
pub enum ProposeError {
    #[error("no metadata leader is known")]
    NoLeader,
    #[error("node {0} is not the metadata leader")]
    NotLeader(u64),
    #[error("metadata leader unreachable: {0}")]
    Unreachable(String),
    #[error("metadata group failed: {0}")]
    Raft(String),
}

/// What answers the internal listener's requests.
pub trait InternalHandler: Send + Sync + 'static {
    fn handle(
        &self,
        request: InternalRequest,
    ) -> impl std::future::Future<Output = InternalResponse> + Send;

    /// A connection that carried `node`'s heartbeats (or registration) closed.
    fn heartbeats_closed(self: Arc<Self>, _node: NodeId) {}
}

async fn write_frame<T: Serialize>(
    stream: &mut (impl AsyncWrite + Unpin),
    value: &T,
) -> std::io::Result<()> {
    let json = serde_json::to_vec(value).map_err(std::io::Error::other)?;
    let mut frame = Vec::with_capacity(json.len() + 4);
    frame.extend_from_slice(&(json.len() as u32).to_be_bytes());
    frame.extend_from_slice(&json);
    stream.write_all(&frame).await
}

async fn read_frame<T: for<'de> Deserialize<'de>>(
    stream: &mut (impl AsyncRead + Unpin),
) -> std::io::Result<T> {
    let first = stream.read_u32().await?;
    let len = first as usize;
    if len > MAX_FRAME_BYTES && looks_like_tls(first) {
        return Err(std::io::Error::new(
            std::io::ErrorKind::PermissionDenied,
            "a TLS handshake: the peer has internal_tls_* settings and this node has none",
        ));
    }
    if len > MAX_FRAME_BYTES {
        return Err(std::io::Error::other(format!("frame of {len} bytes")));
    }
    let mut buf = vec![0; len];
    stream.read_exact(&mut buf).await?;
    serde_json::from_slice(&buf).map_err(|e| std::io::Error::other(Undecodable(e)))
}

/// Serves the internal listener until `shutdown` fires.
pub async fn serve<H: InternalHandler>(
    listener: TcpListener,
    transport: Arc<Transport>,
    handler: Arc<H>,
    shutdown: tokio_util::sync::CancellationToken,
) {
    loop {
        let accepted = tokio::select! {
            () = shutdown.cancelled() => return,
            accepted = listener.accept() => accepted,
        };
        let Ok((tcp, peer)) = accepted else {
            tokio::time::sleep(Duration::from_millis(50)).await;
            continue;
        };
        let handler = Arc::clone(&handler);
        let transport = Arc::clone(&transport);
        let shutdown = shutdown.clone();
        tokio::spawn(async move {
            let handshake = tokio::select! {
                () = shutdown.cancelled() => return,
                s = transport.accept(tcp) => s,
            };
            let mut stream = match handshake {
                Ok(s) => s,
                Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => return,
                Err(e) => {
                    transport.log_refusal(peer, &e);
                    return;
                }
            };
            // Whose heartbeats this connection carries: when it closes, that node may be gone.
            let mut heartbeats: Option<NodeId> = None;
            loop {
                let request = tokio::select! {
                    () = shutdown.cancelled() => return,
                    r = read_frame::<InternalRequest>(&mut stream) => r,
                };
                let request = match request {
                    Ok(r) => r,
                    Err(e) if undecodable(&e).is_some() => {
                        tracing::warn!(%peer, error = %e, "an internal request this node does not know (a newer node's?)");
                        let answer = InternalResponse::Undecodable(e.to_string());
                        if write_frame(&mut stream, &answer).await.is_err() {
                            break;
                        }
                        continue;
                    }
                    Err(e) if e.kind() == std::io::ErrorKind::PermissionDenied => {
                        transport.log_refusal(peer, &e);
                        break;
                    }
                    Err(e) => {
                        if e.kind() != std::io::ErrorKind::UnexpectedEof {
                            tracing::debug!(%peer, error = %e, "internal connection closed");
                        }
                        break;
                    }
                };
                match &request {
                    InternalRequest::Heartbeat { node, .. } => heartbeats = Some(*node),
                    InternalRequest::Register(r) => heartbeats = Some(r.node),
                    _ => {}
                }
                let response = handler.handle(request).await;
                if write_frame(&mut stream, &response).await.is_err() {
                    break;
                }
            }
            if let Some(node) = heartbeats {
                handler.heartbeats_closed(node);
            }
        });
    }
}

/// A connection to one peer's internal listener, opened on first use and again after an
/// error.
pub struct PeerClient {
    addr: String,
    transport: Arc<Transport>,
    stream: Option<InternalStream>,
}

impl std::fmt::Debug for PeerClient {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "PeerClient({}, {:?})", self.addr, self.transport)
    }
}

impl PeerClient {
    pub fn new(addr: String, transport: Arc<Transport>) -> PeerClient {
        PeerClient {
            addr,
            transport,
            stream: None,
        }
    }

    /// Sends `request` and waits for the answer, for at most `timeout`.
    pub async fn call(
        &mut self,
        request: &InternalRequest,
        timeout: Duration,
    ) -> std::io::Result<InternalResponse> {
        let result = tokio::time::timeout(timeout, async {
            if self.stream.is_none() {
                self.stream = Some(self.transport.connect(&self.addr).await?);
            }
            let stream = self
                .stream
                .as_mut()
                .ok_or_else(|| std::io::Error::other("not connected"))?;
            write_frame(stream, request).await?;
            read_frame(stream).await
        })
        .await
        .unwrap_or_else(|_| {
            Err(std::io::Error::new(
                std::io::ErrorKind::TimedOut,
                "timed out",
            ))
        });
        if result.is_err() {
            // The connection may hold half a frame: start afresh next time.
            self.stream = None;
        }
        result
    }
}

/// openraft's view of the network: a client per target, on the node's connection pool.
#[derive(Debug, Clone)]
pub struct Network {
    pool: Arc<ConnectionPool>,
}

impl Network {
    pub fn new(pool: Arc<ConnectionPool>) -> Network {
        Network { pool }
    }
}

impl RaftNetworkFactory<MetaTypes> for Network {
    type Network = PooledClient;

    async fn new_client(&mut self, _target: u64, node: &BasicNode) -> PooledClient {
        PooledClient {
            addr: node.addr.clone(),
            pool: Arc::clone(&self.pool),
        }
    }
}

/// One target's RPCs, each on a pooled connection.
#[derive(Debug)]
pub struct PooledClient {
    addr: String,
    pool: Arc<ConnectionPool>,
}

impl PooledClient {
    async fn call(
        &self,
        request: &InternalRequest,
        timeout: Duration,
    ) -> std::io::Result<InternalResponse> {
        self.pool.call(&self.addr, request, timeout).await
    }
}

type RpcResult<T, E = openraft::error::Infallible> =
    Result<T, RPCError<u64, BasicNode, RaftError<u64, E>>>;

fn unreachable<E: std::error::Error>(
    e: std::io::Error,
) -> RPCError<u64, BasicNode, RaftError<u64, E>> {
    if e.kind() == std::io::ErrorKind::ConnectionRefused {
        RPCError::Unreachable(Unreachable::new(&e))
    } else {
        RPCError::Network(NetworkError::new(&e))
    }
}

fn unexpected<E: std::error::Error>() -> RPCError<u64, BasicNode, RaftError<u64, E>> {
    RPCError::Network(NetworkError::new(&std::io::Error::other(
        "unexpected response kind",
    )))
}

impl RaftNetwork<MetaTypes> for PooledClient {
    async fn append_entries(
        &mut self,
        rpc: AppendEntriesRequest<MetaTypes>,
        option: RPCOption,
    ) -> RpcResult<AppendEntriesResponse<u64>> {
        match self
            .call(&InternalRequest::Append(rpc), option.hard_ttl())
            .await
        {
            Ok(InternalResponse::Append(r)) => {
                r.map_err(|e| RPCError::RemoteError(RemoteError::new(0, e)))
            }
            Ok(_) => Err(unexpected()),
            Err(e) => Err(unreachable(e)),
        }
    }

    async fn install_snapshot(
        &mut self,
        rpc: InstallSnapshotRequest<MetaTypes>,
        option: RPCOption,
    ) -> RpcResult<InstallSnapshotResponse<u64>, InstallSnapshotError> {
        match self
            .call(&InternalRequest::Snapshot(rpc), option.hard_ttl())
            .await
        {
            Ok(InternalResponse::Snapshot(r)) => {
                r.map_err(|e| RPCError::RemoteError(RemoteError::new(0, e)))
            }
            Ok(_) => Err(unexpected()),
            Err(e) => Err(unreachable(e)),
        }
    }

    async fn vote(
        &mut self,
        rpc: VoteRequest<u64>,
        option: RPCOption,
    ) -> RpcResult<VoteResponse<u64>> {
        match self
            .call(&InternalRequest::Vote(rpc), option.hard_ttl())
            .await
        {
            Ok(InternalResponse::Vote(r)) => {
                r.map_err(|e| RPCError::RemoteError(RemoteError::new(0, e)))
            }
            Ok(_) => Err(unexpected()),
            Err(e) => Err(unreachable(e)),
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)] // test code: a failed unwrap is a failed test

    use super::*;

    struct Handler;

    impl InternalHandler for Handler {
        async fn handle(&self, _request: InternalRequest) -> InternalResponse {
            InternalResponse::ReadIndex(Ok(7))
        }
    }

    /// A newer node's request this node does not know is answered as such, and the
    /// connection (with the heartbeats it carries) goes on.
    #[tokio::test]
    async fn an_unknown_request_is_answered_and_the_connection_kept() {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap().to_string();
        let handler = Arc::new(Handler);
        let shutdown = tokio_util::sync::CancellationToken::new();
        let transport = Arc::new(Transport::plain());
        tokio::spawn(serve(
            listener,
            Arc::clone(&transport),
            handler,
            shutdown.clone(),
        ));
        let mut stream = transport.connect(&addr).await.unwrap();
        let heartbeat = InternalRequest::Heartbeat {
            node: NodeId(2),
            incarnation: None,
        };
        write_frame(&mut stream, &heartbeat).await.unwrap();
        let _: InternalResponse = read_frame(&mut stream).await.unwrap();

        write_frame(&mut stream, &serde_json::json!({"FromTheFuture": {"x": 1}}))
            .await
            .unwrap();
        let answer: InternalResponse = read_frame(&mut stream).await.unwrap();
        assert!(
            matches!(&answer, InternalResponse::Undecodable(why) if why.contains("FromTheFuture")),
            "{answer:?}"
        );
        write_frame(&mut stream, &InternalRequest::ReadIndex)
            .await
            .unwrap();
        let answer: InternalResponse = read_frame(&mut stream).await.unwrap();
        assert!(
            matches!(answer, InternalResponse::ReadIndex(Ok(7))),
            "{answer:?}"
        );
        shutdown.cancel();
    }
}
