"""DescribeQuorum (KIP-595) through the Java Admin client (4.3.1), as kafka-metadata-quorum.sh
asks it: every node answers for the metadata group (a follower asks the leader), the leader is
the one each node's admin API names, every voter's log catches up with the high watermark, and
after the metadata leader is SIGKILLed a survivor reports a new leader in a later epoch, with
the dead voter behind. Admin clients that send their requests to "the controller" keep working
when the metadata leader dies."""

import re
import time
import subprocess

from confluent_kafka.admin import AdminClient, NewTopic
from kafka.admin import KafkaAdminClient, NewTopic as KpNewTopic

from conftest import ROOT, wait_until

from .harness import CLIENT_DEFAULTS, cluster  # noqa: F401  (fixture)

JAVA = ROOT / "tests" / "java"
LINE = re.compile(r"leader=(-?\d+) epoch=(-?\d+) hw=(-?\d+) voters=(.*)")


def quorum(bootstrap):
    """{'leader', 'epoch', 'hw', 'voters': {id: log end}} from the Java Admin, or None if the
    request failed (no metadata leader for a moment)."""
    r = subprocess.run(["java", "-cp", f"{JAVA / 'lib'}/*:{JAVA}", "QuorumSmoke", bootstrap],
                       capture_output=True, text=True, timeout=60)
    if r.returncode != 0:
        return None
    m = LINE.fullmatch(r.stdout.strip())
    assert m, f"unexpected output: {r.stdout!r} {r.stderr[-2000:]}"
    voters = {int(i): int(e) for i, e in (v.split(":") for v in m.group(4).split(","))}
    return {"leader": int(m.group(1)), "epoch": int(m.group(2)), "hw": int(m.group(3)), "voters": voters}


def caught_up(bootstrap):
    q = quorum(bootstrap)
    return q if q and q["hw"] > 0 and all(end >= q["hw"] for end in q["voters"].values()) else None


def test_every_node_describes_the_metadata_quorum_and_a_new_leader_after_a_kill(cluster):
    subprocess.run([str(ROOT / "scripts" / "java-env")], check=True, timeout=600)
    c = cluster(3)
    controller = wait_until(c.metadata_leader, 30, "a metadata leader")
    seen = {}
    for i in c.ids:
        q = wait_until(lambda: caught_up(c.node(i).bootstrap), 30, f"node {i} to describe a caught-up quorum")
        assert q["leader"] == controller, q
        assert set(q["voters"]) == {1, 2, 3}, q
        seen[i] = q
    c.kill(controller)
    survivor = next(i for i in c.ids if i != controller)

    def new_leader():
        q = quorum(c.node(survivor).bootstrap)
        return q if q and q["leader"] not in (-1, controller) else None

    after = wait_until(new_leader, 30, "a new metadata leader in DescribeQuorum")
    assert after["epoch"] > seen[survivor]["epoch"], (seen[survivor], after)
    assert after["voters"][controller] < after["hw"], after
    assert after["voters"][after["leader"]] >= after["hw"], after


def test_admin_clients_outlive_the_metadata_leader(cluster):
    """Admin clients send CreateTopics, ElectLeaders, reassignments... to the controller that
    Metadata named. It used to name the metadata leader; after that node was SIGKILLed,
    librdkafka refreshed its metadata at once (a broker went down), from a node that still
    named the dead leader before the new election, and then waited for that node to come back:
    every admin call timed out (reproduced: create_topics, 30 s). Now each node names itself
    (Kafka in KRaft mode names a random live broker) and passes such requests on to the
    metadata leader."""
    c = cluster(3)
    c.create_topic("before", 1, replication_factor=3)
    leader = wait_until(c.metadata_leader, 30, "a metadata leader")
    for i in c.ids:
        assert c.metadata(via=i).controller_id == i
    # librdkafka caches as its controller the node that answered its last metadata request,
    # from any broker it knows, and each names itself: in most runs that is the leader killed
    # next (the case of the bug), but not in all (seen: 2 runs in 11), and such a run still
    # tests a request passed on to the new leader. kafka-python looks for the controller on its
    # first admin request, after the kill.
    rd = AdminClient({"bootstrap.servers": c.nodes[leader].bootstrap, **CLIENT_DEFAULTS})
    rd.list_topics(timeout=10)
    kp = KafkaAdminClient(bootstrap_servers=c.nodes[leader].bootstrap, request_timeout_ms=10000)
    try:
        assert "before" in kp.list_topics()
        c.kill(leader)
        wait_until(lambda: c.metadata_leader() not in (None, leader), 20, "a new metadata leader")
        rd.create_topics([NewTopic("after-rd", num_partitions=1, replication_factor=2)])["after-rd"].result(30)
        kp.create_topics([KpNewTopic("after-kp", 1, 2)])
        for name in ("after-rd", "after-kp"):
            wait_until(lambda: c.partition(name, 0) is not None and c.partition(name, 0).leader in c.live(),
                       20, f"{name} to have a live leader")
    finally:
        kp.close()


def test_the_controller_metadata_names_is_in_its_broker_list_from_the_first_answer(cluster):
    """Metadata names the answering node as the controller. In the first moments after a start,
    before the node's own registration was applied, its broker list lacked it, and librdkafka
    then held admin requests for a controller it could not find: a CreateTopics sent right
    after a cluster started timed out after 30 s (3 runs in 7 of a draft test that did so). Every
    answer, from the first, lists the node it names."""
    c = cluster(3, start=False)
    for node in c.nodes.values():
        node.start(wait=False)
    answers = 0
    deadline = time.monotonic() + 8
    while time.monotonic() < deadline and answers < 40:
        admin = AdminClient({**CLIENT_DEFAULTS, "bootstrap.servers": c.nodes[1].bootstrap})
        try:
            md = admin.list_topics(timeout=1)
        except Exception:
            continue            # not listening yet
        if md.orig_broker_id not in (-1, 1):   # -1: answered over the bootstrap connection
            continue
        answers += 1
        assert md.controller_id in md.brokers, \
            f"controller {md.controller_id} not among brokers {sorted(md.brokers)}"
    assert answers > 0, "node 1 never answered Metadata"
    # And an admin request sent at once is answered.
    admin = AdminClient({**CLIENT_DEFAULTS, "bootstrap.servers": c.nodes[2].bootstrap})
    for f in admin.create_topics([NewTopic("right-after-start", 1, 1)]).values():
        f.result(timeout=20)
