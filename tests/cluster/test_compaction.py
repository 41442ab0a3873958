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

from kafka import TopicPartition as KafkaTopicPartition
from kafka.admin import KafkaAdminClient

from conftest import wait_until

from .harness import CLIENT_DEFAULTS

pytestmark = pytest.mark.timeout(180)

TOPIC = "compacted"
KEYS, VERSIONS = 20, 30


def read_all(bootstrap, topic=TOPIC):
    """(offset, key, value) of every record, from the start to the high watermark (the last
    record is never compacted away: the active segment is not cleaned)."""
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": f"read-{time.monotonic()}",
                  "enable.auto.commit": False, **CLIENT_DEFAULTS})
    try:
        # A leader just elected answers OFFSET_NOT_AVAILABLE (KIP-207) until its high
        # watermark reaches its epoch's start (seen once in CI); consumers retry it, and so
        # does this.
        (high,) = wait_until(
            lambda: (c.get_watermark_offsets(TopicPartition(topic, 0), timeout=10, cached=False)[1],),
            20, f"{topic}/0's high watermark")
        c.assign([TopicPartition(topic, 0, OFFSET_BEGINNING)])
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


def make_leader(c, admin, node, topic=TOPIC):
    def led():
        try:
            admin.elect_leaders(ElectionType.PREFERRED, [TopicPartition(topic, 0)]).result(10)
        except KafkaException:
            pass  # ELECTION_NOT_NEEDED, or not yet possible: look again
        return c.leader_of(topic, 0) == node
    wait_until(led, 30, f"node {node} to lead {topic}/0")


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


PRODUCERS_TOPIC = "compacted-producers"


def last_sequences(bootstrap, node):
    """{producer id: last sequence} of the producers node `node`'s replica knows
    (DescribeProducers sent to that node)."""
    admin = KafkaAdminClient(bootstrap_servers=bootstrap, request_timeout_ms=10000)
    try:
        tp = KafkaTopicPartition(PRODUCERS_TOPIC, 0)
        state = admin.describe_producers([tp], broker_id=node)[tp]
        return {p.producer_id: p.last_sequence for p in state.active_producers}
    finally:
        admin.close()


def segments_hold(c, node, needle):
    """Whether any segment of the topic on `node` holds the bytes `needle`."""
    files = [f for f in c.nodes[node].data_dir.rglob("*.log") if f.parent.name == f"{PRODUCERS_TOPIC}-0"]
    assert files, f"no segments of {PRODUCERS_TOPIC}-0 on node {node}"
    return any(needle in f.read_bytes() for f in files)


def test_an_idempotent_producer_carries_on_after_failover_to_a_copy_of_a_compacted_log(cluster):
    """The cleaner removes every record of one producer's last batch, and the first and last
    records of another's (newer values came from a third producer). A replica that copies the
    cleaned log must still learn both producers' last sequences, as Kafka's does (the cleaner
    keeps the first batch emptied, and the second's last offset and sequence); otherwise, once
    it leads, it refuses their next batches as UNKNOWN_PRODUCER_ID or out of order (librdkafka
    then starts its sequences again: no duplicate protection across that failover)."""
    c = cluster(3, env={"SLUICE_LOG_CLEANER_INTERVAL_MS": "200"})
    admin = AdminClient({"bootstrap.servers": c.bootstrap, **CLIENT_DEFAULTS})
    admin.create_topics([NewTopic(PRODUCERS_TOPIC, 1, replica_assignment=[[3, 1, 2]], config={
        "cleanup.policy": "compact", "segment.bytes": "4096"})])[PRODUCERS_TOPIC].result(20)
    c.wait_in_sync(PRODUCERS_TOPIC)
    errors = []

    def report(err, _msg):
        if err is not None:
            errors.append(err)

    idempotent = Producer({"bootstrap.servers": c.bootstrap, "acks": "all", "enable.idempotence": True,
                           "linger.ms": 0, **CLIENT_DEFAULTS})
    for k in range(10):
        idempotent.produce(PRODUCERS_TOPIC, key=f"k{k}".encode(), value=f"from-idempotent-{k}".encode(),
                           on_delivery=report)
    assert idempotent.flush(20) == 0 and not errors, errors
    known = last_sequences(c.bootstrap, 3)
    assert list(known.values()) == [9], known
    (pid,) = known
    # One batch if librdkafka waits for all five (however it batches them, its last batch
    # loses its last record).
    second = Producer({"bootstrap.servers": c.bootstrap, "acks": "all", "enable.idempotence": True,
                       "linger.ms": 200, **CLIENT_DEFAULTS})
    for k in range(5):
        second.produce(PRODUCERS_TOPIC, key=f"s{k}".encode(), value=f"second-{k}".encode(), on_delivery=report)
    assert second.flush(20) == 0 and not errors, errors
    (pid2,) = set(last_sequences(c.bootstrap, 3)) - {pid}
    expected = {pid: 9, pid2: 4}
    plain = Producer({"bootstrap.servers": c.bootstrap, "acks": "all", "enable.idempotence": False,
                      "linger.ms": 0, **CLIENT_DEFAULTS})
    for key in [f"k{k}" for k in range(10)] + ["s0", "s4"]:
        plain.produce(PRODUCERS_TOPIC, key=key.encode(), value=f"from-plain-{key}".encode(), on_delivery=report)
    assert plain.flush(30) == 0 and not errors, errors
    for _ in range(60):  # seal the segments holding all of the above: one batch at a time
        plain.produce(PRODUCERS_TOPIC, key=b"filler", value=b"x" * 100, on_delivery=report)
        assert plain.flush(30) == 0 and not errors, errors
    # Every replica's cleaner removes the idempotent producer's records (each node cleans its
    # own copy), so that node 3 refills from a cleaned log whichever node then leads.
    def cleaned(node):
        return not any(segments_hold(c, node, v) for v in [b"from-idempotent", b"second-0", b"second-4"])

    for node in c.ids:
        wait_until(lambda node=node: cleaned(node), 60,
                   f"node {node}'s cleaner to remove the overwritten records")
        assert segments_hold(c, node, b"second-2"), "a record nobody overwrote is kept"
        assert last_sequences(c.bootstrap, node) == expected

    c.wipe(3, leave_isr_of=PRODUCERS_TOPIC)
    c.wait_in_sync(PRODUCERS_TOPIC, timeout=60)
    assert cleaned(3), "node 3 copied a log the cleaner had not cleaned"
    assert last_sequences(c.bootstrap, 3) == expected, "the copy knows the producers' last sequences"

    make_leader(c, admin, 3, PRODUCERS_TOPIC)
    for k in range(5):
        idempotent.produce(PRODUCERS_TOPIC, key=f"k{k}".encode(), value=f"again-{k}".encode(), on_delivery=report)
        second.produce(PRODUCERS_TOPIC, key=f"s{k}".encode(), value=f"second-again-{k}".encode(), on_delivery=report)
    assert idempotent.flush(30) == 0 and second.flush(30) == 0 and not errors, errors
    assert last_sequences(c.bootstrap, 3) == {pid: 14, pid2: 9}
    records = read_all(c.bootstrap, PRODUCERS_TOPIC)
    values = [v for _, k, v in records if k != b"filler"]
    again = [v for v in values if b"again-" in v]
    assert sorted(again) == sorted([f"again-{k}".encode() for k in range(5)]
                                   + [f"second-again-{k}".encode() for k in range(5)]), "each record once"
