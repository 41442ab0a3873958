"""Client quotas in a 3-node cluster: a quota set with Kafka's own kafka-configs (4.3.1) through
one node is in the replicated metadata log, so every node describes it and the node that leads
a partition enforces it on a client that never talked to the node the quota was set on; its
deletion through another node lifts the throttle; and quotas survive a full restart.

What a node itself holds is read with a raw DescribeClientQuotas (v0) on one connection to that
node: kafka-configs bootstrapped on one node sends its request to whichever node the Java
AdminClient finds least loaded, so its answer need not come from the node it was given."""

import socket
import struct
import time

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from cluster.harness import CLIENT_DEFAULTS, cluster  # noqa: F401  (the fixture)
from cluster.kafka_cluster import kafka_libs
from conftest import wait_until
from security.conftest import metric
from security.test_cluster_acls import requests, stop_all
from security.test_kafka_tools import configs
from security.test_quotas import burst
from security.test_sasl import read_frame, request

pytestmark = pytest.mark.timeout(150)

MB = 1_000_000
THROTTLED = ("sluice_quota_throttled_responses_total", '{quota="producer_byte_rate"}')


# --- what a node holds -------------------------------------------------------------------------


def quotas_on(node):
    """Every client quota as `node` itself answers DescribeClientQuotas v0 (no filter component:
    every entity): {((entity_type, entity_name or None), ...): {key: value}}."""
    # components: empty array; strict: false
    with socket.create_connection((node.host, node.port), timeout=10) as sock:
        sock.sendall(request(48, 0, struct.pack(">ib", 0, 0)))
        body = read_frame(sock)
    at = 0

    def take(fmt):
        nonlocal at
        values = struct.unpack_from(fmt, body, at)
        at += struct.calcsize(fmt)
        return values if len(values) > 1 else values[0]

    def text():
        nonlocal at
        n = take(">h")
        value = body[at:at + max(n, 0)].decode() if n >= 0 else None
        at += max(n, 0)
        return value

    _throttle, error = take(">ih")
    message = text()
    assert error == 0, f"DescribeClientQuotas on node {node.node_id}: error {error} {message}"
    quotas = {}
    for _ in range(max(take(">i"), 0)):
        entity = tuple((text(), text()) for _ in range(take(">i")))
        quotas[entity] = {text(): take(">d") for _ in range(take(">i"))}
    return quotas


def wait_held_everywhere(c, expected, timeout=20):
    for node in c.nodes.values():
        wait_until(lambda: quotas_on(node) == expected, timeout,
                   f"node {node.node_id} to hold exactly {expected} (holds {quotas_on(node)})")


def kafka_configs(libs, node, *args):
    r = configs(libs, node.bootstrap, *args)
    assert r.returncode == 0, f"kafka-configs via node {node.node_id} {args}: {r.stdout + r.stderr}"
    return r.stdout


def describe_noisy(libs, node):
    return kafka_configs(libs, node, "--describe", "--entity-type", "clients", "--entity-name", "noisy")


def counts(c, api):
    return {i: requests(n, api) for i, n in c.nodes.items()}


# --- producing -----------------------------------------------------------------------------------


def send(p, topic, total_bytes, record=10_000):
    """`total_bytes` in records of `record` bytes through producer `p`; the seconds it took
    until every record was acknowledged."""
    payload = b"x" * record
    reports = []
    start = time.monotonic()
    for _ in range(total_bytes // record):
        while True:
            try:
                p.produce(topic, payload, on_delivery=lambda err, msg: reports.append(err))
                break
            except BufferError:
                p.poll(0.05)
        p.poll(0)
    assert p.flush(60) == 0, "every record delivered"
    elapsed = time.monotonic() - start
    failed = [e for e in reports if e is not None]
    assert len(reports) == total_bytes // record and not failed, \
        f"{len(reports)} delivery reports for {total_bytes // record} records, failed: {failed[:5]}"
    p.poll(0.5)  # let throttle callbacks run
    return elapsed


def topic_not_led_by_1(c):
    """A 1-partition topic (replication factor 1) placed on node 3, which leads it; (name, 3)."""
    admin = AdminClient({"bootstrap.servers": c.bootstrap, **CLIENT_DEFAULTS})
    admin.create_topics([NewTopic("noisy-0", 1, replica_assignment=[[3]])])["noisy-0"].result(30)
    assert c.wait_for_leader("noisy-0", 0) == 3
    return "noisy-0", 3


# --- 1-3. set through node 1, enforced by another node, deleted through node 2 -------------------


def test_a_quota_set_through_one_node_is_described_and_enforced_by_the_others(cluster):
    c = cluster(3)
    n1, n2, n3 = c.nodes[1], c.nodes[2], c.nodes[3]
    libs = kafka_libs()
    topic, leader = topic_not_led_by_1(c)
    ln = c.nodes[leader]

    # 1. Set through node 1; node 2 and node 3 describe it (kafka-configs and their own answer).
    before = counts(c, "AlterClientQuotas")
    kafka_configs(libs, n1, "--alter", "--add-config", f"producer_byte_rate={MB}",
                  "--entity-type", "clients", "--entity-name", "noisy")
    print("AlterClientQuotas answered by", {i: v - before[i] for i, v in counts(c, "AlterClientQuotas").items()})
    expected = {(("client-id", "noisy"),): {"producer_byte_rate": float(MB)}}
    wait_held_everywhere(c, expected)
    for node in (n2, n3):
        out = describe_noisy(libs, node)
        assert f"producer_byte_rate={float(MB)}" in out, f"via node {node.node_id}: {out}"

    # 2. client.id=noisy, bootstrapped on node 3 alone, produces to the partition another node
    # than node 1 leads: that node holds it to about 1 MB/s.
    throttles = []
    p = Producer({"bootstrap.servers": n3.bootstrap, "client.id": "noisy", "linger.ms": 5,
                  "batch.size": 200_000, "message.timeout.ms": 60_000, **CLIENT_DEFAULTS,
                  "throttle_cb": lambda e: throttles.append((e.broker_id, e.throttle_time))})
    throttled = {i: metric(n, *THROTTLED) for i, n in c.nodes.items()}
    elapsed = send(p, topic, 4 * MB)
    after = {i: metric(n, *THROTTLED) for i, n in c.nodes.items()}
    print(f"{topic} led by node {leader}: 4 MB in {elapsed:.2f} s, throttles {throttles}, "
          f"throttled responses {throttled} -> {after}")
    # 4 MB at 1 MB/s with one second of burst: about 3 s.
    assert elapsed >= 2.5, f"noisy producer not held to 1 MB/s by node {leader}: {elapsed:.2f} s"
    assert any(t > 0 for _, t in throttles), f"librdkafka saw no throttle_time_ms: {throttles}"
    assert after[leader] > throttled[leader], f"node {leader} counted no throttled response"
    assert after[1] == throttled[1], "node 1 (no partition of the topic) throttled a response"

    # 3. Deleted through node 2: once every node has seen the deletion, the same producer sends
    # 4 MB without a throttle.
    kafka_configs(libs, n2, "--alter", "--delete-config", "producer_byte_rate",
                  "--entity-type", "clients", "--entity-name", "noisy")
    wait_held_everywhere(c, {})
    for node in c.nodes.values():
        out = describe_noisy(libs, node)
        assert "producer_byte_rate" not in out, f"via node {node.node_id}: {out}"
    p.poll(0.5)
    throttles.clear()
    throttled = metric(ln, *THROTTLED)
    elapsed = send(p, topic, 4 * MB)
    print(f"after the deletion: 4 MB in {elapsed:.2f} s, throttles {throttles}")
    assert not any(t > 0 for _, t in throttles), \
        f"throttled after the quota was deleted on every node: {throttles}"
    assert metric(ln, *THROTTLED) == throttled, f"node {leader} still throttled responses"
    del p
    # Both runs are in the partition: 2 x 400 records.
    reader = Consumer({"bootstrap.servers": n3.bootstrap, "group.id": "q-count", **CLIENT_DEFAULTS})
    try:
        assert reader.get_watermark_offsets(TopicPartition(topic, 0), timeout=10) == (0, 800)
    finally:
        reader.close()


# --- 4. a full restart -----------------------------------------------------------------------------


def test_quotas_survive_a_full_cluster_restart(cluster):
    c = cluster(3)
    n1, n2 = c.nodes[1], c.nodes[2]
    libs = kafka_libs()
    kafka_configs(libs, n1, "--alter", "--add-config",
                  f"producer_byte_rate={MB},consumer_byte_rate={2 * MB}",
                  "--entity-type", "clients", "--entity-name", "noisy")
    # A deletion is in the log too (made through node 2).
    kafka_configs(libs, n2, "--alter", "--delete-config", "consumer_byte_rate",
                  "--entity-type", "clients", "--entity-name", "noisy")
    # And an address's connection creation rate (KIP-612).
    kafka_configs(libs, n2, "--alter", "--add-config", "connection_creation_rate=2",
                  "--entity-type", "ips", "--entity-name", "127.0.0.9")
    expected = {(("client-id", "noisy"),): {"producer_byte_rate": float(MB)},
                (("ip", "127.0.0.9"),): {"connection_creation_rate": 2.0}}
    wait_held_everywhere(c, expected)

    stop_all(c)
    c.start()

    wait_held_everywhere(c, expected)
    # Every node's listener holds 127.0.0.9 to it, though it was set through node 2 only.
    for node in c.nodes.values():
        outcomes = [outcome for outcome, _ in burst(node.bootstrap, "127.0.0.9", 8)]
        assert outcomes.count("answered") <= 4 and outcomes.count("closed") >= 4, (node.node_id, outcomes)
    for node in c.nodes.values():
        out = describe_noisy(libs, node)
        assert f"producer_byte_rate={float(MB)}" in out and "consumer_byte_rate" not in out, \
            f"via node {node.node_id} after the restart: {out}"
