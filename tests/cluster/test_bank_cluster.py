"""The bank workload (issue 16) on a 3-node cluster (issue 13) while nodes die: librdkafka
transactional processors (consume-transform-produce, read_committed, exactly once) keep going
while each of the three nodes is SIGKILLed in turn, during the load, and started again (the next
kill waits until every partition is back in sync), so every partition leader, and with them the
processors' group and transaction coordinators, moves while transactions are open (a
processor commits every 20 ms). The checker must pass: every acknowledged transfer debited and
credited exactly once, or refused and applied nowhere; balances never negative; the total
unchanged; no transaction left hanging (the drain finishes)."""

import json
import os
import signal
import subprocess
import time

from confluent_kafka import Consumer, TopicPartition

from conftest import SLUICE, wait_until

from .harness import CLIENT_DEFAULTS, cluster  # noqa: F401  (fixture)

LOAD_S = 30


def commands_sent(c):
    """Records on the run's commands topic (0 until the bench has made it)."""
    md = c.metadata()
    names = [t for t in md.topics if t.endswith(".commands")]
    if not names:
        return 0
    consumer = Consumer({"bootstrap.servers": c.bootstrap, "group.id": "bank-cluster-probe", **CLIENT_DEFAULTS})
    try:
        return sum(consumer.get_watermark_offsets(TopicPartition(names[0], p), timeout=5)[1]
                   for p in md.topics[names[0]].partitions)
    finally:
        consumer.close()


def test_bank_transfers_stay_exactly_once_while_nodes_die(cluster, tmp_path):
    c = cluster(3)
    out = tmp_path / "bank.json"
    log = open(tmp_path / "bench.log", "w")
    bench = subprocess.Popen(
        [str(SLUICE), "bench", "bank", "--brokers", c.bootstrap, "--rate", "2000", "--duration", str(LOAD_S),
         "--processors", "2", "--accounts", "2000", "--seed", "11", "--work-dir", str(tmp_path / "work"),
         "--json", str(out)],
        stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    log.close()
    done = []
    try:
        # The kills start once the load has (the bench first waits for the processors to hold
        # their partitions), and each one lands while transfers flow.
        wait_until(lambda: bench.poll() is not None or commands_sent(c) > 2000, 120, "the load to start")
        load_started = time.monotonic()
        for node in (2, 3, 1):
            assert bench.poll() is None, "the bench ended before the faults"
            time.sleep(1)
            c.kill(node)
            killed_at = time.monotonic() - load_started
            done.append(f"{killed_at:.1f}s kill {node}")
            assert killed_at < LOAD_S - 2, f"a kill came after the load: {done}"
            time.sleep(3)
            c.node(node).start()
            c.wait_all_in_sync(90)
        bench.wait(timeout=400)
    except subprocess.TimeoutExpired:
        raise AssertionError(f"the bank bench ran over its time: {(tmp_path / 'bench.log').read_text()[-3000:]}")
    finally:
        if bench.poll() is None:
            os.killpg(bench.pid, signal.SIGKILL)
            bench.wait()
    output = (tmp_path / "bench.log").read_text()
    assert out.exists(), (done, output[-3000:])
    report = json.loads(out.read_text())
    checker = report["checker"]
    assert bench.returncode == 0 and checker["ok"], (done, checker, output[-3000:])
    assert report["drained"], "transfers were still open at the end: a hanging transaction?"
    sent = report["transfers_sent"]
    assert (checker["transfers_debited"] + checker["transfers_refused"]
            + checker["transfers_unknown_not_applied"] == sent), checker
    assert checker["transfers_debited"] > 0.9 * sent, checker
    assert report["transfers_completed"] == checker["transfers_debited"] + checker["transfers_refused"]
    print(f"faults (seconds after the load started): {done}; {sent} transfers; "
          f"completed per second: {report['completed_per_second']}")
