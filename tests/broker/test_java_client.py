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
