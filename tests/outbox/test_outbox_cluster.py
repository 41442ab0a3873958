"""`sluice outbox` publishing to a 3-node cluster (issues 13 and 17) while each node is SIGKILLed in
turn and started again (the next kill waits until every partition is back in sync): the topics
it writes and its progress topic change leaders, and its transaction coordinator moves,
mid-stream. The checker
(workload.check) must still find every committed row published exactly once, no rolled-back
row, and per aggregate the commit order."""

import time

import pytest

from conftest import wait_until
from outbox.workload import Writers, rows_flow, settle_and_check, setup_aggregates

from cluster.harness import cluster  # noqa: F401  (fixture)

pytestmark = pytest.mark.timeout(420)


def test_every_committed_row_once_in_commit_order_while_each_node_dies(postgres, cluster, relays):
    c = cluster(3)
    setup_aggregates(postgres, "shop", 30)
    r = relays(postgres, c, "--topic-prefix", "shop.", name="a")
    r.wait_state("active", 60)
    writers = Writers(postgres, threads=4, aggregates=30, rollback=0.2).start(100_000, 250)
    try:
        wait_until(lambda: (r.status() or {}).get("rows", 0) > 300, 30, "rows to flow")
        for node in c.ids:
            c.kill(node)
            time.sleep(3)
            c.node(node).start()
            # Back in every ISR before the next kill: one node down at a time.
            c.wait_all_in_sync(90)
            rows_flow([r], f"rows to flow after node {node}'s restart: {r.log()[-2000:]}")
    finally:
        writers.stop()
        writers.join()
    assert len(writers.committed) > 1000, f"only {len(writers.committed)} rows committed"
    assert writers.rolled_back, "no transaction was rolled back"
    settle_and_check(postgres, c.bootstrap, writers, [r])
