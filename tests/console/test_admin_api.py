"""The console's JSON admin API, endpoint by endpoint, including bad input; what it changes is
checked through real Kafka clients (confluent-kafka, kafka-python), and every answer is
validated against the served OpenAPI document."""

import base64
import json
import socket
import subprocess
import time
import urllib.error
import urllib.request

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, ConfigResource
from jsonschema import Draft202012Validator
from openapi_spec_validator import validate as validate_spec

from conftest import SLUICE, free_port, wait_until


class Api:
    def __init__(self, base, token=None):
        self.base = base
        self.token = token
        self._doc = None

    def call(self, method, path, body=None, raw=None, content_type="application/json", token=None,
             headers=None):
        data = raw if raw is not None else (json.dumps(body).encode() if body is not None else None)
        req = urllib.request.Request(self.base + path, data=data, method=method, headers=headers or {})
        if data is not None:
            req.add_header("Content-Type", content_type)
        tok = token or self.token
        if tok:
            req.add_header("Authorization", "Bearer " + tok)
        try:
            with urllib.request.urlopen(req, timeout=15) as r:
                status, text, ctype = r.status, r.read().decode(), r.headers.get("Content-Type", "")
        except urllib.error.HTTPError as e:
            status, text, ctype = e.code, e.read().decode(), e.headers.get("Content-Type", "")
        if status >= 400:
            assert ctype.startswith("application/json"), f"{method} {path}: error is not JSON: {text!r}"
            payload = json.loads(text)
            assert isinstance(payload.get("error"), str) and payload["error"], payload
            return status, payload
        if ctype.startswith("application/json") and text:
            return status, json.loads(text)
        return status, text

    def doc(self):
        if self._doc is None:
            self._doc = self.call("GET", "/api/openapi.json")[1]
        return self._doc

    def conforms(self, value, schema_name):
        """Validates a response body against a component schema of the served document."""
        doc = self.doc()
        schema = {**doc, "$ref": f"#/components/schemas/{schema_name}"}
        errors = sorted(Draft202012Validator(schema).iter_errors(value), key=str)
        assert not errors, f"{schema_name}: {errors[0]}"
        return value


@pytest.fixture
def api(broker):
    return Api(broker.admin_url)


def kafka_partitions(bootstrap, topic):
    md = AdminClient({"bootstrap.servers": bootstrap}).list_topics(timeout=10)
    t = md.topics.get(topic)
    return None if t is None or t.error is not None else len(t.partitions)


def test_openapi_document_is_valid_and_complete(api):
    doc = api.doc()
    validate_spec(doc)
    for path in ["/api/overview", "/api/topics", "/api/topics/{topic}/partitions/{partition}/messages",
                 "/api/groups/{group}/reset-offsets", "/api/clusters/{name}/proxy/{path}", "/metrics"]:
        assert path in doc["paths"], path


def test_unknown_endpoints_and_methods_are_json_errors(api):
    status, body = api.call("GET", "/api/nope")
    assert status == 404 and "/api/nope" in body["error"]
    status, body = api.call("PATCH", "/api/topics", {})
    assert status == 405 and "PATCH" in body["error"]
    assert api.call("GET", "/health") == (200, {"status": "ok"})


def test_overview_and_history(api, broker):
    ov = api.conforms(api.call("GET", "/api/overview")[1], "Overview")
    node = ov["nodes"][0]
    assert node["kafka_address"] == broker.bootstrap
    assert node["status"] == "online" and node["disk_total_bytes"] >= node["disk_free_bytes"] > 0
    assert ov["controller_id"] == node["id"]
    api.call("POST", "/api/topics", {"name": "traffic", "partitions": 1})
    p = Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 0})
    deadline = time.time() + 4
    while time.time() < deadline:  # two to four sampling intervals of steady traffic
        for i in range(50):
            p.produce("traffic", value=b"x" * 100)
        p.flush(5)
        time.sleep(0.05)
    hist = api.conforms(api.call("GET", "/api/overview/history")[1], "History")
    assert hist["interval_ms"] == 1000
    busy = [pt for pt in hist["points"] if pt["produce_msgs_per_s"] > 0]
    assert busy, hist["points"]
    assert all(pt["produce_p99_us"] is not None and pt["produce_p99_us"] > 0 for pt in busy)
    assert max(pt["produce_bytes_per_s"] for pt in busy) > 100 * max(pt["produce_msgs_per_s"] for pt in busy) * 0.5
    topics = {t["name"]: t for t in api.call("GET", "/api/topics")[1]}
    assert topics["traffic"]["messages"] > 0


def test_create_describe_and_bad_creates(api, broker):
    status, t = api.call("POST", "/api/topics", {"name": "orders", "partitions": 3, "replication_factor": 1,
                                                 "configs": {"retention.ms": "3600000"}})
    assert status == 201
    api.conforms(t, "TopicDetail")
    assert kafka_partitions(broker.bootstrap, "orders") == 3, "a Kafka client sees the new topic"
    cfg = {c["name"]: c for c in t["configs"]}
    assert cfg["retention.ms"] == {**cfg["retention.ms"], "value": "3600000", "source": "topic"}
    assert [p["partition"] for p in t["partition_table"]] == [0, 1, 2]
    assert all(p["leader"] == p["replicas"][0] == p["in_sync_replicas"][0] for p in t["partition_table"])
    listed = api.call("GET", "/api/topics")[1]
    for s in listed:
        api.conforms(s, "TopicSummary")
    assert any(s["name"] == "orders" and s["partitions"] == 3 for s in listed)
    assert any(s["name"] == "__consumer_offsets" and s["internal"] for s in listed)

    bad = [
        ({"name": "orders", "partitions": 1}, 409, "already exists"),
        ({"name": "bad name!", "partitions": 1}, 400, "name"),
        ({"name": "zero", "partitions": 0}, 400, "partition"),
        ({"name": "toomany", "partitions": 1, "replication_factor": 3}, 400, "replication"),
        ({"name": "badcfg", "configs": {"retention.ms": "soon"}}, 400, "retention.ms"),
        ({"name": "nocfg", "configs": {"no.such.config": "1"}}, 400, "no.such.config"),
        ({"partitions": 1}, 400, "name"),
        ({"name": "extra", "colour": "blue"}, 400, "colour"),
        ({"name": "wrongtype", "partitions": "three"}, 400, "partitions"),
        ({"name": "elsewhere", "replicas": [[99]]}, 400, "only node"),
        ({"name": "both", "partitions": 1, "replicas": [[1]]}, 400, "either"),
        ({"name": "noparts", "replicas": []}, 400, "no partition"),
    ]
    for body, want, word in bad:
        status, err = api.call("POST", "/api/topics", body)
        assert status == want and word in err["error"].lower(), (body, status, err)
        if "name" in body and body["name"] != "orders":
            assert kafka_partitions(broker.bootstrap, body["name"]) is None, f"{body} must create nothing"
    # Replicas named by hand, as kafka-topics.sh --replica-assignment: one node, so only it.
    node = t["partition_table"][0]["leader"]
    status, placed = api.call("POST", "/api/topics", {"name": "placed", "replicas": [[node], [node]]})
    assert status == 201 and [p["replicas"] for p in placed["partition_table"]] == [[node], [node]], placed
    status, err = api.call("POST", "/api/topics/placed/partitions", {"count": 4, "replicas": [[node]]})
    assert status == 400 and "one replica list per new partition" in err["error"], err
    status, grown = api.call("POST", "/api/topics/placed/partitions", {"count": 3, "replicas": [[node]]})
    assert status == 200 and len(grown["partition_table"]) == 3, grown
    status, err = api.call("POST", "/api/topics", raw=b'{"name": "half')
    assert status == 400, err
    status, err = api.call("POST", "/api/topics", raw=b'{"name": "x"}', content_type="text/plain")
    assert status == 415, err
    assert api.call("GET", "/api/topics/missing")[0] == 404


def test_edit_configs_and_add_partitions(api, broker):
    api.call("POST", "/api/topics", {"name": "cfg", "partitions": 1})
    status, t = api.call("PUT", "/api/topics/cfg/configs", {"configs": {"retention.ms": "7200000", "flush.mode": "sync"}})
    assert status == 200, t
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    described = admin.describe_configs([ConfigResource(ConfigResource.Type.TOPIC, "cfg")])
    entries = list(described.values())[0].result(10)
    assert entries["retention.ms"].value == "7200000", "a Kafka admin client sees the change"
    # Overrides left out return to their defaults.
    status, t = api.call("PUT", "/api/topics/cfg/configs", {"configs": {}})
    assert {c["name"]: c["source"] for c in t["configs"]}["retention.ms"] == "default"
    for body, want in [({"configs": {"retention.ms": "-7"}}, 400), ({"configs": {"segment.bytes": "x"}}, 400),
                       ({"config": {}}, 400), ({"configs": []}, 400)]:
        assert api.call("PUT", "/api/topics/cfg/configs", body)[0] == want, body
    assert api.call("PUT", "/api/topics/missing/configs", {"configs": {}})[0] == 404
    assert api.call("PUT", "/api/topics/__consumer_offsets/configs", {"configs": {}})[0] == 400

    status, t = api.call("POST", "/api/topics/cfg/partitions", {"count": 4})
    assert status == 200 and t["partitions"] == 4
    assert kafka_partitions(broker.bootstrap, "cfg") == 4
    status, err = api.call("POST", "/api/topics/cfg/partitions", {"count": 2})
    assert status == 400 and "larger" in err["error"]
    assert api.call("POST", "/api/topics/cfg/partitions", {"count": -1})[0] == 400
    assert api.call("POST", "/api/topics/missing/partitions", {"count": 9})[0] == 404
    assert api.call("POST", "/api/topics/__consumer_offsets/partitions", {"count": 99})[0] == 400


def test_delete_needs_the_name_typed(api, broker):
    api.call("POST", "/api/topics", {"name": "doomed", "partitions": 1})
    status, err = api.call("DELETE", "/api/topics/doomed")
    assert status == 400 and "confirm" in err["error"]
    assert api.call("DELETE", "/api/topics/doomed?confirm=doome")[0] == 400
    assert kafka_partitions(broker.bootstrap, "doomed") == 1, "still there"
    assert api.call("DELETE", "/api/topics/doomed?confirm=doomed")[0] == 204
    wait_until(lambda: kafka_partitions(broker.bootstrap, "doomed") is None, 10, "the topic to be gone")
    assert api.call("DELETE", "/api/topics/doomed?confirm=doomed")[0] == 404
    status, err = api.call("DELETE", "/api/topics/__consumer_offsets?confirm=__consumer_offsets")
    assert status == 400 and "internal" in err["error"]


def test_delete_records(api, broker):
    api.call("POST", "/api/topics", {"name": "purgeable", "partitions": 2})
    p = Producer({"bootstrap.servers": broker.bootstrap})
    for i in range(40):
        p.produce("purgeable", value=b"v", partition=i % 2)
    assert p.flush(10) == 0
    status, t = api.call("POST", "/api/topics/purgeable/delete-records", {"partition": 0, "before_offset": 7})
    assert status == 200, t
    api.conforms(t, "TopicDetail")
    assert [r["log_start_offset"] for r in t["partition_table"]] == [7, 0]
    from kafka import KafkaConsumer
    from kafka.structs import TopicPartition as KTP
    c = KafkaConsumer(bootstrap_servers=broker.bootstrap)
    tps = [KTP("purgeable", 0), KTP("purgeable", 1)]
    assert list(c.beginning_offsets(tps).values()) == [7, 0], "a Kafka client sees the new log start"
    # Without a partition: everything, in every partition.
    status, t = api.call("POST", "/api/topics/purgeable/delete-records", {"before_offset": -1})
    assert status == 200 and [r["log_start_offset"] for r in t["partition_table"]] == [20, 20]
    assert list(c.beginning_offsets(tps).values()) == [20, 20]
    c.close()
    api.call("POST", "/api/topics", {"name": "compact-only", "partitions": 1, "configs": {"cleanup.policy": "compact"}})
    for path, body, want in [
        ("purgeable", {"partition": 0, "before_offset": 21}, 400),   # past the high watermark
        ("purgeable", {"partition": 0, "before_offset": -2}, 400),
        ("purgeable", {"before_offset": 3}, 400),                    # an offset needs a partition
        ("purgeable", {"partition": 9, "before_offset": 0}, 404),
        ("purgeable", {"partition": 0}, 400),
        ("purgeable", {"partition": 0, "before_offset": 1, "extra": 1}, 400),
        ("missing", {"before_offset": -1}, 404),
        ("__consumer_offsets", {"before_offset": -1}, 400),
        ("compact-only", {"before_offset": -1}, 409),
    ]:
        status, err = api.call("POST", f"/api/topics/{path}/delete-records", body)
        assert status == want and err["error"], (path, body, status, err)
    status, t = api.call("GET", "/api/topics/purgeable")
    assert [r["log_start_offset"] for r in t["partition_table"]] == [20, 20], "refused requests changed nothing"


def test_browse_records_written_by_a_kafka_client(api, broker):
    api.call("POST", "/api/topics", {"name": "browse", "partitions": 1})
    p = Producer({"bootstrap.servers": broker.bootstrap, "compression.type": "zstd", "linger.ms": 20})
    t0 = int(time.time() * 1000) - 100_000
    for i in range(30):
        value = json.dumps({"n": i}).encode() if i % 3 else bytes([0xff, 0x00, i])
        p.produce("browse", key=f"k{i}".encode(), value=value, headers=[("i", str(i).encode()), ("bin", b"\xfe")],
                  timestamp=t0 + i * 1000)
    p.produce("browse", key=None, value=None)
    p.flush(10)
    q = "/api/topics/browse/partitions/0/messages"
    status, page = api.call("GET", q + "?from=oldest&order=oldest_first&limit=10")
    assert status == 200
    api.conforms(page, "BrowseResponse")
    assert [r["offset"] for r in page["records"]] == list(range(10))
    assert page["high_watermark"] == 31
    r1 = page["records"][1]
    assert r1["key"]["text"] == "k1" and json.loads(r1["value"]["text"]) == {"n": 1}
    assert r1["timestamp"] == t0 + 1000 and r1["timestamp_type"] == "CreateTime"
    assert r1["headers"][0] == {"key": "i", "value": {"base64": base64.b64encode(b"1").decode(), "text": "1",
                                                       "size": 1, "truncated": False}}
    r0 = page["records"][0]
    assert r0["value"]["text"] is None and base64.b64decode(r0["value"]["base64"]) == bytes([0xff, 0, 0])
    newest = api.call("GET", q + "?limit=3")[1]["records"]
    assert [r["offset"] for r in newest] == [30, 29, 28]
    assert newest[0]["key"] is None and newest[0]["value"] is None
    back = api.call("GET", q + "?from=offset&value=5&order=newest_first&limit=3")[1]["records"]
    assert [r["offset"] for r in back] == [5, 4, 3]
    by_time = api.call("GET", q + f"?from=timestamp&value={t0 + 20_500}&order=oldest_first&limit=2")[1]["records"]
    assert [r["offset"] for r in by_time] == [21, 22]
    past_end = api.call("GET", q + "?from=offset&value=1000&order=oldest_first")[1]["records"]
    assert past_end == []

    for query, word in [("?limit=0", "limit"), ("?limit=501", "limit"), ("?from=middle", "from"),
                        ("?from=offset", "value"), ("?order=sideways", "order"), ("?limit=ten", "limit"),
                        ("?colour=red", "colour")]:
        status, err = api.call("GET", q + query)
        assert status == 400 and word in err["error"], (query, err)
    assert api.call("GET", "/api/topics/browse/partitions/7/messages")[0] == 404
    assert api.call("GET", "/api/topics/browse/partitions/x/messages")[0] == 400
    assert api.call("GET", "/api/topics/missing/partitions/0/messages")[0] == 404


def test_produce_a_test_record(api, broker):
    api.call("POST", "/api/topics", {"name": "manual", "partitions": 3, "configs": {"max.message.bytes": "2000"}})
    status, r = api.call("POST", "/api/topics/manual/messages",
                         {"key": "user-7", "value": "{\"hello\": 1}", "headers": [{"key": "h", "value": "v"},
                                                                                  {"key": "none"}]})
    assert status == 201
    api.conforms(r, "ProduceResponse")
    # The key's partition is the one the Java client's default partitioner picks.
    from kafka.partitioner.default import murmur2
    assert r["partition"] == (murmur2(b"user-7") & 0x7FFFFFFF) % 3
    blob = bytes(range(256))
    status, r2 = api.call("POST", "/api/topics/manual/messages",
                          {"partition": 0, "value": base64.b64encode(blob).decode(), "encoding": "base64"})
    assert status == 201 and r2["partition"] == 0

    from kafka import KafkaConsumer, TopicPartition as KTP
    c = KafkaConsumer(bootstrap_servers=broker.bootstrap, auto_offset_reset="earliest", enable_auto_commit=False,
                      consumer_timeout_ms=3000)
    c.assign([KTP("manual", p) for p in range(3)])
    got = {(m.partition, m.offset): m for m in c}
    c.close()
    m = got[(r["partition"], r["offset"])]
    assert m.key == b"user-7" and m.value == b'{"hello": 1}' and m.headers == [("h", b"v"), ("none", None)]
    assert got[(0, r2["offset"])].value == blob and got[(0, r2["offset"])].key is None

    bad = [
        ("/api/topics/manual/messages", {"partition": 9, "value": "x"}, 404),
        ("/api/topics/missing/messages", {"value": "x"}, 404),
        ("/api/topics/manual/messages", {"value": "***", "encoding": "base64"}, 400),
        ("/api/topics/manual/messages", {"value": "x", "encoding": "rot13"}, 400),
        ("/api/topics/manual/messages", {"value": "x" * 5000}, 400),
        ("/api/topics/manual/messages", {"value": 5}, 400),
        ("/api/topics/__consumer_offsets/messages", {"key": "k", "value": "x"}, 400),
    ]
    for path, body, want in bad:
        status, err = api.call("POST", path, body)
        assert status == want, (path, body, status, err)
    assert api.call("GET", "/api/topics/manual/partitions/0/messages")[1]["high_watermark"] == 1 + (r["partition"] == 0)


def consume_and_commit(bootstrap, topic, group, n):
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "auto.offset.reset": "earliest",
                  "enable.auto.commit": False})
    c.subscribe([topic])
    got = []
    deadline = time.time() + 30
    while len(got) < n and time.time() < deadline:
        got += [m for m in c.consume(n - len(got), 0.5) if not m.error()]
    c.commit(asynchronous=False)
    return c, got


def test_groups_lag_and_offset_reset(api, broker):
    api.call("POST", "/api/topics", {"name": "work", "partitions": 2})
    p = Producer({"bootstrap.servers": broker.bootstrap})
    for i in range(40):
        p.produce("work", key=str(i).encode(), value=b"v", partition=i % 2)
    p.flush(10)
    c, got = consume_and_commit(broker.bootstrap, "work", "workers", 40)
    assert len(got) == 40
    try:
        groups = api.call("GET", "/api/groups")[1]
        row = next(g for g in groups if g["group"] == "workers")
        api.conforms(row, "GroupRow")
        assert row["state"] == "Stable" and row["members"] == 1 and row["lag"] == 0
        detail = api.conforms(api.call("GET", "/api/groups/workers")[1], "GroupStatus")
        assert sorted(p for _, ps in detail["members"][0]["assignment"] for p in ps) == [0, 1]
        status, err = api.call("POST", "/api/groups/workers/reset-offsets", {"topic": "work", "to": "earliest"})
        assert status == 409 and "member" in err["error"], "a group with members cannot be reset"
    finally:
        c.close()
    wait_until(lambda: api.call("GET", "/api/groups/workers")[1]["state"] == "Empty", 10, "the group to empty")

    status, preview = api.call("POST", "/api/groups/workers/reset-offsets",
                               {"topic": "work", "partitions": [1], "to": "shift", "value": -5, "dry_run": True})
    assert status == 200 and preview == {"dry_run": True, "changes": [
        {"topic": "work", "partition": 1, "current_offset": 20, "new_offset": 15}]}
    assert api.call("GET", "/api/groups/workers")[1]["offsets"][1]["committed_offset"] == 20, "a preview changes nothing"
    status, done = api.call("POST", "/api/groups/workers/reset-offsets", {"topic": "work", "to": "offset", "value": 3})
    assert status == 200 and [ch["new_offset"] for ch in done["changes"]] == [3, 3]
    # A Kafka consumer of the group sees the new offsets.
    probe = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "workers"})
    committed = probe.committed([TopicPartition("work", 0), TopicPartition("work", 1)], timeout=10)
    probe.close()
    assert [tp.offset for tp in committed] == [3, 3]
    wait_until(lambda: any(pt["lag"] == 34 for pt in api.call("GET", "/api/groups/workers/lag-history")[1]), 5,
               "the lag chart to show 34")
    for pt in api.call("GET", "/api/groups/workers/lag-history")[1]:
        api.conforms(pt, "LagPoint")

    for body, want in [({"topic": "work", "to": "sideways"}, 400), ({"topic": "work", "to": "offset"}, 400),
                       ({"topic": "missing", "to": "earliest"}, 404), ({"topic": "work", "partitions": [5], "to": "latest"}, 404),
                       ({"to": "latest"}, 400)]:
        assert api.call("POST", "/api/groups/workers/reset-offsets", body)[0] == want, body
    assert api.call("POST", "/api/groups/workers/reset-offsets", raw=b"{")[0] == 400
    assert api.call("GET", "/api/groups/nobody")[0] == 404
    assert api.call("GET", "/api/groups/nobody/lag-history")[0] == 404


def test_clusters_registry_and_proxy(api, broker, start_broker):
    other = start_broker(name="other")
    Api(other.admin_url).call("POST", "/api/topics", {"name": "elsewhere", "partitions": 1})
    assert api.call("GET", "/api/clusters")[1] == [{"name": "local", "admin_url": None, "local": True, "has_token": False}]
    status, listed = api.call("POST", "/api/clusters", {"name": "dc2", "admin_url": other.admin_url})
    assert status == 201 and listed[1]["name"] == "dc2"
    for c in listed:
        api.conforms(c, "Cluster")
    status, topics = api.call("GET", "/api/clusters/dc2/proxy/api/topics")
    assert status == 200 and "elsewhere" in [t["name"] for t in topics]
    status, created = api.call("POST", "/api/clusters/dc2/proxy/api/topics", {"name": "made-remotely"})
    assert status == 201 and kafka_partitions(other.bootstrap, "made-remotely") == 1
    assert kafka_partitions(broker.bootstrap, "made-remotely") is None
    status, err = api.call("GET", "/api/clusters/dc2/proxy/api/topics/missing")
    assert status == 404, "the other cluster's errors pass through"
    for body, want in [({"name": "dc2", "admin_url": other.admin_url}, 409), ({"name": "local", "admin_url": other.admin_url}, 400),
                       ({"name": "bad name", "admin_url": other.admin_url}, 400), ({"name": "x", "admin_url": "ftp://h:1"}, 400),
                       ({"name": "x", "admin_url": "not a url"}, 400), ({"name": "x", "admin_url": "http://h:1/api"}, 400),
                       ({"name": "x"}, 400)]:
        assert api.call("POST", "/api/clusters", body)[0] == want, body
    dead_port = free_port()
    api.call("POST", "/api/clusters", {"name": "gone", "admin_url": f"http://127.0.0.1:{dead_port}"})
    status, err = api.call("GET", "/api/clusters/gone/proxy/api/topics")
    assert status == 502 and "gone" in err["error"]
    assert api.call("GET", "/api/clusters/nope/proxy/api/topics")[0] == 404
    # The registry survives a restart.
    broker.stop()
    broker.start()
    names = [c["name"] for c in api.call("GET", "/api/clusters")[1]]
    assert names == ["local", "dc2", "gone"]
    assert api.call("DELETE", "/api/clusters/gone")[0] == 204
    assert api.call("DELETE", "/api/clusters/gone")[0] == 404
    assert [c["name"] for c in api.call("GET", "/api/clusters")[1]] == ["local", "dc2"]


def test_admin_token(start_broker):
    token = "a-long-enough-admin-token-123"
    b = start_broker(env={"SLUICE_ADMIN_TOKEN": token}, name="token")
    anon = Api(b.admin_url)
    assert anon.call("GET", "/health")[0] == 200
    with urllib.request.urlopen(b.admin_url + "/", timeout=5) as r:
        assert r.status == 200 and b"Sluice" in r.read(), "the page itself loads, then asks for the token"
    for path in ["/api/topics", "/api/overview", "/metrics", "/api/openapi.json", "/api/clusters"]:
        status, err = anon.call("GET", path)
        assert status == 401 and "token" in err["error"], path
        assert anon.call("GET", path, token="a-long-enough-admin-token-12")[0] == 401, path
    assert Api(b.admin_url, token).call("GET", "/api/topics")[0] == 200
    # Registered as another cluster: the right token is forwarded; a wrong or missing one is
    # a 502 naming that cluster, not a 401 (which the console reads as its own broker's).
    console = Api(start_broker(name="console").admin_url)
    for name, registered, want in [("right", token, 200), ("wrong", "not-the-admin-token-000", 502), ("none", None, 502)]:
        body = {"name": name, "admin_url": b.admin_url, **({"token": registered} if registered else {})}
        assert console.call("POST", "/api/clusters", body)[0] == 201
        status, answer = console.call("GET", f"/api/clusters/{name}/proxy/api/topics")
        assert status == want, (name, answer)
        if want == 502:
            assert f"cluster '{name}'" in answer["error"] and "token" in answer["error"], answer
    with urllib.request.urlopen(urllib.request.Request(b.admin_url + "/metrics",
                                                       headers={"Authorization": "Bearer " + token}), timeout=5) as r:
        assert b"sluice_connections" in r.read()


def test_a_web_page_cannot_use_an_open_admin_port(api, broker):
    """An open admin port (no token: loopback only) must not serve a web page the browser was
    tricked into reaching: by DNS rebinding (the page's own name, resolved again to 127.0.0.1:
    the browser then sends that name as Host) or by a cross-site form post (Origin names the
    page). Both are refused with 403 and change nothing; local names and the console's own
    origin work."""
    port = api.base.rsplit(":", 1)[1]
    rebound = {"Host": f"attacker.example:{port}"}
    for method, path, body in [("GET", "/api/topics", None), ("GET", "/metrics", None),
                               ("POST", "/api/topics", {"name": "rebound", "partitions": 1})]:
        status, err = api.call(method, path, body, headers=rebound)
        assert status == 403 and "attacker.example" in err["error"] and "Host" in err["error"], (path, err)
    for host in [f"localhost:{port}", f"127.0.0.1:{port}", f"LOCALHOST.:{port}"]:
        assert api.call("GET", "/api/topics", headers={"Host": host})[0] == 200, host
    # A form a page posts cross-site: text/plain needs no preflight, and the browser names the page.
    cross = {"Origin": "http://attacker.example"}
    status, err = api.call("POST", "/api/topics", {"name": "forged", "partitions": 1}, headers=cross,
                           content_type="text/plain")
    assert status == 403 and "cross-site" in err["error"], err
    status, err = api.call("DELETE", "/api/topics/forged", headers={"Origin": f"http://127.0.0.1:{int(port) + 1}"})
    assert status == 403, err
    assert kafka_partitions(broker.bootstrap, "forged") is None
    assert kafka_partitions(broker.bootstrap, "rebound") is None
    # The console's own requests name its origin.
    own = {"Origin": api.base}
    assert api.call("POST", "/api/topics", {"name": "own-origin", "partitions": 1}, headers=own)[0] == 201
    assert kafka_partitions(broker.bootstrap, "own-origin") == 1


def serve_fails(*flags, env=None):
    r = subprocess.run([str(SLUICE), "serve", "--listen", f"127.0.0.1:{free_port()}", *flags],
                       capture_output=True, text=True, timeout=20, env={"PATH": "/usr/bin:/bin", **(env or {})})
    assert r.returncode != 0
    return r.stderr


def test_admin_off_loopback_needs_a_token(tmp_path):
    err = serve_fails("--admin-listen", f"0.0.0.0:{free_port()}", "--data-dir", str(tmp_path))
    assert "admin_token" in err
    err = serve_fails("--admin-listen", f"127.0.0.1:{free_port()}", "--data-dir", str(tmp_path),
                      env={"SLUICE_ADMIN_TOKEN": "short"})
    assert "16 characters" in err


def test_openapi_json_is_what_the_generator_writes():
    from pathlib import Path
    gen = Path(__file__).resolve().parents[2] / "crates" / "sluice-admin" / "openapi_gen.py"
    r = subprocess.run(["python3", str(gen), "--check"], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
