#!/usr/bin/env python3
"""Sluice beside Apache Kafka over SASL_SSL (SCRAM-SHA-512, TLS 1.3), in one run, one broker at
a time, rounds interleaved S-K-K-S (issue 15's speed goals):

  produce   1 KiB records, acks=all, full speed: `sluice bench produce` (the same client for
            both brokers) and Kafka's own ProducerPerformance (Java client 4.3.1)
  e2e       end-to-end latency at 10,000 msg/s of 128 B, acks=all: `sluice bench e2e`
            over SASL_SSL; for Sluice also over PLAINTEXT in the same round

Both brokers fsync every 100 ms (Sluice flush.mode=interval, Kafka log.flush.interval.ms=100),
as `sluice bench compare --durability interval`. Kafka: single KRaft node, 1 GiB heap, a
SASL_SSL client listener with a PEM keystore, SCRAM credentials made by `kafka-storage format
--add-scram`; each broker gets 5 s of warm-up load first. Writes
bench/results/<date>-tls-compare.json.

    tests/.venv/bin/python bench/tls_compare.py [--rounds 2] [--count 300000] [--seconds 8]

Needs tests/.venv (scripts/python-env: trustme), Kafka's jars (`sluice bench compare
--install-only`) and a JDK.
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
from pathlib import Path

import trustme

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "bench"))
from local_broker import LocalBroker  # noqa: E402
from tls_overhead import free_port, java_producer  # noqa: E402

SLUICE = ROOT / "target" / "release" / "sluice"
USER, PASSWORD = "bench", "bench-password-123"


def wait_port(port, seconds):
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        try:
            socket.create_connection(("127.0.0.1", port), 1).close()
            return
        except OSError:
            time.sleep(0.2)
    raise RuntimeError(f"nothing listens on {port} after {seconds} s")


class Certs:
    def __init__(self, work):
        ca = trustme.CA()
        server = ca.issue_cert("127.0.0.1")
        self.key, self.cert, self.ca = work / "key.pem", work / "cert.pem", work / "ca.pem"
        self.keystore = work / "keystore.pem"
        server.private_key_pem.write_to_path(str(self.key))
        server.cert_chain_pems[0].write_to_path(str(self.cert))
        ca.cert_pem.write_to_path(str(self.ca))
        # Kafka's PEM keystore takes a PKCS#8 key only (trustme writes EC keys as SEC1).
        from cryptography.hazmat.primitives import serialization
        key = serialization.load_pem_private_key(server.private_key_pem.bytes(), None)
        pkcs8 = key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                  serialization.NoEncryption())
        self.keystore.write_bytes(pkcs8 + server.cert_chain_pems[0].bytes())


class Sluice(LocalBroker):
    name = "sluice"

    def __init__(self, work, certs):
        super().__init__(["--tls-cert-file", str(certs.cert), "--tls-key-file", str(certs.key),
                          "--log-flush-mode", "interval", "--log-flush-interval-ms", "100"],
                         prefix="sluice-tls-compare-", listeners=("PLAINTEXT", "SASL_SSL"))

    def __enter__(self):
        super().__enter__()
        self.plaintext, self.sasl_ssl = self.bootstrap, self.address["SASL_SSL"]
        self.create_user(USER, PASSWORD)
        return self


class Kafka:
    name = "kafka"

    def __init__(self, work, certs, libs):
        self.work, self.certs, self.libs = work / "kafka", certs, libs

    def __enter__(self):
        self.work.mkdir(parents=True)
        secure, plain, controller = free_port(), free_port(), free_port()
        self.sasl_ssl, self.plaintext = f"127.0.0.1:{secure}", None
        props = self.work / "server.properties"
        props.write_text(
            "process.roles=broker,controller\nnode.id=1\n"
            f"controller.quorum.voters=1@127.0.0.1:{controller}\n"
            f"listeners=SASL_SSL://127.0.0.1:{secure},PLAINTEXT://127.0.0.1:{plain},"
            f"CONTROLLER://127.0.0.1:{controller}\n"
            f"advertised.listeners=SASL_SSL://127.0.0.1:{secure},PLAINTEXT://127.0.0.1:{plain}\n"
            "controller.listener.names=CONTROLLER\ninter.broker.listener.name=PLAINTEXT\n"
            "listener.security.protocol.map=SASL_SSL:SASL_SSL,PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT\n"
            "sasl.enabled.mechanisms=SCRAM-SHA-512\n"
            "listener.name.sasl_ssl.scram-sha-512.sasl.jaas.config="
            "org.apache.kafka.common.security.scram.ScramLoginModule required;\n"
            f"ssl.keystore.type=PEM\nssl.keystore.location={self.certs.keystore}\n"
            "ssl.client.auth=none\n"
            f"log.dirs={self.work / 'data'}\nnum.partitions=1\noffsets.topic.replication.factor=1\n"
            "transaction.state.log.replication.factor=1\ntransaction.state.log.min.isr=1\n"
            "group.initial.rebalance.delay.ms=0\n"
            "log.flush.interval.ms=100\nlog.flush.scheduler.interval.ms=100\n")
        cp = f"{self.libs}/*"
        log = open(self.work / "kafka.log", "w")
        subprocess.run(["java", "-cp", cp, "kafka.tools.StorageTool", "format", "-t",
                        "c2x1aWNlYmVuY2hrYWZrYQ", "-c", str(props),
                        "--add-scram", f"SCRAM-SHA-512=[name={USER},password={PASSWORD}]"],
                       stdout=log, stderr=log, check=True)
        self.proc = subprocess.Popen(["java", "-Xms1g", "-Xmx1g", "-XX:+UseG1GC", "-cp", cp,
                                      "kafka.Kafka", str(props)],
                                     stdout=subprocess.DEVNULL, stderr=log)
        try:
            wait_port(secure, 90)
            time.sleep(3)
        except RuntimeError:
            tail = (self.work / "kafka.log").read_text()[-3000:]
            self.__exit__()
            raise RuntimeError("Kafka did not start: " + tail)
        return self

    def __exit__(self, *exc):
        self.proc.terminate()
        try:
            self.proc.wait(30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
        shutil.rmtree(self.work, ignore_errors=True)


def bench(brokers, certs, secure, *args):
    """`sluice bench ARGS` against `brokers`, over SASL_SSL when `secure`; its stdout."""
    flags = ["--brokers", brokers]
    if secure:
        flags += ["--security-protocol", "SASL_SSL", "--tls-ca-file", str(certs.ca),
                  "--sasl-mechanism", "SCRAM-SHA-512", "--sasl-username", USER]
    r = subprocess.run([str(SLUICE), "bench", *args, *flags], capture_output=True, text=True,
                       timeout=300, env={**os.environ, "SLUICE_SASL_PASSWORD": PASSWORD})
    if r.returncode != 0:
        raise RuntimeError(r.stdout[-2000:] + r.stderr[-2000:])
    return r.stdout


def produce_rate(stdout):
    line = [l for l in stdout.splitlines() if " msg/s" in l][-1]
    return float(line.split(" = ")[1].split(" msg/s")[0])


def e2e(brokers, certs, secure, topic, seconds, out):
    bench(brokers, certs, secure, "e2e", "--topic", topic, "--rate", "10000", "--size", "128",
          "--duration", str(seconds), "--acks", "all", "--no-floor", "--quiet", "--json", str(out))
    run = json.loads(out.read_text())["series"][0]["runs"][0]
    if run["lost"] or run["duplicated"] or run["failed"]:
        raise RuntimeError(f"e2e lost/duplicated/failed records: {run}")
    lat = run["latency"]
    return {"p50_ms": lat["p50_us"] / 1000, "p99_ms": lat["p99_us"] / 1000,
            "avg_ms": lat["avg_us"] / 1000, "send_rate": run["send_rate_per_s"]}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=2, help="S-K then K-S pairs count as 2")
    ap.add_argument("--count", type=int, default=300_000, help="records per Java run")
    ap.add_argument("--seconds", type=float, default=8, help="per sluice bench run")
    args = ap.parse_args()
    libs = subprocess.run([str(SLUICE), "bench", "compare", "--install-only"], capture_output=True,
                          text=True, check=True, timeout=900).stdout.strip().splitlines()[-1]
    work = Path(tempfile.mkdtemp(prefix="sluice-tls-compare-", dir=ROOT / "target"))
    certs = Certs(work)
    java_props = {
        "security.protocol": "SASL_SSL", "sasl.mechanism": "SCRAM-SHA-512",
        "ssl.truststore.type": "PEM", "ssl.truststore.location": str(certs.ca),
        "sasl.jaas.config": "org.apache.kafka.common.security.scram.ScramLoginModule required "
                            f'username="{USER}" password="{PASSWORD}";'}
    order = []
    for r in range(args.rounds):
        order += ["sluice", "kafka"] if r % 2 == 0 else ["kafka", "sluice"]
    rounds = []
    try:
        for i, which in enumerate(order):
            broker = Sluice(work, certs) if which == "sluice" else Kafka(work, certs, libs)
            with broker as b:
                bench(b.sasl_ssl, certs, True, "produce", "--topic", "warmup", "--size", "1024",
                      "--duration", "5", "--acks", "all")
                row = {"broker": which, "round": i}
                row["sluice_bench_produce"] = produce_rate(bench(
                    b.sasl_ssl, certs, True, "produce", "--topic", f"max-{i}", "--size", "1024",
                    "--duration", str(args.seconds), "--acks", "all"))
                row["java_producer_performance"] = java_producer(
                    libs, b.sasl_ssl, java_props, f"java-{i}", args.count, 1024)
                row["e2e_sasl_ssl"] = e2e(b.sasl_ssl, certs, True, f"e2e-tls-{i}", 10,
                                          work / "e2e.json")
                if b.plaintext:
                    row["e2e_plaintext"] = e2e(b.plaintext, certs, False, f"e2e-plain-{i}", 10,
                                               work / "e2e.json")
            rounds.append(row)
            print(json.dumps(row), flush=True)
    finally:
        shutil.rmtree(work, ignore_errors=True)

    def med(which, *path):
        values = []
        for row in rounds:
            if row["broker"] != which:
                continue
            v = row
            for p in path:
                v = v.get(p) if isinstance(v, dict) else None
            if v is not None:
                values.append(v)
        return statistics.median(values) if values else None

    summary = {}
    for which in ("sluice", "kafka"):
        summary[which] = {
            "sluice_bench_produce": med(which, "sluice_bench_produce"),
            "java_producer_performance": med(which, "java_producer_performance"),
            "e2e_sasl_ssl_p99_ms": med(which, "e2e_sasl_ssl", "p99_ms"),
            "e2e_sasl_ssl_p50_ms": med(which, "e2e_sasl_ssl", "p50_ms"),
            "e2e_plaintext_p99_ms": med(which, "e2e_plaintext", "p99_ms"),
        }
    s, k = summary["sluice"], summary["kafka"]
    summary["ratios"] = {
        "sluice_bench_produce": s["sluice_bench_produce"] / k["sluice_bench_produce"],
        "java_producer_performance": s["java_producer_performance"] / k["java_producer_performance"],
        "e2e_p99_kafka_over_sluice": k["e2e_sasl_ssl_p99_ms"] / s["e2e_sasl_ssl_p99_ms"],
    }
    print(json.dumps(summary, indent=2))
    out = ROOT / "bench" / "results" / f"{datetime.date.today()}-tls-compare.json"
    out.write_text(json.dumps({"args": vars(args), "rounds": rounds, "summary": summary}, indent=2))
    print("wrote", out)


if __name__ == "__main__":
    main()
