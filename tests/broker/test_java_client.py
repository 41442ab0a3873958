"""The Java Kafka client (kafka-clients from Maven Central) with its default settings."""

import subprocess

from conftest import ROOT


def test_java_client_produces_and_consumes(broker):
    subprocess.run([str(ROOT / "scripts" / "java-env")], check=True, timeout=600)
    java = ROOT / "tests" / "java"
    r = subprocess.run(["java", "-cp", f"{java / 'lib'}/*:{java}", "ClientSmoke", broker.bootstrap, "java-smoke", "20000"],
                       capture_output=True, text=True, timeout=180)
    assert r.returncode == 0, r.stdout + r.stderr
    assert r.stdout.strip() == "OK 20000"


def test_an_idempotent_java_producer_the_broker_expired_keeps_producing(start_broker):
    # Retention (and with it the producer expiry sweep) every 300 ms; the records are stamped
    # 25 h ago, past producer.id.expiration.ms (24 h), so every sweep forgets the producer.
    # Before, its next batch was answered UNKNOWN_PRODUCER_ID and this client retried it
    # until its delivery timeout (15 s here).
    broker = start_broker(["--log-retention-check-interval-ms", "300"])
    subprocess.run([str(ROOT / "scripts" / "java-env")], check=True, timeout=600)
    java = ROOT / "tests" / "java"
    r = subprocess.run(["java", "-cp", f"{java / 'lib'}/*:{java}", "ExpiredProducerSmoke", broker.bootstrap,
                        "java-expired-producer", "3", "1500"],
                       capture_output=True, text=True, timeout=180)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    assert r.stdout.strip() == "OK 10"  # every record once, in order (end offset 10)
