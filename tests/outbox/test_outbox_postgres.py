"""`sluice outbox` against a real PostgreSQL 15 (started by the test, wal_level=logical):
concurrent writers in many transactions, some rolled back; the active relay SIGKILLed (the
standby takes over), the broker SIGKILLed and restarted, the database crashed and restarted;
then the checker (workload.check): every committed row published exactly once, no rolled-back
row, per aggregate the commit order."""

import json
import signal
import time
import urllib.request
import uuid

import pytest
from confluent_kafka.admin import (AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource,
                                   NewTopic)

from conftest import wait_until
from outbox.conftest import run_relay
from outbox.workload import (SIZE, TOPICS, Writers, deleted_after_restart,
                             large_transactions_streamed, read_topics, rows_flow, settle_and_check,
                             setup_aggregates)

pytestmark = pytest.mark.timeout(240)


def test_every_committed_row_once_in_commit_order_through_relay_broker_and_database_crashes(
        postgres, broker, relays):
    setup_aggregates(postgres, "shop", 30)
    a = relays(postgres, broker, "--topic-prefix", "shop.", name="a")
    a.wait_state("active", 60)
    b = relays(postgres, broker, "--topic-prefix", "shop.", name="b")
    b.wait_state("standby", 30)

    writers = Writers(postgres, threads=4, aggregates=30, rollback=0.2).start(100_000, 150)
    try:
        wait_until(lambda: (a.status() or {}).get("rows", 0) > 300, 30, "rows to flow")

        # 1. The active relay dies mid-stream: the standby takes over within seconds.
        a.kill()
        killed = time.monotonic()
        b.wait_state("active", 15)
        took_over = time.monotonic() - killed
        a = relays(postgres, broker, "--topic-prefix", "shop.", name="a2")
        a.wait_state("standby", 30)
        rows_flow([a, b], "rows to flow through b", 30)

        # 2. The broker dies and comes back on the same data.
        broker.kill()
        time.sleep(1)
        broker.start()
        rows_flow([a, b], f"rows to flow after the broker's restart: {b.log()[-2000:]}", 60)

        # 3. The database crashes (no shutdown checkpoint) and comes back.
        postgres.restart("immediate")
        rows_flow([a, b], f"rows to flow after the database's restart: {b.log()[-2000:]}", 60)
    finally:
        writers.stop()
        writers.join()
    assert len(writers.committed) > 1000, f"only {len(writers.committed)} rows committed"
    assert writers.rolled_back, "no transaction was rolled back"
    truth, published = settle_and_check(postgres, broker.bootstrap, writers, [a, b])
    assert took_over < 10, f"the standby took {took_over:.1f} s to take over"
    print(f"{len(truth)} rows published once each; {len(writers.rolled_back)} rolled back; "
          f"{len(writers.uncertain)} uncertain commits; standby took over in {took_over:.2f} s")


def test_delete_published_empties_the_table_and_a_restart_resumes_without_duplicates(
        postgres, broker, relays):
    setup_aggregates(postgres, "shop", 10)
    r = relays(postgres, broker, "--topic-prefix", "shop.", "--delete-published")
    r.wait_state("active", 60)
    writers = Writers(postgres, threads=2, aggregates=10, rollback=0.1).start(150, 60)
    writers.join()
    committed = set(writers.committed)
    wait_until(lambda: r.status()["rows"] >= len(committed), 30,
               f"the {len(committed)} committed rows to be published: {r.status()}")
    with postgres.connect("shop", autocommit=True) as c:
        wait_until(lambda: c.execute("SELECT count(*) FROM outbox").fetchone()[0] == 0, 30,
                   f"the relay to delete the published rows: {r.status()}, "
                   f"{c.execute('SELECT count(*) FROM outbox').fetchone()[0]} left")
    # A clean stop and a new start: nothing published again.
    r.stop()
    r = relays(postgres, broker, "--topic-prefix", "shop.", "--delete-published", name="again")
    r.wait_state("active", 60)
    with postgres.connect("shop") as c:
        c.execute("INSERT INTO aggregates VALUES ('agg-99', 0)")
        c.execute("INSERT INTO outbox VALUES (%s, 'order', 'agg-99', 'changed', %s)",
                  (uuid.uuid4(), b'{"aggregate": "agg-99", "version": 1}'))
        c.execute("UPDATE aggregates SET version = 1 WHERE id = 'agg-99'")
        c.commit()
    published = read_topics(broker.bootstrap, TOPICS, len(committed) + 1, 30)
    ids = [p[4] for p in published]
    assert len(ids) == len(set(ids)) == len(committed) + 1, \
        f"{len(ids)} records, {len(set(ids))} distinct, {len(committed) + 1} rows committed"
    assert committed <= set(ids)


def test_rows_published_but_not_yet_deleted_when_the_relay_dies_are_deleted_after_its_restart(
        postgres, broker, relays):
    """--delete-published: a relay whose DELETE of a published batch fails (here a trigger
    refuses deletes) publishes nothing more and says why; SIGKILLed then, its successor reads
    the change log again from the batch's start, deletes the published rows, publishes the
    rest once, and empties the table."""
    setup_aggregates(postgres, "shop", 10)
    with postgres.connect("shop", autocommit=True) as c:
        c.execute("CREATE TABLE faults (refuse_deletes boolean NOT NULL)")
        c.execute("INSERT INTO faults VALUES (true)")
        c.execute("""CREATE FUNCTION refuse_deletes() RETURNS trigger LANGUAGE plpgsql AS $$
                     BEGIN
                       IF (SELECT refuse_deletes FROM faults) THEN
                         RAISE EXCEPTION 'the test refuses deletes';
                       END IF;
                       RETURN OLD;
                     END $$""")
        c.execute("CREATE TRIGGER refuse_deletes BEFORE DELETE ON outbox FOR EACH ROW "
                  "EXECUTE FUNCTION refuse_deletes()")

    def left():
        with postgres.connect("shop", autocommit=True) as c:
            return c.execute("SELECT count(*) FROM outbox").fetchone()[0]

    def allow_deletes():
        with postgres.connect("shop", autocommit=True) as c:
            c.execute("UPDATE faults SET refuse_deletes = false")

    deleted_after_restart(postgres, broker, relays, TOPICS, left, allow_deletes)


# --- bad input -------------------------------------------------------------------------------


def test_an_unreachable_database_is_named(broker):
    from conftest import free_port
    port = free_port()
    code, out, took = run_relay(f"postgres://postgres@127.0.0.1:{port}/shop", broker)
    assert code == 1 and "cannot connect to postgres://postgres@127.0.0.1" in out, out
    assert took < 30
    # The consoles list it as failed, with the reason (its last status report).
    with urllib.request.urlopen(broker.admin_url + "/api/outbox", timeout=5) as r:
        listed = json.loads(r.read())
    assert [(r["source"], r["state"], r["silent"]) for r in listed] == [
        (f"postgres://127.0.0.1:{port}/shop", "failed", False)], listed
    assert "cannot connect" in listed[0]["last_error"], listed


def test_a_database_without_logical_wal_is_named(broker):
    from outbox.pg import Postgres
    pg = Postgres(wal_level="replica").start()
    try:
        with pg.connect(autocommit=True) as c:
            c.execute("CREATE TABLE outbox (id uuid, aggregatetype text, aggregateid text, "
                      "type text, payload bytea)")
        code, out, _ = run_relay(pg, broker, db="postgres")
        assert code == 1 and "wal_level = replica" in out and "wal_level = logical" in out, out
    finally:
        pg.close()


def test_a_missing_table_or_column_is_named(postgres, broker):
    code, out, _ = run_relay(postgres, broker, table="public.nothing")
    assert code == 1 and "table public.nothing does not exist" in out, out
    code, out, _ = run_relay(postgres, broker, "--column-payload", "body")
    assert code == 1 and 'has no column "body"' in out, out
    # Nothing half-done: no slot was made for a table that is not there.
    with postgres.connect("shop") as c:
        assert c.execute("SELECT count(*) FROM pg_replication_slots").fetchone()[0] == 0


def slot_and_limited_topic(postgres, broker, relays, max_message_bytes):
    """Starts and stops a relay (its first start makes the slot: rows committed before it are
    not in the stream), then creates topic shop.order with the given max.message.bytes;
    returns the admin client."""
    first_start = relays(postgres, broker, "--topic-prefix", "shop.")
    first_start.wait_state("active", 60)
    first_start.stop()
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    admin.create_topics([NewTopic("shop.order", 1, 1, config={
        "max.message.bytes": str(max_message_bytes)})])["shop.order"].result(30)
    return admin


def test_a_row_sluice_cannot_take_stops_the_relay_before_it(postgres, broker, relays):
    """A payload larger than its topic takes, and an aggregatetype that is no topic name: the
    relay stops with the row's id and publishes nothing from that row on; the rows before it
    are published once."""
    admin = slot_and_limited_topic(postgres, broker, relays, 2000)
    first, big, after = uuid.uuid4(), uuid.uuid4(), uuid.uuid4()
    with postgres.connect("shop") as c:
        c.execute("INSERT INTO outbox VALUES (%s, 'order', 'a', 't', %s)", (first, b'small'))
        c.commit()
        c.execute("INSERT INTO outbox VALUES (%s, 'order', 'a', 't', %s)", (big, b'x' * 10_000))
        c.execute("INSERT INTO outbox VALUES (%s, 'order', 'a', 't', %s)", (after, b'small'))
        c.commit()
    code, out, _ = run_relay(postgres, broker, "--topic-prefix", "shop.", timeout=90)
    assert code == 1 and f"row id {big}" in out and "larger than topic shop.order" in out, out
    got = read_topics(broker.bootstrap, ["shop.order"], 1, 10)
    assert [g[4] for g in got] == [str(first)], got

    # The position stayed before the big row: after the limit is raised, it and the one after
    # it come, once; the first row does not come again.
    raise_limit = ConfigResource("topic", "shop.order", incremental_configs=[
        ConfigEntry("max.message.bytes", "1000000",
                    incremental_operation=AlterConfigOpType.SET)])
    admin.incremental_alter_configs([raise_limit])[raise_limit].result(30)
    with postgres.connect("shop") as c:
        c.execute("INSERT INTO outbox VALUES (%s, 'bad topic', 'a', 't', %s)",
                  (uuid.uuid4(), b'x'))
        c.commit()
    code, out, _ = run_relay(postgres, broker, "--topic-prefix", "shop.", timeout=90)
    assert code == 1 and '"shop.bad topic" has' in out and "the relay stops before it" in out, out
    got = read_topics(broker.bootstrap, ["shop.order"], 3, 10)
    assert [g[4] for g in got] == [str(first), str(big), str(after)], got


def test_a_row_refused_inside_a_large_transaction_stops_the_relay_before_the_transaction(
        postgres, broker, relays):
    """A transaction of more rows than --max-batch-rows is sent in parts into one Sluice
    transaction; a row of it that its topic refuses (too large) comes back while later parts
    are sent, and librdkafka then fails every send: the relay still names the row and stops,
    and nothing of the transaction is published."""
    slot_and_limited_topic(postgres, broker, relays, 2000)
    first, big = uuid.uuid4(), uuid.uuid4()
    with postgres.connect("shop") as c:
        c.execute("INSERT INTO outbox VALUES (%s, 'order', 'a', 't', %s)", (first, b'small'))
        c.commit()
        for i in range(300):
            row = big if i == 10 else uuid.uuid4()
            c.execute("INSERT INTO outbox VALUES (%s, 'order', 'a', 't', %s)",
                      (row, b'x' * (10_000 if row == big else 100)))
        c.commit()
    code, out, _ = run_relay(postgres, broker, "--topic-prefix", "shop.", "--max-batch-rows",
                             "20", timeout=90)
    assert code == 1 and f"row id {big}" in out and "larger than topic shop.order" in out, out
    got = read_topics(broker.bootstrap, ["shop.order"], 1, 10)
    assert [g[4] for g in got] == [str(first)], got


@pytest.mark.parametrize("extra", [[], ["--max-batch-rows", "20"]], ids=["batch", "streamed"])
def test_small_rows_refused_as_a_batch_are_sent_in_batches_the_topic_takes(postgres, broker,
                                                                           relays, extra):
    """Kafka checks whole batches, and the relay sends a partition's rows in batches (up to
    1,000,000 bytes): rows each far below the topic's max.message.bytes can be refused
    together. The relay asks the topic's limit, aborts, and sends batches that fit it from a new
    session: every row comes, once and in order, without the operator raising the limit. Also
    when the transaction is sent in parts (`streamed`: 20 rows a part)."""
    slot_and_limited_topic(postgres, broker, relays, 20000)
    ids = [uuid.uuid4() for _ in range(200)]
    with postgres.connect("shop") as c:
        for i in ids:   # 200 rows of 1,000 bytes in one transaction: one partition's batch
            c.execute("INSERT INTO outbox VALUES (%s, 'order', 'a', 't', %s)", (i, b'x' * 1000))
        c.commit()
        # A row that stops the relay once it is past the rest (so that run_relay returns).
        c.execute("INSERT INTO outbox VALUES (%s, 'bad topic', 'a', 't', %s)", (uuid.uuid4(), b'x'))
        c.commit()
    code, out, _ = run_relay(postgres, broker, "--topic-prefix", "shop.", *extra, timeout=90)
    assert code == 1 and '"shop.bad topic" has' in out, out
    assert "sends smaller batches from now on" in out and "max_message_bytes=20000" in out, out
    assert "larger than topic shop.order takes" not in out, out
    got = read_topics(broker.bootstrap, ["shop.order"], len(ids), 10)
    assert [g[4] for g in got] == [str(i) for i in ids], got[:3]


def test_a_relay_that_lost_its_lease_publishes_nothing_more(postgres, broker, relays):
    """The active relay is frozen (SIGSTOP) and the database ends its sessions, as a network
    cut would: the standby takes the lease and publishes; when the frozen one wakes up it may
    hold a batch it had not committed, but it is fenced and stands by, and every row is still
    published exactly once."""
    setup_aggregates(postgres, "shop", 10)
    a = relays(postgres, broker, "--topic-prefix", "shop.", name="a")
    a.wait_state("active", 60)
    b = relays(postgres, broker, "--topic-prefix", "shop.", name="b")
    b.wait_state("standby", 30)
    writers = Writers(postgres, threads=2, aggregates=10, rollback=0.1).start(100_000, 120)
    try:
        wait_until(lambda: a.status()["rows"] > 200, 30, "rows to flow through a")
        a.proc.send_signal(signal.SIGSTOP)
        a_rows = None
        try:
            with postgres.connect(autocommit=True) as c:
                # a's control session (it holds the advisory lock) and its walsender.
                ended = c.execute(
                    "SELECT pg_terminate_backend(pid) FROM pg_locks WHERE locktype = 'advisory' "
                    "UNION ALL SELECT pg_terminate_backend(active_pid) FROM pg_replication_slots "
                    "WHERE active_pid IS NOT NULL").fetchall()
            assert len(ended) == 2, ended
            b.wait_state("active", 20)
            rows = b.status()["rows"]
            wait_until(lambda: b.status()["rows"] > rows + 200, 30, "rows to flow through b")
        finally:
            a.proc.send_signal(signal.SIGCONT)
        a.wait_state("standby", 30)
        a_rows = a.status()["rows"]
        rows = b.status()["rows"]
        wait_until(lambda: b.status()["rows"] > rows + 200, 30, "rows to flow through b after")
        assert a.status()["rows"] == a_rows, "the relay that lost its lease published more"
        assert b.state() == "active"
    finally:
        writers.stop()
        writers.join()
    truth, published = settle_and_check(postgres, broker.bootstrap, writers, [a, b])
    print(f"{len(truth)} rows published once each across the lease change")


@pytest.mark.timeout(600)
def test_large_transactions_are_streamed_and_a_relay_killed_mid_stream_publishes_none_twice(
        postgres, broker, relays):
    def insert(first, count):
        with postgres.connect("shop") as c:
            c.execute(f"""INSERT INTO outbox (id, aggregatetype, aggregateid, type, payload)
                          SELECT gen_random_uuid(), 'bulk', 'agg-' || (i % 8), 'created',
                                 convert_to(lpad(i::text, 12, '0') || repeat('x', {SIZE - 12}),
                                            'UTF8')
                          FROM generate_series({first}, {first + count - 1}) AS i""")
            c.commit()

    def left():
        with postgres.connect("shop", autocommit=True) as c:
            return c.execute("SELECT count(*) FROM outbox").fetchone()[0]

    large_transactions_streamed(postgres, broker, relays, insert, left, rereads=False)
