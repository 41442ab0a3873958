"""What a coordinator's take-over of a large `__consumer_offsets` partition costs the groups
around it (scripts/cluster-coordinator-load; not in CI: filling the partition takes a while).

Fills group G's offsets partition with `--commits` OffsetCommit requests of 100 offsets each,
SIGKILLs G's coordinator, and meanwhile asks a group H, coordinated by each surviving node of
G's partition, for its offset every few milliseconds. It prints how long the node that took G
over read and replayed the partition (its log line), the slowest answer H got from that node
while it did, and when G's last commit was answered again.

    scripts/cluster-coordinator-load [--commits 3000] [--keep]
"""

import argparse
import re
import struct
import threading
import time

from broker import raw
from conftest import wait_until

from .harness import scratch_cluster
from .test_groups import (OFFSETS, coordinator_of, fetched_offset, java_partition_for, offset_commit_error,
                          offset_fetch_v1)

PARTITIONS = 100


def commit_many(group, topic, offset):
    """OffsetCommit v2 of `offset` on partitions 0..PARTITIONS-1 of `topic`, outside a generation."""
    body = raw.string(group) + struct.pack(">i", -1) + raw.string("") + struct.pack(">q", -1)
    body += struct.pack(">i", 1) + raw.string(topic) + struct.pack(">i", PARTITIONS)
    for p in range(PARTITIONS):
        body += struct.pack(">iq", p, offset) + raw.string("")
    return raw.frame(raw.header_v1(8, 2, 1) + body)


def commit_one(bootstrap, group, topic, partition, offset):
    body = raw.string(group) + struct.pack(">i", -1) + raw.string("") + struct.pack(">q", -1)
    body += struct.pack(">i", 1) + raw.string(topic) + struct.pack(">iiq", 1, partition, offset) + raw.string("")
    return raw.call(bootstrap, raw.frame(raw.header_v1(8, 2, 1) + body))


def find_coordinator_v1(group):
    return raw.frame(raw.header_v1(10, 1, 3) + raw.string(group) + struct.pack(">b", 0))


def group_on(c, leader, avoid, prefix):
    """A group whose offsets partition `leader` leads and that is not partition `avoid`."""
    partitions = len(c.metadata(OFFSETS).topics[OFFSETS].partitions)
    for i in range(10_000):
        name = f"{prefix}-{i}"
        p = java_partition_for(name, partitions)
        if p != avoid and c.leader_of(OFFSETS, p) == leader:
            return name
    raise AssertionError(f"no group led by node {leader}")


def poll(node, group, stop, out):
    """(seconds since start, latency, error) of each OffsetFetch of `group` to `node`."""
    conn = None
    start = time.monotonic()
    while not stop.is_set():
        t0 = time.monotonic()
        try:
            if conn is None:
                conn = raw.Conn(node.bootstrap, timeout=10)
            conn.send(offset_fetch_v1(group, "big", 0))
            _offset, error = fetched_offset(conn.read_frame())
        except (OSError, AssertionError, TypeError):
            conn, error = None, "down"
        out.append((t0 - start, time.monotonic() - t0, error))
        time.sleep(0.005)


def main(argv=None):
    ap = argparse.ArgumentParser(prog="scripts/cluster-coordinator-load", description=__doc__.split("\n\n")[0])
    ap.add_argument("--commits", type=int, default=3000, help="OffsetCommit requests of 100 offsets each")
    ap.add_argument("--keep", action="store_true", help="keep the data directories")
    args = ap.parse_args(argv)
    with scratch_cluster(3, "sluice-coordinator-load-", args.keep) as c:
        c.start()
        c.create_topic("big", PARTITIONS, replication_factor=1)
        g = "g-big"
        # The first asks the cluster for the offsets topic; then the coordinator takes it.
        raw.call(c.node(1).bootstrap, find_coordinator_v1(g))
        wait_until(lambda: (t := c.metadata(OFFSETS).topics.get(OFFSETS)) and t.partitions, 30, OFFSETS)
        partition, leader = coordinator_of(c, g)
        wait_until(lambda: offset_commit_error(commit_one(c.node(leader).bootstrap, g, "big", 0, 0)) == 0,
                   30, f"{g}'s coordinator to take a commit")
        bootstrap = c.node(leader).bootstrap
        started = time.monotonic()
        conn = raw.Conn(bootstrap, timeout=30)
        for i in range(args.commits):
            conn.send(commit_many(g, "big", i + 1))
            conn.read_frame()
        conn.close()
        print(f"{args.commits * PARTITIONS} offsets committed to {OFFSETS}-{partition} "
              f"in {time.monotonic() - started:.1f} s")
        c.wait_for_isr(OFFSETS, partition)
        followers = [n for n in c.partition(OFFSETS, partition).replicas if n != leader]
        watched = {n: group_on(c, n, partition, f"h{n}") for n in followers}
        for n, h in watched.items():
            commit_one(c.node(n).bootstrap, h, "big", 0, 7)
        stop = threading.Event()
        answers = {n: [] for n in followers}
        threads = [threading.Thread(target=poll, args=(c.node(n), h, stop, answers[n]), daemon=True)
                   for n, h in watched.items()]
        for t in threads:
            t.start()
        time.sleep(1)
        killed_at = time.monotonic()
        c.kill(leader)
        new = c.wait_for_leader(OFFSETS, partition, not_node=leader)
        back = None
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            try:
                offset, error = fetched_offset(raw.call(c.node(new).bootstrap, offset_fetch_v1(g, "big", 0), timeout=10))
            except (OSError, AssertionError):
                offset, error = None, "down"
            if error == 0 and offset == args.commits:
                back = time.monotonic() - killed_at
                break
            time.sleep(0.01)
        time.sleep(1)
        stop.set()
        for t in threads:
            t.join()
        log = c.node(new).log_path.read_text(errors="replace")
        loads = [line for line in log.splitlines()
                 if "coordinating an internal partition" in line and f"partition={partition} " in line]
        print(f"node {new} took {OFFSETS}-{partition} over: {loads[-1] if loads else 'no log line'}")
        print(f"group {g} answered its last commit again {back:.2f} s after the kill"
              if back is not None else f"group {g} never answered its last commit again")
        slow = max(answers[new], key=lambda a: a[1])
        errors = {}
        for _t, _lat, e in answers[new]:
            errors[e] = errors.get(e, 0) + 1
        print(f"group {watched[new]} on node {new}: {len(answers[new])} OffsetFetch answers, "
              f"slowest {slow[1] * 1000:.0f} ms, errors {errors}")
        if re.search(r"records=(\d+)", loads[-1] if loads else "") is None:
            raise SystemExit("the take-over's log line was not found")


if __name__ == "__main__":
    main()
