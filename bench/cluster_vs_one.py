#!/usr/bin/env python3
"""Issue 13's throughput ratio: acks=all produce throughput of 1 KiB records into a 3-node
cluster at RF=3 (min.insync.replicas=2) over the same into one Sluice node, side by side on
this machine. Rounds alternate A-B-B-A; each starts fresh processes on fresh data directories
and runs `sluice bench produce --size 1024 --acks all` (one producer, closed loop). Prints each
round, the medians and the ratio (target >= 0.5); writes
bench/results/<date>-cluster-vs-one.json.

    tests/.venv/bin/python bench/cluster_vs_one.py [--rounds 3] [--seconds 8]
"""

import argparse
import datetime
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))
os.environ.setdefault("SLUICE_BIN", str(ROOT / "target" / "release" / "sluice"))

from cluster.harness import scratch_cluster  # noqa: E402
from conftest import Broker  # noqa: E402

SLUICE = Path(os.environ["SLUICE_BIN"])


def produce(args, bootstrap, *extra):
    run = subprocess.run([str(SLUICE), "bench", "produce", "--brokers", bootstrap, "--size", "1024",
                          "--acks", "all", "--duration", str(args.seconds), "--topic", "tput", *extra],
                         capture_output=True, text=True, timeout=args.seconds * 6 + 120)
    m = re.search(r"= (\d+) msg/s", run.stdout)
    if run.returncode != 0 or not m:
        raise RuntimeError(f"sluice bench produce: {run.stdout[-1000:]} {run.stderr[-2000:]}")
    return int(m.group(1))


def one_round(args, mode):
    if mode == "cluster":
        with scratch_cluster(3, "sluice-vs-one-") as c:
            c.start()
            return produce(args, c.bootstrap, "--replication-factor", "3",
                           "--topic-config", "min.insync.replicas=2")
    base = Path(tempfile.mkdtemp(prefix="sluice-one-"))
    b = Broker(base / "data", name="one-node")
    try:
        b.start()
        return produce(args, b.bootstrap)
    finally:
        b.kill()
        shutil.rmtree(base, ignore_errors=True)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=3, help="rounds per mode (A-B-B-A order)")
    ap.add_argument("--seconds", type=int, default=8)
    args = ap.parse_args()
    order = []
    for r in range(args.rounds):
        order += ["one", "cluster"] if r % 2 == 0 else ["cluster", "one"]
    rounds = []
    for mode in order:
        subprocess.run(["sync"], check=False)
        rounds.append({"mode": mode, "produce_msg_per_s": one_round(args, mode)})
        print(json.dumps(rounds[-1]), flush=True)
    medians = {mode: statistics.median(r["produce_msg_per_s"] for r in rounds if r["mode"] == mode)
               for mode in ("one", "cluster")}
    summary = {"median_msg_per_s": medians, "cluster_over_one": medians["cluster"] / medians["one"]}
    print(json.dumps(summary, indent=2))
    out = ROOT / "bench" / "results" / f"{datetime.date.today()}-cluster-vs-one.json"
    out.write_text(json.dumps({"command": "tests/.venv/bin/python bench/cluster_vs_one.py "
                               + " ".join(sys.argv[1:]), "rounds": rounds, "summary": summary},
                              indent=2) + "\n")
    print(f"written {out}")


if __name__ == "__main__":
    main()
