"""The example outbox service (examples/outbox) end to end: three service instances change the
same accounts concurrently, each change and its event in one database transaction (some rolled
back on purpose); `sluice outbox` relays the committed events; the example consumer runs at the
same time and, for each event, reads the account back from the database: never missing, never
older than the event, per account versions 1, 2, ... in order, each event once. The consumer
must see exactly as many events as the outbox table holds and the services committed."""

import json
import subprocess
import sys

import pytest
from confluent_kafka.admin import AdminClient, NewTopic

from conftest import ARTIFACTS, ROOT, log_prefix, wait_until

pytestmark = pytest.mark.timeout(180)

EXAMPLE = ROOT / "examples" / "outbox"
INSTANCES = 3
COUNT = 300          # committed transactions per instance
RATE = 60            # transactions a second per instance: ~5 s of writes overlapping the reads
ENTITIES = 20
TOPIC = "example.account"
PARTITIONS = 3       # accounts spread over partitions: per-key order, not per-topic order


def run_example(script, *args, name):
    """Starts examples/outbox/SCRIPT with the venv's Python: stdout piped (its JSON summary),
    stderr to an artifact log."""
    log_path = ARTIFACTS / f"{log_prefix()}{name}.log"
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    with open(log_path, "wb") as log:
        proc = subprocess.Popen([sys.executable, str(EXAMPLE / script), *map(str, args)],
                                stdout=subprocess.PIPE, stderr=log, text=True)
    proc.log_path = log_path
    return proc


def summary(proc, timeout, what):
    """The JSON summary a finished example process printed last."""
    try:
        out, _ = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        out, _ = proc.communicate(timeout=10)
        raise AssertionError(f"{what} did not finish within {timeout} s: "
                             f"{proc.log_path.read_text(errors='replace')[-2000:]}")
    lines = out.strip().splitlines()
    assert lines, (f"{what} printed no summary (exit {proc.returncode}): "
                   f"{proc.log_path.read_text(errors='replace')[-2000:]}")
    return json.loads(lines[-1])


def test_the_example_consumer_never_sees_an_event_ahead_of_the_database(postgres, broker, relays):
    postgres.create_database("example")
    with postgres.connect("example", autocommit=True) as c:
        c.execute((EXAMPLE / "schema.sql").read_text())
    dsn = postgres.url("example")

    # The relay's first start makes the replication slot: it must be active before any write.
    relay = relays(postgres, broker, "--topic-prefix", "example.", db="example", name="example")
    relay.wait_state("active", 60)

    # The topic made beforehand (the relay would make it with one partition on its first
    # event), so that the consumer has joined its group before the first write.
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    admin.create_topics([NewTopic(TOPIC, PARTITIONS, 1)])[TOPIC].result(30)

    procs = []
    try:
        # The consumer runs while the services write, so that it reads accounts that are still
        # changing. It knows the count in advance: each instance commits exactly COUNT.
        consumer = run_example("consumer.py", "--brokers", broker.bootstrap, "--dsn", dsn,
                               "--topics", TOPIC, "--expect", INSTANCES * COUNT,
                               "--timeout", 90, "--drain", 2, name="example-consumer")
        procs.append(consumer)

        def consumer_assigned():
            assert consumer.poll() is None, \
                f"the consumer exited: {consumer.log_path.read_text(errors='replace')}"
            return f"assigned {PARTITIONS} partitions" in consumer.log_path.read_text()
        wait_until(consumer_assigned, 30, "the consumer to join its group")
        services = [run_example("service.py", "--dsn", dsn, "--instance", f"s{i}",
                                "--entities", ENTITIES, "--count", COUNT, "--duration", 40,
                                "--rate", RATE, "--rollback", 0.1, "--seed", i,
                                name=f"example-service-{i}")
                    for i in range(INSTANCES)]
        procs.extend(services)

        results = [summary(s, 60, f"service instance {i}") for i, s in enumerate(services)]
        for i, (s, r) in enumerate(zip(services, results)):
            assert s.returncode == 0 and r["failed"] == 0, \
                f"service instance {i} failed (exit {s.returncode}): {r}: " \
                f"{s.log_path.read_text(errors='replace')[-2000:]}"
            assert r["committed"] == COUNT, \
                f"service instance {i} committed {r['committed']} of {COUNT} ({r})"
        committed = sum(r["committed"] for r in results)
        assert sum(r["rolled_back"] for r in results) > 0, f"nothing was rolled back: {results}"

        # The database agrees: one outbox row per committed transaction, and since each
        # transaction bumps one account's version by one, the versions add up to the same.
        with postgres.connect("example") as c:
            rows = c.execute("SELECT count(*) FROM outbox").fetchone()[0]
            versions, accounts = c.execute(
                "SELECT coalesce(sum(version), 0), count(*) FROM accounts").fetchone()
        assert rows == versions == committed, \
            f"{rows} outbox rows, versions add up to {versions}, {committed} commits reported"

        got = summary(consumer, 110, "the consumer")
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait(timeout=10)

    context = (f"consumer: {got}\n{consumer.log_path.read_text(errors='replace')[-3000:]}\n"
               f"relay: {relay.status()}\n{relay.log()[-3000:]}")
    violations = {k: got[k] for k in ("missing", "older", "out_of_order", "gaps", "duplicates",
                                       "malformed")}
    assert violations == dict.fromkeys(violations, 0), f"violations {violations}\n{context}"
    assert got["events"] == committed, \
        f"the consumer saw {got['events']} events, {committed} were committed\n{context}"
    assert got["accounts"] == accounts, \
        f"events of {got['accounts']} accounts, the database has {accounts}\n{context}"
    assert consumer.returncode == 0, f"the consumer exited with {consumer.returncode}\n{context}"
    print(f"{committed} events from {INSTANCES} instances checked against the database: "
          f"{got['newer']} found the account already newer, {got['current']} at the event's "
          f"version; {sum(r['rolled_back'] for r in results)} rolled back; "
          f"{sum(r['retries'] for r in results)} retries; consumer took {got['seconds']} s")
