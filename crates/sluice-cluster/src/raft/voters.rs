//! Changing the voters of the metadata group at run time (Kafka's AddRaftVoter and
//! RemoveRaftVoter, KIP-853): a node that joined as a learner becomes a voter, and a voter goes
//! back to being a learner (it stays a broker and keeps applying the metadata). openraft makes
//! each change through a joint configuration, so a majority of both the old and the new voter
//! sets agrees on it (`docs/decisions/cluster-membership.md`).

use std::collections::BTreeSet;

use openraft::ChangeMembers;
use serde::{Deserialize, Serialize};

use super::network::{InternalRequest, InternalResponse, ProposeError};
use super::node::MetadataNode;

/// Why a voter change was refused.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, thiserror::Error)]
pub enum VoterChangeError {
    #[error(
        "node {0} is not in the metadata group: start it with --internal-listen first, so it \
         joins as a learner"
    )]
    NotMember(u64),
    #[error("node {0} is already a voter")]
    AlreadyVoter(u64),
    #[error("node {0} is not a voter")]
    NotVoter(u64),
    #[error("node {0} is the only voter: the metadata group needs at least one")]
    LastVoter(u64),
    #[error(transparent)]
    Propose(#[from] ProposeError),
}

impl MetadataNode {
    /// Makes `node` (a learner) a voter, or (`add == false`) a voter a learner; waits until
    /// the change is committed. Any node may ask: one that does not lead forwards to the one
    /// that does.
    pub async fn change_voter(&self, node: u64, add: bool) -> Result<(), VoterChangeError> {
        match self.leader() {
            Some(leader) if leader == self.id() => {}
            Some(_) => {
                return match self
                    .call_leader(&InternalRequest::ChangeVoter { node, add })
                    .await?
                {
                    InternalResponse::ChangeVoter(result) => result,
                    _ => Err(ProposeError::Unreachable("unexpected response".into()).into()),
                };
            }
            None => return Err(ProposeError::NoLeader.into()),
        }
        let voters = self.voter_ids();
        let change = if add {
            if voters.contains(&node) {
                return Err(VoterChangeError::AlreadyVoter(node));
            }
            if !self.is_member(node) {
                return Err(VoterChangeError::NotMember(node));
            }
            ChangeMembers::AddVoterIds(BTreeSet::from([node]))
        } else {
            if !voters.contains(&node) {
                return Err(VoterChangeError::NotVoter(node));
            }
            if voters.len() == 1 {
                return Err(VoterChangeError::LastVoter(node));
            }
            ChangeMembers::RemoveVoters(BTreeSet::from([node]))
        };
        // `retain`: a voter that leaves stays a learner (it is still a broker).
        self.raft()
            .change_membership(change, true)
            .await
            .map_err(|e| ProposeError::Raft(e.to_string()))?;
        tracing::info!(node, add, "metadata voters changed");
        Ok(())
    }

    /// The voters as this node's membership says.
    pub fn voter_ids(&self) -> BTreeSet<u64> {
        self.raft()
            .metrics()
            .borrow()
            .membership_config
            .membership()
            .voter_ids()
            .collect()
    }
}
