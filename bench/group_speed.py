#!/usr/bin/env python3
"""Consumer-group figures (issue 4), with confluent-kafka members in separate processes:

1. failover: 3 members on a 6-partition topic; SIGKILL one; time until the group is Stable
   again with 2 members (DescribeGroups polled every 5 ms). Expected: the session timeout plus
   a little. Reported as the time beyond the session timeout.
2. consume throughput: a 3-member group versus a single consumer reading the same records.

    python3 bench/group_speed.py [--rounds 3] [--records 300000] [--size 1024] [--session-ms 6000]
        [--heartbeat-ms 500]

Needs tests/.venv (scripts/python-env). Writes bench/results/<date>-group-speed.json.
"""

import argparse
import datetime
import json
import os
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

MEMBER = r'''
import sys, time, signal
from confluent_kafka import Consumer
bootstrap, group, topic, out, session, heartbeat = sys.argv[1:7]
stop = False
def handler(*_):
    global stop
    stop = True
signal.signal(signal.SIGTERM, handler)
c = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "auto.offset.reset": "earliest",
              "enable.auto.commit": True, "session.timeout.ms": int(session), "heartbeat.interval.ms": int(heartbeat),
              "fetch.wait.max.ms": 100})
c.subscribe([topic])
n = 0
last = 0
while not stop:
    msgs = c.consume(num_messages=10000, timeout=0.2)
    n += sum(1 for m in msgs if not m.error())
    now = time.time()
    if now - last > 0.05:
        open(out, "w").write(str(n)); last = now
open(out, "w").write(str(n))
c.close()
'''


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def main():
    from confluent_kafka import Producer
    from confluent_kafka.admin import AdminClient, NewTopic

    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--records", type=int, default=300_000)
    ap.add_argument("--size", type=int, default=1024)
    ap.add_argument("--session-ms", type=int, default=6000)
    ap.add_argument("--heartbeat-ms", type=int, default=500)
    args = ap.parse_args()
    work = Path(tempfile.mkdtemp(prefix="sluice-groups-", dir=ROOT / "target"))
    port, admin_port = free_port(), free_port()
    broker = subprocess.Popen([str(ROOT / "target" / "release" / "sluice"), "serve", "--listen", f"127.0.0.1:{port}",
                               "--admin-listen", f"127.0.0.1:{admin_port}", "--data-dir", str(work / "data"),
                               "--log-level", "warn", "--group-initial-rebalance-delay-ms", "500"])
    bootstrap = f"127.0.0.1:{port}"
    member_py = work / "member.py"
    member_py.write_text(MEMBER)
    procs = []

    def start_member(group, topic, name):
        out = work / f"{name}.count"
        p = subprocess.Popen([sys.executable, str(member_py), bootstrap, group, topic, str(out), str(args.session_ms), str(args.heartbeat_ms)])
        procs.append(p)
        return p, out

    def count(out):
        try:
            return int(out.read_text() or 0)
        except (FileNotFoundError, ValueError):
            return 0

    def group_state(group):
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{admin_port}/api/groups/{group}", timeout=2) as r:
                return json.load(r)
        except urllib.error.HTTPError:
            return {"state": "Dead", "members": [], "generation": -1}  # not created yet

    failover, three, one = [], [], []
    try:
        deadline = time.time() + 30
        while True:
            try:
                urllib.request.urlopen(f"http://127.0.0.1:{admin_port}/health", timeout=1)
                break
            except OSError:
                if time.time() > deadline:
                    raise
                time.sleep(0.05)
        admin = AdminClient({"bootstrap.servers": bootstrap})
        value = os.urandom(args.size)
        for r in range(args.rounds):
            topic = f"speed-{r}"
            admin.create_topics([NewTopic(topic, 6, 1)])[topic].result(15)
            p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5})
            for _ in range(args.records):
                while True:
                    try:
                        p.produce(topic, value=value)
                        break
                    except BufferError:
                        p.poll(0.01)
            assert p.flush(60) == 0

            # Throughput: one consumer, then three members, over the same records.
            for label, n_members, sink in [("one", 1, one), ("three", 3, three)]:
                group = f"tp-{label}-{r}"
                start = time.time()
                members = [start_member(group, topic, f"{group}-{i}") for i in range(n_members)]
                while sum(count(o) for _, o in members) < args.records:
                    if time.time() - start > 300:
                        raise RuntimeError("consumers too slow")
                    time.sleep(0.01)
                elapsed = time.time() - start
                sink.append(args.records / elapsed)
                for proc, _ in members:
                    proc.send_signal(signal.SIGTERM)
                for proc, _ in members:
                    proc.wait(30)
                print(f"round {r + 1}: {label} consumer(s): {args.records / elapsed:,.0f} msg/s (incl. joining)", flush=True)

            # Failover.
            group = f"fo-{r}"
            members = [start_member(group, topic, f"{group}-{i}") for i in range(3)]
            deadline = time.time() + 60
            while True:
                g = group_state(group)
                if g["state"] == "Stable" and len(g["members"]) == 3:
                    generation = g["generation"]
                    break
                if time.time() > deadline:
                    raise RuntimeError("group never stabilised")
                time.sleep(0.05)
            victim, _ = members[1]
            killed = time.time()
            victim.send_signal(signal.SIGKILL)
            while True:
                g = group_state(group)
                if g["state"] == "Stable" and len(g["members"]) == 2 and g["generation"] > generation:
                    stable = time.time()
                    break
                if time.time() - killed > 60:
                    raise RuntimeError("group never recovered")
                time.sleep(0.005)
            beyond = (stable - killed) * 1000 - args.session_ms
            failover.append(beyond)
            print(f"round {r + 1}: SIGKILL -> Stable in {(stable - killed) * 1000:.0f} ms "
                  f"= session timeout + {beyond:.0f} ms", flush=True)
            for proc, _ in members:
                if proc.poll() is None:
                    proc.send_signal(signal.SIGTERM)
                    proc.wait(30)
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
        broker.terminate()
        broker.wait(20)
        shutil.rmtree(work, ignore_errors=True)

    summary = {
        "failover_beyond_session_ms": {"median": statistics.median(failover), "min": min(failover), "max": max(failover)},
        "consume_one_msg_per_s": {"median": statistics.median(one), "min": min(one), "max": max(one)},
        "consume_three_msg_per_s": {"median": statistics.median(three), "min": min(three), "max": max(three)},
        "three_over_one": statistics.median(t / o for t, o in zip(three, one)),
    }
    print(json.dumps(summary, indent=2))
    report = {
        "date": datetime.date.today().isoformat(),
        "commit": subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True).stdout.strip(),
        "machine": {"nproc": os.cpu_count()},
        "command": "python3 bench/group_speed.py " + " ".join(sys.argv[1:]),
        "settings": vars(args),
        "failover_beyond_session_ms": failover,
        "consume_one_msg_per_s": one,
        "consume_three_msg_per_s": three,
        "summary": summary,
    }
    out = ROOT / "bench" / "results" / f"{report['date']}-group-speed-hb{args.heartbeat_ms}.json"
    out.write_text(json.dumps(report, indent=2) + "\n")
    print(f"wrote {out.relative_to(ROOT)}")


if __name__ == "__main__":
    main()
