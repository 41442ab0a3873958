"""The outbox workload and its checker, shared by the tests and bench/outbox_bench.py.

Writers: threads that each run database transactions, each writing one to four outbox rows
for one to three aggregates (an aggregate's version is bumped per row, under its row lock, so
the versions of one aggregate's rows are its commit order), some rolled back on purpose. A
transaction whose COMMIT got no answer (the database went away) is *uncertain*: the table
says afterwards whether it committed.

Checker: reads every outbox topic with read_committed and proves that every row the table
holds was published exactly once, no other row was (rolled back or never written), and per
aggregate the published versions are 1, 2, ... n in order: commit order per key."""

import json
import random
import threading
import time
import uuid
from collections import defaultdict

import psycopg
import pymysql
from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition

TYPES = ("order", "payment")
# Errors of either database's client (PostgreSQL: psycopg; MariaDB: PyMySQL).
DB_ERRORS = (psycopg.Error, pymysql.err.Error)


def aggregate_type(name):
    return TYPES[int(name.split("-")[1]) % len(TYPES)]


def setup_aggregates(server, db, count):
    conn = server.connect(db)
    try:
        with conn.cursor() as cur:
            cur.executemany("INSERT INTO aggregates VALUES (%s, 0)",
                            [(f"agg-{i}",) for i in range(count)])
        conn.commit()
    finally:
        conn.close()


class Writers:
    def __init__(self, pg, db="shop", threads=4, aggregates=20, rollback=0.15, seed=1,
                 payload_bytes=0, rate=None):
        self.pg, self.db, self.threads = pg, db, threads
        self.aggregates = [f"agg-{i}" for i in range(aggregates)]
        self.rollback, self.payload_bytes = rollback, payload_bytes
        self.rate = rate                      # transactions per second in all, None: flat out
        self.random = random.Random(seed)
        self.lock = threading.Lock()
        self.committed, self.rolled_back, self.uncertain = set(), set(), set()
        self.commit_times = {}                # id -> time.time() after COMMIT returned
        self.errors = 0
        self.stop_flag = threading.Event()
        self.workers = []

    def start(self, transactions_each, deadline_s):
        deadline = time.monotonic() + deadline_s
        for n in range(self.threads):
            rng = random.Random(self.random.random())
            t = threading.Thread(target=self._run, args=(rng, transactions_each, deadline),
                                 daemon=True)
            t.start()
            self.workers.append(t)
        return self

    def join(self, timeout=120):
        for t in self.workers:
            t.join(timeout)
            assert not t.is_alive(), "a writer did not finish"

    def stop(self):
        self.stop_flag.set()

    def _connect(self, deadline):
        while time.monotonic() < deadline and not self.stop_flag.is_set():
            try:
                return self.pg.connect(self.db)
            except DB_ERRORS:
                time.sleep(0.2)
        return None

    def _run(self, rng, count, deadline):
        conn = None
        interval = self.threads / self.rate if self.rate else 0
        next_at = time.monotonic()
        for _ in range(count):
            if self.stop_flag.is_set() or time.monotonic() > deadline:
                break
            if interval:
                next_at += interval
                pause = next_at - time.monotonic()
                if pause > 0:
                    time.sleep(pause)
            if conn is None:
                conn = self._connect(deadline)
                if conn is None:
                    break
            rows = sorted(rng.choice(self.aggregates)
                          for _ in range(rng.randint(1, 4)))
            ids = [str(uuid.uuid4()) for _ in rows]
            roll_back = rng.random() < self.rollback
            committing = False
            try:
                with conn.cursor() as cur:
                    for agg, row_id in zip(rows, ids):
                        # (MariaDB has no UPDATE ... RETURNING; the row stays locked.)
                        cur.execute("UPDATE aggregates SET version = version + 1 WHERE id = %s",
                                    (agg,))
                        cur.execute("SELECT version FROM aggregates WHERE id = %s", (agg,))
                        version = cur.fetchone()[0]
                        payload = json.dumps({"aggregate": agg, "version": version,
                                              "pad": "x" * self.payload_bytes}).encode()
                        cur.execute("INSERT INTO outbox (id, aggregatetype, aggregateid, type, "
                                    "payload) VALUES (%s, %s, %s, 'changed', %s)",
                                    (row_id, aggregate_type(agg), agg, payload))
                if roll_back:
                    conn.rollback()
                    with self.lock:
                        self.rolled_back.update(str(i) for i in ids)
                else:
                    committing = True
                    conn.commit()
                    now = time.time()
                    with self.lock:
                        for i in ids:
                            self.committed.add(str(i))
                            self.commit_times[str(i)] = now
            except DB_ERRORS:
                with self.lock:
                    self.errors += 1
                    (self.uncertain if committing else self.rolled_back).update(str(i) for i in ids)
                try:
                    conn.close()
                except DB_ERRORS:
                    pass
                conn = None
        if conn is not None:
            conn.close()


def table_truth(server, db="shop"):
    """{id: (aggregateid, version)} of every row the outbox table holds, and each aggregate's
    final version."""
    conn = server.connect(db)
    try:
        with conn.cursor() as cur:
            cur.execute("SELECT id, aggregateid, payload FROM outbox")
            rows = cur.fetchall()
            cur.execute("SELECT id, version FROM aggregates")
            versions = dict(cur.fetchall())
        conn.commit()
    finally:
        conn.close()
    return {str(i): (agg, json.loads(bytes(p))["version"]) for i, agg, p in rows}, versions


def read_topics(bootstrap, topics, until_count, timeout, login=None):
    """Every record of `topics` (read_committed, from the start), in partition order:
    [(topic, partition, offset, key, id header, payload, receive time)]. `login`: more client
    settings (security.protocol, sasl.*, ssl.*)."""
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": f"checker-{uuid.uuid4()}",
                  "enable.auto.commit": False, "isolation.level": "read_committed",
                  "enable.partition.eof": False, **(login or {})})
    try:
        # A topic the relay has not made yet (it makes one at its first row) is waited for.
        deadline = time.monotonic() + timeout
        while True:
            md = c.list_topics(timeout=10)
            if all(t in md.topics for t in topics) or time.monotonic() > deadline:
                break
            time.sleep(0.2)
        parts = [TopicPartition(t, p, OFFSET_BEGINNING) for t in topics if t in md.topics
                 for p in md.topics[t].partitions]
        c.assign(parts)
        got = []
        while len(got) < until_count and time.monotonic() < deadline:
            for m in c.consume(1000, 0.5):
                if m.error():
                    continue
                h = dict(m.headers() or [])
                got.append((m.topic(), m.partition(), m.offset(), m.key(),
                            h.get("id", b"").decode(), m.value(), time.time()))
        # Anything beyond the expected count (a duplicate) shows up within a moment.
        end = time.monotonic() + 2
        while time.monotonic() < end:
            for m in c.consume(1000, 0.2):
                if not m.error():
                    h = dict(m.headers() or [])
                    got.append((m.topic(), m.partition(), m.offset(), m.key(),
                                h.get("id", b"").decode(), m.value(), time.time()))
        return got
    finally:
        c.close()


def check(truth, versions, published, writers=None):
    """Violations (a list of strings, empty when everything holds)."""
    problems = []
    seen = defaultdict(int)
    for rec in published:
        seen[rec[4]] += 1
    for row_id, n in seen.items():
        if n > 1:
            problems.append(f"row {row_id} published {n} times")
        if row_id not in truth:
            problems.append(f"row {row_id} published but not in the table (rolled back or never "
                            f"written)")
    missing = [i for i in truth if i not in seen]
    if missing:
        problems.append(f"{len(missing)} committed rows never published, e.g. {missing[:3]}")
    if writers is not None:
        lost = [i for i in writers.committed if i not in truth]
        if lost:
            problems.append(f"{len(lost)} rows whose COMMIT succeeded are not in the table")
        leaked = [i for i in writers.rolled_back if i in seen]
        if leaked:
            problems.append(f"{len(leaked)} rolled-back rows were published, e.g. {leaked[:3]}")
    per_key = defaultdict(list)
    for rec in sorted(published, key=lambda r: (r[0], r[1], r[2])):
        per_key[rec[3].decode()].append(json.loads(rec[5])["version"])
    for agg, vs in per_key.items():
        want = list(range(1, len(vs) + 1))
        if vs != want:
            problems.append(f"aggregate {agg}: published versions {vs[:20]}... are not 1..n in "
                            f"order")
        elif versions.get(agg) != len(vs):
            problems.append(f"aggregate {agg}: {len(vs)} versions published, table says "
                            f"{versions.get(agg)}")
    return problems


TOPICS = ["shop.order", "shop.payment"]


def relayed_rows(*relays):
    """Rows the running relays have published (each counts its own, from its start)."""
    return sum((r.status() or {}).get("rows", 0) for r in relays)


def rows_flow(relays, what, timeout=60, more=300):
    """Waits until `relays` have published `more` rows beyond what they have now. The baseline
    waits for an answer from every relay still running (one that did not answer in time would
    count as none and let the wait pass at once); a dead one counts as none."""
    from conftest import wait_until

    def baseline():
        answers = [r.status() for r in relays if r.proc is not None and r.proc.poll() is None]
        return None if None in answers else [sum(a.get("rows", 0) for a in answers)]
    before = wait_until(baseline, 10, "the relays' status")[0]
    wait_until(lambda: relayed_rows(*relays) > before + more, timeout, what)


def settle_and_check(db, bootstrap, writers, relays, timeout=60, topics=TOPICS):
    """Reads what was published to `topics` and checks it against the table and the writers
    (see check); fails with the violations and the relays' logs. Returns (truth, published)."""
    truth, versions = table_truth(db)
    assert truth, "the writers committed nothing"
    published = read_topics(bootstrap, topics, len(truth), timeout)
    problems = check(truth, versions, published, writers)
    assert not problems, "\n".join(problems[:20]) + "\n" + "\n".join(
        r.log()[-3000:] for r in relays)
    return truth, published


def deleted_after_restart(db, broker, relays, topics, left, allow_deletes):
    """The --delete-published crash test of both sources (see its callers): `left()` counts
    the outbox table's rows, `allow_deletes()` lifts the fault that refuses deletes."""
    from conftest import wait_until
    r = relays(db, broker, "--topic-prefix", "shop.", "--delete-published")
    r.wait_state("active", 60)
    writers = Writers(db, threads=2, aggregates=10, rollback=0.1).start(60, 60)
    writers.join()
    committed = set(writers.committed)
    assert committed, "the writers committed nothing"
    wait_until(lambda: "the test refuses deletes" in ((r.status() or {}).get("last_error") or ""),
               30, f"the relay to report its failing delete: {r.log()[-2000:]}")
    # Some rows were published (the batch whose delete failed), none deleted.
    assert read_topics(broker.bootstrap, topics, 1, 30), "nothing was published"
    assert left() == len(committed), f"{left()} rows in the table, {len(committed)} committed"
    r.kill()
    allow_deletes()
    r = relays(db, broker, "--topic-prefix", "shop.", "--delete-published", name="again")
    r.wait_state("active", 60)
    wait_until(lambda: left() == 0, 30,
               f"the restarted relay to delete the published rows: {r.log()[-2000:]}")
    published = read_topics(broker.bootstrap, topics, len(committed), 30)
    ids = [p[4] for p in published]
    assert len(ids) == len(set(ids)) == len(committed), \
        f"{len(ids)} records, {len(set(ids))} distinct, {len(committed)} rows committed"
    assert set(ids) == committed


# The rows of large_transactions_streamed: their bytes each (a 12-digit number, then padding).
SIZE = 4096
# Its relays' transaction timeout: a 390 MiB transaction on a slow shared machine may take
# longer than the default 60 s to read and send.
LONG_TRANSACTIONS = ("--transaction-timeout-ms", "600000")


def peak_rss_mb(pid):
    """A process's peak resident memory (VmHWM), in MiB."""
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    raise AssertionError(f"no VmHWM for process {pid}")


def large_transactions_streamed(db, broker, relays, insert, left, rereads, rows=100_000):
    """A database transaction larger than the relay holds, for both sources: `insert(first,
    count)` writes the rows numbered first.. in one transaction (topic shop.bulk, key agg-N%8,
    payload the 12-digit number and padding to SIZE bytes), `left()` counts the table's rows.

    The relay (--delete-published) publishes a transaction of `rows` rows (390 MiB) while its
    peak memory stays below 200 MiB. Stopped and started again, it reads that transaction again
    (`rereads`: the source sends it again, as the binary log does; PostgreSQL's slot may start
    after it) and deletes its rows in one pass at its end, not row by row, then publishes a
    one-row transaction. A second large one is SIGKILLed mid-stream (rows sent into its open
    Sluice transaction, none committed); the relay started after it publishes that transaction
    whole. Read back: every row exactly once, per key in the order written, and the table
    emptied."""
    from conftest import wait_until
    a = relays(db, broker, "--topic-prefix", "shop.", "--delete-published",
               *LONG_TRANSACTIONS, name="a")
    a.wait_state("active", 60)
    insert(1, rows)
    wait_until(lambda: (a.status() or {}).get("rows", 0) >= rows, 180,
               f"the {rows} rows to be published: {a.status()} {a.log()[-2000:]}")
    peak = peak_rss_mb(a.proc.pid)
    a.stop()

    a = relays(db, broker, "--topic-prefix", "shop.", "--delete-published",
               *LONG_TRANSACTIONS, name="a2")
    a.wait_state("active", 60)
    insert(rows + 1, 1)
    wait_until(lambda: (a.status() or {}).get("rows", 0) >= 1, 60,
               f"the one-row transaction to be published: {a.status()} {a.log()[-2000:]}")
    deletes = a.log().count("deleted the rows of a transaction published before this session")
    # Read again, a published transaction's ids are deleted at its end, not row by row.
    assert deletes == 1 if rereads else deletes <= 1, \
        f"{deletes} deletes of rows read again: {a.log()[-2000:]}"

    insert(rows + 2, rows)
    # More than four parts' rows sent (a part is 5,000 rows or 16 MiB), not yet committed.
    wait_until(lambda: (a.status() or {}).get("pending_rows", 0) > 20_000, 120,
               f"the second transaction to be sent: {a.status()} {a.log()[-2000:]}")
    a.kill()
    # Had the killed relay committed it, this one would publish nothing (or publish it twice,
    # which the count below catches).
    b = relays(db, broker, "--topic-prefix", "shop.", "--delete-published",
               *LONG_TRANSACTIONS, name="b")
    b.wait_state("active", 60)
    wait_until(lambda: (b.status() or {}).get("rows", 0) >= rows, 180,
               f"the second transaction to be published: {b.status()} {b.log()[-2000:]}")

    total = 2 * rows + 1
    c = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": f"big-{uuid.uuid4()}",
                  "enable.auto.commit": False, "isolation.level": "read_committed",
                  "auto.offset.reset": "earliest"})
    numbers = defaultdict(list)   # key -> the numbers read, in offset order
    ids = set()
    read = 0
    try:
        c.subscribe(["shop.bulk"])
        deadline = time.monotonic() + 120
        while read < total and time.monotonic() < deadline:
            for m in c.consume(2000, 0.5):
                if m.error():
                    continue
                read += 1
                ids.add(dict(m.headers() or [])["id"])
                numbers[m.key().decode()].append(int(m.value()[:12]))
        # A duplicate would show within a moment.
        end = time.monotonic() + 2
        while time.monotonic() < end:
            read += sum(1 for m in c.consume(2000, 0.2) if not m.error())
    finally:
        c.close()
    assert read == len(ids) == total, f"{read} records, {len(ids)} distinct ids, {total} written"
    for key, got in numbers.items():
        assert got == sorted(got), f"{key}: out of the order written"
    assert sorted(n for got in numbers.values() for n in got) == list(range(1, total + 1))
    wait_until(lambda: left() == 0, 60, f"the relay to empty the table: {b.log()[-2000:]}")
    assert peak < 200, f"the relay's peak memory was {peak:.0f} MiB for {rows * SIZE >> 20} MiB"
    print(f"relay peak memory {peak:.0f} MiB for a transaction of {rows * SIZE >> 20} MiB")
