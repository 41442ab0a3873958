"""Client compatibility matrix: Python clients from PyPI against one broker, each in its own
venv made by `tests/compat/python/setup` (tests/.venv keeps the suite's own pins):

- aiokafka (latest; its own asyncio implementation of the protocol), with two rebalance checks:
  the offsets a member commits while the group prepares a rebalance (aiokafka's auto-commit
  before rejoining, and an application's commit in on_partitions_revoked);
- confluent-kafka 2.0.2, i.e. librdkafka 2.0.2 (the librdkafka of Debian 12, and of kcat there);
  confluent-kafka 1.9.x has no wheel for this Python (3.11), so librdkafka 1.9 is the Go
  client's (confluent-kafka-go) part of the matrix;
- kafka-python 2.0.2, the version long-running deployments pin: no idempotent producer and no
  transactions in that version, so those checks are not its.

Each program runs once (on the first test that needs it) and prints one CHECK line per check.
"""

import os

import pytest

from conftest import Broker
from compat import harness

PYTHON = harness.COMPAT / "python"
DEADLINE = 150  # each program's own watchdog (checks.watchdog); the subprocess timeout backs it

# Extras: produce_compressed (gzip, snappy, lz4 and zstd batches stored and read back; for
# librdkafka also that it really compressed them), transactions_send_offsets
# (consume-transform-produce), and aiokafka's: a null CreateTopics error message on success,
# fencing by a newer producer of the same transactional id, and the rebalance commits.
STANDARD = (*harness.STANDARD_CHECKS, "produce_compressed")
CLIENTS = {
    "aiokafka": ("venv-aiokafka", "aiokafka_client.py",
                 (*STANDARD, "admin_create_topic_null_message", "transactions_send_offsets",
                  "transactions_fenced", "group_rebalance_autocommit",
                  "group_rebalance_listener_commit")),
    "confluent-kafka-2.0.2": ("venv-confluent-2.0.2", "confluent_client.py",
                              (*STANDARD, "transactions_send_offsets")),
    "kafka-python-2.0.2": ("venv-kafka-python-2.0.2", "kafka_python_client.py",
                           tuple(c for c in STANDARD if c not in ("produce_idempotent", "transactions"))),
}


@pytest.fixture(scope="module")
def broker(tmp_path_factory):
    harness.setup("python")
    b = Broker(tmp_path_factory.mktemp("compat-python"), name="compat-python",
               env=harness.BROKER_ENV)
    b.start()
    yield b
    b.kill()


_runs = {}


def client_run(broker, client):
    if client not in _runs:
        venv, program, _ = CLIENTS[client]
        argv = [str(PYTHON / venv / "bin" / "python"), program, broker.bootstrap]
        env = {**os.environ, "COMPAT_DEADLINE": str(DEADLINE), "PYTHONDONTWRITEBYTECODE": "1"}
        _runs[client] = harness.run_client(argv, timeout=DEADLINE + 30, env=env, cwd=PYTHON)
    return _runs[client]


@pytest.mark.parametrize("client,check", [(c, k) for c, (_, _, checks) in CLIENTS.items() for k in checks])
def test_python_client(broker, client, check):
    harness.assert_check(client_run(broker, client), check)
