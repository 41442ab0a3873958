"""Reads from followers (KIP-392) with librdkafka: a consumer whose `client.rack` is a
follower's rack is sent there by the leader and reads everything from it, a consumer in the
leader's rack stays on the leader, and a follower serves only what the leader has committed
(it holds records past the high watermark while another in-sync follower is paused, and gives
them out only once they are committed)."""

import contextlib
import struct
import subprocess
import time
import types

from confluent_kafka import Consumer, Producer, TopicPartition

from broker.raw import Conn, frame, header_v1, string
from broker.test_metrics import scrape, value
from conftest import ROOT, wait_until

from .harness import CLIENT_DEFAULTS, cluster  # noqa: F401  (fixture)

RACKS = ["rack-a", "rack-b", "rack-c"]


def fetched_records(node, topic):
    """Records node served to fetches of `topic`/0 (a follower serves consumers only)."""
    return value(scrape(node), "sluice_fetch_records", "_total", topic=topic, partition=0) or 0


def served(c, nodes, topic):
    """{node: records it served to fetches of topic/0}."""
    return {i: fetched_records(c.node(i), topic) for i in nodes}


def rack_cluster(cluster, topic, **flags):
    """A 3-node cluster with RACKS and a topic of one partition on all three, in sync:
    (cluster, leader, follower, other follower)."""
    c = cluster(3, racks=RACKS, **flags)
    c.create_topic(topic, 1, replication_factor=3)
    leader = c.wait_for_leader(topic, 0)
    c.wait_for_isr(topic, 0)
    follower, other = [i for i in c.ids if i != leader]
    return c, leader, follower, other


def produce(bootstrap, topic, values, acks="all"):
    p = Producer({"bootstrap.servers": bootstrap, "acks": acks, "linger.ms": 5, **CLIENT_DEFAULTS})
    failed = []
    for v in values:
        p.produce(topic, value=v, partition=0, on_delivery=lambda err, m: err and failed.append(err))
    assert p.flush(20) == 0, "not every record was delivered"
    assert not failed, failed


def rack_consumer(bootstrap, rack):
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": f"fr-{rack}-{time.monotonic_ns()}",
                  "client.rack": rack, "enable.auto.commit": False, **CLIENT_DEFAULTS})
    return c


def read(consumer, topic, count, timeout_s):
    """Reads `count` values of topic/0 from offset 0 (or until the timeout): the values."""
    consumer.assign([TopicPartition(topic, 0, 0)])
    got = []
    deadline = time.monotonic() + timeout_s
    while len(got) < count and time.monotonic() < deadline:
        for m in consumer.consume(100, 0.5):
            if m.error() is None:
                got.append(m.value())
    return got


def test_a_consumer_reads_from_the_follower_in_its_rack(cluster):
    topic = "fr-rack"
    c, leader, follower, other = rack_cluster(cluster, topic)
    values = [f"v{i}".encode() for i in range(300)]
    produce(c.bootstrap, topic, values)

    before = served(c, (follower, other), topic)
    consumer = rack_consumer(c.bootstrap, RACKS[follower - 1])
    try:
        got = read(consumer, topic, len(values), 30)
    finally:
        consumer.close()
    assert got == values, f"read {len(got)} of {len(values)}, or out of order"
    # The follower in the consumer's rack served it; the other follower served nobody.
    assert fetched_records(c.node(follower), topic) - before[follower] >= len(values)
    assert fetched_records(c.node(other), topic) == before[other]

    # A consumer in the leader's rack reads from the leader: the followers serve nothing.
    before = served(c, (follower, other), topic)
    consumer = rack_consumer(c.bootstrap, RACKS[leader - 1])
    try:
        assert read(consumer, topic, len(values), 30) == values
    finally:
        consumer.close()
    assert served(c, (follower, other), topic) == before


def fetch_error(bootstrap, topic, version):
    """A consumer's Fetch (v10 or v11, no rack, no session) of topic/0 from offset 0: the
    partition's error code."""
    body = struct.pack(">iiiibii", -1, 0, 1, 1 << 20, 0, 0, -1)  # replica, wait, min/max bytes,
    body += struct.pack(">i", 1) + string(topic)                   # isolation, session id/epoch
    body += struct.pack(">i", 1) + struct.pack(">iiqqi", 0, -1, 0, -1, 1 << 20)
    body += struct.pack(">i", 0)  # forgotten topics
    if version >= 11:
        body += string("")        # rack id
    conn = Conn(bootstrap)
    try:
        conn.send(frame(header_v1(1, version, 5) + body))
        payload = conn.read_frame()
    finally:
        conn.sock.close()
    assert payload is not None, "the broker closed the connection"
    at = 4 + 4 + 2 + 4  # correlation id, throttle time, error code, session id
    (topics,) = struct.unpack_from(">i", payload, at)
    assert topics == 1
    (n,) = struct.unpack_from(">h", payload, at + 4)
    at += 4 + 2 + n
    (parts,) = struct.unpack_from(">i", payload, at)
    assert parts == 1
    index, error = struct.unpack_from(">ih", payload, at + 4)
    assert index == 0
    return error


def test_a_follower_refuses_fetches_older_than_v11(cluster):
    """Before KIP-392 a consumer reads from the leader only, as in Kafka; from v11 a follower
    serves it."""
    topic = "fr-versions"
    c, leader, follower, _ = rack_cluster(cluster, topic)
    produce(c.bootstrap, topic, [b"x"])
    assert fetch_error(c.node(follower).bootstrap, topic, 10) == 6  # NOT_LEADER_OR_FOLLOWER
    assert fetch_error(c.node(follower).bootstrap, topic, 11) == 0
    assert fetch_error(c.node(leader).bootstrap, topic, 10) == 0


def test_the_java_consumer_reads_from_the_follower_in_its_rack(cluster):
    """The Java client (4.3.1) uses incremental fetch sessions (KIP-227): the leader's redirect
    must reach it in a session too."""
    subprocess.run([str(ROOT / "scripts" / "java-env")], check=True, timeout=600)
    topic = "fr-java"
    c, leader, follower, other = rack_cluster(cluster, topic)
    produce(c.bootstrap, topic, [f"v{i}".encode() for i in range(500)])
    before = served(c, (follower, other), topic)
    java = ROOT / "tests" / "java"
    r = subprocess.run(["java", "-cp", f"{java / 'lib'}/*:{java}", "FollowerReadSmoke", c.bootstrap, topic,
                        RACKS[follower - 1], "500"], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stdout + r.stderr
    assert r.stdout.strip() == "OK 500"
    assert fetched_records(c.node(follower), topic) - before[follower] >= 500
    assert fetched_records(c.node(other), topic) == before[other]


@contextlib.contextmanager
def uncommitted_on_follower(cluster, topic):
    """A rack cluster whose follower holds records it must not give out: 50 committed records,
    read by a consumer in the follower's rack (from the follower), then one in-sync follower
    paused, so that 20 acks=1 records reach the other follower's log but are not committed
    (until the paused one leaves the ISR, 10 s without fetching). A long session, so that the
    paused follower is not fenced (and out of the ISR) at once. Yields the setting; the paused
    node is resumed and the consumer closed on the way out."""
    c, leader, follower, paused = rack_cluster(cluster, topic, extra=("--cluster-session-timeout-ms", "20000"))
    first = [f"a{i}".encode() for i in range(50)]
    produce(c.bootstrap, topic, first)
    consumer = rack_consumer(c.bootstrap, RACKS[follower - 1])
    try:
        assert read(consumer, topic, len(first), 30) == first
        assert fetched_records(c.node(follower), topic) >= len(first), "not read from the follower"
        c.pause(paused)
        paused_at = time.monotonic()
        try:
            later = [f"b{i}".encode() for i in range(20)]
            # A new client is given only the nodes that answer: a stopped node still accepts
            # connections (the kernel does), and a producer that bootstraps from it waits out its
            # connection-setup timeout, maybe more than once (failed once in CI: 20 s, nothing sent).
            answering = ",".join(c.node(i).bootstrap for i in (leader, follower))
            produce(answering, topic, later, acks="1")
            end = wait_until_follower_holds(c, follower, topic, len(first) + len(later))
            yield types.SimpleNamespace(c=c, leader=leader, follower=follower, paused=paused,
                                        consumer=consumer, first=first, later=later,
                                        paused_at=paused_at, end=end)
        finally:
            if c.node(paused).paused:
                c.resume(paused)
    finally:
        consumer.close()


def poll_until(consumer, deadline):
    """The values `consumer` gets until `deadline` (time.monotonic())."""
    seen = []
    while time.monotonic() < deadline:
        seen += [m.value() for m in consumer.consume(100, 0.5) if m.error() is None]
    return seen


def poll_count(consumer, count, timeout_s):
    """The values `consumer` gets until it has `count` of them or `timeout_s` passed."""
    seen = []
    deadline = time.monotonic() + timeout_s
    while len(seen) < count and time.monotonic() < deadline:
        seen += [m.value() for m in consumer.consume(100, 0.5) if m.error() is None]
    return seen


def test_a_follower_serves_only_committed_records(cluster):
    with uncommitted_on_follower(cluster, "fr-committed") as s:
        seen = poll_until(s.consumer, s.paused_at + 6)
        assert time.monotonic() < s.paused_at + 9, "the paused follower may have left the ISR"
        assert seen == [], f"the follower served uncommitted records: {seen[:5]}"
        assert s.end == len(s.first) + len(s.later)
        # Committed once the paused follower catches up: now they are read, in order.
        s.c.resume(s.paused)
        assert poll_count(s.consumer, len(s.later), 30) == s.later


def wait_until_follower_holds(c, node, topic, end, timeout=10):
    """Waits until `node`'s log of topic/0 ends at `end` (its log_end_offset metric)."""
    def holds():
        got = value(scrape(c.node(node)), "sluice_log_end_offset", topic=topic, partition=0)
        return int(got) if got is not None and got >= end else None
    return wait_until(holds, timeout, f"node {node} to replicate {topic}/0 up to {end}")


def high_watermark(c, node, topic):
    return value(scrape(c.node(node)), "sluice_high_watermark", topic=topic, partition=0)


def test_a_restarted_follower_serves_only_what_was_committed(cluster):
    """A replica's log ends past the high watermark (records no quorum has yet). A follower
    that restarts must not take its whole log as committed: it starts from the high watermark
    it saved (Kafka's replication-offset-checkpoint) and learns the rest from its leader.
    Before that checkpoint it published its log end, and gave the uncommitted records to the
    consumer in its rack."""
    topic = "fr-restart"
    with uncommitted_on_follower(cluster, topic) as s:
        c, follower, committed = s.c, s.follower, len(s.first)
        total = committed + len(s.later)
        assert high_watermark(c, s.leader, topic) == committed
        c.restart(follower)  # SIGKILL, then start again
        wait_until_follower_holds(c, follower, topic, total)
        hw = high_watermark(c, follower, topic)
        assert hw is not None and hw <= committed, \
            f"the restarted follower publishes {hw} of its log's {total} as committed"
        seen = poll_until(s.consumer, s.paused_at + 8)
        assert time.monotonic() < s.paused_at + 9.5, "the paused follower may have left the ISR"
        assert seen == [], f"the restarted follower served uncommitted records: {seen[:5]}"
        assert high_watermark(c, follower, topic) == committed
        c.resume(s.paused)
        assert poll_count(s.consumer, len(s.later), 30) == s.later
        # ... from the restarted follower (its counters start again at its restart).
        assert fetched_records(c.node(follower), topic) >= len(s.later), "not read from the follower"
