"""Moving replicas between nodes (KIP-455): `sluice topic reassign` and the Java Admin client's
alterPartitionReassignments / listPartitionReassignments (what kafka-reassign-partitions.sh
calls). A move adds the new replicas, lets them copy the log, and drops the old ones once the
new are in sync; an acks=all producer running through it loses nothing, and the leader moves
when the old one leaves."""

import subprocess
import time

from confluent_kafka import Consumer, TopicPartition
from confluent_kafka.admin import AdminClient

from conftest import ROOT, sluice_cli, wait_until

from .harness import CLIENT_DEFAULTS, cluster  # noqa: F401  (fixture)
from .checker import History
from .workload import ProducerWorkload, drain_and_check, produce_records

JAVA = ROOT / "tests" / "java"


def java_admin(bootstrap, *args):
    """ReassignSmoke's output lines (see tests/java/ReassignSmoke.java)."""
    r = subprocess.run(["java", "-cp", f"{JAVA / 'lib'}/*:{JAVA}", "ReassignSmoke", bootstrap, *args],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, f"ReassignSmoke {args} failed: {r.stderr[-2000:]}"
    return r.stdout.strip().splitlines()


def settled(c, topic, partition, replicas):
    """True once every live node reports `replicas` (in order), all of them in sync, and a
    leader among them."""
    for node in c.live():
        p = c.partition(topic, partition, via=node)
        if p is None or p.replicas != replicas or sorted(p.isrs) != sorted(replicas) \
                or p.leader not in replicas:
            return False
    return True


def holds(c, node, topic, partition):
    return (c.nodes[node].data_dir / "topics" / f"{topic}-{partition}").is_dir()


def test_a_partition_moves_off_its_leader_under_load_and_loses_nothing(cluster):
    subprocess.run([str(ROOT / "scripts" / "java-env")], check=True, timeout=600)
    c = cluster(3)
    topic = "mv-load"
    c.create_topic(topic, 1, replication_factor=2)
    old = c.partition(topic, 0).replicas
    spare = next(n for n in c.ids if n not in old)
    leaving = c.leader_of(topic, 0)
    staying = next(n for n in old if n != leaving)
    target = [spare, staying]
    history = History()
    # Something to copy before the move starts, then writes all through it.
    produce_records(c.bootstrap, topic, history, 3000)
    producer = ProducerWorkload(c.bootstrap, topic, history, rate_per_s=300, max_count=6000,
                                duration_s=20.0).start()
    try:
        producer.wait_acked(3300, timeout=20)
        r = sluice_cli("topic", "-b", c.bootstrap, "reassign", topic, "-p", "0",
                       "--replicas", ",".join(map(str, target)), "--wait", "60", timeout=90)
        assert f"{topic}-0: moving to {spare},{staying}" in r.stdout and "done" in r.stdout, r.stdout
        assert java_admin(c.bootstrap, "list") == [], "the move has completed"
        wait_until(lambda: settled(c, topic, 0, target), 20, f"every node to see {topic}-0 on {target}")
        assert c.leader_of(topic, 0) in target
        # The producer goes on with the new leader.
        since = time.monotonic()
        producer.wait_acked(20, timeout=20, since=since)
    finally:
        producer.finish()
    wait_until(lambda: not holds(c, leaving, topic, 0), 20, f"node {leaving} to delete its replica")
    assert holds(c, spare, topic, 0)
    result = drain_and_check(c, topic, history, "reassign-load")
    assert result.valid, result.info
    assert sum(1 for s in history.sends if s.status == "ok") >= 3300


def test_the_java_admin_moves_lists_and_cancels_reassignments(cluster):
    subprocess.run([str(ROOT / "scripts" / "java-env")], check=True, timeout=600)
    c = cluster(3)
    topic = "mv-admin"
    c.create_topic(topic, 2, replication_factor=2)
    history = History()
    produce_records(c.bootstrap, topic, history, 400)
    replicas = c.partition(topic, 1).replicas
    spare = next(n for n in c.ids if n not in replicas)
    # Kafka's error for each bad request, by exception class.
    assert java_admin(c.bootstrap, "move", topic, "1", f"{replicas[0]},99")[0].startswith(
        "error InvalidReplicaAssignmentException: node 99 is not a node of this cluster")
    assert java_admin(c.bootstrap, "move", topic, "1", f"{spare},{spare}")[0].startswith(
        "error InvalidReplicaAssignmentException")
    assert java_admin(c.bootstrap, "move", topic, "7", f"{spare}")[0].startswith(
        "error UnknownTopicOrPartitionException")
    assert java_admin(c.bootstrap, "cancel", topic, "1")[0].startswith(
        "error NoReassignmentInProgressException")
    # Growing to three replicas, then shrinking back to the original two.
    grown = replicas + [spare]
    assert java_admin(c.bootstrap, "move", topic, "1", ",".join(map(str, grown))) == ["ok"]
    wait_until(lambda: settled(c, topic, 1, grown), 30, f"{topic}-1 on {grown}")
    assert java_admin(c.bootstrap, "move", topic, "1", ",".join(map(str, replicas))) == ["ok"]
    wait_until(lambda: settled(c, topic, 1, replicas), 30, f"{topic}-1 back on {replicas}")
    wait_until(lambda: not holds(c, spare, topic, 1), 20, f"node {spare} to delete its replica")
    # The other partition was never touched.
    assert sorted(c.partition(topic, 0).isrs) == sorted(c.partition(topic, 0).replicas)
    result = drain_and_check(c, topic, history, "reassign-admin")
    assert result.valid, result.info


def test_a_running_move_is_listed_with_its_progress_and_can_be_cancelled(cluster):
    subprocess.run([str(ROOT / "scripts" / "java-env")], check=True, timeout=600)
    c = cluster(3)
    topic = "mv-cancel"
    c.create_topic(topic, 1, replication_factor=2)
    replicas = c.partition(topic, 0).replicas
    spare = next(n for n in c.ids if n not in replicas)
    history = History()
    produce_records(c.bootstrap, topic, history, 200)
    # The spare node is stopped: the move starts but cannot finish.
    c.kill(spare)
    wait_until(lambda: c.metadata().controller_id in c.live(), 20, "a live metadata leader")
    target = [spare, replicas[1]]
    r = sluice_cli("topic", "-b", c.bootstrap, "reassign", topic, "--replicas",
                   ",".join(map(str, target)), timeout=60)
    assert f"{topic}-0: moving to" in r.stdout, r.stdout
    listed = java_admin(c.bootstrap, "list")
    removing = replicas[0]
    assert listed == [f"{topic}-0 replicas={spare},{replicas[1]},{removing} adding={spare} "
                      f"removing={removing}"], listed
    shown = sluice_cli("topic", "-b", c.bootstrap, "reassignments").stdout
    assert f"{topic}-0" in shown and f"node {spare}: size unknown" in shown, shown
    # Until the new replica is in sync, the old ones keep every write.
    produce_records(c.bootstrap, topic, history, 200)
    assert sorted(c.partition(topic, 0).isrs) == sorted(replicas)
    r = sluice_cli("topic", "-b", c.bootstrap, "reassign", topic, "--cancel", timeout=60)
    assert f"{topic}-0: reassignment cancelled" in r.stdout, r.stdout
    assert java_admin(c.bootstrap, "list") == []
    wait_until(lambda: sorted(c.partition(topic, 0).replicas) == sorted(replicas), 20,
               "the original replicas back")
    bad = sluice_cli("topic", "-b", c.bootstrap, "reassign", topic, "--replicas", "1,x", check=False)
    assert bad.returncode != 0 and "'x' is not a node id" in bad.stderr, bad.stderr
    again = sluice_cli("topic", "-b", c.bootstrap, "reassign", topic, "--cancel", check=False)
    assert again.returncode != 0 and "NoReassignmentInProgress" in again.stdout, again.stdout
    c.restart(spare)
    result = drain_and_check(c, topic, history, "reassign-cancel")
    assert result.valid, result.info


def test_a_new_replica_starts_where_the_leader_log_starts(cluster):
    """The leader no longer holds the first records (DeleteRecords, as retention would): the
    new replica starts its copy at the leader's log start instead of asking for offset 0
    forever."""
    c = cluster(3)
    topic = "mv-start"
    c.create_topic(topic, 1, replication_factor=2)
    replicas = c.partition(topic, 0).replicas
    spare = next(n for n in c.ids if n not in replicas)
    history = History()
    produce_records(c.bootstrap, topic, history, 500)
    admin = AdminClient({"bootstrap.servers": c.bootstrap, **CLIENT_DEFAULTS})
    deleted = admin.delete_records([TopicPartition(topic, 0, 300)])
    assert deleted[TopicPartition(topic, 0, 300)].result(20).low_watermark == 300
    target = [replicas[0], spare]
    r = sluice_cli("topic", "-b", c.bootstrap, "reassign", topic, "--replicas",
                   ",".join(map(str, target)), "--wait", "30", timeout=60)
    assert "done" in r.stdout, r.stdout
    wait_until(lambda: settled(c, topic, 0, target), 20, f"{topic}-0 on {target}")
    # Only the new replica is left with the old leader gone: it must hold 300..500.
    c.kill(replicas[0])
    c.wait_for_leader(topic, 0, not_node=replicas[0])
    low, high = admin_offsets(c, topic)
    assert (low, high) == (300, 500), (low, high)


def admin_offsets(c, topic):
    consumer = Consumer({"bootstrap.servers": c.bootstrap, "group.id": "offsets", **CLIENT_DEFAULTS})
    try:
        return consumer.get_watermark_offsets(TopicPartition(topic, 0), timeout=10)
    finally:
        consumer.close()
