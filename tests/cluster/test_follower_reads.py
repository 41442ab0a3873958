"""Reads from followers (KIP-392) with librdkafka: a consumer whose `client.rack` is a
follower's rack is sent there by the leader and reads everything from it, a consumer in the
leader's rack stays on the leader, and a follower serves only what the leader has committed
(it holds records past the high watermark while another in-sync follower is paused, and gives
them out only once they are committed)."""

import subprocess
import time
import urllib.request

from confluent_kafka import Consumer, Producer, TopicPartition
from prometheus_client.openmetrics.parser import text_string_to_metric_families

from conftest import ROOT

from .harness import CLIENT_DEFAULTS, cluster  # noqa: F401  (fixture)

RACKS = ["rack-a", "rack-b", "rack-c"]


def fetched_records(node, topic):
    """Records node served to fetches of `topic`/0 (a follower serves consumers only)."""
    with urllib.request.urlopen(f"http://127.0.0.1:{node.admin_port}/metrics", timeout=5) as r:
        text = r.read().decode()
    for family in text_string_to_metric_families(text):
        if family.name == "sluice_fetch_records":
            for s in family.samples:
                if s.name.endswith("_total") and s.labels.get("topic") == topic and s.labels.get("partition") == "0":
                    return s.value
    return 0


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
    c = cluster(3, racks=RACKS)
    topic = "fr-rack"
    c.create_topic(topic, 1, replication_factor=3)
    leader = c.wait_for_leader(topic, 0)
    c.wait_for_isr(topic, 0)
    follower, other = [i for i in c.ids if i != leader]
    values = [f"v{i}".encode() for i in range(300)]
    produce(c.bootstrap, topic, values)

    before = {i: fetched_records(c.node(i), topic) for i in (follower, other)}
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
    before = {i: fetched_records(c.node(i), topic) for i in (follower, other)}
    consumer = rack_consumer(c.bootstrap, RACKS[leader - 1])
    try:
        assert read(consumer, topic, len(values), 30) == values
    finally:
        consumer.close()
    assert {i: fetched_records(c.node(i), topic) for i in (follower, other)} == before


def test_the_java_consumer_reads_from_the_follower_in_its_rack(cluster):
    """The Java client (4.3.1) uses incremental fetch sessions (KIP-227): the leader's redirect
    must reach it in a session too."""
    subprocess.run([str(ROOT / "scripts" / "java-env")], check=True, timeout=600)
    c = cluster(3, racks=RACKS)
    topic = "fr-java"
    c.create_topic(topic, 1, replication_factor=3)
    leader = c.wait_for_leader(topic, 0)
    c.wait_for_isr(topic, 0)
    follower, other = [i for i in c.ids if i != leader]
    produce(c.bootstrap, topic, [f"v{i}".encode() for i in range(500)])
    before = {i: fetched_records(c.node(i), topic) for i in (follower, other)}
    java = ROOT / "tests" / "java"
    r = subprocess.run(["java", "-cp", f"{java / 'lib'}/*:{java}", "FollowerReadSmoke", c.bootstrap, topic,
                        RACKS[follower - 1], "500"], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stdout + r.stderr
    assert r.stdout.strip() == "OK 500"
    assert fetched_records(c.node(follower), topic) - before[follower] >= 500
    assert fetched_records(c.node(other), topic) == before[other]


def test_a_follower_serves_only_committed_records(cluster):
    # A long session, so that the paused follower is not fenced (and out of the ISR) at once.
    c = cluster(3, racks=RACKS, extra=("--cluster-session-timeout-ms", "20000"))
    topic = "fr-committed"
    c.create_topic(topic, 1, replication_factor=3)
    leader = c.wait_for_leader(topic, 0)
    c.wait_for_isr(topic, 0)
    follower, paused = [i for i in c.ids if i != leader]
    first = [f"a{i}".encode() for i in range(50)]
    produce(c.bootstrap, topic, first)
    consumer = rack_consumer(c.bootstrap, RACKS[follower - 1])
    try:
        assert read(consumer, topic, len(first), 30) == first
        assert fetched_records(c.node(follower), topic) >= len(first), "not read from the follower"
        # With one in-sync follower paused the high watermark cannot pass it (until it leaves
        # the ISR, 10 s without fetching): acks=1 records reach the other follower's log but are not
        # committed, and that follower must not give them out.
        c.pause(paused)
        paused_at = time.monotonic()
        try:
            later = [f"b{i}".encode() for i in range(20)]
            produce(c.bootstrap, topic, later, acks="1")
            end = wait_until_follower_holds(c, follower, topic, len(first) + len(later))
            seen = []
            while time.monotonic() < paused_at + 6:
                seen += [m.value() for m in consumer.consume(100, 0.5) if m.error() is None]
            assert time.monotonic() < paused_at + 9, "the paused follower may have left the ISR"
            assert seen == [], f"the follower served uncommitted records: {seen[:5]}"
            assert end == len(first) + len(later)
        finally:
            c.resume(paused)
        # Committed once the paused follower catches up: now they are read, in order.
        seen = []
        deadline = time.monotonic() + 30
        while len(seen) < len(later) and time.monotonic() < deadline:
            seen += [m.value() for m in consumer.consume(100, 0.5) if m.error() is None]
        assert seen == later
    finally:
        consumer.close()


def wait_until_follower_holds(c, node, topic, end, timeout=10):
    """Waits until `node`'s log of topic/0 ends at `end` (its log_end_offset metric)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with urllib.request.urlopen(f"http://127.0.0.1:{c.node(node).admin_port}/metrics", timeout=5) as r:
            text = r.read().decode()
        for family in text_string_to_metric_families(text):
            if family.name == "sluice_log_end_offset":
                for s in family.samples:
                    if s.labels.get("topic") == topic and s.labels.get("partition") == "0" and s.value >= end:
                        return int(s.value)
        time.sleep(0.1)
    raise AssertionError(f"node {node} did not replicate {topic}/0 up to {end}")
