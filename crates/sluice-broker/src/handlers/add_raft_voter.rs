//! AddRaftVoter and RemoveRaftVoter (KIP-853; the Java Admin's `addRaftVoter` /
//! `removeRaftVoter`, `sluice cluster add-voter` / `remove-voter`): a node that joined the
//! metadata group as a learner (`--internal-listen`) becomes a voter, and a voter goes back to
//! being a learner (still a broker). The learner's internal listener is the one it joined with;
//! the request's `listeners` are not used. Errors: DUPLICATE_VOTER, VOTER_NOT_FOUND,
//! INCONSISTENT_CLUSTER_ID, INVALID_REQUEST (not a member yet, the last voter, a single node),
//! NOT_CONTROLLER while no metadata leader is known, REQUEST_TIMED_OUT when it is unreachable.

use kafka_protocol::error::ResponseError;
use kafka_protocol::messages::{AddRaftVoterRequest, AddRaftVoterResponse, ResponseKind};
use kafka_protocol::protocol::StrBytes;
use sluice_cluster::raft::network::ProposeError;
use sluice_cluster::raft::voters::VoterChangeError;
use sluice_wire::Reply;

use super::str_bytes;
use crate::broker::Broker;
use crate::handlers::{Call, Versions};

pub const VERSIONS: Versions = Versions::new(0, 0);

pub fn handle(broker: &Broker, request: AddRaftVoterRequest, _call: &Call) -> Reply {
    change(
        broker,
        request.cluster_id.as_ref(),
        request.voter_id,
        true,
        |code, message| {
            ResponseKind::AddRaftVoter(
                AddRaftVoterResponse::default()
                    .with_error_code(code)
                    .with_error_message(message),
            )
        },
    )
}

/// Checks and makes the change for both APIs; `answer(code, message)` builds the response.
pub(super) fn change(
    broker: &Broker,
    cluster_id: Option<&StrBytes>,
    voter: i32,
    add: bool,
    answer: fn(i16, Option<StrBytes>) -> ResponseKind,
) -> Reply {
    let fail = move |e: ResponseError, message: String| answer(e.code(), Some(str_bytes(&message)));
    let Some(replication) = broker.replication().cloned() else {
        return Reply::Ready(Box::new(fail(
            ResponseError::InvalidRequest,
            "this single node has no metadata voters to change: start the nodes with --cluster"
                .into(),
        )));
    };
    let ours = broker.cluster_id().to_string();
    if let Some(id) = cluster_id.filter(|id| id.as_str() != ours) {
        return Reply::Ready(Box::new(fail(
            ResponseError::InconsistentClusterId,
            format!("cluster id {id} is not this cluster's ({ours})"),
        )));
    }
    let Ok(node) = u64::try_from(voter) else {
        return Reply::Ready(Box::new(fail(
            ResponseError::InvalidRequest,
            format!("{voter} is not a node id"),
        )));
    };
    Reply::Later(Box::pin(async move {
        let outcome = replication.node().metadata().change_voter(node, add).await;
        Some(match outcome {
            Ok(()) => answer(0, None),
            Err(e) => {
                let code = match &e {
                    VoterChangeError::AlreadyVoter(_) => ResponseError::DuplicateVoter,
                    VoterChangeError::NotVoter(_) => ResponseError::VoterNotFound,
                    VoterChangeError::NotMember(_) | VoterChangeError::LastVoter(_) => {
                        ResponseError::InvalidRequest
                    }
                    VoterChangeError::Propose(ProposeError::NoLeader)
                    | VoterChangeError::Propose(ProposeError::NotLeader(_)) => {
                        ResponseError::NotController
                    }
                    VoterChangeError::Propose(ProposeError::Unreachable(_)) => {
                        ResponseError::RequestTimedOut
                    }
                    VoterChangeError::Propose(ProposeError::Raft(_)) => {
                        ResponseError::UnknownServerError
                    }
                };
                fail(code, e.to_string())
            }
        })
    }))
}
