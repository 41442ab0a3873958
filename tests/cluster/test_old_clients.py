"""Old clients through a failover: a version that ApiVersions advertises is a promise, on a
cluster too. confluent-kafka 2.0.2 (librdkafka 2.0.2, Debian 12's) and kafka-python 2.0.2 (no
idempotence; the version long-running deployments pin), each from its own venv
(tests/compat/python/setup), and the Java client 2.8.2 (tests/compat/java/setup) produce to a
3-partition RF=3 topic and read it in a consumer group while the leader of partition 0 is SIGKILLed and restarted, and then the leader of another
partition. After that, a fresh group of each client drains the topic. Checked: every record
acknowledged to any producer is read by every consumer, one value per offset, and the
idempotent producers' records are stored once (kafka-python's retries may store one twice).
And librdkafka 2.0.2's transactions stay exactly once when the transaction coordinator is
SIGKILLed under a consume-transform-produce loop."""

import collections
import json
import subprocess
import time

import pytest

from compat import harness
from conftest import wait_until

from .checker import History
from .test_transactions import (TXN_TOPIC, coordinator_node, end_offsets, exactly_once, find_txn_coordinator,
                                transactional_producer)
from .workload import produce_records

pytestmark = pytest.mark.timeout(240)

PYTHON = harness.COMPAT / "python"
CLIENTS = {"confluent": ("venv-confluent-2.0.2", "ck"), "kafka-python": ("venv-kafka-python-2.0.2", "kp"),
           "java": (None, "jv")}
PROGRAM = __file__.replace("test_old_clients.py", "old_client.py")
JAVA_PROGRAM = __file__.replace("test_old_clients.py", "OldJavaClient.java")  # run as a single-file source
COUNT, RATE = 3000, 300      # 10 s of sending each


def start(client, args, out, err):
    if client == "java":
        argv = ["java", "-Dorg.slf4j.simpleLogger.defaultLogLevel=warn",
                "-cp", str(harness.COMPAT / "java" / "lib-2.8.2" / "*"), JAVA_PROGRAM]
    else:
        argv = [str(PYTHON / CLIENTS[client][0] / "bin" / "python"), PROGRAM, client]
    with open(err, "w") as stderr:  # the child keeps its own copy
        return subprocess.Popen([*argv, *map(str, args[:3]), str(out), *map(str, args[3:])],
                                stderr=stderr)


@pytest.fixture
def children():
    """The client processes a test starts; any still running at its end are killed."""
    procs = {}
    yield procs
    for p in procs.values():
        if p.poll() is None:
            p.kill()
            p.wait(10)


def read(path):
    """The JSON lines a child wrote (one it is still writing is left for the next read)."""
    with open(path) as f:
        return [json.loads(line) for line in f if line.endswith("\n") and line.strip()]


def test_old_clients_lose_nothing_through_leader_kills(cluster, tmp_path, children):
    harness.setup("python")
    harness.setup("java")
    c = cluster(3)
    c.create_topic("old", 3, replication_factor=3)
    procs = children
    for client in CLIENTS:
        procs[f"produce-{client}"] = start(client, ["produce", c.bootstrap, "old", COUNT, RATE],
                                           tmp_path / f"produce-{client}.json", tmp_path / f"produce-{client}.err")
        procs[f"live-{client}"] = start(client, ["consume", c.bootstrap, "old", f"live-{client}", COUNT / RATE + 45],
                                        tmp_path / f"live-{client}.json", tmp_path / f"live-{client}.err")
    # The kills begin once every producer has had a record acknowledged (the Java program is
    # compiled at its start, which takes seconds on a loaded machine).
    wait_until(lambda: all("first record acknowledged" in (tmp_path / f"produce-{client}.err").read_text()
                           for client in CLIENTS), 60, "every producer's first acknowledgement")
    began = time.monotonic()
    killed = []
    for at, partition in [(1.0, 0), (5.0, 1)]:
        time.sleep(max(0.0, began + at - time.monotonic()))
        victim = c.leader_of("old", partition)
        assert victim is not None, f"partition {partition} has no leader"
        c.kill(victim)
        killed.append(victim)
        time.sleep(2.5)
        c.restart(victim)
    for client in CLIENTS:
        procs[f"produce-{client}"].wait(120)
    c.wait_all_in_sync(90)
    for client in CLIENTS:
        procs[f"drain-{client}"] = start(client, ["consume", c.bootstrap, "old", f"drain-{client}", 25],
                                         tmp_path / f"drain-{client}.json", tmp_path / f"drain-{client}.err")
    for p in procs.values():
        p.wait(120)

    def stderr(name):
        return (tmp_path / f"{name}.err").read_text()[-2000:]

    for client, (_, prefix) in CLIENTS.items():
        reports = read(tmp_path / f"produce-{client}.json")
        failed = [r for r in reports if r["err"] is not None]
        acked = {r["v"] for r in reports if r["err"] is None}
        assert len(reports) == COUNT and not failed, (client, len(reports), failed[:5], stderr(f"produce-{client}"))
        for reader in ("drain", "live"):
            for reading in CLIENTS:
                name = f"{reader}-{reading}"
                records = [r for r in read(tmp_path / f"{name}.json") if r.get("v", "").startswith(prefix + "-")]
                values = collections.Counter(r["v"] for r in records)
                lost = sorted(acked - set(values))
                assert not lost, (f"{name} lost {len(lost)} of {client}'s acknowledged records: {lost[:5]}",
                                  killed, stderr(name))
                stored = collections.defaultdict(set)
                for r in records:
                    stored[(r["p"], r["o"])].add(r["v"])
                assert all(len(v) == 1 for v in stored.values()), f"{name}: one offset, two values"
                if client != "kafka-python":
                    # The idempotent producers' retries are stored once.
                    offsets = collections.defaultdict(set)
                    for r in records:
                        offsets[r["v"]].add((r["p"], r["o"]))
                    twice = [v for v, at in offsets.items() if len(at) > 1]
                    assert not twice, f"{name}: {client}'s records stored twice: {twice[:5]}"


def test_old_librdkafka_transactions_are_exactly_once_across_a_coordinator_kill(cluster, tmp_path, children):
    harness.setup("python")
    c = cluster(3)
    source, sink, group, txn_id, total = "old-in", "old-out", "g-old-ctp", "t-old-ctp", 1500
    c.create_topic(source, 3, replication_factor=3)
    c.create_topic(sink, 3, replication_factor=3)
    history = History()
    produce_records(c.bootstrap, source, history, total)
    assert all(s.status == "ok" for s in history.sends)
    # The transaction coordinator to kill is looked up before the transformer starts: a
    # lookup while it ran once took long enough for it to finish its work before the kill.
    # A first transactional producer makes the transaction state topic to look it up in.
    transactional_producer(c.bootstrap, "t-old-first").flush(1)
    wait_until(lambda: len(getattr(c.metadata(TXN_TOPIC).topics.get(TXN_TOPIC), "partitions", {})) or None,
               30, f"{TXN_TOPIC}'s partitions")
    victim = coordinator_node(c, TXN_TOPIC, txn_id)
    log = tmp_path / "transform.json"
    proc = children["transform"] = start("confluent", ["transform", c.bootstrap, source, group, 90, sink,
                                                       txn_id, total], log, tmp_path / "transform.err")

    def commits():
        return sum(1 for r in read(log) if "commit" in r) if log.exists() else 0
    deadline = time.monotonic() + 60
    while commits() < 15 and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.05)
    assert commits() >= 15, (read(log)[-5:], (tmp_path / "transform.err").read_text()[-2000:])
    before_kill = len(read(log))
    assert find_txn_coordinator(c.node(c.ids[0]).bootstrap, txn_id) == victim, "the coordinator moved before the kill"
    c.kill(victim)
    proc.wait(120)
    records = read(log)
    assert records and "done" in records[-1], (records[-5:], (tmp_path / "transform.err").read_text()[-2000:])
    after = records[before_kill:]
    assert any("commit" in r for r in after), f"no commit after node {victim}'s kill: {after[-5:]}"
    # Every input record turned into exactly one committed output record, and no transaction
    # hangs on the sink.
    assert exactly_once(c, source, sink) == total
    for p, (lso, high) in enumerate(end_offsets(c.bootstrap, sink, 3)):
        assert lso == high, f"{sink}/{p}: last stable offset {lso} < high watermark {high}"
