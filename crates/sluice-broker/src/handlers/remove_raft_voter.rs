//! RemoveRaftVoter (KIP-853): a voter of the metadata group becomes a learner; it stays a
//! broker. Checked and made as AddRaftVoter is ([`super::add_raft_voter`]).

use kafka_protocol::messages::{RemoveRaftVoterRequest, RemoveRaftVoterResponse, ResponseKind};
use sluice_wire::Reply;

use crate::broker::Broker;
use crate::handlers::{Call, Versions};

pub const VERSIONS: Versions = Versions::new(0, 0);

pub fn handle(broker: &Broker, request: RemoveRaftVoterRequest, _call: &Call) -> Reply {
    super::add_raft_voter::change(
        broker,
        request.cluster_id.as_ref(),
        request.voter_id,
        false,
        |code, message| {
            ResponseKind::RemoveRaftVoter(
                RemoveRaftVoterResponse::default()
                    .with_error_code(code)
                    .with_error_message(message),
            )
        },
    )
}
