"""SASL with the old clients of the compatibility matrix (tests/compat/python/setup):
confluent-kafka 2.0.2 (librdkafka 2.0.2, Debian 12's) and kafka-python 2.0.2."""

import subprocess
from pathlib import Path

import pytest

from compat import harness
from security.conftest import create_user
from security.test_sasl import PASSWORD

PYTHON = harness.COMPAT / "python"
HERE = Path(__file__).resolve().parent
OLD = {"confluent-kafka-2.0.2": ("venv-confluent-2.0.2", "confluent"),
       "kafka-python-2.0.2": ("venv-kafka-python-2.0.2", "kafka-python")}


@pytest.fixture(scope="module")
def old_clients():
    harness.setup("python")


@pytest.mark.parametrize("client", sorted(OLD))
@pytest.mark.parametrize("mechanism", ["SCRAM-SHA-256", "SCRAM-SHA-512", "PLAIN"])
def test_old_client_logs_in(old_clients, start_secure, client, mechanism):
    b = start_secure()
    create_user(b, "alice", PASSWORD)
    venv, kind = OLD[client]
    topic = f"old-{kind}-{mechanism.lower()}"
    r = subprocess.run([str(PYTHON / venv / "bin" / "python"), str(HERE / "old_client.py"), kind,
                        b.address("SASL_PLAINTEXT"), "SASL_PLAINTEXT", mechanism, "alice", PASSWORD,
                        topic], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0 and "OK" in r.stdout, f"{client}: {r.stdout[-2000:]} {r.stderr[-2000:]}"
