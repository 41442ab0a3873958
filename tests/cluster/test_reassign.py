"""Moving replicas between nodes (KIP-455): `sluice topic reassign` and the Java Admin client's
alterPartitionReassignments / listPartitionReassignments (what kafka-reassign-partitions.sh
calls). A move adds the new replicas, lets them copy the log, and drops the old ones once the
new are in sync; an acks=all producer running through it loses nothing, and the leader moves
when the old one leaves."""

import json
import re
import subprocess
import time

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, ConfigResource

from conftest import ROOT, SLUICE, sluice_cli, wait_until

from .harness import CLIENT_DEFAULTS, cluster  # noqa: F401  (fixture)
from .checker import History
from .kafka_cluster import kafka_libs
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


@pytest.fixture(scope="module")
def java():
    """The Java client and ReassignSmoke, compiled once for the module."""
    subprocess.run([str(ROOT / "scripts" / "java-env")], check=True, timeout=600)


def spare_for(c, replicas):
    """A node of `c` that is not one of `replicas`."""
    return next(n for n in c.ids if n not in replicas)


def holds(c, node, topic, partition):
    return (c.nodes[node].data_dir / "topics" / f"{topic}-{partition}").is_dir()


def test_a_partition_moves_off_its_leader_under_load_and_loses_nothing(cluster, java):
    c = cluster(3)
    topic = "mv-load"
    c.create_topic(topic, 1, replication_factor=2)
    old = c.partition(topic, 0).replicas
    spare = spare_for(c, old)
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


def test_the_java_admin_moves_lists_and_cancels_reassignments(cluster, java):
    c = cluster(3)
    topic = "mv-admin"
    c.create_topic(topic, 2, replication_factor=2)
    history = History()
    produce_records(c.bootstrap, topic, history, 400)
    replicas = c.partition(topic, 1).replicas
    spare = spare_for(c, replicas)
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


def test_a_running_move_is_listed_with_its_progress_and_can_be_cancelled(cluster, java):
    c = cluster(3)
    topic = "mv-cancel"
    c.create_topic(topic, 1, replication_factor=2)
    replicas = c.partition(topic, 0).replicas
    spare = spare_for(c, replicas)
    history = History()
    produce_records(c.bootstrap, topic, history, 200)
    # The spare node is stopped: the move starts but cannot finish.
    c.kill(spare)
    wait_until(lambda: c.metadata_leader() in c.live(), 20, "a live metadata leader")
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
    spare = spare_for(c, replicas)
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


def fill(c, topic, mib, partitions=(0,)):
    """About `mib` MiB of 1 KiB records (acks=all, idempotent) in each of `partitions`;
    returns the count per partition."""
    producer = Producer({"bootstrap.servers": c.bootstrap, "enable.idempotence": True,
                         "linger.ms": 20, **CLIENT_DEFAULTS})
    failed = []
    for i in range(mib * 1024):
        for p in partitions:
            producer.produce(topic, value=b"%08d" % i + b"x" * 1016, partition=p,
                             on_delivery=lambda err, _msg: err and failed.append(err))
        producer.poll(0)
    assert producer.flush(60) == 0 and not failed, failed[:3]
    return {p: mib * 1024 for p in partitions}


def read_back(c, topic, partition):
    """Every value of the partition, in order (from whichever replica leads it now)."""
    consumer = Consumer({"bootstrap.servers": c.bootstrap, "group.id": "read-back",
                         "enable.auto.commit": False, **CLIENT_DEFAULTS})
    values = []
    try:
        consumer.assign([TopicPartition(topic, partition, 0)])
        _, high = consumer.get_watermark_offsets(TopicPartition(topic, partition), timeout=10)
        deadline = time.monotonic() + 30
        while len(values) < high and time.monotonic() < deadline:
            for m in consumer.consume(1000, timeout=1):
                assert m.error() is None, m.error()
                values.append(m.value())
    finally:
        consumer.close()
    return values


def intact(values, count):
    return len(values) == count and all(v[:8] == b"%08d" % i for i, v in enumerate(values))


def broker_config(c, node, key):
    """The value of a dynamic broker config on `node` (None when unset)."""
    admin = AdminClient({"bootstrap.servers": c.nodes[node].bootstrap, **CLIENT_DEFAULTS})
    resource = ConfigResource("broker", str(node))
    configs = admin.describe_configs([resource])[resource].result(20)
    entry = configs.get(key)
    return entry.value if entry is not None else None


def test_a_throttled_move_copies_at_the_capped_rate_and_the_throttle_goes_after(cluster):
    c = cluster(3)
    topic = "mv-throttle"
    c.create_topic(topic, 1, replication_factor=2)
    replicas = c.partition(topic, 0).replicas
    spare = spare_for(c, replicas)
    counts = fill(c, topic, 6)
    target = [replicas[0], spare]
    started = time.monotonic()
    move = subprocess.Popen([str(SLUICE), "topic", "-b", c.bootstrap, "reassign", topic, "--replicas",
                             ",".join(map(str, target)), "--throttle", "1000000", "--wait", "60"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        # Part way through, the new replica holds some of the leader's bytes, not all.
        def partial():
            shown = sluice_cli("topic", "-b", c.bootstrap, "reassignments").stdout
            m = re.search(rf"node {spare}: [\d.]+ (?:MiB|B) / [\d.]+ MiB \((\d+)%\)", shown)
            return m is not None and 0 < int(m.group(1)) < 100 and shown
        shown = wait_until(partial, 10, "a move in progress with bytes copied")
        assert broker_config(c, spare, "follower.replication.throttled.rate") == "1000000", shown
        out, err = move.communicate(timeout=90)
    finally:
        if move.poll() is None:
            move.kill()
    elapsed = time.monotonic() - started
    assert move.returncode == 0, err
    assert "throttled the copy to 1000000 bytes/s" in out and "done" in out and "throttle removed" in out, out
    # ~6.3 MB at 1 MB/s (after a first second's worth): an unthrottled copy takes well under a second here.
    assert elapsed >= 4.0, f"the throttled move took only {elapsed:.1f} s"
    wait_until(lambda: settled(c, topic, 0, target), 20, f"{topic}-0 on {target}")
    for node in c.ids:
        assert broker_config(c, node, "follower.replication.throttled.rate") is None
        assert broker_config(c, node, "leader.replication.throttled.rate") is None
    # The new replica holds it all: with the other one stopped it serves every record.
    c.kill(replicas[0])
    c.wait_for_leader(topic, 0, not_node=replicas[0])
    assert intact(read_back(c, topic, 0), counts[0])


def test_kafka_reassign_partitions_sh_executes_throttles_and_verifies(cluster):
    """Kafka's own tool (4.3.1, from Maven Central): --execute with --throttle sets the topic's
    throttled replicas and every node's rates; --verify reports completion and clears them."""
    libs = kafka_libs()
    c = cluster(3)
    topic = "mv-tool"
    c.create_topic(topic, 2, replication_factor=2)
    counts = fill(c, topic, 2, partitions=(0, 1))
    plan = {"version": 1, "partitions": []}
    for p in (0, 1):
        replicas = c.partition(topic, p).replicas
        spare = spare_for(c, replicas)
        plan["partitions"].append({"topic": topic, "partition": p, "replicas": [spare, replicas[1]]})
    path = c.nodes[1].data_dir.parent / "reassign.json"
    path.write_text(json.dumps(plan))

    def tool(*args):
        r = subprocess.run(["java", "-cp", f"{libs}/*", "org.apache.kafka.tools.reassign.ReassignPartitionsCommand",
                            "--bootstrap-server", c.bootstrap, "--reassignment-json-file", str(path), *args],
                           capture_output=True, text=True, timeout=120)
        assert r.returncode == 0, f"kafka-reassign-partitions {args}: {r.stdout[-1500:]} {r.stderr[-1500:]}"
        return r.stdout

    out = tool("--execute", "--throttle", "4000000")
    assert "Successfully started partition reassignments" in out, out
    assert "The inter-broker throttle limit was set to 4000000 B/s" in out, out

    def verified():
        out = tool("--verify")
        return "is still in progress" not in out and out
    out = wait_until(verified, 60, "kafka-reassign-partitions --verify to report completion")
    assert f"Reassignment of partition {topic}-0 is completed" in out, out
    assert "Clearing broker-level throttles" in out, out
    for entry in plan["partitions"]:
        wait_until(lambda: settled(c, topic, entry["partition"], entry["replicas"]), 20,
                   f"{topic}-{entry['partition']} on {entry['replicas']}")
    for node in c.ids:
        assert broker_config(c, node, "leader.replication.throttled.rate") is None
    for p in (0, 1):
        assert intact(read_back(c, topic, p), counts[p]), f"{topic}-{p}"
