//! Replicas placed by hand: CreateTopics and CreatePartitions with an assignment
//! (`kafka-topics.sh --replica-assignment`), checked as Kafka's controller checks them.
//!
//! Every replica must be a registered node, named once per partition; every partition of a
//! topic has the same number of replicas. A replica on a fenced node is placed but starts out
//! of the ISR (it catches up once its node is back); a partition whose replicas are all
//! fenced is refused, since it would have no leader. The first in-sync replica leads.

use serde::{Deserialize, Serialize};

use crate::ids::{LeaderEpoch, NodeId, PartitionEpoch};
use crate::metadata::{ClusterState, PartitionChange};

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, thiserror::Error)]
pub enum AssignmentError {
    #[error("the assignment names no partition")]
    NoPartitions,
    #[error(
        "{additional} partition(s) would be added, but the assignment names {given}; name one \
         replica list per new partition"
    )]
    Count { additional: usize, given: usize },
    #[error("partition {partition} of the assignment has no replicas")]
    NoReplicas { partition: usize },
    #[error(
        "partition {partition} of the assignment names {got} replicas; the cluster has {nodes} \
         node(s)"
    )]
    MoreThanNodes {
        partition: usize,
        got: usize,
        nodes: usize,
    },
    #[error("partition {partition} of the assignment names node {node} more than once")]
    Repeated { partition: usize, node: i32 },
    #[error(
        "partition {partition} of the assignment has {got} replica(s), but the topic's \
         partitions have {want}"
    )]
    ReplicaCount {
        partition: usize,
        got: usize,
        want: usize,
    },
    #[error("partition {partition} of the assignment names node {node}, which is not registered")]
    UnknownNode { partition: usize, node: i32 },
    #[error(
        "every replica of partition {partition} of the assignment ({nodes:?}) is on a fenced \
         node; at least one must be live to lead"
    )]
    AllFenced { partition: usize, nodes: Vec<i32> },
}

/// The partitions `assignment` describes, numbered from `first` (0 for a new topic, the
/// current count for CreatePartitions): partition `first + i` has the replicas
/// `assignment[i]`, the preferred leader first. `replication_factor`: the count every
/// partition must have (an existing topic's); `None`: the first partition's.
pub fn assigned_partitions(
    state: &ClusterState,
    first: usize,
    assignment: &[Vec<NodeId>],
    replication_factor: Option<usize>,
) -> Result<Vec<PartitionChange>, AssignmentError> {
    let want = match (replication_factor, assignment.first()) {
        (Some(rf), _) => rf,
        (None, Some(replicas)) => replicas.len(),
        (None, None) => return Err(AssignmentError::NoPartitions),
    };
    let mut partitions = Vec::with_capacity(assignment.len());
    for (i, replicas) in assignment.iter().enumerate() {
        let partition = first + i;
        if replicas.is_empty() {
            return Err(AssignmentError::NoReplicas { partition });
        }
        // Before the check for repeats, which is quadratic in the list's length.
        if replicas.len() > state.nodes.len() {
            return Err(AssignmentError::MoreThanNodes {
                partition,
                got: replicas.len(),
                nodes: state.nodes.len(),
            });
        }
        if let Some((_, node)) = replicas
            .iter()
            .enumerate()
            .find(|(j, n)| replicas[..*j].contains(n))
        {
            return Err(AssignmentError::Repeated {
                partition,
                node: node.0,
            });
        }
        if replicas.len() != want {
            return Err(AssignmentError::ReplicaCount {
                partition,
                got: replicas.len(),
                want,
            });
        }
        if let Some(node) = replicas.iter().find(|n| !state.nodes.contains_key(n)) {
            return Err(AssignmentError::UnknownNode {
                partition,
                node: node.0,
            });
        }
        let isr: Vec<NodeId> = replicas
            .iter()
            .copied()
            .filter(|n| state.is_live(*n))
            .collect();
        if isr.is_empty() {
            return Err(AssignmentError::AllFenced {
                partition,
                nodes: replicas.iter().map(|n| n.0).collect(),
            });
        }
        partitions.push(PartitionChange {
            replicas: replicas.clone(),
            leader: isr.first().copied(),
            leader_epoch: LeaderEpoch(0),
            isr,
            partition_epoch: PartitionEpoch(0),
            adding: Vec::new(),
            removing: Vec::new(),
        });
    }
    Ok(partitions)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)] // test code: a failed unwrap is a failed test

    use super::*;
    use crate::metadata::MetadataRecord;
    use crate::testing::{node, state_with_nodes};

    fn nodes(ids: &[i32]) -> Vec<NodeId> {
        ids.iter().map(|i| node(*i)).collect()
    }

    #[test]
    fn partitions_get_the_named_replicas_led_by_the_first() {
        let state = state_with_nodes(&[(1, None), (2, None), (3, None)]);
        let parts =
            assigned_partitions(&state, 0, &[nodes(&[3, 1]), nodes(&[2, 3])], None).unwrap();
        assert_eq!(parts.len(), 2);
        assert_eq!(parts[0].replicas, nodes(&[3, 1]));
        assert_eq!(parts[0].leader, Some(node(3)));
        assert_eq!(parts[0].isr, nodes(&[3, 1]));
        assert_eq!(parts[1].leader, Some(node(2)));
    }

    #[test]
    fn a_fenced_replica_starts_out_of_sync_and_does_not_lead() {
        let mut state = state_with_nodes(&[(1, None), (2, None), (3, None)]);
        state
            .apply(&MetadataRecord::FenceNode { node: node(1) })
            .unwrap();
        let parts = assigned_partitions(&state, 0, &[nodes(&[1, 2])], None).unwrap();
        assert_eq!(parts[0].replicas, nodes(&[1, 2]));
        assert_eq!(parts[0].isr, nodes(&[2]));
        assert_eq!(parts[0].leader, Some(node(2)));
        assert_eq!(
            assigned_partitions(&state, 0, &[nodes(&[1])], None),
            Err(AssignmentError::AllFenced {
                partition: 0,
                nodes: vec![1]
            })
        );
    }

    #[test]
    fn bad_assignments_are_refused_naming_the_partition() {
        let state = state_with_nodes(&[(1, None), (2, None), (3, None)]);
        assert_eq!(
            assigned_partitions(&state, 0, &[], None),
            Err(AssignmentError::NoPartitions)
        );
        assert_eq!(
            assigned_partitions(&state, 0, &[nodes(&[1]), nodes(&[])], None),
            Err(AssignmentError::NoReplicas { partition: 1 })
        );
        assert_eq!(
            assigned_partitions(&state, 0, &[nodes(&[1, 2, 3, 1])], None),
            Err(AssignmentError::MoreThanNodes {
                partition: 0,
                got: 4,
                nodes: 3
            })
        );
        assert_eq!(
            assigned_partitions(&state, 0, &[nodes(&[1, 2, 1])], None),
            Err(AssignmentError::Repeated {
                partition: 0,
                node: 1
            })
        );
        assert_eq!(
            assigned_partitions(&state, 0, &[nodes(&[1, 2]), nodes(&[3])], None),
            Err(AssignmentError::ReplicaCount {
                partition: 1,
                got: 1,
                want: 2
            })
        );
        assert_eq!(
            assigned_partitions(&state, 4, &[nodes(&[1, 2])], Some(3)),
            Err(AssignmentError::ReplicaCount {
                partition: 4,
                got: 2,
                want: 3
            })
        );
        assert_eq!(
            assigned_partitions(&state, 0, &[nodes(&[1, 7])], None),
            Err(AssignmentError::UnknownNode {
                partition: 0,
                node: 7
            })
        );
    }
}
