#!/usr/bin/env python3
"""Transactions per second through librdkafka (confluent-kafka) with one and with many
transactional producers at once, one record per transaction, against one Sluice broker with
flush.mode=sync, in one run (rounds interleave the producer counts):

    python3 bench/txn_producers.py [--producers 1,16] [--rounds 3] [--seconds 5] [--per-txn 1]

Each producer is its own process (its own transactional id) looping begin, produce
`--per-txn` records of 100 bytes, commit, for `--seconds`. Prints each round's total
transactions/s and the medians; `--json FILE` writes them. `--bootstrap HOST:PORT` aims at a
running broker instead (e.g. Apache Kafka, for a side-by-side figure). Needs tests/.venv.
"""

import argparse
import json
import multiprocessing as mp
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "bench"))
from local_broker import LocalBroker  # noqa: E402


def producer_loop(bootstrap, topic, tid, seconds, per_txn, start_at, out):
    from confluent_kafka import Producer

    p = Producer({"bootstrap.servers": bootstrap, "transactional.id": tid, "linger.ms": 0})
    p.init_transactions(30)
    p.begin_transaction()
    p.produce(topic, b"w" * 100)
    p.commit_transaction(30)
    while time.time() < start_at:
        time.sleep(0.001)
    done = 0
    t0 = time.perf_counter()
    while time.perf_counter() - t0 < seconds:
        p.begin_transaction()
        for _ in range(per_txn):
            p.produce(topic, b"v" * 100)
        p.commit_transaction(30)
        done += 1
    out.put((done, time.perf_counter() - t0))


def round_rate(bootstrap, topic, producers, seconds, per_txn, tag):
    out = mp.Queue()
    start_at = time.time() + 2 + producers * 0.1
    procs = [mp.Process(target=producer_loop,
                        args=(bootstrap, topic, f"txnp-{tag}-{i}", seconds, per_txn, start_at, out))
             for i in range(producers)]
    for p in procs:
        p.start()
    results = [out.get(timeout=120 + seconds) for _ in procs]
    for p in procs:
        p.join(30)
    return sum(d / el for d, el in results)


def main():
    from confluent_kafka.admin import AdminClient, NewTopic

    ap = argparse.ArgumentParser()
    ap.add_argument("--producers", default="1,16")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--seconds", type=float, default=5)
    ap.add_argument("--per-txn", type=int, default=1)
    ap.add_argument("--partitions", type=int, default=16)
    ap.add_argument("--bootstrap")
    ap.add_argument("--json")
    args = ap.parse_args()
    counts = [int(x) for x in args.producers.split(",")]

    def run(bootstrap):
        admin = AdminClient({"bootstrap.servers": bootstrap})
        topic = f"txn-producers-{int(time.time())}"
        admin.create_topics([NewTopic(topic, args.partitions, 1)])[topic].result(30)
        rates = {n: [] for n in counts}
        for r in range(args.rounds):
            for n in (counts if r % 2 == 0 else counts[::-1]):
                rate = round_rate(bootstrap, topic, n, args.seconds, args.per_txn, f"{r}-{n}")
                rates[n].append(rate)
                print(f"round {r + 1} producers {n:3d}: {rate:9,.0f} txn/s", flush=True)
        return rates

    if args.bootstrap:
        rates = run(args.bootstrap)
    else:
        with LocalBroker(["--log-flush-mode", "sync"], prefix="sluice-txnp-") as b:
            rates = run(b.bootstrap)
    med = {n: statistics.median(v) for n, v in rates.items()}
    for n in counts:
        print(f"producers {n:3d}: median {med[n]:9,.0f} txn/s = {med[n] / med[counts[0]]:.2f}x of {counts[0]}")
    if args.json:
        Path(args.json).write_text(json.dumps({"command": " ".join(sys.argv), "txn_per_s": rates,
                                               "median": med}, indent=2) + "\n")


if __name__ == "__main__":
    main()
