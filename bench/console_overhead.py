#!/usr/bin/env python3
"""Does watching the broker slow it down? Produce throughput of confluent-kafka into one Sluice
broker, in one run, in three conditions taken in turn (each pair of rounds in A-B-B-A order so
that drift cancels):

  plain     nobody watching;
  api       the console's own requests without a browser: /api/overview and
            /api/overview/history every 2 s (what the open overview page asks), /metrics every 1 s;
  browser   the console's overview page open in headless Chromium (it polls every 2 s and draws
            its charts) plus /metrics every 1 s. Chromium runs on the same 2 cores, so this
            also charges the browser's own CPU to the broker.

Prints each round, the medians and the ratios to `plain`; writes
bench/results/<date>-console-overhead.json.

    python3 bench/console_overhead.py [--rounds 7] [--count 2000000] [--size 1024]

Needs tests/.venv (scripts/python-env) and scripts/console-env (Chromium, playwright-core).
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


WATCH = r"""
import json, sys, threading, time, urllib.request
base, schedule = sys.argv[1], json.loads(sys.argv[2])
stop = threading.Event()
threading.Thread(target=lambda: (sys.stdin.read(), stop.set()), daemon=True).start()
calls = failures = 0
due = {path: time.monotonic() for path, _ in schedule}
while not stop.is_set():
    now = time.monotonic()
    for path, every in schedule:
        if now >= due[path]:
            due[path] = now + every
            try:
                with urllib.request.urlopen(base + path, timeout=5) as r:
                    r.read()
                calls += 1
            except OSError:
                failures += 1
    stop.wait(0.05)
print(calls, failures, flush=True)
"""


class Watcher:
    """Polls admin URLs on a schedule from a separate program until stopped, and counts the
    calls. Not a thread (it would compete with the producing client for Python's GIL) and not
    a fork of this process (copy-on-write faults in the producer measurably slowed it)."""

    def __init__(self, base, schedule):
        self.args = [sys.executable, "-c", WATCH, base, json.dumps(schedule)]
        self.calls = self.failures = 0

    def __enter__(self):
        self.proc = subprocess.Popen(self.args, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        return self

    def __exit__(self, *exc):
        out, _ = self.proc.communicate("", timeout=20)
        self.calls, self.failures = (int(x) for x in out.split())


def produce(bootstrap, topic, count, value):
    from confluent_kafka import Producer

    p = Producer({"bootstrap.servers": bootstrap, "acks": "1", "linger.ms": 5,
                  "queue.buffering.max.messages": 1_000_000, "queue.buffering.max.kbytes": 1_048_576})
    errors = []
    start = time.perf_counter()
    produce_all(p, topic, value, count, lambda e, _m: e and errors.append(e))
    left = p.flush(120)
    elapsed = time.perf_counter() - start
    assert left == 0 and not errors, (left, errors[:3])
    return count / elapsed


def main():
    from confluent_kafka.admin import AdminClient, NewTopic

    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=7, help="rounds per condition")
    ap.add_argument("--count", type=int, default=2_000_000)
    ap.add_argument("--size", type=int, default=1024)
    args = ap.parse_args()

    results = {"plain": [], "api": [], "browser": []}
    calls = {"api": 0, "browser": 0}
    with LocalBroker(prefix="sluice-console-bench-") as broker:
        base = broker.admin_url
        bootstrap = broker.bootstrap
        value = os.urandom(args.size)
        admin_client = AdminClient({"bootstrap.servers": bootstrap})
        n = 0

        def run(condition):
            nonlocal n
            n += 1
            topic = f"overhead-{n}"
            admin_client.create_topics([NewTopic(topic, 1, 1)])[topic].result(15)
            if condition == "plain":
                rate = produce(bootstrap, topic, args.count, value)
            elif condition == "api":
                schedule = [("/api/overview", 2.0), ("/api/overview/history", 2.0), ("/metrics", 1.0)]
                with Watcher(base, schedule) as w:
                    rate = produce(bootstrap, topic, args.count, value)
                assert w.failures == 0
                calls["api"] += w.calls
            else:
                page = subprocess.Popen(["node", str(ROOT / "tests" / "console" / "open_console.mjs"), base],
                                        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
                try:
                    assert page.stdout.readline().strip() == "ready", "the console did not open"
                    time.sleep(2)  # let it settle into its polling
                    with Watcher(base, [("/metrics", 1.0)]) as w:
                        rate = produce(bootstrap, topic, args.count, value)
                    assert w.failures == 0
                    calls["browser"] += w.calls
                finally:
                    page.terminate()
                    page.wait(20)
            # Drop the data so that the disk and page cache start each round alike.
            admin_client.delete_topics([topic])[topic].result(15)
            results[condition].append(rate)
            print(f"{condition:8s} {rate:,.0f} msg/s", flush=True)

        run("plain")  # warm-up, not counted
        results["plain"].clear()
        for r in range(args.rounds):
            order = ["plain", "api", "browser"]
            for c in (order if r % 2 == 0 else order[::-1]):
                run(c)

    med = {k: statistics.median(v) for k, v in results.items()}
    for k in ("api", "browser"):
        print(f"{k}: median {med[k]:,.0f} msg/s = {med[k] / med['plain']:.3f} of plain ({med['plain']:,.0f})")
    import confluent_kafka
    report = {
        "date": datetime.date.today().isoformat(),
        "commit": subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True).stdout.strip(),
        "command": "python3 bench/console_overhead.py " + " ".join(sys.argv[1:]),
        "client": f"confluent-kafka {confluent_kafka.version()[0]} (librdkafka {confluent_kafka.libversion()[0]})",
        "settings": vars(args),
        "msg_per_s": results,
        "median_msg_per_s": med,
        "ratio_to_plain": {k: med[k] / med["plain"] for k in ("api", "browser")},
        "admin_calls_during_runs": calls,
    }
    out = ROOT / "bench" / "results" / f"{report['date']}-console-overhead.json"
    out.write_text(json.dumps(report, indent=2) + "\n")
    print(f"wrote {out.relative_to(ROOT)}")


if __name__ == "__main__":
    main()
