"""The HTTP admin API (and so the console) of a cluster: every node shows every node, the
partitions' leaders, replicas and ISR from the metadata, and each follower's lag as its leader
sees it; topic changes made on any node's admin port go through the controller and reach every
node and Kafka's own API; DeleteRecords reaches the partition's leader wherever it is, and its
followers follow the new log start, so a failover does not bring deleted records back."""

import os
import shutil
import subprocess
import time
from pathlib import Path

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, ConfigResource

from conftest import wait_until
from broker.test_metrics import scrape
from broker.test_metrics import value as metric
from console.test_admin_api import Api

from .harness import CLIENT_DEFAULTS, cluster  # noqa: F401  (fixture)
from .test_partitions import controller


CONSOLE = Path(__file__).resolve().parents[1] / "console"
ARTIFACTS = Path(__file__).resolve().parents[1] / "artifacts" / "cluster-console"


def api_of(c, node):
    return Api(c.nodes[node].admin_url)


def kafka_topic(c, node, topic):
    # Every topic is asked for: a Metadata request naming a missing topic would create it
    # (auto.create.topics.enable), as on Kafka.
    md = AdminClient({"bootstrap.servers": c.nodes[node].bootstrap, **CLIENT_DEFAULTS}).list_topics(
        timeout=10)
    t = md.topics.get(topic)
    return None if t is None or t.error is not None else t


def kafka_config(c, node, topic, key):
    res = ConfigResource(ConfigResource.Type.TOPIC, topic)
    admin = AdminClient({"bootstrap.servers": c.nodes[node].bootstrap, **CLIENT_DEFAULTS})
    return admin.describe_configs([res])[res].result(20)[key].value


def watermarks(c, node, topic, partition):
    consumer = Consumer({"bootstrap.servers": c.nodes[node].bootstrap, "group.id": "console-wm",
                         **CLIENT_DEFAULTS})
    try:
        return consumer.get_watermark_offsets(TopicPartition(topic, partition), timeout=10)
    finally:
        consumer.close()


def test_every_node_shows_the_whole_cluster(cluster):
    c = cluster(3)
    c.create_topic("shown", 2, replication_factor=3)
    c.wait_in_sync("shown")
    views = {}
    for i in c.ids:
        api = api_of(c, i)
        status, ov = api.call("GET", "/api/overview")
        assert status == 200
        api.conforms(ov, "Overview")
        views[i] = ov
    controllers = {ov["controller_id"] for ov in views.values()}
    assert len(controllers) == 1 and controllers <= set(c.ids), controllers
    controller = controllers.pop()
    for i, ov in views.items():
        nodes = {n["id"]: n for n in ov["nodes"]}
        assert sorted(nodes) == [1, 2, 3], ov
        for j, n in nodes.items():
            assert n["status"] == "online", (i, n)
            assert n["kafka_address"] == c.nodes[j].bootstrap
            # Each node's admin address and disk come from that node itself.
            assert n["admin_address"] == c.nodes[j].admin_url, (i, n)
            assert n["data_bytes"] is not None and n["disk_total_bytes"] > 0
            assert "voter" in n["roles"]
            assert ("controller" in n["roles"]) == (j == controller)
        # Connections: each node's own, summed over the cluster.
        assert all(isinstance(n["connections"], int) and n["connections"] >= 0 for n in nodes.values()), ov
        assert ov["connections"] == sum(n["connections"] for n in nodes.values()), ov
        # 2 partitions of 'shown' plus the internal topics, all in sync.
        assert ov["partitions"] >= 2 and ov["under_replicated_partitions"] == 0, ov
        assert ov["offline_partitions"] == 0

    # The partition table agrees with Kafka's Metadata, on every node.
    md = kafka_topic(c, 2, "shown")
    for i in c.ids:
        status, detail = api_of(c, i).call("GET", "/api/topics/shown")
        assert status == 200
        api_of(c, i).conforms(detail, "TopicDetail")
        assert detail["replication_factor"] == 3 and detail["partitions"] == 2
        for row in detail["partition_table"]:
            p = md.partitions[row["partition"]]
            assert row["leader"] == p.leader
            assert sorted(row["replicas"]) == sorted(p.replicas)
            assert sorted(row["in_sync_replicas"]) == [1, 2, 3]


def test_follower_lag_shows_and_a_dead_node_is_fenced(cluster):
    c = cluster(3)
    c.create_topic("lagged", 3, replication_factor=3)
    c.wait_in_sync("lagged")
    producer = Producer({"bootstrap.servers": c.bootstrap, "acks": "all", **CLIENT_DEFAULTS})
    for n in range(60):
        producer.produce("lagged", value=b"v%d" % n, partition=n % 3)
    assert producer.flush(20) == 0
    api = api_of(c, 1)

    def lag_caught_up():
        detail = api.call("GET", "/api/topics/lagged")[1]
        rows = detail["partition_table"]
        # (This node's replica learns the leader's high watermark in its next fetch.)
        ok = all(len(r["follower_lag"]) == 2 and r["high_watermark"] == 20
                 and all(f["in_sync"] and f["records"] == 0 for f in r["follower_lag"]) for r in rows)
        return ok and detail
    detail = wait_until(lag_caught_up, 20, "every follower's lag reported at 0")
    for r in detail["partition_table"]:
        assert sorted(f["node"] for f in r["follower_lag"]) == sorted(set(r["replicas"]) - {r["leader"]})

    # The same in a browser: three nodes on the overview, the lag column on the topic page.
    if not (CONSOLE / "node_modules" / "playwright-core").exists() or not Path("/usr/bin/chromium").exists():
        pytest.fail("run scripts/console-env first (scripts/test does): it installs Chromium and playwright-core")
    shutil.rmtree(ARTIFACTS, ignore_errors=True)
    run = subprocess.run(["node", str(CONSOLE / "cluster_ui.mjs"), c.nodes[1].admin_url, "lagged", str(ARTIFACTS)],
                         cwd=CONSOLE, capture_output=True, text=True, timeout=120,
                         env={**os.environ, "NODE_NO_WARNINGS": "1"})
    assert run.returncode == 0 and "passed" in run.stdout, f"cluster_ui.mjs failed:\n{run.stdout}\n{run.stderr}"

    # Not the controller: the overview is read from node 1 while the victim is down.
    victim = 3 if controller(c) != 3 else 2
    c.kill(victim)

    def fenced():
        ov = api.call("GET", "/api/overview")[1]
        node = next(n for n in ov["nodes"] if n["id"] == victim)
        return node["status"] == "fenced" and ov["under_replicated_partitions"] > 0 and (ov, node)
    ov, node = wait_until(fenced, 20, f"node {victim} shown fenced")
    api.conforms(ov, "Overview")
    assert node["error"] and node["version"] is None, node
    detail = api.call("GET", "/api/topics/lagged")[1]
    for r in detail["partition_table"]:
        assert victim not in r["in_sync_replicas"] and r["leader"] != victim, r


def test_topic_changes_on_any_node_go_through_the_controller(cluster):
    c = cluster(3)
    one, two, three = api_of(c, 1), api_of(c, 2), api_of(c, 3)
    status, created = two.call("POST", "/api/topics", {
        "name": "web", "partitions": 3, "replication_factor": 3,
        "configs": {"retention.ms": "3600000"}})
    assert status == 201, created
    two.conforms(created, "TopicDetail")
    assert created["replication_factor"] == 3 and len(created["partition_table"]) == 3
    t = wait_until(lambda: kafka_topic(c, 3, "web"), 10, "the topic in node 3's Metadata")
    assert len(t.partitions) == 3 and all(len(p.replicas) == 3 for p in t.partitions.values())
    assert kafka_config(c, 3, "web", "retention.ms") == "3600000"
    # What a cluster enforces: a majority of the 3 replicas unless the topic says otherwise
    # (DescribeConfigs said 1, the single node's default, before).
    assert kafka_config(c, 3, "web", "min.insync.replicas") == "2"
    configs = {v["name"]: v for v in created["configs"]}
    assert configs["min.insync.replicas"]["value"] == "2"

    # Configs: set on node 3, seen by Kafka's DescribeConfigs on node 1 and every console.
    status, detail = three.call("PUT", "/api/topics/web/configs",
                                {"configs": {"retention.ms": "7200000", "cleanup.policy": "delete"}})
    assert status == 200, detail
    assert kafka_config(c, 1, "web", "retention.ms") == "7200000"
    configs = {v["name"]: v for v in one.call("GET", "/api/topics/web")[1]["configs"]}
    assert configs["retention.ms"]["value"] == "7200000"
    assert configs["retention.ms"]["source"] == "topic"

    # Bad input: a clear 4xx, nothing changed.
    status, err = one.call("PUT", "/api/topics/web/configs", {"configs": {"retention.ms": "soon"}})
    assert status == 400 and "retention.ms" in err["error"], err
    status, err = one.call("PUT", "/api/topics/web/configs", {"configs": {"no.such.config": "1"}})
    assert status == 400, err
    assert kafka_config(c, 2, "web", "retention.ms") == "7200000"
    status, err = one.call("POST", "/api/topics", {"name": "web", "partitions": 1})
    assert status == 409, err
    status, err = one.call("POST", "/api/topics", {"name": "too-many", "replication_factor": 5})
    assert status == 400 and "replication" in err["error"].lower(), err
    status, err = one.call("POST", "/api/topics", {"name": "bad name!"})
    assert status == 400, err
    status, err = one.call("GET", "/api/topics/no-such-topic")
    assert status == 404, err
    status, err = one.call("PUT", "/api/topics/__consumer_offsets/configs", {"configs": {}})
    assert status in (400, 404), err

    # More partitions, from node 1.
    status, detail = one.call("POST", "/api/topics/web/partitions", {"count": 5})
    assert status == 200 and len(detail["partition_table"]) == 5, detail
    wait_until(lambda: len(kafka_topic(c, 2, "web").partitions) == 5, 10, "5 partitions in Metadata")
    status, err = one.call("POST", "/api/topics/web/partitions", {"count": 2})
    assert status == 400, err

    # Replicas named by hand (kafka-topics.sh --replica-assignment), from node 2; grown the
    # same way from node 3; a node that does not exist is refused and nothing is made.
    status, placed = two.call("POST", "/api/topics", {"name": "web-placed", "replicas": [[3, 1], [2, 3]]})
    assert status == 201, placed
    assert [(p["replicas"], p["leader"]) for p in placed["partition_table"]] == [([3, 1], 3), ([2, 3], 2)], placed
    status, grown = three.call("POST", "/api/topics/web-placed/partitions", {"count": 3, "replicas": [[1, 2]]})
    assert status == 200 and grown["partition_table"][2]["replicas"] == [1, 2], grown
    status, err = three.call("POST", "/api/topics/web-placed/partitions", {"count": 5, "replicas": [[1, 2]]})
    assert status == 400 and "one replica list per new partition" in err["error"], err
    status, err = one.call("POST", "/api/topics", {"name": "web-nowhere", "replicas": [[1, 9]]})
    assert status == 400 and "not registered" in err["error"], err
    assert one.call("GET", "/api/topics/web-nowhere")[0] == 404

    # Delete, from node 3 (the name must be repeated).
    status, err = three.call("DELETE", "/api/topics/web")
    assert status == 400 and "confirm" in err["error"], err
    status, _ = three.call("DELETE", "/api/topics/web?confirm=web")
    assert status == 204
    assert "web" not in [t["name"] for t in three.call("GET", "/api/topics")[1]]
    wait_until(lambda: "web" not in [t["name"] for t in one.call("GET", "/api/topics")[1]], 10,
               "the topic gone from node 1's console")
    wait_until(lambda: kafka_topic(c, 2, "web") is None, 10, "the topic gone from Metadata")


def test_delete_records_reaches_the_leader_and_survives_a_failover(cluster):
    c = cluster(3)
    c.create_topic("purged", 1, replication_factor=3)
    c.wait_in_sync("purged")
    producer = Producer({"bootstrap.servers": c.bootstrap, "acks": "all", **CLIENT_DEFAULTS})
    for n in range(50):
        producer.produce("purged", value=b"r%d" % n, partition=0)
    assert producer.flush(20) == 0
    leader = c.leader_of("purged", 0)
    other = next(i for i in c.ids if i != leader)

    # Asked of a node that does not lead the partition: it goes to the leader.
    status, err = api_of(c, other).call("POST", "/api/topics/purged/delete-records",
                                        {"partition": 0, "before_offset": 99})
    assert status == 400 and "out of range" in err["error"].lower(), err
    status, detail = api_of(c, other).call("POST", "/api/topics/purged/delete-records",
                                           {"partition": 0, "before_offset": 30})
    assert status == 200, detail
    assert watermarks(c, leader, "purged", 0) == (30, 50)

    # The answer came once every in-sync replica had followed the new log start (each node's
    # console shows its own replica).
    starts = {i: api_of(c, i).call("GET", "/api/topics/purged")[1]["partition_table"][0]
              ["log_start_offset"] for i in c.ids}
    assert all(s == 30 for s in starts.values()), starts

    # The leader dies: its successor does not serve the deleted records again.
    c.kill(leader)
    new_leader = c.wait_for_leader("purged", 0, not_node=leader)
    assert watermarks(c, new_leader, "purged", 0) == (30, 50)
    consumer = Consumer({"bootstrap.servers": c.nodes[new_leader].bootstrap, "group.id": "purged-read",
                         "auto.offset.reset": "earliest", **CLIENT_DEFAULTS})
    try:
        consumer.assign([TopicPartition("purged", 0, 0)])
        seen = []
        wait_until(lambda: (seen.extend(m for m in consumer.consume(50, 1) if not m.error())
                            or len(seen) >= 20), 20, "the 20 records left")
        assert [m.offset() for m in seen] == list(range(30, 50))
    finally:
        consumer.close()


def test_delete_records_from_the_console_waits_for_the_followers(cluster):
    """A paused follower stays in the ISR until its session lapses (1 s): a delete asked to
    wait less answers 504 and says why; the leader has deleted the records, and the same
    delete answers 200 once the follower is back."""
    c = cluster(3)
    c.create_topic("purge-wait", 1, replication_factor=3)
    producer = Producer({"bootstrap.servers": c.bootstrap, "acks": "all", **CLIENT_DEFAULTS})
    for n in range(20):
        producer.produce("purge-wait", value=b"r%d" % n, partition=0)
    assert producer.flush(20) == 0
    c.wait_in_sync("purge-wait")
    leader = c.leader_of("purge-wait", 0)
    follower = next(i for i in c.ids if i != leader)
    asked = next(i for i in c.ids if i not in (leader, follower))
    status, err = api_of(c, asked).call("POST", "/api/topics/purge-wait/delete-records",
                                        {"partition": 0, "before_offset": 5, "timeout_ms": 70000})
    assert status == 400 and "timeout_ms" in err["error"], err
    c.pause(follower)
    try:
        status, err = api_of(c, asked).call("POST", "/api/topics/purge-wait/delete-records",
                                            {"partition": 0, "before_offset": 10, "timeout_ms": 300})
        assert status == 504, (status, err)
        assert "did not follow" in err["error"], err
    finally:
        c.resume(follower)
    assert watermarks(c, leader, "purge-wait", 0) == (10, 20)
    status, detail = api_of(c, asked).call("POST", "/api/topics/purge-wait/delete-records",
                                           {"partition": 0, "before_offset": 10})
    assert status == 200, detail


def test_every_node_lists_every_consumer_group_and_names_its_coordinator(cluster):
    """Groups live on their coordinators (the leaders of their offsets partitions), spread over
    the nodes; every node's console lists them all, each with its coordinator and that node's
    console address, and a group's page asked of another node says which node has it."""
    c = cluster(3)
    c.create_topic("grouped", 1, replication_factor=3)
    groups = [f"console-group-{i}" for i in range(6)]
    for g in groups:
        consumer = Consumer({**CLIENT_DEFAULTS, "bootstrap.servers": c.bootstrap, "group.id": g,
                             "enable.auto.commit": False})
        try:
            consumer.assign([TopicPartition("grouped", 0, 0)])
            consumer.commit(offsets=[TopicPartition("grouped", 0, 0)], asynchronous=False)
        finally:
            consumer.close()
    lists = {}
    for i in c.ids:
        def listed(i=i):
            rows = api_of(c, i).call("GET", "/api/groups")[1]
            return {r["group"]: r for r in rows if r["group"] in groups} if len(
                [r for r in rows if r["group"] in groups]) == len(groups) else None
        lists[i] = wait_until(listed, 20, f"node {i}'s console to list all {len(groups)} groups")
    assert lists[1] == lists[2] == lists[3], lists
    # The overview counts the cluster's groups, on every node.
    counts = {i: api_of(c, i).call("GET", "/api/overview")[1]["groups"] for i in c.ids}
    assert len(set(counts.values())) == 1 and counts[1] >= len(groups), counts
    for g, row in lists[1].items():
        coordinator = row["node"]
        assert row["admin_address"] == c.nodes[coordinator].admin_url, row
        status, detail = api_of(c, coordinator).call("GET", f"/api/groups/{g}")
        assert status == 200 and detail["group"] == g, (status, detail)
        other = next(i for i in c.ids if i != coordinator)
        status, err = api_of(c, other).call("GET", f"/api/groups/{g}")
        assert status == 404 and f"coordinated by node {coordinator}" in err["error"], (status, err)


def test_a_groups_offsets_reset_reads_partitions_the_coordinator_holds_no_replica_of(cluster):
    """The console's offset reset runs on the group's coordinator, which need not hold a replica
    of the topic: the log start, end and the offset of a time are read on each partition's
    leader. Before, the reset read this node's replicas and answered 404 for a partition held
    elsewhere, and a follower's end could trail its leader's."""
    c = cluster(3)
    c.create_topic("spread-reset", 3, replication_factor=1)
    base = int(time.time() * 1000) - 100_000
    producer = Producer({**CLIENT_DEFAULTS, "bootstrap.servers": c.bootstrap, "acks": "all"})
    for p in range(3):
        for i in range(10):
            producer.produce("spread-reset", value=f"{p}-{i}", partition=p, timestamp=base + i * 1000)
    assert producer.flush(30) == 0
    group = "reset-anywhere"
    consumer = Consumer({**CLIENT_DEFAULTS, "bootstrap.servers": c.bootstrap, "group.id": group,
                         "enable.auto.commit": False})
    try:
        committed = [TopicPartition("spread-reset", p, 2) for p in range(3)]
        consumer.commit(offsets=committed, asynchronous=False)
    finally:
        consumer.close()

    def coordinator():
        rows = api_of(c, 1).call("GET", "/api/groups")[1]
        return next((r["node"] for r in rows if r["group"] == group), None)
    node = wait_until(coordinator, 20, "the group in the console's list")
    holders = {p: c.partition("spread-reset", p).replicas for p in range(3)}
    assert any(node not in replicas for replicas in holders.values()), (node, holders)
    api = api_of(c, node)

    def reset(to, value=None, partitions=None, dry_run=True):
        body = {"topic": "spread-reset", "to": to, "dry_run": dry_run}
        if value is not None:
            body["value"] = value
        if partitions is not None:
            body["partitions"] = partitions
        return api.call("POST", f"/api/groups/{group}/reset-offsets", body)

    for to, value, want in [("latest", None, 10), ("earliest", None, 0),
                            ("timestamp", base + 5_000, 5), ("timestamp", base + 60_000, 10),
                            ("shift", 3, 5), ("offset", 99, 10)]:
        status, body = reset(to, value)
        assert status == 200, (to, value, body)
        changes = {ch["partition"]: (ch["current_offset"], ch["new_offset"]) for ch in body["changes"]}
        assert changes == {p: (2, want) for p in range(3)}, (to, value, body)
    status, body = reset("timestamp", base + 7_000, dry_run=False)
    assert status == 200 and not body["dry_run"], body
    consumer = Consumer({**CLIENT_DEFAULTS, "bootstrap.servers": c.bootstrap, "group.id": group,
                         "enable.auto.commit": False})
    try:
        got = consumer.committed([TopicPartition("spread-reset", p) for p in range(3)], timeout=15)
    finally:
        consumer.close()
    assert sorted((tp.partition, tp.offset) for tp in got) == [(0, 7), (1, 7), (2, 7)], got
    # The lag of partitions held elsewhere: their leaders' ends, asked every 2 s, on the group's
    # page, in the console's list of groups and in /metrics.
    def page_lag():
        offsets = api.call("GET", f"/api/groups/{group}")[1]["offsets"]
        lag = {o["partition"]: (o["log_end_offset"], o["lag"]) for o in offsets}
        return lag if lag == {p: (10, 3) for p in range(3)} else None
    wait_until(page_lag, 15, "every partition's end and lag on the group's page")

    def listed_lag():
        rows = api_of(c, 1).call("GET", "/api/groups")[1]
        return next(r["lag"] for r in rows if r["group"] == group) == 9
    wait_until(listed_lag, 15, "the group's total lag in the console's list")

    def metric_lag():
        families = scrape(c.nodes[node])
        return all(metric(families, "sluice_consumer_group_lag", group=group, topic="spread-reset",
                          partition=str(p)) == 3 for p in range(3))
    wait_until(metric_lag, 15, "each partition's lag in /metrics")
    # Bad input is named: a partition the topic lacks, a topic that does not exist, a node that
    # does not coordinate the group.
    status, err = reset("latest", partitions=[5])
    assert status == 404 and "spread-reset-5" in err["error"], err
    status, err = api.call("POST", f"/api/groups/{group}/reset-offsets", {"topic": "nope", "to": "latest"})
    assert status == 404, err
    other = next(i for i in c.ids if i != node)
    status, err = api_of(c, other).call("POST", f"/api/groups/{group}/reset-offsets",
                                        {"topic": "spread-reset", "to": "latest", "dry_run": True})
    assert status == 503 and "does not coordinate" in err["error"], (status, err)


def test_the_message_browser_and_test_producer_work_on_any_node(cluster):
    """The console's message browser reads a partition this node holds no replica of on its
    leader, and a test record is written by the partition's leader and answered once committed
    (as acks=all is): 503 naming the cause when too few replicas are in sync, and a record the
    console acknowledged survives its leader's death. Before (read in the code, not run), a node
    without a replica answered 404 to both, a follower 503 to a record, and the leader
    acknowledged a record as soon as it alone had it."""
    c = cluster(3)
    c.create_topic("spread", 3, replication_factor=1)
    one = api_of(c, 1)
    holders = {p: c.partition("spread", p).replicas[0] for p in range(3)}
    elsewhere = [p for p, node in holders.items() if node != 1]
    assert elsewhere, holders
    for p in range(3):
        status, body = one.call("POST", "/api/topics/spread/messages",
                                {"partition": p, "key": f"k{p}", "value": f"v{p}", "headers": [{"key": "h", "value": "x"}]})
        assert status == 201, (p, body)
        assert body == {"partition": p, "offset": 0}, body
    for p in range(3):
        status, page = one.call("GET", f"/api/topics/spread/partitions/{p}/messages?from=oldest&order=oldest_first")
        assert status == 200, (p, page)
        assert page["high_watermark"] == 1, page
        [record] = page["records"]
        assert (record["key"]["text"], record["value"]["text"], record["offset"]) == (f"k{p}", f"v{p}", 0), record
        assert record["headers"] == [{"key": "h", "value": {"base64": "eA==", "text": "x", "size": 1, "truncated": False}}], record
    # A key alone picks the partition, from the cluster's metadata, as the Java client would.
    status, body = one.call("POST", "/api/topics/spread/messages", {"key": "some-key", "value": "by key"})
    assert status == 201 and body["partition"] in range(3), body

    # Bad input is named, on any node.
    status, err = one.call("GET", f"/api/topics/spread/partitions/7/messages")
    assert status == 404, err
    status, err = one.call("POST", "/api/topics/spread/messages", {"partition": 7, "value": "x"})
    assert status == 404, err
    status, err = one.call("POST", "/api/topics/nope/messages", {"value": "x"})
    assert status == 404, err

    # Committed before it is acknowledged: three replicas must be in sync.
    c.create_topic("strict", 1, replication_factor=3, config={"min.insync.replicas": "3"})
    c.wait_for_isr("strict", 0)
    leader = c.leader_of("strict", 0)
    other = next(i for i in c.ids if i != leader)
    status, body = api_of(c, other).call("POST", "/api/topics/strict/messages", {"value": "kept"})
    assert status == 201 and body["offset"] == 0, body
    c.kill(leader)
    new = c.wait_for_leader("strict", 0, not_node=leader)
    # A follower learns the high watermark on its next fetch: read until it has.
    values = lambda node: [r["value"]["text"] for r in  # noqa: E731
                           api_of(c, node).call("GET", "/api/topics/strict/partitions/0/messages?from=oldest")[1]["records"]]
    wait_until(lambda: values(other) == ["kept"], 15, "the acknowledged record on the survivors")
    # Two of three in sync now: the console's record is refused, as acks=all is.
    c.wait_for_isr("strict", 0, without=[leader])
    status, err = api_of(c, new).call("POST", "/api/topics/strict/messages", {"value": "refused"})
    assert status == 503 and "insync" in err["error"].lower().replace("-", "").replace(" ", ""), err
    status, page = api_of(c, new).call("GET", "/api/topics/strict/partitions/0/messages?from=oldest")
    assert [r["value"]["text"] for r in page["records"]] == ["kept"], page


def test_the_overview_charts_the_whole_clusters_traffic(cluster):
    """The charts of any node's console sum every node's traffic: records produced to
    partitions other nodes lead, and read from them, show on node 1's overview, counted once (on
    their leader; followers' copies are not traffic); a node that goes down leaves the sum
    without breaking it."""
    c = cluster(3)
    c.create_topic("charted", 3, replication_factor=3)
    c.wait_in_sync("charted")
    elsewhere = [p for p in range(3) if c.leader_of("charted", p) != 1]
    assert elsewhere, "one of three partitions is led by another node (leaders are balanced)"
    api = api_of(c, 1)

    def integral(key):
        # Each point is a rate over the interval since the previous point: rate × interval,
        # summed, is what was counted since the first point.
        pts = api.call("GET", "/api/overview/history")[1]["points"]
        return sum(b[key] * (b["t_ms"] - a["t_ms"]) / 1000 for a, b in zip(pts, pts[1:]))

    time.sleep(2.5)  # the sampler's baseline and a first point, before any traffic
    before = integral("produce_msgs_per_s")
    sent = 3_000
    # Idempotent: a retried batch is not appended (nor counted) twice.
    producer = Producer({"bootstrap.servers": c.bootstrap, "acks": "all", "linger.ms": 5,
                         "enable.idempotence": True, **CLIENT_DEFAULTS})
    for n in range(sent):
        producer.produce("charted", value=b"%d" % n, partition=elsewhere[n % len(elsewhere)])
    assert producer.flush(20) == 0
    # Each node's rate is over its own clock, the chart's intervals over node 1's: the area
    # matches the count to within the answers' jitter (a few per cent on a loaded machine),
    # which still tells 3,000 (once) from 0 (node 1's own traffic only) and 9,000 (copies too).
    low, high = sent * 0.97, sent * 1.03
    wait_until(lambda: integral("produce_msgs_per_s") - before >= low, 15,
               "node 1's chart counts the records produced to other nodes' partitions")
    time.sleep(3)  # later points add nothing more: followers' copies are not traffic
    counted = integral("produce_msgs_per_s") - before
    assert low <= counted <= high, f"counted once, on their leader: {counted}"
    status, hist = api.call("GET", "/api/overview/history")
    assert status == 200
    api.conforms(hist, "History")
    wait_until(lambda: (p := api.call("GET", "/api/overview/history")[1]["points"][-1])["nodes_counted"] == 3
               and p["nodes_missing"] == 0, 10, "a point with all three nodes")

    consumed_before = integral("consume_msgs_per_s")
    consumer = Consumer({"bootstrap.servers": c.bootstrap, "group.id": "charted-reader",
                         "auto.offset.reset": "earliest", **CLIENT_DEFAULTS})
    consumer.assign([TopicPartition("charted", p, 0) for p in elsewhere])
    got, deadline = 0, time.time() + 30
    while got < sent and time.time() < deadline:
        got += sum(1 for m in consumer.consume(500, timeout=0.5) if not m.error())
    consumer.close()
    assert got == sent
    wait_until(lambda: integral("consume_msgs_per_s") - consumed_before >= low, 15,
               "node 1's chart counts the records read from other nodes")
    time.sleep(3)
    read = integral("consume_msgs_per_s") - consumed_before
    assert read <= high, f"the followers' fetches are not counted as consumption: {read}"

    # A node down: while it is not fenced yet its traffic is missing from the point (and
    # said so); once fenced it is no longer asked. The chart goes on either way.
    victim = 3 if controller(c) != 3 else 2
    c.kill(victim)
    wait_until(lambda: (p := api.call("GET", "/api/overview/history")[1]["points"][-1])["nodes_counted"] == 2
               and p["nodes_missing"] == 0, 30, f"node {victim} left out of the chart once fenced")
    producer = Producer({"bootstrap.servers": c.bootstrap, "acks": "all", **CLIENT_DEFAULTS})
    mark = integral("produce_msgs_per_s")
    for n in range(200):
        producer.produce("charted", value=b"after-%d" % n)
    assert producer.flush(30) == 0
    wait_until(lambda: integral("produce_msgs_per_s") - mark >= 200 * 0.97, 15,
               "traffic still charted with a node down")
