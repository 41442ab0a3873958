"""A 5-node cluster (five metadata voters) loses two nodes at once, the metadata leader and a
partition leader, under an idempotent acks=all producer on a topic replicated on all five with
min.insync.replicas=3: the three left elect a new metadata leader and new partition leaders
and go on acknowledging; a third loss leaves too few replicas, and no acks=all write is
acknowledged then; the nodes come back, refill, and the checker finds nothing lost."""

import time

import pytest
from confluent_kafka import KafkaError, Producer

from .checker import History
from .harness import CLIENT_DEFAULTS
from .test_partitions import controller
from .workload import ProducerWorkload, drain_and_check

pytestmark = pytest.mark.timeout(150)

TOPIC = "five"
PARTITIONS = 5


def test_five_nodes_survive_two_lost_and_refuse_writes_without_a_quorum_of_replicas(cluster):
    c = cluster(5)
    c.create_topic(TOPIC, PARTITIONS, replication_factor=5, config={"min.insync.replicas": "3"})
    history = History()
    w = ProducerWorkload(c.bootstrap, TOPIC, history, rate_per_s=300, duration_s=90.0).start()
    try:
        w.wait_acked(600, timeout=20)
        boss = controller(c)
        leaders = {p: c.wait_for_leader(TOPIC, p) for p in range(PARTITIONS)}
        other = next(leaders[p] for p in range(PARTITIONS) if leaders[p] != boss)
        killed_at = time.monotonic()
        c.kill(boss)
        c.kill(other)
        for p in range(PARTITIONS):
            new = c.wait_for_leader(TOPIC, p, timeout=20)
            assert new not in (boss, other)
        assert controller(c) not in (boss, other)
        w.wait_acked(500, timeout=30, since=killed_at)

        # A third node down: two replicas left, below min.insync.replicas=3.
        third = next(i for i in c.ids if i not in (boss, other))
        c.kill(third)
        # Sent once, not retried: an acknowledgement would be a lost write waiting to happen.
        refused = []
        p = Producer({"bootstrap.servers": c.bootstrap, "acks": "all", "enable.idempotence": False,
                      "retries": 0, "message.timeout.ms": 8000, "request.timeout.ms": 4000, **CLIENT_DEFAULTS})
        for i in range(5):
            p.produce(TOPIC, value=f"minority-{i}".encode(), partition=i % PARTITIONS,
                      on_delivery=lambda err, msg: refused.append(err))
        p.flush(20)
        assert len(refused) == 5, f"only {len(refused)} of 5 answered"
        assert all(err is not None for err in refused), f"acknowledged without a quorum: {refused}"
        codes = {err.code() for err in refused}
        assert codes <= {KafkaError.NOT_ENOUGH_REPLICAS, KafkaError.NOT_ENOUGH_REPLICAS_AFTER_APPEND,
                         KafkaError._MSG_TIMED_OUT, KafkaError.REQUEST_TIMED_OUT}, codes

        for i in (boss, other, third):
            c.restart(i)
        restarted_at = time.monotonic()
        c.wait_in_sync(TOPIC, timeout=40)
        w.wait_acked(300, timeout=30, since=restarted_at)
        w.finish()
    finally:
        w.abort()
    assert w.fatal is None, w.fatal
    result = drain_and_check(c, TOPIC, history, "five-nodes")
    assert result.valid, str(result)
