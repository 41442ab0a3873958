"""The bank workload (issue 16) on a 3-node cluster (issue 13) while nodes die: librdkafka
transactional processors (consume-transform-produce, read_committed, exactly once) keep going
while each of the three nodes is SIGKILLed in turn and started again, so every partition
leader, and with them the processors' group and transaction coordinators, moves at least once
mid-transaction. The checker
must pass: every acknowledged transfer debited and credited exactly once, or refused and
applied nowhere; balances never negative; the total unchanged; no transaction left hanging
(the drain finishes)."""

import json
import os
import signal
import subprocess
import time

from conftest import SLUICE

from .harness import cluster  # noqa: F401  (fixture)


def test_bank_transfers_stay_exactly_once_while_nodes_die(cluster, tmp_path):
    c = cluster(3)
    out = tmp_path / "bank.json"
    bench = subprocess.Popen(
        [str(SLUICE), "bench", "bank", "--brokers", c.bootstrap, "--rate", "2000", "--duration", "26",
         "--processors", "2", "--accounts", "2000", "--seed", "11", "--work-dir", str(tmp_path / "work"),
         "--json", str(out)],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)
    started = time.monotonic()
    done = []
    try:
        # Seconds from the bench's start (the load starts a few seconds in, once the processors
        # hold their partitions): each node down for 5 s in turn.
        for at, action, node in [(8, "kill", 2), (13, "start", 2), (17, "kill", 3), (22, "start", 3),
                                 (26, "kill", 1), (31, "start", 1)]:
            while time.monotonic() - started < at and bench.poll() is None:
                time.sleep(0.1)
            assert bench.poll() is None, "the bench ended before the faults"
            if action == "kill":
                c.kill(node)
            else:
                c.node(node).start()
            done.append(f"{time.monotonic() - started:.1f}s {action} {node}")
        stdout, stderr = bench.communicate(timeout=400)
    finally:
        if bench.poll() is None:
            os.killpg(bench.pid, signal.SIGKILL)
            bench.communicate()
    assert out.exists(), (done, stdout[-2000:], stderr[-3000:])
    report = json.loads(out.read_text())
    checker = report["checker"]
    assert bench.returncode == 0 and checker["ok"], (done, checker, stderr[-3000:])
    assert report["drained"], "transfers were still open at the end: a hanging transaction?"
    sent = report["transfers_sent"]
    assert sent >= 40_000, sent
    assert (checker["transfers_debited"] + checker["transfers_refused"]
            + checker["transfers_unknown_not_applied"] == sent), checker
    assert checker["transfers_debited"] > 0.9 * sent, checker
    assert report["transfers_completed"] == checker["transfers_debited"] + checker["transfers_refused"]
