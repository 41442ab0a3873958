"""Compacted topics on a 3-node cluster. A follower that was down while its leader compacted
fetches a log with gaps in its offsets (the records in between are gone for good): it must take
the gaps as Kafka's followers do, rejoin the ISR, serve the newest value of every key once it
leads, and keep the gaps through a crash of every node (recovery must not take a gap for
damage); a node with a replaced disk refills from an empty log the same way. `__consumer_offsets` and `__transaction_state` are compacted too, so a node that was
down long enough for them to be cleaned depends on the same path."""

import time

import pytest
from confluent_kafka import OFFSET_BEGINNING, Consumer, ElectionType, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from conftest import wait_until

from .harness import CLIENT_DEFAULTS

pytestmark = pytest.mark.timeout(180)

TOPIC = "compacted"
KEYS, VERSIONS = 20, 30


def read_all(bootstrap):
    """(offset, key, value) of every record, from the start to the high watermark (the last
    record is never compacted away: the active segment is not cleaned)."""
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": f"read-{time.monotonic()}",
                  "enable.auto.commit": False, **CLIENT_DEFAULTS})
    try:
        _, high = c.get_watermark_offsets(TopicPartition(TOPIC, 0), timeout=10, cached=False)
        c.assign([TopicPartition(TOPIC, 0, OFFSET_BEGINNING)])
        out = []
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline and not (out and out[-1][0] >= high - 1):
            out += [(m.offset(), m.key(), m.value()) for m in c.consume(1000, 1.0) if m.error() is None]
        assert out and out[-1][0] >= high - 1, f"read up to offset {out[-1][0] if out else None} of {high}"
        return out
    finally:
        c.close()


def newest(records):
    values = {}
    for _, key, value in records:
        if key != b"filler":
            values[key] = value
    return {k: v for k, v in values.items() if v is not None}


def make_leader(c, admin, node):
    def led():
        try:
            admin.elect_leaders(ElectionType.PREFERRED, [TopicPartition(TOPIC, 0)]).result(10)
        except KafkaException:
            pass  # ELECTION_NOT_NEEDED, or not yet possible: look again
        return c.leader_of(TOPIC, 0) == node
    wait_until(led, 30, f"node {node} to lead {TOPIC}/0")


def test_a_follower_that_missed_a_compaction_catches_up_through_the_gaps(cluster):
    c = cluster(3, env={"SLUICE_LOG_CLEANER_INTERVAL_MS": "200"})
    admin = AdminClient({"bootstrap.servers": c.bootstrap, **CLIENT_DEFAULTS})
    # Node 2 first: the preferred leader, which the test makes lead again at the end. The
    # tombstones are kept (delete.retention.ms, 24 h by default): a replica that misses a
    # tombstone removed before it fetched it keeps the key's older value, on Kafka as here.
    admin.create_topics([NewTopic(TOPIC, 1, replica_assignment=[[2, 1, 3]], config={
        "cleanup.policy": "compact", "segment.bytes": "4096"})])[TOPIC].result(20)
    c.wait_in_sync(TOPIC)
    p = Producer({"bootstrap.servers": c.bootstrap, "acks": "all", "enable.idempotence": True,
                  "linger.ms": 0, "batch.num.messages": 20, **CLIENT_DEFAULTS})
    errors = []

    def report(err, _msg):
        if err is not None:
            errors.append(err)

    for k in range(KEYS):
        p.produce(TOPIC, key=f"key-{k}".encode(), value=f"{k}:first".encode(), on_delivery=report)
    assert p.flush(20) == 0
    c.kill(2)
    for version in range(VERSIONS):
        for k in range(KEYS):
            p.produce(TOPIC, key=f"key-{k}".encode(), value=f"{k}:{version}".encode(), on_delivery=report)
        assert p.flush(30) == 0
    for k in range(15, KEYS):  # five keys deleted
        p.produce(TOPIC, key=f"key-{k}".encode(), value=None, on_delivery=report)
    for _ in range(60):  # push the newest values and the tombstones into sealed segments
        p.produce(TOPIC, key=b"filler", value=b"x" * 100, on_delivery=report)
    assert p.flush(30) == 0 and not errors, errors
    want = {f"key-{k}".encode(): f"{k}:{VERSIONS - 1}".encode() for k in range(15)}

    def compacted():
        records = read_all(c.bootstrap)
        keyed = [k for _, k, _ in records if k != b"filler"]
        return records if keyed and len(keyed) == len(set(keyed)) else None

    on_leader = wait_until(compacted, 60, "the leader's cleaner to compact the topic")
    first_offset = on_leader[0][0]
    assert first_offset >= KEYS, f"the records node 2 holds were not compacted away: {on_leader[:3]}"

    # Node 2 holds offsets 0..19 and fetches from 20: the leader's next batch starts later.
    c.restart(2)
    c.wait_in_sync(TOPIC, timeout=60)
    make_leader(c, admin, 2)
    records = read_all(c.bootstrap)
    offsets = [o for o, _, _ in records]
    assert newest(records) == want
    assert offsets[-1] == on_leader[-1][0], "node 2 ends where its old leader did"

    # Every node SIGKILLed: node 2 recovers its segments with their gaps, cutting nothing.
    # Its recovery point is removed, as if nothing had been flushed, so that it scans every
    # segment of the partition (a flushed one would be trusted and not looked at).
    for i in c.ids:
        c.kill(i)
    points = [f for f in c.nodes[2].data_dir.rglob("recovery-point") if f.parent.name == f"{TOPIC}-0"]
    assert len(points) == 1, points
    points[0].unlink()
    for i in c.ids:
        c.restart(i, wait=False)
    c.wait_ready(c.ids)
    c.wait_in_sync(TOPIC, timeout=60)
    make_leader(c, admin, 2)
    log = c.nodes[2].log()
    assert "truncated a torn or corrupt tail" not in log and "removing segment after damaged" not in log
    after = read_all(c.bootstrap)
    assert newest(after) == want and [o for o, _, _ in after][-1] == offsets[-1]

    # A replaced disk: node 3 refills from an empty log, and its first batch from the leader
    # starts far past offset 0. It must rejoin the ISR (only once it holds the leader's log end).
    c.wipe(3, leave_isr_of=TOPIC)
    c.wait_in_sync(TOPIC, timeout=60)
    assert "cannot append what the leader sent" not in c.nodes[3].log()
