"""Client compatibility matrix: Node.js clients from npm against one broker, installed by
`tests/compat/node/setup` (package.json and package-lock.json pin the versions):

- kafkajs 2.2.4 (its own pure-JavaScript implementation of the protocol). It commits the
  offsets it has processed when a heartbeat answers REBALANCE_IN_PROGRESS in the middle of a
  batch (group_rebalance_commit). Only the gzip codec is built in, so produce_compressed is
  gzip alone;
- @confluentinc/kafka-javascript 1.10.1 through its KafkaJS-compatible API, i.e. librdkafka
  2.15.1 built from the sources in the npm package (no prebuilt binary is reachable; see the
  setup script). librdkafka commits its stored offsets when an eager rebalance revokes its
  partitions (group_rebalance_commit), and speaks the KIP-848 consumer protocol
  (group_consumer_protocol).

Each program runs once (on the first test that needs it) and prints one CHECK line per check.
"""

import pytest

from conftest import Broker
from compat import harness

NODE = harness.COMPAT / "node"
TIMEOUT = 230  # the programs stop themselves after 200 s (common.js hardDeadline)

STANDARD = harness.STANDARD_CHECKS
CLIENTS = {
    "kafkajs-2.2.4": ("kafkajs_client.js",
                      (*STANDARD, "produce_compressed", "group_rebalance_commit",
                       "transactions_send_offsets", "transactions_read_uncommitted")),
    "confluent-kafka-javascript-1.10.1": ("confluent_client.js",
                                          (*STANDARD, "produce_compressed", "group_rebalance_commit",
                                           "group_consumer_protocol", "transactions_send_offsets",
                                           "transactions_read_uncommitted")),
}


@pytest.fixture(scope="module")
def broker(tmp_path_factory):
    harness.setup("node")
    b = Broker(tmp_path_factory.mktemp("compat-node"), name="compat-node",
               env=harness.BROKER_ENV)
    b.start()
    yield b
    b.kill()


_runs = {}


def client_run(broker, client):
    if client not in _runs:
        program, _ = CLIENTS[client]
        _runs[client] = harness.run_client(["node", program, broker.bootstrap], timeout=TIMEOUT, cwd=NODE)
    return _runs[client]


@pytest.mark.parametrize("client,check", [(c, k) for c, (_, checks) in CLIENTS.items() for k in checks])
def test_node_client(broker, client, check):
    harness.assert_check(client_run(broker, client), check)
