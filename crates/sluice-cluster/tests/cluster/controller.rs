#![allow(clippy::unwrap_used)] // test code: a failed unwrap is a failed test
//! The controller's decisions applied to the metadata state, by scenario and under random
//! schedules of heartbeats, crashes, restarts and ISR requests. After every step: every record
//! the controller emitted applies on the state as is (so every node applies it alike), and the
//! partition invariants hold — the leader is a live in-sync replica, only an in-sync replica
//! ever becomes leader, the leader epoch moves exactly when the leader does (or its process
//! restarted, or a replica left the set), and a fenced node
//! is in an ISR only while the partition has no leader (the last in-sync replicas wait there
//! for one of them to return).

use std::collections::{BTreeMap, BTreeSet};

use proptest::prelude::*;
use sluice_cluster::controller::{AlterPartitionError, Controller, ControllerConfig, Election};
use sluice_cluster::metadata::{MetadataRecord, NodeRegistration};
use sluice_cluster::{ClusterState, LeaderEpoch, NodeId};
use uuid::Uuid;

const SESSION_MS: i64 = 1_000;

fn registration(id: i32) -> NodeRegistration {
    registration_with(id, directory(id, 0))
}

/// Node `id`'s data directory id after `wipes` wipes of its disk.
fn directory(id: i32, wipes: u32) -> Uuid {
    Uuid::from_u128(((id as u128) << 32) | wipes as u128)
}

fn registration_with(id: i32, directory: Uuid) -> NodeRegistration {
    NodeRegistration {
        node: NodeId(id),
        incarnation: Uuid::new_v4(),
        kafka_host: "127.0.0.1".into(),
        kafka_port: 9092 + id,
        listeners: Vec::new(),
        internal_addr: format!("127.0.0.1:{}", 9192 + id),
        rack: None,
        directory: Some(directory),
    }
}

/// A metadata state and its controller, checking each batch of records as it applies them.
struct Cluster {
    state: ClusterState,
    controller: Controller,
    now_ms: i64,
}

impl Cluster {
    fn new(nodes: i32) -> Cluster {
        let state = ClusterState::default();
        let controller = Controller::new(
            ControllerConfig {
                session_timeout_ms: SESSION_MS,
                ..Default::default()
            },
            &state,
            0,
        );
        let mut cluster = Cluster {
            state,
            controller,
            now_ms: 0,
        };
        for id in 1..=nodes {
            cluster.register(id);
        }
        cluster
    }

    fn register(&mut self, id: i32) {
        let records = self
            .controller
            .register(&self.state, registration(id), self.now_ms);
        self.commit(records);
    }

    /// Node `id` starts again with an empty data directory (its `wipes`th).
    fn register_wiped(&mut self, id: i32, wipes: u32) {
        let records = self.controller.register(
            &self.state,
            registration_with(id, directory(id, wipes)),
            self.now_ms,
        );
        self.commit(records);
        for (topic, index, p) in self.state.partitions() {
            assert!(
                !p.isr.contains(&NodeId(id)),
                "{}-{index}: a wiped node stays in the ISR {p:?}",
                topic.name
            );
        }
    }

    /// Partition 0's leader shrinks its ISR to itself (its followers lag); returns it.
    fn shrink_to_leader(&mut self, topic: Uuid) -> NodeId {
        let p = self.state.partition(topic, 0).unwrap().clone();
        let leader = p.leader.unwrap();
        let records = self
            .controller
            .alter_partition(
                &self.state,
                leader,
                topic,
                0,
                p.leader_epoch,
                p.partition_epoch,
                vec![leader],
            )
            .unwrap();
        self.commit(records);
        leader
    }

    /// Every node but `dead` heartbeats past a session; the next tick fences `dead`.
    fn fence(&mut self, dead: NodeId) {
        self.now_ms += SESSION_MS + 1;
        let alive: Vec<NodeId> = self
            .state
            .live_nodes()
            .map(|n| n.registration.node)
            .collect();
        for n in alive {
            if n != dead {
                self.controller.heartbeat(&self.state, n, None, self.now_ms);
            }
        }
        self.tick();
        assert!(!self.state.is_live(dead));
    }

    fn tick(&mut self) {
        let records = self.controller.tick(&self.state, self.now_ms);
        self.commit(records);
    }

    fn create_topic(&mut self, name: &str, partitions: i32, rf: i32) -> Uuid {
        let id = Uuid::new_v4();
        let records = self
            .controller
            .create_topic(&self.state, name, id, partitions, rf, BTreeMap::new())
            .unwrap();
        self.commit(records);
        id
    }

    /// Applies one decision's `records` as the metadata log does (one log entry, applied
    /// whole), then checks the invariants.
    fn commit(&mut self, records: Vec<MetadataRecord>) {
        let before = self.state.clone();
        for record in records {
            if let Err(e) = self.state.apply(&record) {
                panic!("controller emitted a record that fails: {e}: {record:?}");
            }
        }
        check(&before, &self.state);
    }
}

fn check(before: &ClusterState, after: &ClusterState) {
    for (topic, index, p) in after.partitions() {
        if let Some(leader) = p.leader {
            assert!(
                p.isr.contains(&leader),
                "{}-{index}: leader outside ISR {p:?}",
                topic.name
            );
            assert!(
                after.is_live(leader),
                "{}-{index}: fenced leader {p:?}",
                topic.name
            );
        }
        for r in &p.isr {
            assert!(
                after.is_live(*r) || p.leader.is_none(),
                "{}-{index}: fenced {r} in ISR {p:?}",
                topic.name
            );
        }
        let Ok(old) = before.partition(topic.id, index) else {
            continue;
        };
        if p.leader != old.leader {
            assert_eq!(
                p.leader_epoch,
                old.leader_epoch.next(),
                "epoch moves with the leader"
            );
            if let Some(leader) = p.leader {
                assert!(
                    old.isr.contains(&leader),
                    "{}-{index}: unclean election of {leader}: {old:?} → {p:?}",
                    topic.name
                );
            }
        } else {
            // A leader that restarted (a new incarnation) leads on in the next epoch.
            let restarted = p.leader.is_some_and(|l| {
                let incarnation =
                    |s: &ClusterState| s.nodes.get(&l).map(|n| n.registration.incarnation);
                incarnation(before) != incarnation(after)
            });
            // So does one whose replica set lost a member (a move completed or cancelled).
            let dropped = old.replicas.iter().any(|r| !p.replicas.contains(r));
            if restarted || dropped {
                assert_eq!(
                    p.leader_epoch,
                    old.leader_epoch.next(),
                    "a new epoch, same leader"
                );
            } else {
                assert_eq!(p.leader_epoch, old.leader_epoch);
            }
        }
        assert!(p.partition_epoch >= old.partition_epoch);
    }
}

#[test]
fn a_dead_leader_is_replaced_by_an_in_sync_replica() {
    let mut c = Cluster::new(3);
    let topic = c.create_topic("orders", 3, 3);
    let p0 = c.state.partition(topic, 0).unwrap().clone();
    let dead = p0.leader.unwrap();
    // Everyone but the leader keeps heartbeating past its session.
    c.now_ms = SESSION_MS + 1;
    for n in 1..=3 {
        if NodeId(n) != dead {
            assert!(c.controller.heartbeat(&c.state, NodeId(n), None, c.now_ms));
        }
    }
    c.tick();
    assert!(!c.state.is_live(dead));
    let p0 = c.state.partition(topic, 0).unwrap();
    assert_ne!(p0.leader, Some(dead));
    assert_eq!(p0.leader_epoch, LeaderEpoch(1));
    assert!(!p0.isr.contains(&dead));
    // A fenced node's heartbeat is refused: it must register again.
    assert!(!c.controller.heartbeat(&c.state, dead, None, c.now_ms));
    c.register(dead.0);
    assert!(c.state.is_live(dead));
    assert!(
        !c.state.partition(topic, 0).unwrap().isr.contains(&dead),
        "rejoins the ISR only once caught up"
    );
}

#[test]
fn an_expired_session_is_fenced_at_the_next_tick_without_waiting() {
    let mut c = Cluster::new(3);
    let topic = c.create_topic("orders", 3, 3);
    let dead = c.state.partition(topic, 0).unwrap().leader.unwrap();
    // Well inside everyone's session: nothing happens on its own.
    c.now_ms = 100;
    c.tick();
    assert!(c.state.is_live(dead));
    // Its process is gone (the probe was refused): fenced now, and replaced as leader.
    c.controller.expire(dead);
    c.tick();
    assert!(!c.state.is_live(dead));
    let p0 = c.state.partition(topic, 0).unwrap();
    assert_ne!(p0.leader, Some(dead));
    assert!(!p0.isr.contains(&dead));
    // The others keep their sessions, and the node comes back by registering.
    assert!(c.state.is_live(NodeId(1)) || dead == NodeId(1));
    assert_eq!(c.state.live_nodes().count(), 2);
    c.register(dead.0);
    assert!(c.state.is_live(dead));
}

#[test]
fn the_last_in_sync_replica_is_the_only_one_that_may_lead_again() {
    let mut c = Cluster::new(3);
    let topic = c.create_topic("t", 1, 3);
    let leader = c.shrink_to_leader(topic);
    c.fence(leader);
    let p = c.state.partition(topic, 0).unwrap();
    assert_eq!(p.leader, None, "offline, not led by an out-of-sync replica");
    assert_eq!(p.isr, vec![leader]);
    c.register(leader.0);
    assert_eq!(c.state.partition(topic, 0).unwrap().leader, Some(leader));
}

#[test]
fn a_node_back_with_a_wiped_disk_leaves_every_isr_and_leads_nothing() {
    let mut c = Cluster::new(3);
    let topic = c.create_topic("t", 3, 3);
    // A fast restart with a new disk, while still live and leading: it leaves every ISR, and
    // what it led moves to another in-sync replica.
    let node = c.state.partition(topic, 0).unwrap().leader.unwrap();
    c.register_wiped(node.0, 1);
    for index in 0..3 {
        let p = c.state.partition(topic, index).unwrap();
        assert!(p.leader.is_some() && p.leader != Some(node), "{p:?}");
        assert_eq!(p.isr.len(), 2);
    }
    // Registering again with the same (new) directory changes nothing more.
    let before = c.state.clone();
    c.register_wiped(node.0, 1);
    assert_eq!(
        before.partition(topic, 1).unwrap(),
        c.state.partition(topic, 1).unwrap()
    );
}

#[test]
fn a_partition_whose_only_in_sync_replica_was_wiped_waits_for_an_unclean_election() {
    let mut c = Cluster::new(3);
    let topic = c.create_topic("t", 1, 3);
    let leader = c.shrink_to_leader(topic);
    c.fence(leader);
    assert_eq!(c.state.partition(topic, 0).unwrap().isr, vec![leader]);
    // It comes back with an empty disk: it must not lead (that would serve an empty log as
    // the partition's history); the partition stays offline with nobody in sync.
    c.register_wiped(leader.0, 1);
    let p = c.state.partition(topic, 0).unwrap().clone();
    assert_eq!(p.leader, None);
    assert!(p.isr.is_empty());
    // Only an operator's unclean election brings it back: the first candidate that is a
    // live replica leads (a fenced one, or a node that is no replica, is passed over).
    c.fence(NodeId(leader.0 % 3 + 1));
    let fenced = NodeId(leader.0 % 3 + 1);
    let other = (1..=3)
        .map(NodeId)
        .find(|n| *n != leader && *n != fenced)
        .unwrap();
    let (records, outcomes) = c.controller.elect_unclean(
        &c.state,
        &[("t".to_string(), 0, vec![NodeId(9), fenced, other, leader])],
    );
    assert_eq!(outcomes.len(), 1);
    assert_eq!(outcomes[0].2, Election::Elected);
    for record in &records {
        c.state.apply(record).unwrap();
    }
    let p = c.state.partition(topic, 0).unwrap();
    assert_eq!(p.leader, Some(other));
    assert_eq!(p.isr, vec![other]);
    // Asked again: it has a leader now.
    let (records, outcomes) = c.controller.elect_unclean(
        &c.state,
        &[
            ("t".to_string(), 0, vec![leader]),
            ("nope".to_string(), 0, vec![]),
        ],
    );
    assert!(records.is_empty());
    assert_eq!(outcomes[0].2, Election::NotNeeded);
    assert_eq!(outcomes[1].2, Election::UnknownPartition);
}

#[test]
fn a_node_without_a_directory_id_before_is_not_taken_for_a_wiped_one() {
    let mut c = Cluster::new(3);
    let topic = c.create_topic("t", 1, 3);
    // Restarted by a version without directory ids, then by one with them: neither is a
    // wiped disk as far as the controller can tell, and the node stays in sync.
    for directory in [None, Some(directory(2, 7))] {
        let registration = NodeRegistration {
            directory,
            ..registration(2)
        };
        let records = c.controller.register(&c.state, registration, c.now_ms);
        c.commit(records);
        assert_eq!(c.state.partition(topic, 0).unwrap().isr.len(), 3);
    }
}

#[test]
fn isr_changes_are_checked_against_the_current_partition() {
    let mut c = Cluster::new(3);
    let topic = c.create_topic("t", 1, 3);
    let p = c.state.partition(topic, 0).unwrap().clone();
    let leader = p.leader.unwrap();
    let follower = *p.replicas.iter().find(|r| **r != leader).unwrap();
    let (le, pe) = (p.leader_epoch, p.partition_epoch);
    let alter = |c: &Cluster, who, le, pe, isr| {
        c.controller
            .alter_partition(&c.state, who, topic, 0, le, pe, isr)
    };
    assert_eq!(
        alter(&c, follower, le, pe, vec![follower]),
        Err(AlterPartitionError::NotLeader(follower))
    );
    assert!(matches!(
        alter(&c, leader, le.next(), pe, vec![leader]),
        Err(AlterPartitionError::FencedLeaderEpoch { .. })
    ));
    assert!(matches!(
        alter(&c, leader, le, pe.next(), vec![leader]),
        Err(AlterPartitionError::InvalidUpdateVersion { .. })
    ));
    assert!(matches!(
        alter(&c, leader, le, pe, vec![follower]),
        Err(AlterPartitionError::InvalidIsr(_))
    ));
    assert!(matches!(
        alter(&c, leader, le, pe, vec![leader, leader]),
        Err(AlterPartitionError::InvalidIsr(_))
    ));
    assert!(matches!(
        alter(&c, leader, le, pe, vec![leader, NodeId(9)]),
        Err(AlterPartitionError::InvalidIsr(_))
    ));
    let records = alter(&c, leader, le, pe, vec![leader]).unwrap();
    c.commit(records);
    // The same request again is now stale.
    assert!(matches!(
        alter(&c, leader, le, pe, vec![leader, follower]),
        Err(AlterPartitionError::InvalidUpdateVersion { .. })
    ));
}

/// Partition 0 of `topic`'s preferred replica misses its session (its successor leads) and
/// registers again, not yet in sync; returns it.
fn preferred_away_and_back(c: &mut Cluster, topic: Uuid) -> NodeId {
    let preferred = c.state.partition(topic, 0).unwrap().replicas[0];
    c.now_ms = SESSION_MS + 1;
    for n in 1..=3 {
        if NodeId(n) != preferred {
            c.controller.heartbeat(&c.state, NodeId(n), None, c.now_ms);
        }
    }
    c.tick();
    c.register(preferred.0);
    preferred
}

/// The leader of partition 0 of `topic` takes `node` back into the ISR.
fn back_in_sync(c: &mut Cluster, topic: Uuid, node: NodeId) {
    let p = c.state.partition(topic, 0).unwrap().clone();
    let mut isr = p.isr.clone();
    isr.push(node);
    let records = c
        .controller
        .alter_partition(
            &c.state,
            p.leader.unwrap(),
            topic,
            0,
            p.leader_epoch,
            p.partition_epoch,
            isr,
        )
        .unwrap();
    c.commit(records);
}

#[test]
fn leadership_returns_to_the_preferred_replica_once_it_is_in_sync() {
    let mut c = Cluster::new(3);
    let topic = c.create_topic("t", 1, 3);
    let preferred = preferred_away_and_back(&mut c, topic);
    assert!(
        c.controller.balance_leaders(&c.state).is_empty(),
        "not in sync yet"
    );
    back_in_sync(&mut c, topic, preferred);
    let records = c.controller.balance_leaders(&c.state);
    assert_eq!(records.len(), 1);
    c.commit(records);
    assert_eq!(c.state.partition(topic, 0).unwrap().leader, Some(preferred));
}

#[test]
fn the_controller_balances_leaders_on_its_timer() {
    let interval = ControllerConfig::default().leader_balance_interval_ms;
    let mut c = Cluster::new(3);
    let topic = c.create_topic("t", 1, 3);
    let preferred = preferred_away_and_back(&mut c, topic);
    assert_ne!(c.state.partition(topic, 0).unwrap().leader, Some(preferred));
    back_in_sync(&mut c, topic, preferred);
    let heartbeat_all = |c: &mut Cluster| {
        for n in 1..=3 {
            c.controller.heartbeat(&c.state, NodeId(n), None, c.now_ms);
        }
    };
    // Not before the interval has passed since the controller started ...
    c.now_ms = interval - 1;
    heartbeat_all(&mut c);
    c.tick();
    assert_ne!(c.state.partition(topic, 0).unwrap().leader, Some(preferred));
    // ... then on the next tick.
    c.now_ms = interval;
    heartbeat_all(&mut c);
    c.tick();
    let p = c.state.partition(topic, 0).unwrap();
    assert_eq!(p.leader, Some(preferred));
    assert_eq!(p.isr.len(), 3, "the ISR is kept");
}

#[derive(Debug, Clone)]
enum Event {
    /// Time passes; every live process heartbeats, then the controller ticks.
    Advance(i64),
    Crash(i32),
    Restart(i32),
    /// The node restarts with an empty data directory (a new directory id).
    Wipe(i32),
    /// The leader of partition `p` asks for the ISR given by a bit mask of nodes.
    Alter {
        partition: i32,
        mask: u8,
    },
    BalanceLeaders,
}

fn event() -> impl Strategy<Value = Event> {
    prop_oneof![
        4 => (100i64..1500).prop_map(Event::Advance),
        1 => (1i32..=5).prop_map(Event::Crash),
        1 => (1i32..=5).prop_map(Event::Restart),
        1 => (1i32..=5).prop_map(Event::Wipe),
        3 => (0i32..4, any::<u8>()).prop_map(|(partition, mask)| Event::Alter { partition, mask }),
        1 => Just(Event::BalanceLeaders),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(300))]

    #[test]
    fn random_schedules_keep_the_invariants(events in prop::collection::vec(event(), 1..60)) {
        let mut c = Cluster::new(5);
        let topic = c.create_topic("t", 4, 3);
        let mut running: BTreeSet<i32> = (1..=5).collect();
        let mut wipes: BTreeMap<i32, u32> = (1..=5).map(|n| (n, 0)).collect();
        for e in events {
            match e {
                Event::Advance(ms) => {
                    c.now_ms += ms;
                    for n in &running {
                        if !c.controller.heartbeat(&c.state, NodeId(*n), None, c.now_ms) {
                            // A fenced process learns it from the refused heartbeat.
                            let registration = registration_with(*n, directory(*n, wipes[n]));
                            let records = c.controller.register(&c.state, registration, c.now_ms);
                            c.commit(records);
                        }
                    }
                    c.tick();
                }
                Event::Crash(n) => {
                    running.remove(&n);
                }
                Event::Restart(n) => {
                    if running.insert(n) {
                        let registration = registration_with(n, directory(n, wipes[&n]));
                        let records = c.controller.register(&c.state, registration, c.now_ms);
                        c.commit(records);
                    }
                }
                Event::Wipe(n) => {
                    running.insert(n);
                    let count = wipes.entry(n).or_default();
                    *count += 1;
                    let count = *count;
                    c.register_wiped(n, count);
                }
                Event::Alter { partition, mask } => {
                    let p = c.state.partition(topic, partition).unwrap().clone();
                    let Some(leader) = p.leader else { continue };
                    let isr: Vec<NodeId> = (1..=5).filter(|n| mask & (1 << n) != 0).map(NodeId).collect();
                    if let Ok(records) = c.controller.alter_partition(
                        &c.state, leader, topic, partition, p.leader_epoch, p.partition_epoch, isr,
                    ) {
                        c.commit(records);
                    }
                }
                Event::BalanceLeaders => {
                    let records = c.controller.balance_leaders(&c.state);
                    c.commit(records);
                }
            }
        }
    }
}

#[test]
fn broker_configs_are_kept_per_node_and_go_with_the_node() {
    use sluice_cluster::requests::{decide, ControllerError, ControllerRequest};
    let mut c = Cluster::new(3);
    let rates = BTreeMap::from([(
        "leader.replication.throttled.rate".to_string(),
        "1000".to_string(),
    )]);
    let ask = |node: i32, configs: &BTreeMap<String, String>| ControllerRequest::BrokerConfig {
        node: NodeId(node),
        configs: configs.clone(),
    };
    let (records, _) = decide(&mut c.controller, &c.state, ask(2, &rates)).unwrap();
    c.commit(records);
    assert_eq!(c.state.broker_configs.get(&NodeId(2)), Some(&rates));
    assert!(!c.state.broker_configs.contains_key(&NodeId(3)));
    // Replaced as a whole: empty clears it.
    let (records, _) = decide(&mut c.controller, &c.state, ask(2, &BTreeMap::new())).unwrap();
    c.commit(records);
    assert!(c.state.broker_configs.is_empty());
    // An unknown node is refused; a removed node's configs go with it.
    assert!(matches!(
        decide(&mut c.controller, &c.state, ask(9, &rates)),
        Err(ControllerError::UnknownNode(_))
    ));
    let (records, _) = decide(&mut c.controller, &c.state, ask(3, &rates)).unwrap();
    c.commit(records);
    c.commit(vec![MetadataRecord::RemoveNode { node: NodeId(3) }]);
    assert!(!c.state.broker_configs.contains_key(&NodeId(3)));
}

#[test]
fn a_leader_that_restarts_before_its_fencing_leads_on_in_a_new_epoch() {
    let mut c = Cluster::new(3);
    let topic = c.create_topic("orders", 1, 3);
    let p0 = c.state.partition(topic, 0).unwrap().clone();
    let leader = p0.leader.unwrap();
    let old = c.state.nodes[&leader].registration.incarnation;
    // The restarted process heartbeats with its new incarnation: not live until it registers.
    assert!(c
        .controller
        .heartbeat(&c.state, leader, Some(old), c.now_ms));
    assert!(!c
        .controller
        .heartbeat(&c.state, leader, Some(Uuid::new_v4()), c.now_ms));
    c.register(leader.0);
    let p0 = c.state.partition(topic, 0).unwrap();
    assert_eq!(p0.leader, Some(leader));
    assert_eq!(p0.leader_epoch, LeaderEpoch(1));
    assert_eq!(p0.isr.len(), 3);
    // Registering again with the same incarnation changes nothing.
    let same = c.state.nodes[&leader].registration.clone();
    let records = c.controller.register(&c.state, same, c.now_ms);
    assert!(records.is_empty(), "{records:?}");
}
