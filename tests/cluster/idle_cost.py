"""Idle cost of a cluster (scripts/cluster-idle-cost; a measurement, not in CI): start N nodes,
create partitions at RF=3 until each node hosts `--replicas` partition replicas, wait until every
partition is in sync, then read each node's CPU time (utime + stime from /proc) over `--seconds`
with no client traffic and print it as a share of one core.

    scripts/cluster-idle-cost [--replicas 2000] [--nodes 3] [--seconds 60] [--keep]
"""

import argparse
import os
import sys
import time

from confluent_kafka.admin import AdminClient, NewTopic

from conftest import wait_until

from .harness import CLIENT_DEFAULTS, cluster_cli_missing, scratch_cluster

PROG = "scripts/cluster-idle-cost"
TOPIC = "idle-cost"


def cpu_seconds(pid):
    """utime + stime of a process, in seconds (fields 14 and 15 of /proc/PID/stat)."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def all_in_sync(c, partitions):
    """One Metadata answer shows every partition led with its whole replica set in the ISR (the
    harness's wait_in_sync asks per partition, which takes minutes for thousands)."""
    t = c.metadata(TOPIC, timeout=30).topics.get(TOPIC)
    if t is None or t.error is not None or len(t.partitions) != partitions:
        return False
    return all(p.leader >= 0 and set(p.replicas) <= set(p.isrs) for p in t.partitions.values())


def main(argv=None):
    ap = argparse.ArgumentParser(prog=PROG, description=__doc__.split("\n\n")[0])
    ap.add_argument("--replicas", type=int, default=2000, help="partition replicas per node")
    ap.add_argument("--nodes", type=int, default=3, choices=(3, 5))
    ap.add_argument("--seconds", type=float, default=60.0)
    ap.add_argument("--settle", type=float, default=10.0, help="seconds idle before measuring")
    ap.add_argument("--keep", action="store_true", help="keep the data directories")
    args = ap.parse_args(argv)
    why = cluster_cli_missing()
    if why:
        print(why, file=sys.stderr)
        return 2
    partitions = args.replicas * args.nodes // 3
    with scratch_cluster(args.nodes, "sluice-idle-", args.keep) as c:
        c.start()
        t0 = time.monotonic()
        admin = AdminClient({"bootstrap.servers": c.bootstrap, **CLIENT_DEFAULTS})
        admin.create_topics([NewTopic(TOPIC, partitions, 3)], request_timeout=120)[TOPIC].result(180)
        wait_until(lambda: all_in_sync(c, partitions), 600, f"{partitions} partitions in sync")
        print(f"{partitions} partitions at RF=3 ({args.replicas} replicas per node) in sync "
              f"after {time.monotonic() - t0:.1f} s", flush=True)
        time.sleep(args.settle)
        before = {i: cpu_seconds(n.proc.pid) for i, n in c.nodes.items()}
        t0 = time.monotonic()
        time.sleep(args.seconds)
        wall = time.monotonic() - t0
        after = {i: cpu_seconds(n.proc.pid) for i, n in c.nodes.items()}
        worst = 0.0
        for i in c.ids:
            share = (after[i] - before[i]) / wall
            worst = max(worst, share)
            print(f"node {i}: {100 * share:.2f}% of a core over {wall:.0f} s idle")
        print(f"worst node: {100 * worst:.2f}% of a core (target < 5%)")
        return 0


if __name__ == "__main__":
    sys.exit(main())
