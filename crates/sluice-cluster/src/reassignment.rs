//! Moving a partition's replicas (KIP-455, `kafka-reassign-partitions.sh`,
//! `sluice topic reassign`).
//!
//! A reassignment is two metadata changes. The first adds the target replicas that are new:
//! `replicas` becomes the target followed by the replicas leaving, `adding` and `removing`
//! name the difference, and the new replicas start fetching from the leader like any follower
//! that is behind. The second is written when every target replica is in the ISR (the
//! leader's own AlterPartition that takes the last one in triggers it): `replicas` becomes the
//! target, the leaving replicas drop out of the ISR, and if the leader is one of them, the
//! first in-sync target replica leads. Nodes then delete the replicas they no longer hold.
//! Until the second change, nothing about the partition's durability changes: the old
//! replicas stay in the ISR, so an acknowledged write is on as many copies as before.

use uuid::Uuid;

use crate::controller::{leader_epoch_after, Controller};
use crate::ids::NodeId;
use crate::metadata::{ClusterState, MetadataRecord, PartitionChange};

/// Why one partition's reassignment is refused; each maps to a Kafka error code.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize, thiserror::Error)]
pub enum ReassignError {
    #[error("unknown topic or partition")]
    UnknownPartition,
    #[error("{0}")]
    InvalidAssignment(String),
    #[error("{0}")]
    InvalidReplicationFactor(String),
    #[error("no reassignment of this partition is in progress")]
    NoReassignmentInProgress,
    #[error("{0}")]
    InvalidRequest(String),
}

/// One partition to move: `Some(target)` replicas, or `None` to cancel its reassignment.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Reassignment {
    pub topic: String,
    pub partition: i32,
    pub target: Option<Vec<NodeId>>,
}

pub type ReassignOutcome = (String, i32, Result<(), ReassignError>);

impl Controller {
    /// Starts (or replaces, or cancels) the reassignment of each partition named. A partition
    /// whose target replicas are all in sync already is moved in one change.
    /// `allow_rf_change: false` refuses a target of another size (KIP-860).
    pub fn reassign(
        &self,
        state: &ClusterState,
        moves: &[Reassignment],
        allow_rf_change: bool,
    ) -> (Vec<MetadataRecord>, Vec<ReassignOutcome>) {
        let mut records = Vec::new();
        let mut outcomes = Vec::new();
        for (i, m) in moves.iter().enumerate() {
            let twice = moves[..i]
                .iter()
                .any(|o| o.topic == m.topic && o.partition == m.partition);
            let outcome = if twice {
                Err(ReassignError::InvalidRequest(
                    "the partition is named twice in the request".into(),
                ))
            } else {
                plan(state, m, allow_rf_change).map(|change| {
                    if let Some((topic, change)) = change {
                        records.push(MetadataRecord::ChangePartition {
                            topic,
                            partition: m.partition,
                            change,
                        });
                    }
                })
            };
            outcomes.push((m.topic.clone(), m.partition, outcome));
        }
        (records, outcomes)
    }
}

/// The change that starts, replaces or cancels one reassignment (`None`: nothing to change).
fn plan(
    state: &ClusterState,
    m: &Reassignment,
    allow_rf_change: bool,
) -> Result<Option<(Uuid, PartitionChange)>, ReassignError> {
    let (topic, p) = state
        .partition_by_name(&m.topic, m.partition)
        .ok_or(ReassignError::UnknownPartition)?;
    // The replicas the partition had before any reassignment that is running.
    let original: Vec<NodeId> = p
        .replicas
        .iter()
        .copied()
        .filter(|r| !p.adding.contains(r))
        .collect();
    let Some(target) = &m.target else {
        if !p.reassigning() {
            return Err(ReassignError::NoReassignmentInProgress);
        }
        let change = reshape(state, p, original, Vec::new(), Vec::new())?;
        return Ok(Some((topic.id, change)));
    };
    check_target(state, target)?;
    if !allow_rf_change && target.len() != original.len() {
        return Err(ReassignError::InvalidReplicationFactor(format!(
            "the replication factor would change from {} to {} and the request does not allow it",
            original.len(),
            target.len()
        )));
    }
    if !p.reassigning() && *target == p.replicas {
        return Ok(None);
    }
    let adding: Vec<NodeId> = target
        .iter()
        .copied()
        .filter(|r| !original.contains(r))
        .collect();
    let removing: Vec<NodeId> = original
        .iter()
        .copied()
        .filter(|r| !target.contains(r))
        .collect();
    let mut replicas = target.clone();
    replicas.extend(&removing);
    let moving = PartitionChange {
        replicas,
        adding,
        removing,
        ..p.clone()
    };
    // Every target replica in sync already (a reorder, or only removals): one change.
    let change = match completed(state, &moving) {
        Some(done) => done,
        None => reshape(state, p, moving.replicas, moving.adding, moving.removing)?,
    };
    Ok(Some((topic.id, change)))
}

fn check_target(state: &ClusterState, target: &[NodeId]) -> Result<(), ReassignError> {
    let invalid = |why: String| Err(ReassignError::InvalidAssignment(why));
    if target.is_empty() {
        return invalid("the target replica list is empty".into());
    }
    for (i, r) in target.iter().enumerate() {
        if target[..i].contains(r) {
            return invalid(format!("node {r} is listed twice in the target replicas"));
        }
        if !state.nodes.contains_key(r) {
            return invalid(format!("node {r} is not a node of this cluster"));
        }
    }
    Ok(())
}

/// If `p` is being reassigned and every target replica is in its ISR, the partition as it is
/// once the reassignment completes: the target replicas only.
pub(crate) fn completed(state: &ClusterState, p: &PartitionChange) -> Option<PartitionChange> {
    if !p.reassigning() {
        return None;
    }
    let target = p.target();
    if !target.iter().all(|r| p.isr.contains(r)) {
        return None;
    }
    reshape(state, p, target, Vec::new(), Vec::new()).ok()
}

/// `p` with new replicas (and replicas being added and removed): the ISR keeps its members
/// that remain replicas, and the leader stays if it remains in sync; otherwise the first live
/// in-sync replica (in the new replica order) leads. Refused when no in-sync replica would
/// remain: that would drop the only copies of acknowledged records.
fn reshape(
    state: &ClusterState,
    p: &PartitionChange,
    replicas: Vec<NodeId>,
    adding: Vec<NodeId>,
    removing: Vec<NodeId>,
) -> Result<PartitionChange, ReassignError> {
    let isr: Vec<NodeId> = p
        .isr
        .iter()
        .copied()
        .filter(|r| replicas.contains(r))
        .collect();
    if isr.is_empty() {
        return Err(ReassignError::InvalidAssignment(format!(
            "none of the replicas {replicas:?} is in sync (ISR {:?}): the move would drop every \
             copy of acknowledged records",
            p.isr
        )));
    }
    let leader = match p.leader {
        Some(l) if isr.contains(&l) => Some(l),
        _ => replicas
            .iter()
            .copied()
            .find(|r| isr.contains(r) && state.is_live(*r)),
    };
    // A replica dropped from the set (a move completed or cancelled) ends the leader epoch
    // even if the leader stays, as Kafka's controller does: a fetch it sent before it deleted
    // its log must not count for it if it is added back (found by the simulation: a replica
    // removed and re-added within a fetch's round trip joined the ISR with an empty log).
    let dropped = p.replicas.iter().any(|r| !replicas.contains(r));
    let leader_epoch = if dropped && leader.is_some() {
        p.leader_epoch.next()
    } else {
        leader_epoch_after(p, leader)
    };
    Ok(PartitionChange {
        replicas,
        leader,
        leader_epoch,
        isr,
        partition_epoch: p.partition_epoch.next(),
        adding,
        removing,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::controller::ControllerConfig;
    use crate::testing::{node, state_with_nodes};

    fn cluster_of(n: i32) -> ClusterState {
        let ids: Vec<(i32, Option<&str>)> = (1..=n).map(|i| (i, None)).collect();
        state_with_nodes(&ids)
    }

    fn moved(state: &mut ClusterState, records: &[MetadataRecord]) -> PartitionChange {
        for r in records {
            state
                .apply(r)
                .expect("the controller proposes only valid changes");
        }
        state.partition_by_name("t", 0).expect("t-0").1.clone()
    }

    fn nodes(ids: &[i32]) -> Vec<NodeId> {
        ids.iter().map(|i| node(*i)).collect()
    }

    fn one_partition(state: &mut ClusterState, replicas: &[i32]) {
        let p = PartitionChange {
            replicas: nodes(replicas),
            leader: Some(node(replicas[0])),
            leader_epoch: crate::ids::LeaderEpoch(0),
            isr: nodes(replicas),
            partition_epoch: crate::ids::PartitionEpoch(0),
            adding: Vec::new(),
            removing: Vec::new(),
        };
        state
            .apply(&MetadataRecord::CreateTopic {
                name: "t".into(),
                id: Uuid::new_v4(),
                configs: Default::default(),
                partitions: vec![p],
            })
            .expect("create t");
    }

    fn to(target: &[i32]) -> Vec<Reassignment> {
        vec![Reassignment {
            topic: "t".into(),
            partition: 0,
            target: Some(nodes(target)),
        }]
    }

    #[test]
    fn a_new_replica_is_added_first_and_the_old_one_leaves_once_it_is_in_sync() {
        let mut state = cluster_of(4);
        one_partition(&mut state, &[1, 2, 3]);
        let c = Controller::new(ControllerConfig::default(), &state, 0);
        let (records, outcomes) = c.reassign(&state, &to(&[1, 2, 4]), false);
        assert_eq!(outcomes, vec![("t".into(), 0, Ok(()))]);
        let p = moved(&mut state, &records);
        assert_eq!(p.replicas, nodes(&[1, 2, 4, 3]));
        assert_eq!(
            (p.adding.clone(), p.removing.clone()),
            (nodes(&[4]), nodes(&[3]))
        );
        assert_eq!(
            p.isr,
            nodes(&[1, 2, 3]),
            "the old replicas stay in sync meanwhile"
        );
        assert_eq!(p.leader, Some(node(1)));
        // The leader takes node 4 into the ISR: that completes the move.
        let done = c
            .alter_partition(
                &state,
                node(1),
                state.names["t"],
                0,
                p.leader_epoch,
                p.partition_epoch,
                nodes(&[1, 2, 3, 4]),
            )
            .expect("ISR expansion");
        let p = moved(&mut state, &done);
        assert_eq!(p.replicas, nodes(&[1, 2, 4]));
        assert_eq!(p.isr, nodes(&[1, 2, 4]));
        assert!(!p.reassigning());
        assert_eq!(p.leader, Some(node(1)));
    }

    #[test]
    fn moving_away_from_the_leader_elects_an_in_sync_target_replica() {
        let mut state = cluster_of(4);
        one_partition(&mut state, &[1, 2, 3]);
        let c = Controller::new(ControllerConfig::default(), &state, 0);
        // Only a reorder and a removal among in-sync replicas: done in one change.
        let (records, outcomes) = c.reassign(&state, &to(&[3, 2]), true);
        assert_eq!(outcomes, vec![("t".into(), 0, Ok(()))]);
        let p = moved(&mut state, &records);
        assert_eq!(p.replicas, nodes(&[3, 2]));
        assert_eq!(p.isr, nodes(&[2, 3]));
        assert_eq!(p.leader, Some(node(3)));
        assert_eq!(p.leader_epoch, crate::ids::LeaderEpoch(1));
    }

    #[test]
    fn a_cancelled_reassignment_goes_back_to_the_original_replicas() {
        let mut state = cluster_of(4);
        one_partition(&mut state, &[1, 2, 3]);
        let c = Controller::new(ControllerConfig::default(), &state, 0);
        let (records, _) = c.reassign(&state, &to(&[4, 2, 3]), false);
        moved(&mut state, &records);
        let cancel = vec![Reassignment {
            topic: "t".into(),
            partition: 0,
            target: None,
        }];
        let (records, outcomes) = c.reassign(&state, &cancel, false);
        assert_eq!(outcomes, vec![("t".into(), 0, Ok(()))]);
        let p = moved(&mut state, &records);
        // As Kafka's: the original replicas, in their order during the move (the preferred
        // leader may differ from before it).
        assert_eq!(p.replicas, nodes(&[2, 3, 1]));
        assert!(!p.reassigning());
        assert_eq!(p.isr, nodes(&[1, 2, 3]));
        let (_, outcomes) = c.reassign(&state, &cancel, false);
        assert_eq!(
            outcomes,
            vec![("t".into(), 0, Err(ReassignError::NoReassignmentInProgress))]
        );
    }

    #[test]
    fn bad_targets_are_refused_with_a_reason() {
        let mut state = cluster_of(3);
        one_partition(&mut state, &[1, 2, 3]);
        let c = Controller::new(ControllerConfig::default(), &state, 0);
        let refused = |target: Vec<Reassignment>, allow: bool| {
            let (records, outcomes) = c.reassign(&state, &target, allow);
            assert!(records.is_empty());
            outcomes[0].2.clone().expect_err("refused")
        };
        assert!(matches!(
            refused(to(&[1, 2, 9]), false),
            ReassignError::InvalidAssignment(_)
        ));
        assert!(matches!(
            refused(to(&[1, 1, 2]), false),
            ReassignError::InvalidAssignment(_)
        ));
        assert!(matches!(
            refused(to(&[]), true),
            ReassignError::InvalidAssignment(_)
        ));
        assert!(matches!(
            refused(to(&[1, 2]), false),
            ReassignError::InvalidReplicationFactor(_)
        ));
        let unknown = vec![Reassignment {
            topic: "t".into(),
            partition: 7,
            target: Some(nodes(&[1])),
        }];
        assert_eq!(refused(unknown, true), ReassignError::UnknownPartition);
        let mut twice = to(&[1, 2, 3]);
        twice.extend(to(&[3, 2, 1]));
        let (_, outcomes) = c.reassign(&state, &twice, false);
        assert!(matches!(
            outcomes[1].2,
            Err(ReassignError::InvalidRequest(_))
        ));
    }

    #[test]
    fn a_cancel_that_would_keep_no_in_sync_replica_is_refused() {
        let mut state = cluster_of(4);
        one_partition(&mut state, &[1, 2]);
        let mut c = Controller::new(ControllerConfig::default(), &state, 0);
        let (records, _) = c.reassign(&state, &to(&[3, 4]), false);
        let p = moved(&mut state, &records);
        assert_eq!(
            p.isr,
            nodes(&[1, 2]),
            "the old replicas stay in sync until the new are"
        );
        assert_eq!(p.replicas, nodes(&[3, 4, 1, 2]));
        // Node 3 catches up; then both original replicas die: node 3 holds everything.
        let records = c
            .alter_partition(
                &state,
                node(1),
                state.names["t"],
                0,
                p.leader_epoch,
                p.partition_epoch,
                nodes(&[1, 2, 3]),
            )
            .expect("ISR expansion");
        moved(&mut state, &records);
        c.expire(node(1));
        c.expire(node(2));
        let fenced = c.tick(&state, 10);
        let p = moved(&mut state, &fenced);
        assert_eq!((p.leader, p.isr.clone()), (Some(node(3)), nodes(&[3])));
        let cancel = vec![Reassignment {
            topic: "t".into(),
            partition: 0,
            target: None,
        }];
        let (records, outcomes) = c.reassign(&state, &cancel, false);
        assert!(records.is_empty());
        assert!(matches!(
            outcomes[0].2,
            Err(ReassignError::InvalidAssignment(_))
        ));
    }
}
