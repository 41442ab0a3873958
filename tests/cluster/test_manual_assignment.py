"""Replicas placed by hand in a cluster: CreateTopics and CreatePartitions with an assignment
(kafka-topics.sh --replica-assignment, AdminClient's replica_assignment), through librdkafka and
kafka-python and `sluice topic create`. The named nodes hold the replicas, the first in-sync one
leads, a replica on a dead node catches up once the node is back, and every bad assignment is
refused with INVALID_REPLICA_ASSIGNMENT, creating nothing."""

import subprocess

import pytest
from confluent_kafka import (OFFSET_BEGINNING, Consumer, ElectionType, KafkaError, KafkaException, Producer,
                             TopicPartition)
from confluent_kafka.admin import AdminClient, NewPartitions, NewTopic
from kafka import KafkaAdminClient
from kafka.admin import NewPartitions as KpNewPartitions
from kafka.admin import NewTopic as KpNewTopic
from kafka.errors import InvalidReplicationAssignmentError

from conftest import SLUICE, wait_until

from .harness import CLIENT_DEFAULTS, cluster  # noqa: F401  (fixture)

pytestmark = pytest.mark.timeout(150)


def layout(c, topic):
    """{partition: (replicas, leader)} as Metadata tells it."""
    t = c.metadata(topic).topics.get(topic)
    if t is None or t.error is not None:
        return None
    return {p: (list(m.replicas), m.leader) for p, m in t.partitions.items()}


def placed(name, assignment, config=None):
    """A NewTopic with its replicas named (librdkafka wants the partition count given too; it
    sends -1 for it and for the replication factor, as Kafka's own AdminClient does)."""
    return NewTopic(name, num_partitions=len(assignment), replica_assignment=assignment, config=config or {})


def refused(future):
    """The KafkaError a failed admin future carries; fails the test if it succeeded."""
    with pytest.raises(KafkaException) as e:
        future.result(30)
    return e.value.args[0]


def reader(c, topic, partitions):
    """A consumer of `partitions` from their start, without a group: with a node down the
    cluster may have no __consumer_offsets yet (made with min(3, registered nodes) replicas,
    as Kafka refuses it with fewer live brokers than offsets.topic.replication.factor)."""
    consumer = Consumer({"bootstrap.servers": c.bootstrap, "group.id": "unused",
                         "enable.auto.commit": False, **CLIENT_DEFAULTS})
    consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in partitions])
    return consumer


def round_trip(c, topic, partitions):
    """Five acks=all records to each partition, read back in order."""
    p = Producer({"bootstrap.servers": c.bootstrap, "acks": "all", **CLIENT_DEFAULTS})
    sent = {part: [f"{topic}-{part}-{i}".encode() for i in range(5)] for part in partitions}
    for part, values in sent.items():
        for v in values:
            p.produce(topic, v, partition=part)
    assert p.flush(30) == 0
    consumer = reader(c, topic, partitions)
    got = {part: [] for part in partitions}
    try:
        def all_read():
            m = consumer.poll(0.5)
            if m is not None and m.error() is None and m.partition() in got:
                got[m.partition()].append(m.value())
            return got == sent
        wait_until(all_read, 40, f"every record of {topic} read back ({got})")
    finally:
        consumer.close()


def test_replicas_go_where_the_assignment_names_and_partitions_grow_the_same_way(cluster):
    c = cluster(3)
    admin = AdminClient({"bootstrap.servers": c.bootstrap, **CLIENT_DEFAULTS})

    # librdkafka: partition 0 on 3 and 1 (3 leads), partition 1 on 2 and 3.
    admin.create_topics([placed("placed", [[3, 1], [2, 3]])])["placed"].result(30)
    wait_until(lambda: layout(c, "placed") == {0: ([3, 1], 3), 1: ([2, 3], 2)}, 30,
               f"the named replicas and leaders ({layout(c, 'placed')})")
    c.wait_in_sync("placed")
    round_trip(c, "placed", [0, 1])

    # Two more partitions, placed by hand too; a third by the controller.
    admin.create_partitions([NewPartitions("placed", 4, replica_assignment=[[1, 2], [2, 1]])])["placed"].result(30)
    admin.create_partitions([NewPartitions("placed", 5)])["placed"].result(30)
    want = {0: ([3, 1], 3), 1: ([2, 3], 2), 2: ([1, 2], 1), 3: ([2, 1], 2)}
    wait_until(lambda: len(layout(c, "placed")) == 5, 30, "five partitions")
    got = layout(c, "placed")
    assert {p: got[p] for p in range(4)} == want, got
    assert len(got[4][0]) == 2, f"the controller's partition has the topic's 2 replicas: {got}"
    c.wait_in_sync("placed")
    round_trip(c, "placed", [2, 3, 4])

    # kafka-python, as kafka-topics.sh sends it: partition indexes given with each list.
    kp = KafkaAdminClient(bootstrap_servers=c.bootstrap)
    try:
        kp.create_topics([KpNewTopic("placed-kp", -1, -1, replica_assignments={0: [2], 1: [1], 2: [3]})])
        wait_until(lambda: layout(c, "placed-kp") == {0: ([2], 2), 1: ([1], 1), 2: ([3], 3)}, 30,
                   f"kafka-python's assignment ({layout(c, 'placed-kp')})")
        with pytest.raises(InvalidReplicationAssignmentError):
            kp.create_partitions({"placed-kp": KpNewPartitions(5, [[1]])})
        kp.create_partitions({"placed-kp": KpNewPartitions(4, [[1]])})
        wait_until(lambda: layout(c, "placed-kp").get(3) == ([1], 1), 30, "partition 3 on node 1")
    finally:
        kp.close()

    # `sluice topic create --replica-assignment`, as kafka-topics.sh takes it.
    r = subprocess.run([str(SLUICE), "topic", "create", "placed-cli", "-b", c.bootstrap,
                        "--replica-assignment", "2:3,3:1"], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    assert "2 partition(s)" in r.stdout, r.stdout
    wait_until(lambda: layout(c, "placed-cli") == {0: ([2, 3], 2), 1: ([3, 1], 3)}, 30,
               f"the CLI's assignment ({layout(c, 'placed-cli')})")
    r = subprocess.run([str(SLUICE), "topic", "create", "placed-cli2", "-b", c.bootstrap,
                        "--replica-assignment", "2:x"], capture_output=True, text=True, timeout=60)
    assert r.returncode != 0 and "'x' is not a node id" in r.stderr, r.stderr


def test_bad_assignments_are_refused_and_create_nothing(cluster):
    c = cluster(3)
    admin = AdminClient({"bootstrap.servers": c.bootstrap, **CLIENT_DEFAULTS})
    cases = {
        "unknown-node": [[1, 9]],
        "repeated-node": [[2, 2]],
        "uneven": [[1, 2], [3]],
    }
    for name, assignment in cases.items():
        e = refused(admin.create_topics([placed(name, assignment)])[name])
        assert e.code() == KafkaError.INVALID_REPLICA_ASSIGNMENT, (name, e)
        assert "partition" in e.str(), (name, e.str())
    e = refused(admin.create_topics([placed("unknown-node", [[1, 9]])])["unknown-node"])
    assert "node 9" in e.str() and "not registered" in e.str(), e.str()
    admin.create_topics([placed("v", [[1]])], validate_only=True)["v"].result(30)
    md = c.metadata()
    for name in [*cases, "v"]:
        assert name not in md.topics, f"{name} was created: {md.topics[name]}"

    admin.create_topics([placed("grown", [[1, 2]])])["grown"].result(30)
    wait_until(lambda: layout(c, "grown") == {0: ([1, 2], 1)}, 30, "grown on 1 and 2")
    bad_growth = {
        "too few lists": NewPartitions("grown", 3, replica_assignment=[[2, 3]]),
        "other replica count": NewPartitions("grown", 2, replica_assignment=[[3]]),
        "unknown node": NewPartitions("grown", 2, replica_assignment=[[3, 7]]),
    }
    for what, np in bad_growth.items():
        e = refused(admin.create_partitions([np])["grown"])
        assert e.code() == KafkaError.INVALID_REPLICA_ASSIGNMENT, (what, e)
    e = refused(admin.create_partitions([NewPartitions("grown", 1, replica_assignment=[[2, 3]])])["grown"])
    assert e.code() == KafkaError.INVALID_PARTITIONS, e
    assert layout(c, "grown") == {0: ([1, 2], 1)}, "no partition was added"


def test_a_replica_on_a_dead_node_starts_out_of_sync_and_catches_up(cluster):
    c = cluster(3)
    admin = AdminClient({"bootstrap.servers": c.bootstrap, **CLIENT_DEFAULTS})
    c.kill(3)
    # (Metadata still lists a fenced node, on purpose: decisions/cluster-follower-reads.md.)
    wait_until(lambda: any(n["id"] == 3 and n["status"] == "fenced"
                           for n in c.node(1).admin_get("/api/overview")["nodes"]), 30, "node 3 fenced")

    # Every replica on the dead node: no leader possible, refused.
    e = refused(admin.create_topics([placed("dead-only", [[3]])])["dead-only"])
    assert e.code() == KafkaError.INVALID_REPLICA_ASSIGNMENT and "fenced" in e.str(), e

    # Node 3 first in the list: placed there, but node 1 leads and node 3 is out of the ISR.
    # (One in-sync replica of two is below the default min.insync.replicas, a majority: the
    # topic lowers it to take acks=all writes meanwhile.)
    admin.create_topics([placed("half", [[3, 1]], {"min.insync.replicas": "1"})])["half"].result(30)
    wait_until(lambda: layout(c, "half") == {0: ([3, 1], 1)}, 30, f"led by 1 ({layout(c, 'half')})")
    assert c.wait_for_isr("half", 0, nodes=[1]) == [1]
    round_trip(c, "half", [0])

    c.restart(3)
    c.wait_for_isr("half", 0, nodes=[1, 3], timeout=60)
    # Leadership to the preferred replica, node 3, which must now hold every record to serve
    # them (asked for, as kafka-leader-election.sh asks, rather than waiting for the timer).
    admin.elect_leaders(ElectionType.PREFERRED, [TopicPartition("half", 0)]).result(30)
    wait_until(lambda: c.leader_of("half", 0) == 3, 30, "node 3 to lead (preferred replica)")
    consumer = reader(c, "half", [0])
    got = []

    def read_five():
        m = consumer.poll(0.5)
        if m is not None and m.error() is None:
            got.append(m.value())
        return len(got) >= 5
    try:
        wait_until(read_five, 30, f"the five records from node 3 ({got})")
    finally:
        consumer.close()
    assert got == [f"half-0-{i}".encode() for i in range(5)], got
