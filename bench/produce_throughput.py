#!/usr/bin/env python3
"""Produce throughput of a real client (confluent-kafka / librdkafka) into a Sluice broker.

Starts `target/release/sluice serve` on a fresh data directory, then per round creates a topic
and times producing `--count` records of `--size` bytes (from the first produce() to the end
of flush(), every delivery report checked). Prints msg/s and MB/s per round and the median;
writes bench/results/<date>-produce-<size>B-acks<acks>-<flush mode>[-<codec>].json.

    python3 bench/produce_throughput.py [--count 500000] [--size 1024] [--acks 1] [--rounds 3]
        [--flush-mode interval|sync] [--partitions 1] [--compression none|gzip|snappy|lz4|zstd]
        [--binary PATH --binary PATH2 ...]

With several `--binary` (e.g. a build from before a change), each round measures each of them
in turn, so that the ratio between them comes from one run.

Needs tests/.venv (scripts/python-env) for confluent-kafka.
"""

import argparse
import datetime
import json
import os
import platform
import re
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "bench"))
from local_broker import LocalBroker, produce_all  # noqa: E402


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--count", type=int, default=500_000)
    ap.add_argument("--size", type=int, default=1024)
    ap.add_argument("--acks", default="1")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--partitions", type=int, default=1)
    ap.add_argument("--flush-mode", default="interval")
    ap.add_argument("--linger-ms", default="5")
    ap.add_argument("--compression", default="none")
    ap.add_argument("--binary", action="append", help="sluice binaries to compare (default: target/release/sluice)")
    args = ap.parse_args()
    binaries = args.binary or [str(ROOT / "target" / "release" / "sluice")]
    # Half random, half repeated, so that compression has something to do.
    value = (os.urandom(args.size // 2) + b"x" * args.size)[:args.size]
    brokers = [LocalBroker(binary=b).__enter__() for b in binaries]
    rounds = {b: [] for b in binaries}
    try:
        for r in range(args.rounds):
            for binary, broker in zip(binaries, brokers):
                rounds[binary].append(produce_round(args, broker.bootstrap, f"bench-{r}", value))
                print(f"round {r + 1} {binary}: {rounds[binary][-1]:,.0f} msg/s")
    finally:
        for broker in brokers:
            broker.__exit__(None, None, None)
    medians = {b: statistics.median(rs) for b, rs in rounds.items()}
    for b, rs in rounds.items():
        print(f"{b}: median {medians[b]:,.0f} msg/s ({medians[b] * args.size / 1e6:.1f} MB/s), "
              f"min {min(rs):,.0f}, max {max(rs):,.0f}"
              + (f", {medians[b] / medians[binaries[0]]:.3f} of the first" if b != binaries[0] else ""))
    import confluent_kafka
    report = {
        "date": datetime.date.today().isoformat(),
        "commit": subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True).stdout.strip(),
        "machine": {"nproc": os.cpu_count(), "mem_total_kb": int(re.search(r"MemTotal:\s+(\d+)", Path("/proc/meminfo").read_text()).group(1)),
                    "kernel": platform.release()},
        "client": f"confluent-kafka {confluent_kafka.version()[0]} (librdkafka {confluent_kafka.libversion()[0]})",
        "command": "python3 bench/produce_throughput.py " + " ".join(sys.argv[1:]),
        "settings": vars(args),
        "msg_per_s": rounds[binaries[0]] if len(binaries) == 1 else rounds,
        "median_msg_per_s": medians[binaries[0]] if len(binaries) == 1 else medians,
    }
    codec = "" if args.compression == "none" else f"-{args.compression}"
    name = f"{report['date']}-produce-{args.size}B-acks{args.acks}-{args.flush_mode}{codec}.json"
    out = ROOT / "bench" / "results" / name
    out.write_text(json.dumps(report, indent=2) + "\n")
    print(f"wrote {out.relative_to(ROOT)}")


def produce_round(args, bootstrap, topic, value):
    """Produces `args.count` records into a new topic; returns msg/s."""
    from confluent_kafka import Producer
    from confluent_kafka.admin import AdminClient, NewTopic

    admin_client = AdminClient({"bootstrap.servers": bootstrap})
    admin_client.create_topics(
        [NewTopic(topic, args.partitions, 1, config={"flush.mode": args.flush_mode})])[topic].result(15)
    p = Producer({"bootstrap.servers": bootstrap, "acks": args.acks, "linger.ms": args.linger_ms,
                  "compression.type": args.compression,
                  "queue.buffering.max.messages": 1_000_000, "queue.buffering.max.kbytes": 1_048_576})
    errors = []

    def report(err, _msg):
        if err:
            errors.append(err)

    start = time.perf_counter()
    produce_all(p, topic, value, args.count, report)
    left = p.flush(120)
    elapsed = time.perf_counter() - start
    assert left == 0 and not errors, (left, errors[:3])
    return args.count / elapsed


if __name__ == "__main__":
    main()
