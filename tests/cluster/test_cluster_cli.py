"""`sluice cluster status`: nodes with their racks and leaderships, the controller, and the
partitions a dead node leaves under-replicated — as an operator reads it, in JSON and text."""

import json
import subprocess

from confluent_kafka import Consumer, Producer, TopicPartition

from broker.test_metrics import scrape
from conftest import SLUICE, wait_until

from .harness import cluster  # noqa: F401  (fixture)


def status(bootstrap, *flags):
    r = subprocess.run([str(SLUICE), "cluster", "status", "-b", bootstrap, *flags],
                       capture_output=True, text=True, timeout=30)
    return r


def samples(node, name):
    """{labels-tuple: value} of metric `name` on `node`'s /metrics."""
    family = scrape(node).get(name)
    return {tuple(sorted(s.labels.items())): s.value for s in family.samples} if family else {}


def follower_lag(c, topic):
    """(partition, replica) -> (records, seconds) from each partition's leader's /metrics."""
    lag = {}
    for i in c.live():
        records = samples(c.node(i), "sluice_replica_lag_records")
        seconds = samples(c.node(i), "sluice_replica_lag_seconds")
        for labels, value in seconds.items():
            d = dict(labels)
            if d["topic"] == topic:
                lag[(int(d["partition"]), int(d["replica"]))] = (records.get(labels), value)
    return lag


def test_status_shows_nodes_leaders_and_under_replicated_partitions(cluster):
    c = cluster(3, racks=["r1", "r2", "r3"])
    c.create_topic("st", 3, replication_factor=3)
    for p in range(3):
        c.wait_for_isr("st", p)

    r = status(c.bootstrap, "--json")
    assert r.returncode == 0, r.stderr
    s = json.loads(r.stdout)
    assert [(n["id"], n["rack"], n["up"]) for n in s["nodes"]] == [(1, "r1", True), (2, "r2", True), (3, "r3", True)]
    assert s["controller"] == c.metadata_leader(), s["controller"]
    assert s["partitions"] >= 3
    assert sum(n["leaders"] for n in s["nodes"]) == s["partitions"]
    assert not [p for p in s["under_replicated"] if p["topic"] == "st"], s["under_replicated"]
    assert s["offline"] == []
    # Every follower of st is caught up: 0 records behind on its leader's /metrics.
    lag = wait_until(lambda: (lambda l: l if len(l) == 6 and all(r == 0 for r, _ in l.values()) else None)(
        follower_lag(c, "st")), 10, "st's followers to be caught up")
    assert sorted(r for (p, r) in lag) == sorted([r for p in range(3) for r in s_replicas(c, "st", p)])

    # Node 3 dies: it is listed down, leads nothing, and every partition it held is
    # under-replicated (once the controller has taken it out of the ISR).
    c.kill(3)
    for p in range(3):
        c.wait_for_leader("st", p, not_node=3)

    def degraded():
        s = json.loads(status(c.node(1).bootstrap, "--json").stdout)
        st = [p for p in s["under_replicated"] if p["topic"] == "st"]
        return s if len(st) == 3 else None
    s = wait_until(degraded, 20, "the st partitions to be reported under-replicated")
    node3 = [n for n in s["nodes"] if n["id"] == 3][0]
    assert node3["up"] is False and node3["leaders"] == 0 and node3["replicas"] >= 3
    for p in s["under_replicated"]:
        assert 3 in p["replicas"] and 3 not in p["isr"] and p["leader"] in (1, 2)

    # The leaders' /metrics: node 3 lags in time (it stopped fetching), the others do not;
    # each leader counts its under-replicated partitions.
    def lagging():
        lag = follower_lag(c, "st")
        dead = [v for (p, r), v in lag.items() if r == 3]
        return lag if len(dead) == 3 and all(s >= 1.0 for _, s in dead) else None
    lag = wait_until(lagging, 20, "node 3 to lag on every st partition")
    assert all(s < 5.0 and rec == 0 for (p, r), (rec, s) in lag.items() if r != 3), lag
    under = sum(v for i in c.live() for v in samples(c.node(i), "sluice_under_replicated_partitions").values())
    assert under >= 3, under

    text = status(c.node(1).bootstrap)
    assert text.returncode == 0, text.stderr
    assert "under-replicated" in text.stdout and "down" in text.stdout, text.stdout
    assert "st-0" in text.stdout


def s_replicas(c, topic, partition):
    """The followers of topic/partition (its replicas but the leader)."""
    p = wait_until(lambda: c.partition(topic, partition), 10, f"{topic}/{partition} metadata")
    return [r for r in p.replicas if r != p.leader]


def test_status_names_an_unreachable_bootstrap():
    r = status("127.0.0.1:1")
    assert r.returncode != 0
    assert "127.0.0.1:1" in r.stderr, r.stderr


def cli(*args, stdin=None):
    r = subprocess.run([str(SLUICE), *args], input=stdin, capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, f"sluice {' '.join(args)}: {r.stdout} {r.stderr}"
    return r


def test_the_cli_reaches_each_partition_leader_and_group_coordinator_from_one_node(cluster):
    """Bootstrapped from one node only, the CLI sends partition requests to each partition's
    leader and group and transaction requests to their coordinators, and lists the groups and
    transactions of every node — as a user of a cluster runs it."""
    c = cluster(3)
    c.create_topic("cli", 3, replication_factor=2)
    one = c.nodes[1].bootstrap
    leaders = {p: c.leader_of("cli", p) for p in range(3)}
    assert len(set(leaders.values())) > 1, f"the partitions should be led by several nodes: {leaders}"
    for p in range(3):
        r = cli("produce", "-b", one, "-t", "cli", "-p", str(p), stdin="".join(f"{p}-{i}\n" for i in range(10)))
        assert "produced 10 record(s)" in r.stderr, r.stderr
    described = cli("topic", "-b", one, "describe", "cli").stdout
    for p in range(3):
        row = next(line.split() for line in described.splitlines() if line.split()[:1] == [str(p)])
        assert row[-2:] == ["0", "10"], described
    consumed = cli("consume", "-b", one, "-t", "cli", "--from", "beginning", "--exit-at-end").stdout.split()
    assert sorted(consumed) == sorted(f"{p}-{i}" for p in range(3) for i in range(10))

    # Groups whose coordinators are spread over the nodes.
    groups = [f"g{i}" for i in range(8)]
    for g in groups:
        consumer = Consumer({"bootstrap.servers": c.bootstrap, "group.id": g, "enable.auto.commit": False})
        consumer.commit(offsets=[TopicPartition("cli", p, 3) for p in range(3)], asynchronous=False)
        consumer.close()
    listed = [line.split("\t")[0] for line in cli("group", "-b", one, "list").stdout.splitlines()]
    assert sorted(set(groups) & set(listed)) == groups, listed
    for g in groups:
        rows = [line.split() for line in cli("group", "-b", one, "describe", g).stdout.splitlines()
                if line.startswith("cli ")]
        assert [(r[1], r[2], r[3]) for r in rows] == [(str(p), "3", "10") for p in range(3)], (g, rows)
    cli("group", "-b", one, "reset-offsets", "g5", "-t", "cli", "--to-earliest")
    rows = [line.split() for line in cli("group", "-b", one, "describe", "g5").stdout.splitlines()
            if line.startswith("cli ")]
    assert [r[2] for r in rows] == ["0", "0", "0"], rows
    cli("group", "-b", one, "delete", "g6")
    assert "g6" not in cli("group", "-b", one, "list").stdout

    # A committed transaction, listed and described through its coordinator.
    producer = Producer({"bootstrap.servers": c.bootstrap, "transactional.id": "cli-txn"})
    producer.init_transactions(30)
    producer.begin_transaction()
    producer.produce("cli", b"t", partition=0)
    producer.commit_transaction(30)
    assert any(line.startswith("cli-txn\t") for line in cli("txn", "-b", one, "list").stdout.splitlines())
    assert "State: CompleteCommit" in cli("txn", "-b", one, "describe", "cli-txn").stdout

    # DeleteRecords goes to each leader too.
    deleted = cli("topic", "-b", one, "delete-records", "cli", "--before", "end").stdout
    assert "cli-0: log start offset 12" in deleted and "cli-1: log start offset 10" in deleted, deleted
