"""The Go clients of the compatibility matrix against one real broker.

tests/compat/go/setup builds one program per client from the Go module proxy (versions pinned
in tests/compat/go/go.mod): franz-go (kgo + kadm), Sarama (Config.Version = V4_0_0_0),
segmentio/kafka-go, and librdkafka 1.9.2 through confluent-kafka-go v1.9.2. Each program runs
once against the module's broker and prints a CHECK line per check; each (client, check) is one
test here. kafka-go has no idempotent producer and no transactions, so those checks are not
listed for it.
"""

import pytest

from conftest import Broker
from compat import harness

GO = harness.COMPAT / "go"

_STANDARD = list(harness.STANDARD_CHECKS)
_NO_IDEMPOTENCE_NOR_TXN = [c for c in _STANDARD if c not in ("produce_idempotent", "transactions")]

# client -> the checks its program runs (the standard ones it can express, then extras).
CHECKS = {
    "franz-go": _STANDARD + [
        "group_consumer_protocol",        # KIP-848: ConsumerGroupHeartbeat, not JoinGroup/SyncGroup
        "transactions_read_uncommitted",  # a read_uncommitted consumer sees the aborted records
        "transactions_send_offsets",      # GroupTransactSession: group offsets in the transaction
    ],
    "sarama": _STANDARD + ["transactions_read_uncommitted", "transactions_send_offsets"],
    "kafka-go": _NO_IDEMPOTENCE_NOR_TXN,
    "librdkafka": ["librdkafka_version"] + _STANDARD + ["transactions_read_uncommitted",
                                                         "transactions_send_offsets"],
}

CASES = [(client, name) for client, names in CHECKS.items() for name in names]


@pytest.fixture(scope="module")
def go_broker(tmp_path_factory):
    harness.setup("go")
    broker = Broker(tmp_path_factory.mktemp("compat-go"), name="compat-go",
               env=harness.BROKER_ENV).start()
    yield broker
    broker.kill()


@pytest.fixture(scope="module")
def go_results(go_broker):
    """Runs each client's program once, on first use; {client: run_client result}."""
    results = {}

    def get(client):
        if client not in results:
            results[client] = harness.run_client(
                [str(GO / "bin" / client), "-bootstrap", go_broker.bootstrap], timeout=240)
        return results[client]

    return get


@pytest.mark.parametrize("client,check", CASES, ids=[f"{c}-{n}" for c, n in CASES])
def test_go_client(go_results, client, check):
    harness.assert_check(go_results(client), check)
