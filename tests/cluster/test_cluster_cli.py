"""`sluice cluster status`: nodes with their racks and leaderships, the controller, and the
partitions a dead node leaves under-replicated — as an operator reads it, in JSON and text."""

import json
import subprocess

from conftest import SLUICE, wait_until

from .harness import cluster  # noqa: F401  (fixture)


def status(bootstrap, *flags):
    r = subprocess.run([str(SLUICE), "cluster", "status", "-b", bootstrap, *flags],
                       capture_output=True, text=True, timeout=30)
    return r


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

    text = status(c.node(1).bootstrap)
    assert text.returncode == 0, text.stderr
    assert "under-replicated" in text.stdout and "down" in text.stdout, text.stdout
    assert "st-0" in text.stdout


def test_status_names_an_unreachable_bootstrap():
    r = status("127.0.0.1:1")
    assert r.returncode != 0
    assert "127.0.0.1:1" in r.stderr, r.stderr
