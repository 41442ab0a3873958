"""The audit log's topic (`audit_log_topic`) in a 3-node cluster with the authorizer on, under a
flood of refused requests: every refusal a node counts must reach the topic, none dropped.

A refused request is what an attacker or a misconfigured client sends many of, and the moment
an audit trail matters most. The events go to one partition of a replication factor 3 topic
with `flush.mode=sync` (an audit trail that must survive a power loss); a node that does not
lead it forwards them to the leader, which answers once they are committed. Written one event
per round trip (one fsync each), the topic took about 2,000 events a second here: a flood of
6,000 refusals a second for 5 s filled the node's queue (10,000 events) and about 9,500 were
dropped. Written as a batch of whatever is queued, all 30,000 are on the topic within a
second of the flood's end."""

import json
import struct
import time

from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition

from cluster.harness import cluster  # noqa: F401  (the fixture start_acl_cluster uses)
from security.conftest import metric
from security.test_cluster_acls import (cluster_action, create_acls, denials, node_ips, sasl,
                                        start_acl_cluster, wait_isr, wait_led)
from security.test_sasl import connect, read_frame, request, string

AUDIT = "sluice.audit"
FLOOD = 30_000
CHUNK = 500
PACE = 0.5 / 6    # seconds per CHUNK: 6,000 refusals a second, for 5 s


def metadata_v1(topic, correlation_id):
    return request(3, 1, struct.pack(">i", 1) + string(topic), correlation_id)


def refused_metadata(node, prefix, count):
    """`count` Metadata v1 requests on `node`'s PLAINTEXT listener (principal User:ANONYMOUS),
    request i naming topic `prefix`-i, pipelined CHUNK at a time, a CHUNK every PACE seconds;
    every answer must come back."""
    began = time.monotonic()
    with connect(node, "PLAINTEXT") as sock:
        for k, start in enumerate(range(0, count, CHUNK)):
            time.sleep(max(0.0, began + k * PACE - time.monotonic()))
            n = min(CHUNK, count - start)
            sock.sendall(b"".join(metadata_v1(f"{prefix}-{start + i}", start + i)
                                  for i in range(n)))
            for _ in range(n):
                assert read_frame(sock) is not None, f"node {node.node_id} closed the connection"


def flood_events(node, want, timeout):
    """The audit topic's `authorization_denied` events for Metadata on "secret-*" topics, read
    from its start through a consumer bootstrapped on `node` until `want` are seen or `timeout`
    passes, then for another second (so that a duplicate would be seen too). Returns the events
    and when the `want`-th was read (time.monotonic(), None if never)."""
    c = Consumer(sasl(node, "admin", **{"group.id": "audit-reader", "enable.auto.commit": False}))
    events = []
    try:
        c.assign([TopicPartition(AUDIT, 0, OFFSET_BEGINNING)])
        deadline = time.monotonic() + timeout
        quiet_until = None
        while time.monotonic() < (quiet_until or deadline):
            for m in c.consume(1000, 0.2):
                if m.error() is None:
                    e = json.loads(m.value())
                    if e.get("resource_name", "").startswith("secret-") and \
                            e.get("api") == "Metadata":
                        events.append(e)
            if quiet_until is None and len(events) >= want:
                quiet_until = time.monotonic() + 1
    finally:
        c.close()
    return events, quiet_until and quiet_until - 1


def test_a_flood_of_refused_requests_reaches_the_audit_topic_in_a_cluster(cluster):
    c = start_acl_cluster(cluster, extra=["--audit-log-topic", AUDIT, "--log-flush-mode", "sync"])
    create_acls(c.nodes[1], *[cluster_action(ip) for ip in node_ips(c)])
    refused_metadata(c.nodes[1], "first", 1)     # the first event makes the topic
    leader = wait_led(c, AUDIT, 1, 3)[0]
    wait_isr(c, AUDIT, 0, [1, 2, 3])
    node = c.nodes[next(i for i in c.nodes if i != leader)]   # forwards to the leader
    before = denials(node, "Metadata")
    dropped_before = metric(node, "sluice_audit_events_dropped_total")

    started = time.monotonic()
    refused_metadata(node, "secret", FLOOD)
    sent_in = time.monotonic() - started
    refused = denials(node, "Metadata") - before
    assert refused == FLOOD, f"node {node.node_id} counted {refused:.0f} refusals of {FLOOD}"

    events, reached = flood_events(c.nodes[leader], refused, timeout=60)
    landed_in = (reached or time.monotonic()) - started
    dropped = metric(node, "sluice_audit_events_dropped_total") - dropped_before
    print(f"\n{FLOOD} refused requests sent to node {node.node_id} in {sent_in:.1f} s; "
          f"{len(events)} of {refused:.0f} audit events on the topic {landed_in:.1f} s after "
          f"the flood began; {dropped:.0f} dropped")
    said = [line for line in node.log().splitlines() if "audit events" in line]
    assert dropped == 0, f"node {node.node_id} dropped {dropped:.0f} audit events: {said[-3:]}"
    assert len(events) == refused == FLOOD, \
        f"{len(events)} events of {refused:.0f} refusals reached {AUDIT} in {landed_in:.1f} s"
    # Each refusal once: no event lost and another duplicated in its place.
    assert {e["resource_name"] for e in events} == {f"secret-{i}" for i in range(FLOOD)}
    assert all(e["principal"] == "User:ANONYMOUS" and e["operation"] == "Describe"
               for e in events), events[:3]
    # ... while the node's log shows at most 100 refusals per 10 s window, and says it leaves
    # the rest out.
    log = node.log()
    logged = sum(1 for line in log.splitlines() if "authorization denied" in line and "secret-" in line)
    windows = int(sent_in // 10) + 2
    assert 0 < logged <= 100 * windows, \
        f"node {node.node_id} logged {logged} of the {FLOOD} refusals sent in {sent_in:.1f} s"
    assert "more authorization denials in this window are not logged" in log
