"""`sluice outbox` against a real MariaDB (Debian's, started by the test with the binary log in
row format): the same workload and checker as the PostgreSQL test (workload.py): concurrent
writers, some transactions rolled back, the active relay SIGKILLed (the standby takes over),
the broker SIGKILLed and restarted, the database SIGKILLed and restarted; then every committed
row published exactly once, none rolled back, per aggregate in commit order. And the bad
inputs: no binary log, statement format, a missing table."""

import time

import pytest

from conftest import wait_until
from outbox.conftest import run_relay
from outbox.mariadb import MariaDB
from outbox.workload import (SIZE, TOPICS, Writers, deleted_after_restart,
                             large_transactions_streamed, read_topics, rows_flow, settle_and_check,
                             setup_aggregates)

pytestmark = pytest.mark.timeout(240)


SCHEMA = [
    "CREATE DATABASE shop",
    "CREATE TABLE shop.outbox (id CHAR(36) PRIMARY KEY, aggregatetype VARCHAR(255) NOT NULL, "
    "aggregateid VARCHAR(255) NOT NULL, type VARCHAR(255) NOT NULL, payload BLOB) ENGINE=InnoDB",
    "CREATE TABLE shop.aggregates (id VARCHAR(64) PRIMARY KEY, version INT NOT NULL) "
    "ENGINE=InnoDB",
]


def make_schema(db):
    conn = db.connect(None)
    with conn.cursor() as cur:
        for sql in SCHEMA:
            cur.execute(sql)
    conn.close()


@pytest.fixture
def mariadb():
    db = MariaDB().start()
    make_schema(db)
    yield db
    db.close()


def test_every_committed_row_once_in_commit_order_through_relay_broker_and_database_crashes(
        mariadb, broker, relays):
    setup_aggregates(mariadb, "shop", 30)
    a = relays(mariadb, broker, "--topic-prefix", "shop.", name="a")
    a.wait_state("active", 60)
    b = relays(mariadb, broker, "--topic-prefix", "shop.", name="b")
    b.wait_state("standby", 30)
    everyone = [a, b]      # every relay started: whichever is active, the sum moves

    writers = Writers(mariadb, threads=4, aggregates=30, rollback=0.2).start(100_000, 150)
    try:
        wait_until(lambda: (a.status() or {}).get("rows", 0) > 300, 30,
                   f"rows to flow: {a.log()[-2000:]}")
        a.kill()
        killed = time.monotonic()
        b.wait_state("active", 15)
        took_over = time.monotonic() - killed
        a = relays(mariadb, broker, "--topic-prefix", "shop.", name="a2")
        everyone.append(a)
        a.wait_state("standby", 30)
        rows_flow(everyone, "rows to flow through b", 30)

        broker.kill()
        time.sleep(1)
        broker.start()
        rows_flow(everyone, f"rows to flow after the broker's restart: {b.log()[-2000:]}", 60)

        # The binary log moves to new files while rows flow; then the relay restarts in one.
        conn = mariadb.connect(None)
        with conn.cursor() as cur:
            cur.execute("FLUSH BINARY LOGS")
        rows_flow(everyone, "rows to flow after a rotation", 60)
        with conn.cursor() as cur:
            cur.execute("FLUSH BINARY LOGS")
        conn.close()
        for r in everyone:
            if r.state() == "active":
                r.kill()
        a = relays(mariadb, broker, "--topic-prefix", "shop.", name="a3")
        everyone.append(a)
        rows_flow(everyone, f"rows to flow after a relay restart in a new binlog file: {a.log()[-2000:]}", 60)

        mariadb.restart("immediate")
        rows_flow(everyone, f"rows to flow after the database's restart: {b.log()[-2000:]}", 60)
    finally:
        writers.stop()
        writers.join()
    assert len(writers.committed) > 1000, f"only {len(writers.committed)} rows committed"
    assert writers.rolled_back, "no transaction was rolled back"
    truth, _ = settle_and_check(mariadb, broker.bootstrap, writers, everyone)
    assert took_over < 10, f"the standby took {took_over:.1f} s to take over"
    print(f"{len(truth)} rows published once each; {len(writers.rolled_back)} rolled back; "
          f"standby took over in {took_over:.2f} s")


def test_a_database_without_a_row_format_binary_log_is_named(broker):
    for kw, words in (({"binlog": False}, "binary log is off"),
                      ({"binlog_format": "STATEMENT"}, "binlog_format = STATEMENT"),
                      ({"extra": ["--log-bin-compress=ON"]}, "log_bin_compress = ON")):
        db = MariaDB(**kw).start()
        try:
            make_schema(db)
            code, out, _ = run_relay(db.url("shop"), broker)
            assert code == 1 and words in out, out
        finally:
            db.close()


def test_a_missing_table_or_column_is_named(mariadb, broker):
    code, out, _ = run_relay(mariadb.url("shop"), broker, table="nothing")
    assert code == 1 and "table shop.nothing does not exist" in out, out
    code, out, _ = run_relay(mariadb.url("shop"), broker, "--column-payload", "body")
    assert code == 1 and 'has no column "body"' in out, out


def test_rows_written_before_the_first_publish_survive_a_relay_restart(mariadb, broker, relays):
    """Without a slot, the relay's start in the binary log is committed as its first position
    the moment it becomes active: rows written while it is down before its first batch are
    published by the next start, not skipped."""
    import uuid
    r = relays(mariadb, broker, "--topic-prefix", "shop.", name="first")
    r.wait_state("active", 60)
    r.kill()
    ids = [str(uuid.uuid4()) for _ in range(5)]
    conn = mariadb.connect("shop")
    with conn.cursor() as cur:
        for i in ids:
            cur.execute("INSERT INTO outbox VALUES (%s, 'order', 'k', 'created', 'x')", (i,))
    conn.commit()
    conn.close()
    r = relays(mariadb, broker, "--topic-prefix", "shop.", name="second")
    r.wait_state("active", 60)
    got = read_topics(broker.bootstrap, ["shop.order"], 5, 30)
    assert sorted(g[4] for g in got) == sorted(ids), got


def test_rows_published_but_not_yet_deleted_when_the_relay_dies_are_deleted_after_its_restart(
        mariadb, broker, relays):
    """The PostgreSQL test of the same name against MariaDB's binary log (a SIGNAL in a
    trigger refuses the deletes): workload.deleted_after_restart."""
    setup_aggregates(mariadb, "shop", 10)

    def run(*sql):
        conn = mariadb.connect("shop")
        try:
            with conn.cursor() as cur:
                for q in sql:
                    cur.execute(q)
                rows = cur.fetchall()
            conn.commit()
            return rows
        finally:
            conn.close()

    run("CREATE TABLE faults (refuse_deletes BOOL NOT NULL)",
        "INSERT INTO faults VALUES (TRUE)",
        "CREATE TRIGGER refuse_deletes BEFORE DELETE ON outbox FOR EACH ROW "
        "BEGIN IF (SELECT refuse_deletes FROM faults) THEN "
        "SIGNAL SQLSTATE '45000' SET MESSAGE_TEXT = 'the test refuses deletes'; END IF; END")
    deleted_after_restart(mariadb, broker, relays, TOPICS,
                          lambda: run("SELECT count(*) FROM outbox")[0][0],
                          lambda: run("UPDATE faults SET refuse_deletes = FALSE"))


@pytest.mark.parametrize("names", ["logged", "not-logged"])
def test_rows_written_before_an_alter_table_are_read_by_name_or_refused(mariadb, broker, relays, names):
    """An ALTER TABLE that moves the outbox columns while the relay is behind: with column
    names in the binary log (binlog_row_metadata = FULL) the rows on both sides of it are
    published with the right key and payload; without them the relay stops before the first
    row it cannot place, naming the cause, and publishes nothing of it (it used to read the
    old rows by the new positions and publish one column's bytes as another's)."""
    import uuid
    conn = mariadb.connect(None)
    with conn.cursor() as cur:
        cur.execute(f"SET GLOBAL binlog_row_metadata = '{'FULL' if names == 'logged' else 'NO_LOG'}'")
    conn.close()

    def insert(rows, columns="(id, aggregatetype, aggregateid, type, payload)"):
        c = mariadb.connect("shop")
        with c.cursor() as cur:
            for row in rows:
                cur.execute(f"INSERT INTO outbox {columns} VALUES (%s, 'order', %s, 'created', %s)", row)
        c.commit()
        c.close()

    def batch(tag):
        return [(str(uuid.uuid4()), f"{tag}-key-{n}", f"{tag}-payload-{n}") for n in range(2)]

    before, old_shape, new_shape = batch("a"), batch("b"), batch("c")
    r = relays(mariadb, broker, "--topic-prefix", "shop.", name="before-alter")
    r.wait_state("active", 60)
    insert(before)
    assert len(read_topics(broker.bootstrap, ["shop.order"], 2, 30)) == 2
    r.stop()
    insert(old_shape)
    c = mariadb.connect("shop")
    with c.cursor() as cur:
        cur.execute("ALTER TABLE outbox ADD COLUMN note VARCHAR(20) NOT NULL DEFAULT 'n' FIRST")
    c.close()
    insert(new_shape)

    def published(expected):
        got = read_topics(broker.bootstrap, ["shop.order"], expected, 30 if expected > 2 else 5)
        return [(g[4], g[3].decode(), g[5].decode()) for g in got]

    if names == "logged":
        r = relays(mariadb, broker, "--topic-prefix", "shop.", name="after-alter")
        r.wait_state("active", 60)
        assert sorted(published(6)) == sorted(before + old_shape + new_shape)
    else:
        code, out, _ = run_relay(mariadb.url("shop"), broker, "--topic-prefix", "shop.")
        assert code == 1 and "it was altered" in out and "binlog_row_metadata = FULL" in out, out
        assert sorted(published(2)) == sorted(before), "nothing of the rows it cannot place"


def test_an_alter_table_while_the_relay_runs_is_followed_without_column_names(mariadb, broker, relays):
    """Without column names in the log: a column added while the relay runs (before it placed
    any row, and after) makes it read the table's shape again and go on, and the deletes it
    made of rows in the old shape (`--delete-published`) do not stop it when it restarts."""
    import uuid
    conn = mariadb.connect(None)
    with conn.cursor() as cur:
        cur.execute("SET GLOBAL binlog_row_metadata = 'NO_LOG'")
    conn.close()

    def insert(tag):
        rows = [(str(uuid.uuid4()), f"{tag}-key-{n}", f"{tag}-payload-{n}") for n in range(2)]
        c = mariadb.connect("shop")
        with c.cursor() as cur:
            for row in rows:
                cur.execute("INSERT INTO outbox (id, aggregatetype, aggregateid, type, payload) "
                            "VALUES (%s, 'order', %s, 'created', %s)", row)
        c.commit()
        c.close()
        return rows

    def published(expected):
        got = read_topics(broker.bootstrap, ["shop.order"], expected, 30)
        return sorted((g[4], g[3].decode(), g[5].decode()) for g in got)

    r = relays(mariadb, broker, "--topic-prefix", "shop.", "--delete-published", name="live-alter")
    r.wait_state("active", 60)
    # Altered before the relay placed any row (a quiet outbox, or a standby taking over).
    c = mariadb.connect("shop")
    with c.cursor() as cur:
        cur.execute("ALTER TABLE outbox ADD COLUMN early VARCHAR(20) NULL")
    c.close()
    first = insert("a")
    assert published(2) == sorted(first)
    wait_until(lambda: outbox_count(mariadb) == 0, 30, "the published rows deleted")
    c = mariadb.connect("shop")
    with c.cursor() as cur:
        cur.execute("ALTER TABLE outbox ADD COLUMN note VARCHAR(20) NULL")
    c.close()
    second = insert("b")
    assert published(4) == sorted(first + second)
    assert r.proc.poll() is None, r.log()[-3000:]
    wait_until(lambda: outbox_count(mariadb) == 0, 30, "the new rows deleted too")

    r.stop()
    r = relays(mariadb, broker, "--topic-prefix", "shop.", "--delete-published", name="after-deletes")
    r.wait_state("active", 60)
    third = insert("c")
    assert published(6) == sorted(first + second + third)
    assert r.proc.poll() is None and r.state() == "active", r.log()[-3000:]


def test_a_table_with_a_long_unique_key_is_relayed_without_column_names(mariadb, broker, relays):
    """MariaDB keeps a UNIQUE key on a BLOB as a hidden hash column, which the binary log's rows
    carry but information_schema.COLUMNS does not list: the relay counts it, and the rows are
    published (a first version of the column-count check refused every one)."""
    import uuid
    c = mariadb.connect("shop")
    with c.cursor() as cur:
        cur.execute("SET GLOBAL binlog_row_metadata = 'NO_LOG'")
        cur.execute("ALTER TABLE outbox ADD UNIQUE KEY payload_once (payload)")
    c.close()
    r = relays(mariadb, broker, "--topic-prefix", "shop.", name="long-unique")
    r.wait_state("active", 60)
    rows = [(str(uuid.uuid4()), f"key-{n}", f"payload-{n}") for n in range(3)]
    c = mariadb.connect("shop")
    with c.cursor() as cur:
        for row in rows:
            cur.execute("INSERT INTO outbox VALUES (%s, 'order', %s, 'created', %s)", row)
    c.commit()
    c.close()
    got = read_topics(broker.bootstrap, ["shop.order"], 3, 30)
    assert sorted((g[4], g[3].decode(), g[5].decode()) for g in got) == sorted(rows), r.log()[-3000:]


def read_with_headers(bootstrap, topics, count, timeout=30):
    """(topic, key, value, headers) of every record of `topics`, read_committed, until `count`."""
    import uuid
    from confluent_kafka import Consumer
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": f"checker-{uuid.uuid4()}",
                  "auto.offset.reset": "earliest", "enable.auto.commit": False,
                  "isolation.level": "read_committed", "topic.metadata.refresh.interval.ms": 500})
    got = []
    try:
        c.subscribe(topics)
        deadline = time.monotonic() + timeout
        while len(got) < count and time.monotonic() < deadline:
            for m in c.consume(100, 0.5):
                if not m.error():
                    got.append((m.topic(), m.key().decode(), m.value().decode(),
                                {k: v.decode() for k, v in (m.headers() or [])}))
    finally:
        c.close()
    return got


@pytest.mark.parametrize("names", ["logged", "not logged"])
def test_enum_and_set_columns_are_published_by_their_names(mariadb, broker, relays, names):
    """The binary log carries an ENUM value as its number and a SET value as a bitmap: the relay
    publishes their names (an ENUM aggregatetype used to route rows to a topic named "2").
    A name added to the ENUM while the relay runs is named too: from the table map when the
    server logs names, else by reading the table's shape again."""
    import uuid
    c = mariadb.connect("shop")
    with c.cursor() as cur:
        cur.execute(f"SET GLOBAL binlog_row_metadata = '{'FULL' if names == 'logged' else 'NO_LOG'}'")
        cur.execute("ALTER TABLE outbox MODIFY aggregatetype ENUM('order','payment') NOT NULL, "
                    "MODIFY type ENUM('created','it''s paid') NOT NULL, "
                    "ADD COLUMN tags SET('vip','eu','test') NULL")
    c.close()
    r = relays(mariadb, broker, "--topic-prefix", "shop.", "--header-column", "tags",
               name="enums")
    r.wait_state("active", 60)

    def insert(rows):
        c = mariadb.connect("shop")
        with c.cursor() as cur:
            for (kind, key, event, tags) in rows:
                cur.execute("INSERT INTO outbox (id, aggregatetype, aggregateid, type, payload, tags)"
                            " VALUES (%s, %s, %s, %s, %s, %s)",
                            (str(uuid.uuid4()), kind, key, event, f"{key}-payload", tags))
        c.commit()
        c.close()

    insert([("payment", "p1", "it's paid", "vip,test"), ("order", "o1", "created", None),
            ("order", "o2", "created", "eu")])
    want = [("shop.payment", "p1", "p1-payload", "it's paid", "vip,test"),
            ("shop.order", "o1", "o1-payload", "created", None),
            ("shop.order", "o2", "o2-payload", "created", "eu")]
    topics = ["shop.order", "shop.payment", "shop.refund"]

    def published(n):
        got = read_with_headers(broker.bootstrap, topics, n)
        return sorted((t, k, v, h.get("type"), h.get("tags")) for t, k, v, h in got)
    assert published(3) == sorted(want), r.log()[-3000:]

    c = mariadb.connect("shop")
    with c.cursor() as cur:   # the column count stays: without names only the number shows it
        cur.execute("ALTER TABLE outbox MODIFY aggregatetype ENUM('order','payment','refund') NOT NULL")
    c.close()
    insert([("refund", "r1", "created", "eu,test")])
    want.append(("shop.refund", "r1", "r1-payload", "created", "eu,test"))
    assert published(4) == sorted(want), r.log()[-3000:]
    # A column that becomes an ENUM while the relay runs (the key; the column count stays).
    c = mariadb.connect("shop")
    with c.cursor() as cur:
        cur.execute("ALTER TABLE outbox MODIFY aggregateid ENUM('p1','o1','o2','r1','k1') NOT NULL")
    c.close()
    insert([("order", "k1", "created", None)])
    want.append(("shop.order", "k1", "k1-payload", "created", None))
    assert published(5) == sorted(want), r.log()[-3000:]
    assert r.proc.poll() is None, r.log()[-3000:]
    # With names in the log, the table map names the new values; without, a new session does.
    reread = "with its shape read again" in r.log()
    assert reread == (names == "not logged"), r.log()[-3000:]


@pytest.mark.parametrize("delete", [False, True], ids=["kept", "delete-published"])
def test_xa_transactions_are_published_at_their_commit_and_survive_a_restart(mariadb, broker, relays,
                                                                           delete):
    """An XA transaction is logged at its XA PREPARE and decided later by XA COMMIT or XA
    ROLLBACK: its rows are published at the commit, never at a rollback; one-phase commits are
    plain commits; an XA transaction on another table is no trouble (MariaDB used to end the
    relay's binlog stream at any XA transaction, with error 1236). A relay restarted while one
    is prepared reads it again, and publishes it once at its commit, and nothing twice (also with
    --delete-published, which reads the last batch again from its start). An XA transaction of
    another table left prepared does not hold the relay's position back."""
    import uuid
    flags = ["--topic-prefix", "shop."] + (["--delete-published"] if delete else [])
    r = relays(mariadb, broker, *flags, name="xa")
    r.wait_state("active", 60)
    ins = ("INSERT INTO shop.outbox (id, aggregatetype, aggregateid, type, payload) "
           "VALUES (%s, 'order', %s, 't', %s)")
    xa = mariadb.connect(None)
    plain = mariadb.connect(None)

    def row(cur, key):
        cur.execute(ins, (str(uuid.uuid4()), key, f"{key}-payload"))

    def commit_plain(key):
        with plain.cursor() as cur:
            row(cur, key)
        plain.commit()

    def prepare(xid, key=None, table_only=False):
        with xa.cursor() as cur:
            cur.execute(f"XA START '{xid}'")
            if table_only:
                cur.execute("INSERT INTO shop.aggregates VALUES (%s, 1)", (xid,))
            else:
                row(cur, key)
            cur.execute(f"XA END '{xid}'")
            cur.execute(f"XA PREPARE '{xid}'")

    def decide(xid, how):
        with xa.cursor() as cur:
            cur.execute(f"XA {how} '{xid}'")

    def published(n, timeout=30):
        got = read_with_headers(broker.bootstrap, ["shop.order"], n, timeout)
        return sorted(k for _, k, _, _ in got)

    prepare("x1", "xa-committed")
    commit_plain("plain-1")
    decide("x1", "COMMIT")
    prepare("x2", "xa-rolled-back")
    decide("x2", "ROLLBACK")
    with xa.cursor() as cur:
        cur.execute("XA START 'x3'")
        row(cur, "xa-one-phase")
        cur.execute("XA END 'x3'")
        cur.execute("XA COMMIT 'x3' ONE PHASE")
    prepare("x4", table_only=True)
    decide("x4", "COMMIT")
    left = mariadb.connect(None)   # another table's XA transaction, left prepared
    with left.cursor() as cur:
        cur.execute("XA START 'left'")
        cur.execute("INSERT INTO shop.aggregates VALUES ('left', 1)")
        cur.execute("XA END 'left'")
        cur.execute("XA PREPARE 'left'")
    commit_plain("plain-2")
    want = ["plain-1", "xa-committed", "xa-one-phase", "plain-2"]
    assert published(4) == sorted(want), r.log()[-3000:]
    assert r.proc.poll() is None and r.state() == "active", r.log()[-3000:]

    # Prepared while one relay runs; a transaction after it is published; the relay stops; the
    # next one commits the prepared transaction's rows once, and nothing again.
    prepare("x5", "xa-across-a-restart")
    commit_plain("plain-3")
    want.append("plain-3")
    assert published(5) == sorted(want), r.log()[-3000:]
    before_restart = r.status()["position"]
    r.stop()
    r = relays(mariadb, broker, *flags, name="xa-after")
    r.wait_state("active", 60)
    decide("x5", "COMMIT")
    commit_plain("plain-4")
    want += ["xa-across-a-restart", "plain-4"]
    assert published(7) == sorted(want), r.log()[-3000:]
    assert published(8, timeout=10) == sorted(want), r.log()[-3000:]   # no duplicate
    if delete:
        wait_until(lambda: outbox_count(mariadb) == 0, 30, "every published row deleted")
    # With x5 committed the position moves past the transaction left prepared ('left').
    wait_until(lambda: binlog_offset(r.status()["position"]) > binlog_offset(before_restart), 30,
               "the position past the XA transaction left prepared")
    xa.close()
    plain.close()
    with left.cursor() as cur:
        cur.execute("XA ROLLBACK 'left'")
    left.close()


def binlog_offset(position):
    """'binlog.000001:4057' -> (1, 4057)."""
    name, offset = str(position).rsplit(":", 1)
    return (int(name.rsplit(".", 1)[1]), int(offset))


def outbox_count(db):
    c = db.connect("shop")
    with c.cursor() as cur:
        cur.execute("SELECT count(*) FROM outbox")
        n = cur.fetchone()[0]
    c.close()
    return n

@pytest.mark.timeout(600)
def test_large_transactions_are_streamed_and_a_relay_killed_mid_stream_publishes_none_twice(
        mariadb, broker, relays):
    def insert(first, count):
        conn = mariadb.connect("shop")
        with conn.cursor() as cur:
            cur.execute(f"""INSERT INTO outbox (id, aggregatetype, aggregateid, type, payload)
                            SELECT UUID(), 'bulk', CONCAT('agg-', seq % 8), 'created',
                                   CONCAT(LPAD(seq, 12, '0'), REPEAT('x', {SIZE - 12}))
                            FROM seq_{first}_to_{first + count - 1}""")
        conn.commit()
        conn.close()

    large_transactions_streamed(mariadb, broker, relays, insert, lambda: outbox_count(mariadb),
                                rereads=True)
