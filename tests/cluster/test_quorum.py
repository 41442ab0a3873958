"""DescribeQuorum (KIP-595) through the Java Admin client (4.3.1), as kafka-metadata-quorum.sh
asks it: every node answers for the metadata group (a follower asks the leader), the leader is
the controller that Metadata names, every voter's log catches up with the high watermark, and
after the metadata leader is SIGKILLed a survivor reports a new leader in a later epoch, with
the dead voter behind."""

import re
import subprocess

from conftest import ROOT, wait_until

from .harness import cluster  # noqa: F401  (fixture)

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
    controller = wait_until(lambda: (lambda md: md.controller_id if md.controller_id in c.ids else None)(c.metadata()),
                            30, "a controller in Metadata")
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
