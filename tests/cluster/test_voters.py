"""Changing the metadata voters at run time (KIP-853's AddRaftVoter / RemoveRaftVoter): one
node grows into a 3-node cluster that survives the loss of the node it started from. Nodes 2
and 3 join as learners (`--internal-listen`), become voters (one through `sluice cluster
add-node --voter`, one through the Java Admin client's addRaftVoter, as kafka-metadata-quorum.sh
add-controller sends it), and then the first node is SIGKILLed under an acks=all producer: the
other two elect a metadata leader and new partition leaders and go on. The first node comes
back, is made a learner again (Java removeRaftVoter) and stays a broker; the bad requests get
Kafka's errors. The checker finds nothing acknowledged lost."""

import subprocess
import time

from conftest import ROOT, SLUICE, wait_until

from .checker import History
from .test_quorum import JAVA, quorum
from .workload import ProducerWorkload, drain_and_check

TOPIC = "grown"


def java_voter(c, action, node, via=None):
    bootstrap = c.nodes[via].bootstrap if via else c.bootstrap
    r = subprocess.run(["java", "-cp", f"{JAVA / 'lib'}/*:{JAVA}", "VoterSmoke", bootstrap, action, str(node)],
                       capture_output=True, text=True, timeout=90)
    assert r.returncode == 0, r.stdout + r.stderr[-2000:]
    return r.stdout.strip()


def cli_voter(c, action, node):
    return subprocess.run([str(SLUICE), "cluster", "-b", c.bootstrap, action, str(node)],
                          capture_output=True, text=True, timeout=60)


def voters(c, via):
    q = wait_until(lambda: quorum(c.nodes[via].bootstrap), 30, "DescribeQuorum")
    return sorted(q["voters"]), q["leader"]


def test_one_node_grows_to_three_voters_and_survives_losing_the_first(cluster):
    subprocess.run([str(ROOT / "scripts" / "java-env")], check=True, timeout=600)
    c = cluster(1)
    c.add_node(2)
    c.add_node(3)
    wait_until(lambda: sorted(c.metadata(via=1).brokers) == [1, 2, 3], 30, "nodes 2 and 3 registered")
    assert voters(c, 1)[0] == [1]

    # Refused, with Kafka's errors: not a member yet, already a voter, not a voter.
    r = cli_voter(c, "add-voter", 9)
    assert r.returncode != 0 and "not in the metadata group" in r.stderr, r.stdout + r.stderr
    assert java_voter(c, "add", 1).startswith("error DuplicateVoterException"), "node 1 votes already"
    assert java_voter(c, "remove", 2).startswith("error VoterNotFoundException")
    r = cli_voter(c, "remove-voter", 1)
    assert r.returncode != 0 and "only voter" in r.stderr, r.stdout + r.stderr

    r = subprocess.run([str(SLUICE), "cluster", "-b", c.bootstrap, "add-node", "9", "--wait", "1"],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode != 0 and "node 9 has not joined" in r.stderr, r.stdout + r.stderr
    r = subprocess.run([str(SLUICE), "cluster", "-b", c.bootstrap, "add-node", "2", "--voter"],
                       capture_output=True, text=True, timeout=90)
    assert r.returncode == 0 and "node 2 has joined" in r.stdout and "now a voter" in r.stdout, \
        r.stdout + r.stderr
    assert java_voter(c, "add", 3, via=2) == "ok"
    for i in c.ids:
        assert voters(c, i)[0] == [1, 2, 3], f"node {i}"

    c.create_topic(TOPIC, 3, replication_factor=3)
    history = History()
    w = ProducerWorkload(c.bootstrap, TOPIC, history, rate_per_s=200, duration_s=60.0).start()
    try:
        w.wait_acked(300, timeout=20)
        # The node the cluster grew from dies: two voters of three are left.
        killed_at = time.monotonic()
        c.kill(1)
        for p in range(3):
            c.wait_for_leader(TOPIC, p, not_node=1, timeout=20)
        members, leader = wait_until(lambda: (lambda v: v if v[1] in (2, 3) else None)(voters(c, 2)), 30,
                                     "a metadata leader among nodes 2 and 3")
        assert members == [1, 2, 3]
        w.wait_acked(300, timeout=30, since=killed_at)

        # Back, and a learner again: the quorum is nodes 2 and 3; node 1 is still a broker.
        c.restart(1)
        assert java_voter(c, "remove", 1) == "ok"
        wait_until(lambda: voters(c, 2)[0] == [2, 3], 30, "voters 2 and 3")
        c.wait_in_sync(TOPIC, timeout=30)
        assert 1 in c.metadata(via=2).brokers
        # A promoted voter restarts and rejoins with its vote.
        c.kill(3)
        c.restart(3)
        wait_until(lambda: voters(c, 3)[0] == [2, 3], 30, "node 3 back as a voter")
        since = time.monotonic()
        w.wait_acked(200, timeout=30, since=since)
        w.finish()
    finally:
        w.abort()
    assert w.fatal is None, w.fatal
    result = drain_and_check(c, TOPIC, history, "voters")
    assert result.valid, str(result)
