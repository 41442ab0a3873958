#!/usr/bin/env python3
"""What do TLS and SASL cost? Produce throughput of 1 KiB records into one Sluice broker over
PLAINTEXT and over SASL_SSL (SCRAM-SHA-512, TLS 1.3), side by side in one run, with Kafka's
own ProducerPerformance (Java client 4.3.1) and with confluent-kafka (librdkafka). Rounds
alternate A-B-B-A so that drift cancels; prints each round, the medians and the ratio
SASL_SSL / PLAINTEXT (issue 15's target: >= 0.7); writes bench/results/<date>-tls-overhead.json.

    tests/.venv/bin/python bench/tls_overhead.py [--rounds 4] [--count 300000]

Needs tests/.venv (scripts/python-env, for trustme and confluent-kafka) and Kafka's jars
(`sluice bench compare --install-only`).
"""

import argparse
import datetime
import json
import os
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

import trustme

ROOT = Path(__file__).resolve().parent.parent
SLUICE = ROOT / "target" / "release" / "sluice"
PASSWORD = "bench-password-123"


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def java_producer(libs, bootstrap, props, topic, count, size):
    """ProducerPerformance at full speed; returns records/s."""
    props_file = Path(tempfile.mktemp(suffix=".properties"))
    props_file.write_text("".join(f"{k}={v}\n" for k, v in props.items()))
    r = subprocess.run(["java", "-cp", f"{libs}/*", "org.apache.kafka.tools.ProducerPerformance",
                        "--topic", topic, "--num-records", str(count), "--record-size", str(size),
                        "--throughput", "-1", "--producer.config", str(props_file),
                        "--producer-props", f"bootstrap.servers={bootstrap}", "acks=all",
                        "linger.ms=5", "batch.size=262144"],
                       capture_output=True, text=True, timeout=600)
    props_file.unlink()
    last = [l for l in r.stdout.splitlines() if "records sent" in l][-1:]
    if r.returncode != 0 or not last:
        raise RuntimeError(r.stdout[-2000:] + r.stderr[-2000:])
    return float(last[0].split("records sent,")[1].split("records/sec")[0].strip())


def confluent_producer(conf, topic, count, size):
    from confluent_kafka import Producer
    p = Producer({**conf, "linger.ms": 5, "acks": "all", "queue.buffering.max.messages": 200000})
    value = b"x" * size
    failed = []
    started = time.monotonic()
    for _ in range(count):
        while True:
            try:
                p.produce(topic, value=value, on_delivery=lambda e, m: e and failed.append(e))
                break
            except BufferError:
                p.poll(0.001)
    assert p.flush(120) == 0 and not failed, failed[:3]
    return count / (time.monotonic() - started)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=4)
    ap.add_argument("--count", type=int, default=300_000)
    ap.add_argument("--size", type=int, default=1024)
    args = ap.parse_args()
    libs = subprocess.run([str(SLUICE), "bench", "compare", "--install-only"], capture_output=True,
                          text=True, check=True, timeout=900).stdout.strip().splitlines()[-1]
    work = Path(tempfile.mkdtemp(prefix="sluice-tls-bench-", dir=ROOT / "target"))
    ca = trustme.CA()
    server = ca.issue_cert("127.0.0.1")
    server.private_key_pem.write_to_path(str(work / "key.pem"))
    server.cert_chain_pems[0].write_to_path(str(work / "cert.pem"))
    ca.cert_pem.write_to_path(str(work / "ca.pem"))
    plain, secure, admin = free_port(), free_port(), free_port()
    proc = subprocess.Popen([str(SLUICE), "serve", "--listeners",
                             f"PLAINTEXT://127.0.0.1:{plain},SASL_SSL://127.0.0.1:{secure}",
                             "--admin-listen", f"127.0.0.1:{admin}", "--data-dir", str(work / "data"),
                             "--tls-cert-file", str(work / "cert.pem"), "--tls-key-file", str(work / "key.pem"),
                             "--log-level", "warn"])
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                urllib.request.urlopen(f"http://127.0.0.1:{admin}/health", timeout=1)
                break
            except OSError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.05)
        subprocess.run([str(SLUICE), "user", "create", "bench", "-b", f"127.0.0.1:{plain}"],
                       input=PASSWORD + "\n", text=True, check=True, capture_output=True)
        sasl = {"security.protocol": "SASL_SSL", "sasl.mechanism": "SCRAM-SHA-512"}
        java = {
            "PLAINTEXT": (f"127.0.0.1:{plain}", {}),
            "SASL_SSL": (f"127.0.0.1:{secure}", {
                **sasl, "ssl.truststore.type": "PEM", "ssl.truststore.location": str(work / "ca.pem"),
                "sasl.jaas.config": "org.apache.kafka.common.security.scram.ScramLoginModule required "
                                    f'username="bench" password="{PASSWORD}";'}),
        }
        librdkafka = {
            "PLAINTEXT": {"bootstrap.servers": f"127.0.0.1:{plain}"},
            "SASL_SSL": {"bootstrap.servers": f"127.0.0.1:{secure}", **sasl,
                         "sasl.username": "bench", "sasl.password": PASSWORD,
                         "ssl.ca.location": str(work / "ca.pem")},
        }
        results = {"java": {"PLAINTEXT": [], "SASL_SSL": []}, "librdkafka": {"PLAINTEXT": [], "SASL_SSL": []}}
        order = []
        for r in range(args.rounds):
            order += ["PLAINTEXT", "SASL_SSL"] if r % 2 == 0 else ["SASL_SSL", "PLAINTEXT"]
        for i, listener in enumerate(order):
            bootstrap, props = java[listener]
            rate = java_producer(libs, bootstrap, props, f"java-{i}", args.count, args.size)
            results["java"][listener].append(rate)
            print(f"java       {listener:10} {rate:12,.0f} records/s", flush=True)
            rate = confluent_producer(librdkafka[listener], f"rdk-{i}", args.count, args.size)
            results["librdkafka"][listener].append(rate)
            print(f"librdkafka {listener:10} {rate:12,.0f} records/s", flush=True)
        summary = {}
        for client, by in results.items():
            p, s = statistics.median(by["PLAINTEXT"]), statistics.median(by["SASL_SSL"])
            summary[client] = {"plaintext": p, "sasl_ssl": s, "ratio": s / p}
            print(f"{client}: median PLAINTEXT {p:,.0f}/s, SASL_SSL {s:,.0f}/s, ratio {s / p:.2f}")
        out = ROOT / "bench" / "results" / f"{datetime.date.today()}-tls-overhead.json"
        out.write_text(json.dumps({"args": vars(args), "rounds": results, "summary": summary}, indent=2))
        print("wrote", out)
    finally:
        proc.terminate()
        proc.wait(20)
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
