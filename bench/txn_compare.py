#!/usr/bin/env python3
"""Transactions per second, Sluice beside Apache Kafka on this machine, in one run:

  librdkafka/1    confluent-kafka, one producer, one record per transaction
  librdkafka/16x  16 such producers at once (total)
  java/1          the Apache Kafka Java client (transactions version 2 where offered),
                  one producer, one record per transaction

Brokers: Sluice (`target/release/sluice`, flush.mode=sync), optionally a second Sluice
binary (`--baseline BINARY`, e.g. the previous commit's build), and Kafka 4.3.1 (single KRaft
node, from `--kafka-dir`, as `sluice bench compare` installs it) with
`log.flush.interval.messages=1` (an fsync per append, as flush.mode=sync) and, with
`--kafka-defaults`, also with its default (no fsync). Rounds interleave the brokers; each
figure is the median of its rounds. Writes `--json FILE` if given.

    python3 bench/txn_compare.py [--rounds 3] [--seconds 5] [--baseline BIN] [--kafka-defaults]

Needs tests/.venv (confluent-kafka), tests/java/lib (scripts/java-env) and a JDK.
"""

import argparse
import json
import os
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "bench"))
from local_broker import LocalBroker, free_port  # noqa: E402
from txn_producers import round_rate  # noqa: E402


class KafkaBroker:
    def __init__(self, kafka_dir, fsync_each):
        self.libs = Path(kafka_dir) / "libs"
        self.fsync_each = fsync_each

    def __enter__(self):
        if not self.libs.is_dir():
            raise SystemExit(f"no Kafka in {self.libs.parent}: run `sluice bench compare` once to install it")
        self.work = Path(tempfile.mkdtemp(prefix="kafka-txn-", dir=ROOT / "target"))
        port, controller = free_port(), free_port()
        self.bootstrap = f"127.0.0.1:{port}"
        props = self.work / "server.properties"
        props.write_text(
            "process.roles=broker,controller\nnode.id=1\n"
            f"controller.quorum.voters=1@127.0.0.1:{controller}\n"
            f"listeners=PLAINTEXT://127.0.0.1:{port},CONTROLLER://127.0.0.1:{controller}\n"
            f"advertised.listeners=PLAINTEXT://127.0.0.1:{port}\ncontroller.listener.names=CONTROLLER\n"
            "listener.security.protocol.map=PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT\n"
            f"log.dirs={self.work / 'data'}\nnum.partitions=1\noffsets.topic.replication.factor=1\n"
            "transaction.state.log.replication.factor=1\ntransaction.state.log.min.isr=1\n"
            "group.initial.rebalance.delay.ms=0\n"
            + ("log.flush.interval.messages=1\n" if self.fsync_each else ""))
        cp = f"{self.libs}/*"
        log = open(self.work / "kafka.log", "w")
        subprocess.run(["java", "-cp", cp, "kafka.tools.StorageTool", "format", "-t", "c2x1aWNlYmVuY2hrYWZrYQ",
                        "-c", str(props)], stdout=subprocess.DEVNULL, stderr=log, check=True)
        self.proc = subprocess.Popen(["java", "-Xms1g", "-Xmx1g", "-XX:+UseG1GC", "-cp", cp, "kafka.Kafka", str(props)],
                                     stdout=subprocess.DEVNULL, stderr=log)
        deadline = time.monotonic() + 90
        while time.monotonic() < deadline:
            try:
                socket.create_connection(("127.0.0.1", port), 1).close()
                time.sleep(3)
                return self
            except OSError:
                time.sleep(0.5)
        self.__exit__()
        raise RuntimeError("Kafka did not start")

    def __exit__(self, *exc):
        self.proc.terminate()
        try:
            self.proc.wait(30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
        shutil.rmtree(self.work, ignore_errors=True)


def java_rate(bootstrap, topic, seconds, tag):
    cp = f"{ROOT / 'tests' / 'java' / 'lib'}/*:{ROOT / 'bench' / 'java'}"
    r = subprocess.run(["java", "-cp", cp, "TxnRate", bootstrap, topic, str(seconds), "1", f"java-{tag}"],
                       capture_output=True, text=True, timeout=120 + seconds)
    for line in r.stdout.splitlines():
        if line.startswith("TXN_PER_S "):
            return float(line.split()[1])
    raise RuntimeError(f"TxnRate failed: {r.stdout[-2000:]} {r.stderr[-2000:]}")


def measure(bootstrap, seconds, tag):
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": bootstrap})
    topic = f"txn-compare-{tag}"
    admin.create_topics([NewTopic(topic, 16, 1)])[topic].result(30)
    return {
        "librdkafka/1": round_rate(bootstrap, topic, 1, seconds, 1, f"{tag}-a"),
        "librdkafka/16x": round_rate(bootstrap, topic, 16, seconds, 1, f"{tag}-b"),
        "java/1": java_rate(bootstrap, topic, seconds, tag),
    }


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--seconds", type=float, default=5)
    ap.add_argument("--baseline")
    ap.add_argument("--kafka-dir", default=str(Path.home() / ".cache" / "sluice" / "kafka-4.3.1"))
    ap.add_argument("--kafka-defaults", action="store_true")
    ap.add_argument("--json")
    args = ap.parse_args()
    brokers = [("sluice", lambda: LocalBroker(["--log-flush-mode", "sync"], prefix="sluice-txnc-"))]
    if args.baseline:
        brokers.append(("sluice-baseline", lambda: LocalBroker(["--log-flush-mode", "sync"], prefix="sluice-txnb-",
                                                               binary=args.baseline)))
    brokers.append(("kafka-fsync", lambda: KafkaBroker(args.kafka_dir, True)))
    if args.kafka_defaults:
        brokers.append(("kafka-defaults", lambda: KafkaBroker(args.kafka_dir, False)))
    results = {name: {} for name, _ in brokers}
    for r in range(args.rounds):
        for name, start in (brokers if r % 2 == 0 else brokers[::-1]):
            with start() as b:
                got = measure(b.bootstrap, args.seconds, f"{r}")
            for k, v in got.items():
                results[name].setdefault(k, []).append(v)
            print(f"round {r + 1} {name:16s} " + "  ".join(f"{k} {v:8,.0f}" for k, v in got.items()), flush=True)
    med = {n: {k: statistics.median(v) for k, v in d.items()} for n, d in results.items()}
    print("\nmedian transactions/s")
    for name in med:
        print(f"{name:16s} " + "  ".join(f"{k} {v:8,.0f}" for k, v in med[name].items()))
    for name in med:
        if name != "sluice":
            print(f"sluice / {name:14s} " + "  ".join(
                f"{k} {med['sluice'][k] / med[name][k]:6.2f}x" for k in med[name]))
    if args.json:
        Path(args.json).write_text(json.dumps({"command": " ".join(sys.argv), "txn_per_s": results,
                                               "median": med}, indent=2) + "\n")


if __name__ == "__main__":
    main()
