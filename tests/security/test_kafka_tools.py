"""Kafka's own kafka-configs.sh (4.3.1, its jars from Maven Central via `sluice bench compare
--install-only`) manages SCRAM users on Sluice: --alter --add-config 'SCRAM-SHA-256=[...]',
--describe, --delete-config."""

import subprocess

from cluster.kafka_cluster import kafka_libs
from security.test_sasl import confluent_conf, confluent_roundtrip


def configs(libs, bootstrap, *args):
    r = subprocess.run(["java", "-cp", f"{libs}/*", "kafka.admin.ConfigCommand",
                        "--bootstrap-server", bootstrap, *args],
                       capture_output=True, text=True, timeout=120)
    return r


def test_kafka_configs_sh_manages_scram_users(start_secure):
    libs = kafka_libs()
    b = start_secure()
    r = configs(libs, b.bootstrap, "--alter", "--add-config",
                "SCRAM-SHA-256=[iterations=8192,password=erin-secret],SCRAM-SHA-512=[password=erin-secret]",
                "--entity-type", "users", "--entity-name", "erin")
    assert r.returncode == 0, r.stdout + r.stderr
    r = configs(libs, b.bootstrap, "--describe", "--entity-type", "users", "--entity-name", "erin")
    assert r.returncode == 0, r.stdout + r.stderr
    assert "SCRAM-SHA-256=iterations=8192" in r.stdout and "SCRAM-SHA-512=iterations=4096" in r.stdout, r.stdout
    for mechanism in ("SCRAM-SHA-256", "SCRAM-SHA-512"):
        confluent_roundtrip(confluent_conf(b, "SASL_PLAINTEXT", mechanism, "erin", "erin-secret"),
                            "erin-" + mechanism.lower(), n=2)
    r = configs(libs, b.bootstrap, "--alter", "--delete-config", "SCRAM-SHA-512",
                "--entity-type", "users", "--entity-name", "erin")
    assert r.returncode == 0, r.stdout + r.stderr
    r = configs(libs, b.bootstrap, "--describe", "--entity-type", "users", "--entity-name", "erin")
    assert "SCRAM-SHA-512" not in r.stdout and "SCRAM-SHA-256=iterations=8192" in r.stdout, r.stdout
    # Too few iterations: Kafka's error, shown by the tool.
    r = configs(libs, b.bootstrap, "--alter", "--add-config", "SCRAM-SHA-256=[iterations=100,password=x]",
                "--entity-type", "users", "--entity-name", "frank")
    assert r.returncode != 0 or "UnacceptableCredential" in r.stdout + r.stderr
    out = (r.stdout + r.stderr).lower()
    assert "unacceptable" in out or "iterations" in out, out
