"""Growing a running cluster: a node that `--cluster` does not list starts with
`--internal-listen` and joins as a non-voting member (a Raft learner of the metadata group): it
applies the metadata, registers, and takes replicas — new topics are placed on it, and
existing partitions move to it with a reassignment, under load, with nothing lost. Kafka's
tools see it as a broker and the metadata quorum lists it as an observer."""

import subprocess
import time

from conftest import ROOT, SLUICE, wait_until

from .harness import cluster  # noqa: F401  (fixture)
from .checker import History
from .test_quorum import quorum
from .workload import ProducerWorkload, drain_and_check


def test_a_fourth_node_joins_takes_replicas_and_survives_a_voter_kill(cluster):
    subprocess.run([str(ROOT / "scripts" / "java-env")], check=True, timeout=600)
    c = cluster(3)
    c.create_topic("before", 2, replication_factor=3)
    history = History()
    producer = ProducerWorkload(c.bootstrap, "before", history, rate_per_s=200, max_count=8000,
                                duration_s=40.0).start()
    try:
        producer.wait_acked(200, timeout=20)
        c.add_node(4)
        wait_until(lambda: 4 in c.metadata(via=1).brokers and 4 in c.metadata(via=4).brokers, 20,
                   "node 4 listed as a broker by the others and by itself")
        # It does not vote: the metadata quorum is still nodes 1-3.
        q = wait_until(lambda: quorum(c.nodes[1].bootstrap), 20, "DescribeQuorum")
        assert sorted(q["voters"]) == [1, 2, 3], q
        # A new topic with four replicas lands on every node, node 4 included.
        c.create_topic("after", 4, replication_factor=4)
        assert sorted(c.partition("after", 0).replicas) == [1, 2, 3, 4]
        # An existing partition moves onto node 4 (off node 1) while the producer runs.
        replicas = c.partition("before", 0).replicas
        target = [4] + [n for n in replicas if n != 1][:2]
        r = subprocess.run([str(SLUICE), "topic", "-b", c.bootstrap, "reassign", "before", "-p", "0",
                            "--replicas", ",".join(map(str, target)), "--wait", "60"],
                           capture_output=True, text=True, timeout=90)
        assert r.returncode == 0 and "done" in r.stdout, r.stdout + r.stderr
        wait_until(lambda: c.partition("before", 0).replicas == target
                   and sorted(c.partition("before", 0).isrs) == sorted(target), 20, f"before-0 on {target}")
        since = time.monotonic()
        producer.wait_acked(50, timeout=20, since=since)
        # A voter dies: the metadata group keeps its majority, node 4 keeps serving.
        c.kill(2)
        for p in range(2):
            c.wait_for_leader("before", p, not_node=2)
        since = time.monotonic()
        producer.wait_acked(50, timeout=30, since=since)
    finally:
        producer.finish()
    # Node 4 restarts and rejoins (it asks to join again; it is a member already).
    c.kill(4)
    c.nodes[4].start()
    wait_until(lambda: 4 in c.metadata(via=1).brokers, 20, "node 4 back")
    c.restart(2)
    result = drain_and_check(c, "before", history, "grow")
    assert result.valid, result.info


def remove_node(c, node, *extra):
    return subprocess.run([str(SLUICE), "cluster", "-b", c.bootstrap, "remove-node", str(node), *extra],
                          capture_output=True, text=True, timeout=120)


def test_a_node_is_drained_then_removed_and_the_rest_loses_nothing(cluster):
    c = cluster(3)
    c.add_node(4)
    wait_until(lambda: 4 in c.metadata(via=1).brokers, 20, "node 4 registered")
    c.create_topic("rm", 4, replication_factor=3)
    assert any(4 in c.partition("rm", p).replicas for p in range(4)), "placement uses node 4"
    history = History()
    producer = ProducerWorkload(c.bootstrap, "rm", history, rate_per_s=200, max_count=8000,
                                duration_s=40.0).start()
    try:
        producer.wait_acked(200, timeout=20)
        unknown = remove_node(c, 9)
        assert unknown.returncode != 0 and "node 9 is not a node of this cluster" in unknown.stderr, unknown.stderr
        # Running: drained, not removed.
        r = remove_node(c, 4, "--wait", "60")
        assert r.returncode == 0, r.stdout + r.stderr
        assert "node 4 holds no replica now" in r.stdout and "stop it" in r.stdout, r.stdout
        for p in range(4):
            assert 4 not in c.partition("rm", p).replicas, c.partition("rm", p)
        since = time.monotonic()
        producer.wait_acked(50, timeout=20, since=since)
        c.kill(4)
        wait_until(lambda: remove_node(c, 4).stdout.strip().endswith("node 4 removed from the cluster"), 30,
                   "node 4 removed once it is down")
        wait_until(lambda: all(4 not in c.metadata(via=n).brokers for n in (1, 2, 3)), 20,
                   "node 4 gone from every node's broker list")
        # A voter's replicas have nowhere to go in a cluster of three: refused with the reason.
        refused = remove_node(c, 3, "--wait", "5")
        assert refused.returncode != 0 and "no live node can take node 3's replica" in refused.stderr, refused.stderr
        since = time.monotonic()
        producer.wait_acked(50, timeout=20, since=since)
    finally:
        producer.finish()
    result = drain_and_check(c, "rm", history, "remove-node")
    assert result.valid, result.info
