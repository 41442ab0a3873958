//! The consumer groups of the whole cluster, for the console: each group lives on the node
//! that leads its `__consumer_offsets` partition (its coordinator), so a console lists every
//! group by asking each live node for the groups it coordinates ([`PeerCall::Groups`]) and
//! merging the answers. A group's details stay on its coordinator's console.

use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::PeerCall;
use crate::broker::Broker;

/// How long a console waits for another node's groups.
const GROUPS_TIMEOUT: Duration = Duration::from_millis(1500);

/// One group as its coordinator reports it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct GroupReport {
    pub group: String,
    pub state: String,
    pub protocol_type: String,
    pub members: usize,
    /// Sum of the lag of every partition the group has committed offsets for.
    pub lag: i64,
    /// The coordinator's node id, and its admin address (where the group's page is).
    pub node: i32,
    pub admin_address: Option<String>,
}

impl Broker {
    /// The groups this node coordinates.
    pub fn group_reports_here(&self) -> Vec<GroupReport> {
        let admin_address = self.admin_address.get().cloned();
        self.groups_summary()
            .into_iter()
            .map(|g| GroupReport {
                lag: self.group_status(&g.group).map_or(0, |s| s.total_lag()),
                group: g.group,
                state: g.state.to_string(),
                protocol_type: g.protocol_type,
                members: g.members,
                node: self.config.node_id,
                admin_address: admin_address.clone(),
            })
            .collect()
    }

    /// Every live node's groups (this node's only, on a single node), sorted by name, and the
    /// nodes that did not answer with why.
    pub async fn cluster_groups(&self) -> (Vec<GroupReport>, Vec<(i32, String)>) {
        let answers = self
            .ask_live_nodes(&PeerCall::Groups, GROUPS_TIMEOUT, || {
                self.group_reports_here()
            })
            .await;
        let mut groups = Vec::new();
        let mut missing = Vec::new();
        for (node, reports) in answers {
            match reports {
                Ok(reports) => groups.extend(reports),
                Err(e) => missing.push((node, e)),
            }
        }
        groups.sort_by(|a, b| a.group.cmp(&b.group).then(a.node.cmp(&b.node)));
        (groups, missing)
    }
}
