//! Reads from followers (KIP-392): a leader tells a consumer in another rack to fetch from an
//! in-sync follower in the consumer's own rack (`client.rack`), which serves it below the high
//! watermark it learned from the leader, so a consumer never reads what could still be lost.
//!
//! The choice: nothing when the consumer named no rack, when this node is not the leader or
//! shares the consumer's rack; otherwise the lowest-numbered live follower of that rack that
//! is in the ISR and known to hold the fetch offset. A consumer told nothing reads here.

use sluice_log::Offset;

use crate::broker::Broker;
use crate::partition::Partition;

impl Broker {
    /// The node a consumer in `client_rack` reading `partition` from `offset` should fetch
    /// from instead of this leader, if any.
    pub(crate) fn preferred_read_replica(
        &self,
        partition: &Partition,
        offset: Offset,
        client_rack: &str,
    ) -> Option<i32> {
        if client_rack.is_empty() {
            return None;
        }
        let replication = self.replication.get()?;
        let applied = replication.state();
        let state = &applied.state;
        let rack_of = |node| {
            state
                .nodes
                .get(&node)
                .and_then(|n| n.registration.rack.as_deref())
        };
        if rack_of(replication.me) == Some(client_rack) {
            return None;
        }
        partition
            .followers_holding(offset)
            .into_iter()
            .find(|n| state.is_live(*n) && rack_of(*n) == Some(client_rack))
            .map(|n| n.0)
    }
}
