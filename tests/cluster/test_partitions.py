"""Network partitions, for real: each node runs in a network namespace of its own (netns.py) and
the links between nodes are cut with blackhole routes while clients still reach every node.

A leader cut off from the majority (a partition's leader, or the metadata leader) keeps running
and keeps its clients: it must not acknowledge an acks=all write once the majority may have
moved on, the majority must elect new leaders and take the writes, and after the partition
heals the old leader must rejoin as a follower, dropping whatever it held that was never
committed. The checker then proves nothing
acknowledged was lost and no offset holds two values."""

import os
import shutil
import time

import pytest

from conftest import wait_until

from .checker import History
from .harness import cluster  # noqa: F401  (fixture)
from .netns import Network, unavailable
from .workload import ProducerWorkload, drain_and_check

pytestmark = pytest.mark.timeout(150)

TOPIC = "cut"
PARTITIONS = 3


@pytest.fixture
def network():
    # Not root (a developer's machine): skipped, and says why. As root (CI, this project's
    # machines), namespaces that cannot be made fail the test.
    if os.geteuid() != 0 or shutil.which("ip") is None:
        pytest.skip("network namespaces need root and iproute2 (`ip`)")
    why = unavailable()
    if why:
        pytest.fail(f"this test needs network namespaces: {why}")
    net = Network([1, 2, 3])
    yield net
    net.close()


def leader_seen_by(c, nodes, partition, not_node=None, timeout=30):
    """A leader that every node of `nodes` names (and that is not `not_node`)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        seen = {c.leader_of(TOPIC, partition, via=i) for i in nodes}
        if len(seen) == 1:
            leader = seen.pop()
            if leader is not None and leader != not_node and leader in nodes:
                return leader
        time.sleep(0.1)
    raise AssertionError(f"nodes {nodes} did not agree on a leader of {TOPIC}/{partition} "
                         f"other than {not_node} ({c.describe()})")


def controller(c):
    """The metadata leader (Kafka's controller) as the first node reports it."""
    return wait_until(c.metadata_leader, 15, "a controller")


@pytest.mark.parametrize("victim", ["partition-leader", "controller"])
def test_a_node_cut_off_from_the_majority_acknowledges_nothing_and_loses_nothing(network, cluster, victim):
    c = cluster(3, network=network)
    c.create_topic(TOPIC, PARTITIONS, replication_factor=3)
    for p in range(PARTITIONS):
        c.wait_for_isr(TOPIC, p)
    history = History()
    w = ProducerWorkload(c.bootstrap, TOPIC, history, rate_per_s=300, duration_s=60.0).start()
    try:
        w.wait_acked(600, timeout=20)
        old = c.wait_for_leader(TOPIC, 0) if victim == "partition-leader" else controller(c)
        majority = [i for i in c.ids if i != old]
        cut_at = time.monotonic()
        network.isolate(old)
        # The majority elects another leader for every partition the old one led (and, for the
        # controller, another metadata leader), while the old one still runs and still has its
        # clients.
        for p in range(PARTITIONS):
            leader_seen_by(c, majority, p, not_node=old, timeout=30)
        w.wait_acked(300, timeout=30, since=cut_at)
        time.sleep(max(0.0, cut_at + 8.0 - time.monotonic()))
        assert c.nodes[old].alive(), "the cut-off leader should still run"
        network.heal_all()
        healed_at = time.monotonic()
        for p in range(PARTITIONS):
            c.wait_for_isr(TOPIC, p, timeout=30)
        w.wait_acked(300, timeout=30, since=healed_at)
        w.finish()
    finally:
        w.abort()
    assert w.fatal is None, w.fatal
    result = drain_and_check(c, TOPIC, history, f"netns-isolated-{victim}")
    assert result.valid, str(result)


def in_sync_everywhere(c, timeout=30):
    """Every partition fully in sync, and every node naming the same leader and ISR for it
    (metadata converged)."""
    for p in range(PARTITIONS):
        c.wait_for_isr(TOPIC, p, timeout=timeout)

    def converged():
        views = set()
        for i in c.ids:
            for _ in range(5):
                try:
                    meta = c.partition(TOPIC, p, via=i)
                    break
                except RuntimeError:  # another node answered; ask again
                    continue
            else:
                return False
            views.add((meta.leader, tuple(sorted(meta.isrs))) if meta is not None else None)
        return len(views) == 1 and None not in views
    for p in range(PARTITIONS):
        wait_until(converged, timeout, f"every node to agree on {TOPIC}/{p}'s leader and ISR")


@pytest.mark.parametrize("link", ["leader-follower", "leader-controller"])
def test_one_cut_link_loses_nothing_and_writes_go_on(network, cluster, link):
    """One link cut, every node still up and reaching the others. Leader-follower: the follower
    cannot fetch, leaves the ISR, and the leader goes on with the other one. Leader-controller
    (a partition leader that is not the metadata leader): it can no longer renew its session,
    steps down, and the controller moves its partitions to the node both can still reach. Either
    way acks=all writes go on within seconds, the cut node comes back into sync after the heal,
    every node converges on the same metadata, and the checker finds nothing lost."""
    c = cluster(3, network=network)
    c.create_topic(TOPIC, PARTITIONS, replication_factor=3)
    history = History()
    w = ProducerWorkload(c.bootstrap, TOPIC, history, rate_per_s=300, duration_s=70.0).start()
    try:
        w.wait_acked(600, timeout=20)
        boss = controller(c)
        leaders = {p: c.wait_for_leader(TOPIC, p) for p in range(PARTITIONS)}
        p = next((q for q in range(PARTITIONS) if leaders[q] != boss), None)
        assert p is not None, f"the controller {boss} leads every partition: {leaders}"
        leader = leaders[p]
        third = next(i for i in c.ids if i not in (leader, boss))
        a, b = (leader, third) if link == "leader-follower" else (leader, boss)
        cut_at = time.monotonic()
        network.cut(a, b)
        if link == "leader-follower":
            # Out of the ISR once it has not caught up for replica.lag.time.max (10 s).
            c.wait_for_isr(TOPIC, p, without=[third], timeout=25)
        else:
            leader_seen_by(c, [boss, third], p, not_node=leader, timeout=15)
        w.wait_acked(300, timeout=30, since=cut_at, partition=p)
        time.sleep(max(0.0, cut_at + 8.0 - time.monotonic()))
        assert all(c.nodes[i].alive() for i in c.ids)
        network.heal_all()
        healed_at = time.monotonic()
        in_sync_everywhere(c, timeout=30)
        w.wait_acked(300, timeout=30, since=healed_at)
        w.finish()
    finally:
        w.abort()
    assert w.fatal is None, w.fatal
    result = drain_and_check(c, TOPIC, history, f"netns-cut-{link}")
    assert result.valid, str(result)
