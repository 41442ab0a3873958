#!/usr/bin/env python3
"""What does the authorizer cost? Produce throughput of 1 KiB records (acks=all, `sluice bench
produce`, over SASL_PLAINTEXT as a user who is not a super user) into two Sluice brokers in
one run: one without an authorizer, one with `--authorizer acl` and 1,000 ACLs loaded (997
for other principals and topics, literal and prefixed, plus the three the benchmark's user
needs: Write, Describe and Create on the prefix `acl-bench`). Batches of `--batch-bytes`
(default 16 KiB, so ~15 records per request: the authorizer is asked once per request and
topic, and large batches would hide it). Rounds alternate A-B-B-A, each after `sync` and
dropping the page cache (when root) so one round's write-back does not land in the next;
each round's topic is deleted after it. Reports throughput and the broker's CPU time per
record (utime+stime from /proc), their medians and the ratios with/without (issue 15's
target: the authorizer costs < 3%). Writes bench/results/<date>-acl-overhead.json.

    tests/.venv/bin/python bench/acl_overhead.py [--rounds 6] [--seconds 8] [--batch-bytes 16384]

Needs tests/.venv (scripts/python-env: confluent-kafka).
"""

import argparse
import datetime
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

from confluent_kafka.admin import (AclBinding, AclOperation, AclPermissionType, AdminClient,
                                   ResourcePatternType, ResourceType)

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "bench"))
from local_broker import LocalBroker  # noqa: E402

SLUICE = ROOT / "target" / "release" / "sluice"
USER, PASSWORD = "bench", "bench-password-123"
ACLS = 1000


def broker(authorizer):
    """A broker with a PLAINTEXT listener (User:ANONYMOUS, a super user when the authorizer
    is on: loads the ACLs) and a SASL_PLAINTEXT one for the benchmark's user."""
    extra = ["--authorizer", "acl", "--super-users", "User:ANONYMOUS"] if authorizer else []
    return LocalBroker(extra, prefix="sluice-acl-bench-",
                       listeners=("PLAINTEXT", "SASL_PLAINTEXT"))


def load_acls(bootstrap):
    """1,000 ACLs: the benchmark user's three, and 997 that match nothing it does."""
    T, LIT, PRE = ResourceType.TOPIC, ResourcePatternType.LITERAL, ResourcePatternType.PREFIXED
    ALLOW, Op = AclPermissionType.ALLOW, AclOperation
    bindings = [AclBinding(T, "acl-bench", PRE, f"User:{USER}", "*", op, ALLOW)
                for op in (Op.WRITE, Op.DESCRIBE, Op.CREATE)]
    for i in range(ACLS - len(bindings)):
        pattern = PRE if i % 4 == 0 else LIT
        op = (Op.READ, Op.WRITE, Op.DESCRIBE)[i % 3]
        bindings.append(AclBinding(T, f"other-{i}", pattern, f"User:u{i % 50}", "*", op, ALLOW))
    admin = AdminClient({"bootstrap.servers": bootstrap})
    for future in admin.create_acls(bindings, request_timeout=60).values():
        future.result()
    return len(bindings)


def cpu_seconds(pid):
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def settle():
    subprocess.run(["sync"], check=False)
    try:
        Path("/proc/sys/vm/drop_caches").write_text("3\n")
    except OSError:
        pass


def produce(broker, topic, seconds, batch_bytes):
    """(records/s, broker CPU µs per record)."""
    settle()
    cpu = cpu_seconds(broker.proc.pid)
    r = subprocess.run([str(SLUICE), "bench", "produce", "--brokers",
                        broker.address["SASL_PLAINTEXT"],
                        "--security-protocol", "SASL_PLAINTEXT", "--sasl-mechanism", "SCRAM-SHA-512",
                        "--sasl-username", USER, "--topic", topic, "--size", "1024",
                        "--duration", str(seconds), "--acks", "all",
                        "--batch-bytes", str(batch_bytes)],
                       capture_output=True, text=True, timeout=120 + seconds,
                       env={**os.environ, "SLUICE_SASL_PASSWORD": PASSWORD})
    if r.returncode != 0 or "errors" in r.stdout:
        raise RuntimeError(r.stdout[-2000:] + r.stderr[-2000:])
    cpu = cpu_seconds(broker.proc.pid) - cpu
    line = [l for l in r.stdout.splitlines() if " msg/s" in l][-1]
    records = int(line.split(": ")[1].split(" records")[0])
    subprocess.run([str(SLUICE), "topic", "delete", topic, "-b", broker.bootstrap],
                   capture_output=True, timeout=60)
    return float(line.split(" = ")[1].split(" msg/s")[0]), cpu * 1e6 / max(records, 1)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=6)
    ap.add_argument("--seconds", type=float, default=8)
    ap.add_argument("--batch-bytes", type=int, default=16384)
    args = ap.parse_args()
    results = {"none": [], "acl": []}
    cpu = {"none": [], "acl": []}
    with broker(False) as off, broker(True) as on:
        for b in (off, on):
            b.create_user(USER, PASSWORD)
        loaded = load_acls(on.bootstrap)
        brokers = {"none": off, "acl": on}
        order = []
        for r in range(args.rounds):
            order += ["none", "acl"] if r % 2 == 0 else ["acl", "none"]
        for i, which in enumerate(order):
            rate, us = produce(brokers[which], f"acl-bench-{i}", args.seconds, args.batch_bytes)
            results[which].append(rate)
            cpu[which].append(us)
            print(f"round {i}: authorizer {which:5} {rate:12,.0f} msg/s, "
                  f"broker CPU {us:.2f} µs/record", flush=True)
    off, on = statistics.median(results["none"]), statistics.median(results["acl"])
    cpu_off, cpu_on = statistics.median(cpu["none"]), statistics.median(cpu["acl"])
    summary = {"acls_loaded": loaded, "none_median": off, "acl_median": on, "ratio": on / off,
               "cpu_us_per_record_none": cpu_off, "cpu_us_per_record_acl": cpu_on,
               "cpu_ratio": cpu_on / cpu_off}
    print(f"median without authorizer {off:,.0f} msg/s, with {loaded} ACLs {on:,.0f} msg/s, "
          f"ratio {on / off:.3f}; broker CPU per record {cpu_off:.2f} vs {cpu_on:.2f} µs, "
          f"ratio {cpu_on / cpu_off:.3f}")
    out = ROOT / "bench" / "results" / f"{datetime.date.today()}-acl-overhead.json"
    out.write_text(json.dumps({"args": vars(args), "rounds": results, "cpu_us_per_record": cpu,
                               "summary": summary}, indent=2))
    print("wrote", out)


if __name__ == "__main__":
    main()
