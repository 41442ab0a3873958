"""`sluice cluster status`: nodes with their racks and leaderships, the controller, and the
partitions a dead node leaves under-replicated — as an operator reads it, in JSON and text."""

import json
import subprocess

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
    assert s["controller"] in (1, 2, 3)
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
