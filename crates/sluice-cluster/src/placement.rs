//! Where replicas go and who leads.
//!
//! New partitions are placed greedily on the live nodes: each partition's preferred leader is
//! the node leading the fewest partitions, and each further replica the node holding the
//! fewest replicas, preferring racks the partition does not use yet, so replicas land on
//! distinct racks whenever there are enough racks. Ties go to the lower node id, after
//! rotating by the partition number so that equal nodes take turns.

use std::collections::BTreeMap;

use crate::ids::NodeId;
use crate::metadata::{ClusterState, PartitionInfo};

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PlacementError {
    #[error("replication factor {wanted} is larger than the {live} live nodes")]
    NotEnoughNodes { wanted: usize, live: usize },
    #[error("replication factor must be at least 1, not {0}")]
    InvalidReplicationFactor(i32),
}

/// How many partitions each node leads and hosts.
#[derive(Debug, Clone, Default)]
pub struct Load {
    leaders: BTreeMap<NodeId, usize>,
    replicas: BTreeMap<NodeId, usize>,
}

impl Load {
    /// The current load of every live node (nodes with nothing count as 0).
    pub fn of(state: &ClusterState) -> Load {
        let mut load = Load::default();
        for node in state.live_nodes() {
            load.leaders.insert(node.registration.node, 0);
            load.replicas.insert(node.registration.node, 0);
        }
        for (_, _, p) in state.partitions() {
            if let Some(first) = p.replicas.first() {
                *load.leaders.entry(*first).or_default() += 1;
            }
            for r in &p.replicas {
                *load.replicas.entry(*r).or_default() += 1;
            }
        }
        load
    }
}

/// Replica lists for `count` new partitions of `replication_factor` replicas over the live
/// nodes of `state`, the preferred leader first.
pub fn place(
    state: &ClusterState,
    count: usize,
    replication_factor: i32,
) -> Result<Vec<Vec<NodeId>>, PlacementError> {
    let rf = usize::try_from(replication_factor)
        .ok()
        .filter(|rf| *rf >= 1)
        .ok_or(PlacementError::InvalidReplicationFactor(replication_factor))?;
    let live: Vec<(NodeId, Option<&str>)> = state
        .live_nodes()
        .map(|n| (n.registration.node, n.registration.rack.as_deref()))
        .collect();
    if rf > live.len() {
        return Err(PlacementError::NotEnoughNodes {
            wanted: rf,
            live: live.len(),
        });
    }
    let mut load = Load::of(state);
    let mut placed = Vec::with_capacity(count);
    for p in 0..count {
        // Rotate the candidates so that ties are broken differently per partition.
        let mut candidates = live.clone();
        candidates.rotate_left(p % live.len());
        let mut replicas: Vec<NodeId> = Vec::with_capacity(rf);
        let mut racks: Vec<&str> = Vec::new();
        for slot in 0..rf {
            let best = candidates
                .iter()
                .filter(|(n, _)| !replicas.contains(n))
                .min_by_key(|(n, rack)| {
                    let rack_used = rack.is_some_and(|r| racks.contains(&r));
                    let count = if slot == 0 {
                        load.leaders.get(n).copied().unwrap_or(0)
                    } else {
                        load.replicas.get(n).copied().unwrap_or(0)
                    };
                    (rack_used, count)
                })
                .copied();
            let Some((node, rack)) = best else {
                break;
            };
            replicas.push(node);
            if let Some(rack) = rack {
                racks.push(rack);
            }
            *load.replicas.entry(node).or_default() += 1;
            if slot == 0 {
                *load.leaders.entry(node).or_default() += 1;
            }
        }
        placed.push(replicas);
    }
    Ok(placed)
}

/// The replica that should lead `p`: the first in preference order that is in the ISR and
/// live. Only ISR members may lead (no unclean election).
pub fn choose_leader(p: &PartitionInfo, is_live: impl Fn(NodeId) -> bool) -> Option<NodeId> {
    p.replicas
        .iter()
        .copied()
        .find(|r| p.isr.contains(r) && is_live(*r))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)] // test code: a failed unwrap is a failed test

    use super::*;
    use crate::testing::{node, state_with_nodes};

    #[test]
    fn replicas_spread_evenly_and_leaders_rotate() {
        let state = state_with_nodes(&[(1, None), (2, None), (3, None)]);
        let placed = place(&state, 6, 3).unwrap();
        let mut leaders = BTreeMap::new();
        for replicas in &placed {
            assert_eq!(replicas.len(), 3);
            let mut sorted = replicas.clone();
            sorted.sort();
            sorted.dedup();
            assert_eq!(sorted.len(), 3, "distinct replicas: {replicas:?}");
            *leaders.entry(replicas[0]).or_insert(0) += 1;
        }
        assert_eq!(leaders.values().copied().collect::<Vec<_>>(), [2, 2, 2]);
    }

    #[test]
    fn replicas_land_on_distinct_racks() {
        let state = state_with_nodes(&[
            (1, Some("a")),
            (2, Some("a")),
            (3, Some("b")),
            (4, Some("b")),
            (5, Some("c")),
            (6, Some("c")),
        ]);
        let rack = |n: NodeId| state.nodes[&n].registration.rack.clone().unwrap();
        for replicas in place(&state, 12, 3).unwrap() {
            let mut racks: Vec<String> = replicas.iter().map(|n| rack(*n)).collect();
            racks.sort();
            assert_eq!(racks, ["a", "b", "c"], "{replicas:?}");
        }
    }

    #[test]
    fn too_few_nodes_or_a_bad_factor_is_refused() {
        let state = state_with_nodes(&[(1, None), (2, None)]);
        assert_eq!(
            place(&state, 1, 3),
            Err(PlacementError::NotEnoughNodes { wanted: 3, live: 2 })
        );
        assert_eq!(
            place(&state, 1, 0),
            Err(PlacementError::InvalidReplicationFactor(0))
        );
    }

    #[test]
    fn the_leader_is_the_first_live_isr_member() {
        let p = PartitionInfo {
            adding: Vec::new(),
            removing: Vec::new(),
            replicas: vec![node(1), node(2), node(3)],
            leader: Some(node(1)),
            leader_epoch: Default::default(),
            isr: vec![node(3), node(2)],
            partition_epoch: Default::default(),
        };
        assert_eq!(choose_leader(&p, |_| true), Some(node(2)));
        assert_eq!(choose_leader(&p, |n| n != node(2)), Some(node(3)));
        assert_eq!(
            choose_leader(&p, |n| n == node(1)),
            None,
            "1 is not in sync"
        );
    }
}
