#!/usr/bin/env python3
"""What does encrypting the links between nodes cost? A 3-node cluster on this machine, RF=3,
acks=all, measured with plain links and with every link under TLS (mutual TLS on the internal
listener; followers fetching over an SSL listener with the node's certificate; clients still on
PLAINTEXT, so only the nodes' own traffic changes). Rounds alternate A-B-B-A so that drift
cancels; prints each round, the medians and the ratios TLS / plain; writes
bench/results/<date>-inter-broker-tls.json.

    tests/.venv/bin/python bench/inter_broker_tls.py [--rounds 2] [--seconds 8]

Each round starts a fresh cluster and runs `sluice bench produce` (1 KiB, closed loop) then
`sluice bench e2e` (10,000 msg/s of 128 B). Needs tests/.venv (scripts/python-env: trustme,
confluent-kafka) and target/release/sluice.
"""

import argparse
import datetime
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))
os.environ.setdefault("SLUICE_BIN", str(ROOT / "target" / "release" / "sluice"))

from cluster.harness import scratch_cluster  # noqa: E402
from conftest import cluster_certificates  # noqa: E402
from security.test_cluster_inter_broker import ssl_replication_flags, with_listener  # noqa: E402

SLUICE = Path(os.environ["SLUICE_BIN"])


def bench(args, *command):
    run = subprocess.run([str(SLUICE), "bench", *command], capture_output=True, text=True,
                         timeout=args.seconds * 6 + 120)
    if run.returncode != 0:
        raise RuntimeError(f"sluice bench {' '.join(command)}: {run.stderr[-2000:]}")
    return run.stdout


def one_round(args, mode, files):
    with scratch_cluster(3, f"sluice-ibtls-{mode}-") as c:
        if mode == "tls":
            for node in c.nodes.values():
                node.extra += ssl_replication_flags(files)
                with_listener(node, "REPLICATION", "SSL")
        c.start()
        common = ["--brokers", c.bootstrap, "--acks", "all", "--replication-factor", "3",
                  "--topic-config", "min.insync.replicas=2"]
        out = bench(args, "produce", *common, "--topic", "tput", "--size", "1024",
                    "--duration", str(args.seconds))
        m = re.search(r"= (\d+) msg/s", out)
        if not m:
            raise RuntimeError(f"no throughput in: {out}")
        throughput = int(m.group(1))
        report = Path(tempfile.mkdtemp()) / "e2e.json"
        bench(args, "e2e", *common, "--topic", "e2e", "--size", "128", "--rate", "10000",
              "--duration", str(args.seconds), "--no-floor", "--quiet", "--json", str(report))
        run = json.loads(report.read_text())["series"][0]["runs"][0]
        lat = run["latency"]
        return {"mode": mode, "produce_msg_per_s": throughput, "e2e_p50_us": lat["p50_us"],
                "e2e_p99_us": lat["p99_us"], "e2e_lost": run["lost"]}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=2, help="rounds per mode (A-B-B-A order)")
    ap.add_argument("--seconds", type=int, default=8)
    args = ap.parse_args()
    files = cluster_certificates(Path(tempfile.mkdtemp(prefix="sluice-ibtls-certs-")))
    order = []
    for r in range(args.rounds):
        order += ["plain", "tls"] if r % 2 == 0 else ["tls", "plain"]
    rounds = []
    for mode in order:
        result = one_round(args, mode, files)
        rounds.append(result)
        print(json.dumps(result), flush=True)
    summary = {}
    for mode in ("plain", "tls"):
        mine = [r for r in rounds if r["mode"] == mode]
        summary[mode] = {k: statistics.median(r[k] for r in mine)
                         for k in ("produce_msg_per_s", "e2e_p50_us", "e2e_p99_us")}
    summary["tls_over_plain"] = {k: summary["tls"][k] / summary["plain"][k] for k in summary["plain"]}
    print(json.dumps(summary, indent=2))
    out = ROOT / "bench" / "results" / f"{datetime.date.today()}-inter-broker-tls.json"
    out.write_text(json.dumps({"command": "tests/.venv/bin/python bench/inter_broker_tls.py "
                               + " ".join(sys.argv[1:]), "rounds": rounds, "summary": summary},
                              indent=2) + "\n")
    print(f"written {out}")


if __name__ == "__main__":
    main()
