"""A follower back from a pause rejoins the ISR while writes that need only the leader go on
(min.insync.replicas=1, the ISR down to the leader), and nothing acknowledged is lost: a busy
partition does not stay on one copy for as long as it is busy.

Kafka's rule, which Sluice follows since 2026-12-01, is meant to make this hold however busy
the partition: the high watermark also waits for a follower outside the ISR that has caught up within
replica.lag.time.max.ms, so that a follower a round trip behind the leader's end at every fetch
can still be asked back. This test passed with that rule disabled too (4 runs: 2 at 4,000 writes/s, 2
asking 20,000/s of a producer that reached ~8,000): here a follower's fetch often finds no write newer than the high watermark.
So it guards the behaviour end to end; the rule itself is pinned by the unit tests in
crates/sluice-cluster/src/replica.rs.

Five nodes (five metadata voters), so that the two followers can be paused while the three
others keep the metadata quorum; the partition is placed on the metadata leader and two
others, so that the pause moves neither the controller nor the partition's leadership."""

import time

import pytest
from confluent_kafka.admin import AdminClient, NewTopic

from conftest import wait_until

from .checker import History
from .harness import CLIENT_DEFAULTS
from .test_partitions import controller
from .workload import ProducerWorkload, drain_and_check

pytestmark = pytest.mark.timeout(180)

TOPIC = "rejoin"


def test_a_follower_back_from_a_pause_rejoins_the_isr_while_writes_go_on(cluster):
    c = cluster(5)
    boss = controller(c)
    f1, f2 = [i for i in c.ids if i != boss][:2]
    admin = AdminClient({"bootstrap.servers": c.bootstrap, **CLIENT_DEFAULTS})
    admin.create_topics([NewTopic(TOPIC, 1, replica_assignment=[[boss, f1, f2]],
                                  config={"min.insync.replicas": "1"})])[TOPIC].result(30)
    wait_until(lambda: c.partitions_of(TOPIC) == [0], 30, f"{TOPIC} in Metadata")
    c.wait_in_sync(TOPIC)
    assert c.wait_for_leader(TOPIC, 0) == boss

    history = History()
    # linger.ms=0: a steady stream of small produce requests (a busy partition).
    w = ProducerWorkload(c.bootstrap, TOPIC, history, rate_per_s=4000, max_count=600_000,
                         duration_s=120.0, partition=0, conf={"linger.ms": 0}).start()
    try:
        w.wait_acked(2000, timeout=20)
        c.pause(f1)
        c.pause(f2)
        # Out of the ISR once their controller sessions lapse (fenced), or at the latest once
        # not caught up for replica.lag.time.max.ms (10 s); the writes go on with the leader.
        c.wait_for_isr(TOPIC, 0, nodes=[boss], without=[f1, f2], timeout=30)
        # Counted from 2 s after the shrink: not the writes held back before it.
        w.wait_acked(2000, timeout=20, since=time.monotonic() + 2)

        c.resume(f1)
        resumed_at = time.monotonic()
        c.wait_for_isr(TOPIC, 0, nodes=[boss, f1], without=[f2], timeout=30)
        joined_at = time.monotonic()
        print(f"rejoined {joined_at - resumed_at:.2f} s after the resume")
        # The writes went on throughout: as many acknowledged after the resume as the rate gives
        # in that time, less a margin (the catch-up shares these two cores).
        acked_meanwhile = w.acked(since=resumed_at)
        assert acked_meanwhile >= 1000 * (joined_at - resumed_at), \
            f"only {acked_meanwhile} writes acknowledged in the {joined_at - resumed_at:.1f} s to the rejoin"
        w.wait_acked(1000, timeout=20, since=joined_at)

        c.resume(f2)
        c.wait_for_isr(TOPIC, 0, timeout=30)
        w.finish()
    finally:
        w.abort()
        for i in (f1, f2):
            if c.nodes[i].paused:
                c.resume(i)
    assert w.fatal is None, w.fatal
    result = drain_and_check(c, TOPIC, history, "isr-rejoin")
    assert result.valid, str(result)
