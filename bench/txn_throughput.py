#!/usr/bin/env python3
"""What exactly-once costs: confluent-kafka producing into one Sluice broker with
flush.mode=sync (every acknowledged write fsynced), acks=all, in one run:

  plain        enable.idempotence=false
  idempotent   enable.idempotence=true
  txn/100      a transaction per 100 records (begin, produce 100, commit)
  txn/10       a transaction per 10 records
  txn/1        a transaction per record
  plain/wait1  enable.idempotence=false, waiting for each record's acknowledgement before the
               next (flush per record): the synchronous round trip a transaction per record
               also pays, for scale

Rounds interleave the settings; prints each, the medians and each median's ratio to plain;
writes bench/results/<date>-txn-throughput.json.

    python3 bench/txn_throughput.py [--rounds 3] [--size 512] [--count 200000]

`--count` records per round for plain, idempotent and txn/100; txn/10 and txn/1 send a tenth
and a hundredth of it (each is bounded by round trips, not bytes). Needs tests/.venv.
"""

import argparse
import datetime
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "bench"))
from local_broker import LocalBroker, produce_all  # noqa: E402


def run(bootstrap, topic, setting, count, value):
    from confluent_kafka import Producer

    conf = {"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 5,
            "queue.buffering.max.messages": 1_000_000, "queue.buffering.max.kbytes": 1_048_576}
    per_txn = None
    wait_each = setting == "plain/wait1"
    if setting == "plain":
        conf["enable.idempotence"] = False
    elif wait_each:
        conf["enable.idempotence"] = False
        count = count // 100
    elif setting == "idempotent":
        conf["enable.idempotence"] = True
    else:
        per_txn = int(setting.split("/")[1])
        conf["transactional.id"] = f"bench-{topic}"
        # Fewer records for the round-trip-bound settings: a tenth for txn/10, a hundredth for txn/1.
        count = count * per_txn // 100 if per_txn < 100 else count
    p = Producer(conf)
    errors = []

    def report(err, _msg):
        if err:
            errors.append(err)

    # Warm-up outside the clock: connection, metadata, producer id (and a first transaction).
    if per_txn:
        p.init_transactions(30)
        p.begin_transaction()
    p.produce(topic, value=value, on_delivery=report)
    if per_txn:
        p.commit_transaction(60)
    p.flush(30)
    start = time.perf_counter()
    sent = 0
    while sent < count:
        n = 1 if wait_each else (per_txn or count)
        if per_txn:
            p.begin_transaction()
        produce_all(p, topic, value, min(n, count - sent), report)
        sent += min(n, count - sent)
        if per_txn:
            p.commit_transaction(60)
        if wait_each:
            p.flush(30)
    left = p.flush(120)
    elapsed = time.perf_counter() - start
    assert left == 0 and not errors, (left, errors[:3])
    return count, count / elapsed


def main():
    from confluent_kafka.admin import AdminClient, NewTopic

    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--size", type=int, default=512)
    ap.add_argument("--count", type=int, default=200_000)
    args = ap.parse_args()
    settings = ["plain", "idempotent", "txn/100", "txn/10", "txn/1", "plain/wait1"]

    results = {s: [] for s in settings}
    counts = {}
    with LocalBroker(["--log-flush-mode", "sync"], prefix="sluice-txn-bench-") as broker:
        bootstrap = broker.bootstrap
        value = os.urandom(args.size)
        admin_client = AdminClient({"bootstrap.servers": bootstrap})
        n = 0
        for r in range(args.rounds):
            order = settings if r % 2 == 0 else settings[::-1]
            for s in order:
                n += 1
                topic = f"txn-bench-{n}"
                admin_client.create_topics([NewTopic(topic, 1, 1)])[topic].result(15)
                count, rate = run(bootstrap, topic, s, args.count, value)
                admin_client.delete_topics([topic])[topic].result(15)
                results[s].append(rate)
                counts[s] = count
                print(f"round {r + 1} {s:10s} {count:7d} records {rate:10,.0f} msg/s", flush=True)
    med = {s: statistics.median(v) for s, v in results.items()}
    for s in settings:
        print(f"{s:10s} median {med[s]:10,.0f} msg/s  min {min(results[s]):10,.0f}  max {max(results[s]):10,.0f}"
              f"  = {med[s] / med['plain']:.3f} of plain")
    import confluent_kafka
    report = {
        "date": datetime.date.today().isoformat(),
        "commit": subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True).stdout.strip(),
        "command": "python3 bench/txn_throughput.py " + " ".join(sys.argv[1:]),
        "client": f"confluent-kafka {confluent_kafka.version()[0]} (librdkafka {confluent_kafka.libversion()[0]})",
        "settings": vars(args),
        "records_per_round": counts,
        "msg_per_s": results,
        "median_msg_per_s": med,
        "ratio_to_plain": {s: med[s] / med["plain"] for s in settings},
    }
    out = ROOT / "bench" / "results" / f"{report['date']}-txn-throughput.json"
    out.write_text(json.dumps(report, indent=2) + "\n")
    print(f"wrote {out.relative_to(ROOT)}")


if __name__ == "__main__":
    main()
