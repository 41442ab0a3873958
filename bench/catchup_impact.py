#!/usr/bin/env python3
"""Does a node catching up starve client traffic? Issue 13 asks that catch-up be throttled so
that a recovering node does not. This measures what catch-up costs the clients, unthrottled and
capped, in one run on this machine.

A 3-node cluster without leader balancing; topics `big` and `lat` (1 partition each, RF=3,
min.insync.replicas=2); the victim is a node that leads neither. Each round: the victim is SIGKILLed, `sluice bench produce`
writes `--produce-seconds` of 1 KiB records into `big` (the backlog the victim must copy), then
`sluice bench e2e` offers 10,000 records/s of 128 B to `lat` (acks=all) for `--e2e-seconds`
(its first second left out) while the round's condition holds; the copy of the backlog should
outlast it (`catch_up_s` says whether it did):

- `down`: the victim stays down (the clients' baseline without catch-up);
- `uncapped`: the victim restarts `--e2e-delay` seconds before the e2e run starts, and copies the backlog with no cap
  (`replica.recovery.max.bytes.per.sec=0` on the victim, set through IncrementalAlterConfigs);
- `capped`: the same with the victim's recovery capped at `--cap` bytes/s (default: the
  broker's default cap, 100 MiB/s); `cap=N`: capped at N bytes/s.

Conditions alternate (down, uncapped, capped, capped, uncapped, down, ...). Prints, per round,
the e2e latency figures and how long the victim took to hold the backlog; writes
bench/results/<date>-catchup-impact.json.

    tests/.venv/bin/python bench/catchup_impact.py [--rounds 2] [--produce-seconds 6] [--cap BYTES_PER_S]
"""

import argparse
import datetime
import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))
os.environ.setdefault("SLUICE_BIN", str(ROOT / "target" / "release" / "sluice"))

from confluent_kafka import KafkaException, TopicPartition  # noqa: E402
from confluent_kafka.admin import (AdminClient, AlterConfigOpType, ConfigEntry,  # noqa: E402
                                   ConfigResource, NewTopic, ResourceType)

from broker.test_metrics import scrape, value  # noqa: E402
from cluster.harness import CLIENT_DEFAULTS, scratch_cluster  # noqa: E402

SLUICE = Path(os.environ["SLUICE_BIN"])
RECOVERY_RATE = "replica.recovery.max.bytes.per.sec"


def log_end(node, topic):
    try:
        got = value(scrape(node), "sluice_log_end_offset", topic=topic, partition=0)
    except OSError:
        return None
    return None if got is None else int(got)


def set_recovery_cap(c, node_id, rate):
    """Sets the node's cap (0: none; None: back to the default); the cluster keeps it in its
    metadata, so the node has it after a restart too."""
    admin = AdminClient({"bootstrap.servers": c.bootstrap, **CLIENT_DEFAULTS})
    op = AlterConfigOpType.SET if rate is not None else AlterConfigOpType.DELETE
    res = ConfigResource(ResourceType.BROKER, str(node_id),
                         incremental_configs=[ConfigEntry(RECOVERY_RATE, str(rate or 0),
                                                          incremental_operation=op)])
    for attempt in range(10):
        try:
            for f in admin.incremental_alter_configs([res]).values():
                f.result(30)
            return
        except KafkaException as e:  # e.g. a moment without a metadata leader: asked again
            print(f"set {RECOVERY_RATE}: {e}; again", file=sys.stderr)
            time.sleep(1)
    raise RuntimeError(f"could not set {RECOVERY_RATE} on node {node_id}")


def produce_backlog(args, bootstrap):
    run = subprocess.run([str(SLUICE), "bench", "produce", "--brokers", bootstrap, "--size", "1024",
                          "--acks", "all", "--duration", str(args.produce_seconds), "--topic", "big"],
                         capture_output=True, text=True, timeout=args.produce_seconds * 6 + 120)
    if run.returncode != 0:
        raise RuntimeError(f"sluice bench produce: {run.stdout[-1000:]} {run.stderr[-2000:]}")


def e2e(args, bootstrap, out):
    run = subprocess.run([str(SLUICE), "bench", "e2e", "--brokers", bootstrap, "--topic", "lat",
                          "--rate", "10000", "--size", "128", "--acks", "all", "--duration",
                          str(args.e2e_seconds), "--no-floor", "--json", str(out)],
                         capture_output=True, text=True, timeout=args.e2e_seconds * 6 + 120)
    if run.returncode != 0:
        raise RuntimeError(f"sluice bench e2e: {run.stdout[-1000:]} {run.stderr[-2000:]}")
    return json.loads(out.read_text())


def one_round(args, c, victim, mode, scratch):
    # Set while the victim runs: a client sends a broker's configs to that broker.
    if mode == "uncapped":
        set_recovery_cap(c, victim, 0)
    elif mode == "capped" and args.cap is not None:
        set_recovery_cap(c, victim, args.cap)
    elif mode.startswith("cap="):
        set_recovery_cap(c, victim, int(mode[len("cap="):]))
    leader = c.wait_for_leader("big", 0)
    c.kill(victim)
    produce_backlog(args, c.bootstrap)
    target = log_end(c.node(leader), "big")
    behind = target - (log_end_at_kill.get(victim) or 0)
    caught_up = {}

    def restart_and_time():
        t0 = time.monotonic()
        c.node(victim).start(wait=False)
        deadline = t0 + args.e2e_seconds * 6 + 120
        while time.monotonic() < deadline:
            end = log_end(c.node(victim), "big")
            if end is not None and end >= target:
                caught_up["s"] = time.monotonic() - t0
                return
            time.sleep(0.1)

    timer = None
    if mode != "down":
        timer = threading.Thread(target=restart_and_time)
        timer.start()
        # Measured while the copy runs, not over the node's start.
        time.sleep(args.e2e_delay)
    report = e2e(args, ",".join(c.node(i).bootstrap for i in c.ids if i != victim),
                 scratch / f"e2e-{mode}-{time.monotonic_ns()}.json")
    if timer is not None:
        timer.join()
    else:
        c.node(victim).start(wait=False)
        deadline = time.monotonic() + 300
        while (log_end(c.node(victim), "big") or 0) < target and time.monotonic() < deadline:
            time.sleep(0.2)
    c.wait_for_isr("big", 0, timeout=300)
    c.wait_for_isr("lat", 0, timeout=300)
    if mode != "down":
        set_recovery_cap(c, victim, None)
    log_end_at_kill[victim] = log_end(c.node(victim), "big")
    # The backlog is deleted on every replica once copied: rounds do not fill the disk.
    for attempt in range(10):
        admin = AdminClient({"bootstrap.servers": c.bootstrap, **CLIENT_DEFAULTS})
        try:
            for f in admin.delete_records([TopicPartition("big", 0, log_end_at_kill[victim])]).values():
                f.result(60)
            break
        except KafkaException as e:  # a leadership move meanwhile: asked again
            print(f"delete_records: {e}; again", file=sys.stderr)
            time.sleep(1)
    # Deleting gigabytes of segments stalls this VM's disk for a moment: not in the next round.
    subprocess.run(["sync"], check=False)
    time.sleep(3)
    return {"mode": mode, "backlog_records": behind, "catch_up_s": caught_up.get("s"),
            "e2e": report}


log_end_at_kill = {}


def latency(report):
    """The first latency summary (a dict with `p99_us`) in an e2e JSON report."""
    if isinstance(report, dict):
        if "p99_us" in report:
            return report
        items = report.values()
    elif isinstance(report, list):
        items = report
    else:
        return None
    for item in items:
        found = latency(item)
        if found is not None:
            return found
    return None


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=2, help="rounds per condition")
    ap.add_argument("--produce-seconds", type=int, default=12)
    ap.add_argument("--e2e-seconds", type=int, default=6)
    ap.add_argument("--e2e-delay", type=float, default=3.0,
                    help="seconds from the victim's restart to the e2e run's start")
    ap.add_argument("--modes", default="down,uncapped,capped", help="conditions, in order")
    ap.add_argument("--cap", type=int, default=None,
                    help="bytes/s in the capped rounds (default: the broker's default cap)")
    args = ap.parse_args()
    modes = args.modes.split(",")
    order = []
    for r in range(args.rounds):
        order += modes if r % 2 == 0 else list(reversed(modes))
    rounds = []
    # The leader balancer off: leadership would otherwise move to the victim, mid-measure,
    # when it is back in sync and the preferred replica of a topic.
    with scratch_cluster(3, "sluice-catchup-", env={"SLUICE_LEADER_BALANCE_INTERVAL_MS": "0"}) as c, tempfile.TemporaryDirectory() as scratch:
        c.start()
        for t in ("big", "lat"):
            admin = AdminClient({"bootstrap.servers": c.bootstrap, **CLIENT_DEFAULTS})
            for f in admin.create_topics([NewTopic(t, 1, 3, config={"min.insync.replicas": "2"})]).values():
                f.result(30)
            c.wait_for_isr(t, 0)
        leaders = {c.wait_for_leader("big", 0), c.wait_for_leader("lat", 0)}
        victim = next(i for i in c.ids if i not in leaders)
        for mode in order:
            subprocess.run(["sync"], check=False)
            r = one_round(args, c, victim, mode, Path(scratch))
            lat = latency(r["e2e"]) or {}
            rounds.append(r)
            print(json.dumps({"mode": mode, "backlog_records": r["backlog_records"],
                              "catch_up_s": r["catch_up_s"], "latency": lat}), flush=True)
    summary = {}
    for mode in modes:
        mine = [r for r in rounds if r["mode"] == mode]
        lats = [latency(r["e2e"]) or {} for r in mine]
        summary[mode] = {k: statistics.median(x[k] for x in lats)
                         for k in ("p50_us", "p99_us", "p999_us", "max_us")
                         if lats and all(k in x for x in lats)}
        summary[mode]["catch_up_s"] = [r["catch_up_s"] for r in mine]
    print(json.dumps(summary, indent=2))
    out = ROOT / "bench" / "results" / f"{datetime.date.today()}-catchup-impact.json"
    out.write_text(json.dumps({"command": "tests/.venv/bin/python bench/catchup_impact.py "
                               + " ".join(sys.argv[1:]), "rounds": rounds, "summary": summary},
                              indent=2) + "\n")
    print(f"written {out}")


if __name__ == "__main__":
    main()
