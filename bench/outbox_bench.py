#!/usr/bin/env python3
"""The outbox relay's speed on this machine, database, broker and relay together, in one run:

  relay/max       writers commit outbox rows as fast as they can for --seconds; the relay's
                  published rows per second over that window, and how long it took to catch
                  up after the writers stopped
  relay/latency   writers commit at a fixed --rate rows/s (--rows-per-txn rows a transaction);
                  from just before each COMMIT to a read_committed consumer receiving the row:
                  AVG/P50/P90/P99/P99.9/max
  relay/backlog   the relay's own pace: it stops, writers commit --backlog-seconds of outbox
                  rows flat out, it starts again; rows/s from its start to all published
  direct/max      the source's own answer, for comparison: the same service publishing the
  direct/latency  events inside its business transaction with a Kafka transaction (a
                  transactional confluent-kafka producer per writer, begin / produce / commit
                  per business transaction, then the database commit): rows/s flat out, and
                  latency at the same --rate (or the rate it can reach)

Every business transaction bumps one aggregate's version and writes --max-rows-per-txn events
(flat-out runs) or --rows-per-txn events (latency runs).
PostgreSQL 15 (Debian's, tests/outbox/pg.py: initdb in a temporary directory, fsync and
synchronous_commit on) or, with `--source mariadb`, MariaDB (Debian's, tests/outbox/mariadb.py:
row-format binary log, its default durability: InnoDB flushes its log at each commit, the
binary log is not fsynced), Sluice (`target/release/sluice serve`, its default flush mode) and
`sluice outbox` all run here. Writes `--json FILE` if given.

    python3 bench/outbox_bench.py [--source postgres|mariadb] [--seconds 60] [--rate 5000]
                                  [--rows-per-txn 5] [--max-rows-per-txn 20] [--writers 4]
                                  [--json FILE]

Needs tests/.venv (psycopg, pymysql, confluent-kafka) and scripts/db-env.
"""

import argparse
import json
import statistics
import subprocess
import sys
import threading
import time
import urllib.request
import uuid
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "bench"))
sys.path.insert(0, str(ROOT / "tests"))
from local_broker import LocalBroker, free_port  # noqa: E402
from outbox.mariadb import MariaDB  # noqa: E402
from outbox.pg import Postgres  # noqa: E402

from confluent_kafka import OFFSET_END, Consumer, Producer, TopicPartition  # noqa: E402
from confluent_kafka.admin import AdminClient, NewTopic  # noqa: E402

SCHEMA = """
CREATE TABLE outbox (id uuid PRIMARY KEY, aggregatetype text NOT NULL,
                     aggregateid text NOT NULL, type text NOT NULL, payload bytea);
CREATE TABLE aggregates (id text PRIMARY KEY, version int NOT NULL);
INSERT INTO aggregates SELECT 'agg-' || i, 0 FROM generate_series(0, 9999) i;
"""
MARIADB_SCHEMA = [
    "CREATE DATABASE shop",
    "USE shop",
    "CREATE TABLE shop.outbox (id CHAR(36) PRIMARY KEY, aggregatetype VARCHAR(255) NOT NULL, "
    "aggregateid VARCHAR(255) NOT NULL, type VARCHAR(255) NOT NULL, payload BLOB) ENGINE=InnoDB",
    "CREATE TABLE shop.aggregates (id VARCHAR(64) PRIMARY KEY, version INT NOT NULL) "
    "ENGINE=InnoDB",
    # seq_0_to_9999: MariaDB's Sequence engine.
    "INSERT INTO shop.aggregates SELECT CONCAT('agg-', seq), 0 FROM seq_0_to_9999",
]
AGGREGATES = 10_000
PARTITIONS = 3


def percentiles(values):
    if not values:
        return None
    v = sorted(values)
    at = lambda q: v[min(len(v) - 1, int(q * len(v)))]  # noqa: E731
    return {"count": len(v), "avg": round(statistics.fmean(v), 3), "p50": round(at(0.5), 3),
            "p90": round(at(0.9), 3), "p95": round(at(0.95), 3), "p99": round(at(0.99), 3),
            "p999": round(at(0.999), 3), "max": round(v[-1], 3)}


class Receiver:
    """A read_committed consumer of `topic` from its end; receive time per row id."""

    def __init__(self, bootstrap, topic):
        self.c = Consumer({"bootstrap.servers": bootstrap, "group.id": f"bench-{uuid.uuid4()}",
                           "isolation.level": "read_committed", "enable.auto.commit": False,
                           "fetch.wait.max.ms": 5, "fetch.min.bytes": 1})
        md = self.c.list_topics(topic, timeout=10)
        self.c.assign([TopicPartition(topic, p, OFFSET_END) for p in md.topics[topic].partitions])
        self.received = {}
        self.stop_flag = threading.Event()
        # Wait for the assignment to resolve its end offsets before anything is written.
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and any(
                tp.offset < 0 for tp in self.c.position(self.c.assignment())):
            self.c.poll(0.05)
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self):
        # poll, not consume(n, timeout): consume waits for n records or the whole timeout.
        while not self.stop_flag.is_set():
            m = self.c.poll(0.05)
            if m is not None and not m.error():
                now = time.time()
                h = dict(m.headers() or [])
                self.received[h.get("id", b"").decode()] = now

    def close(self):
        self.stop_flag.set()
        self.thread.join(10)
        self.c.close()


class Writers:
    """`threads` writers; each business transaction bumps an aggregate and writes `rows`
    events, either as outbox rows (mode "outbox") or through a Kafka transaction ("direct").
    `rate` rows/s in all (None: flat out). Records the time just before each COMMIT by row
    id."""

    def __init__(self, pg, mode, threads, rows, rate, seconds, bootstrap=None, topic=None):
        self.pg, self.mode, self.rows, self.rate = pg, mode, rows, rate
        self.seconds, self.bootstrap, self.topic = seconds, bootstrap, topic
        self.sent = {}
        self.count = 0
        self.lock = threading.Lock()
        self.threads = [threading.Thread(target=self._run, args=(n, threads), daemon=True)
                        for n in range(threads)]

    def run(self):
        self.started = time.monotonic()
        for t in self.threads:
            t.start()
        for t in self.threads:
            t.join(self.seconds + 120)
        self.took = time.monotonic() - self.started
        return self

    def _run(self, n, threads):
        conn = self.pg.connect("shop")
        producer = None
        if self.mode == "direct":
            producer = Producer({"bootstrap.servers": self.bootstrap, "linger.ms": 0,
                                 "transactional.id": f"bench-direct-{n}-{uuid.uuid4()}"})
            producer.init_transactions(30)
        interval = threads * self.rows / self.rate if self.rate else 0
        next_at = time.monotonic()
        end = self.started + self.seconds
        i = n
        local = {}
        while time.monotonic() < end:
            if interval:
                next_at += interval
                pause = next_at - time.monotonic()
                if pause > 0:
                    time.sleep(pause)
            agg = f"agg-{(i * 7919) % AGGREGATES}"
            i += threads
            ids = [str(uuid.uuid4()) for _ in range(self.rows)]
            with conn.cursor() as cur:
                if isinstance(self.pg, MariaDB):
                    # MariaDB has no UPDATE ... RETURNING; the row stays locked until COMMIT.
                    cur.execute("UPDATE aggregates SET version = version + 1 WHERE id = %s", (agg,))
                    cur.execute("SELECT version FROM aggregates WHERE id = %s", (agg,))
                else:
                    cur.execute("UPDATE aggregates SET version = version + 1 WHERE id = %s "
                                "RETURNING version", (agg,))
                version = cur.fetchone()[0]
                payloads = [json.dumps({"aggregate": agg, "version": version, "event": k,
                                        "pad": "x" * 40}).encode() for k in range(self.rows)]
                if self.mode == "outbox":
                    cur.executemany("INSERT INTO outbox VALUES (%s, 'order', %s, 'changed', %s)",
                                    [(row_id, agg, p) for row_id, p in zip(ids, payloads)])
                    at = time.time()
                    conn.commit()
                else:
                    producer.begin_transaction()
                    for row_id, p in zip(ids, payloads):
                        producer.produce(self.topic, key=agg, value=p,
                                         headers=[("id", row_id), ("type", "changed")])
                    at = time.time()
                    producer.commit_transaction(30)
                    conn.commit()
            for row_id in ids:
                local[row_id] = at
        conn.close()
        with self.lock:
            self.sent.update(local)
            self.count += len(local)


def relay_rows(port):
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/status", timeout=2) as r:
        return json.loads(r.read())["rows"]


def latency_run(pg, mode, broker, topic, args):
    rx = Receiver(broker.bootstrap, topic)
    try:
        w = Writers(pg, mode, args.writers, args.rows_per_txn, args.rate, args.latency_seconds,
                    broker.bootstrap, topic).run()
        deadline = time.monotonic() + 30
        while len(rx.received) < len(w.sent) and time.monotonic() < deadline:
            time.sleep(0.1)
    finally:
        rx.close()
    lat = [(rx.received[i] - t) * 1000 for i, t in w.sent.items() if i in rx.received]
    return {"offered_rows_per_sec": args.rate, "achieved_rows_per_sec": round(w.count / w.took),
            "rows": w.count, "received": len(lat), "latency_ms": percentiles(lat)}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--source", choices=["postgres", "mariadb"], default="postgres",
                    help="the database the service writes to and the relay follows")
    ap.add_argument("--seconds", type=float, default=60, help="the flat-out runs' length")
    ap.add_argument("--latency-seconds", type=float, default=30)
    ap.add_argument("--backlog-seconds", type=float, default=30,
                    help="how long writers build the backlog the stopped relay then catches up on")
    ap.add_argument("--rate", type=int, default=5000, help="rows/s of the latency runs")
    ap.add_argument("--rows-per-txn", type=int, default=5, help="rows a transaction, latency runs")
    ap.add_argument("--max-rows-per-txn", type=int, default=20,
                    help="rows a transaction, flat-out runs")
    ap.add_argument("--writers", type=int, default=4)
    ap.add_argument("--json")
    args = ap.parse_args()
    if min(args.seconds, args.latency_seconds, args.backlog_seconds, args.rate, args.rows_per_txn,
           args.writers) <= 0:
        ap.error("--seconds, --latency-seconds, --backlog-seconds, --rate, --rows-per-txn and "
                 "--writers must be > 0")

    report = {"config": vars(args), "machine_cores": __import__("os").cpu_count()}
    relay = None
    if args.source == "mariadb":
        pg = MariaDB().start()
    else:
        pg = Postgres().start()
    try:
        if args.source == "mariadb":
            conn = pg.connect(None, autocommit=True)
            with conn.cursor() as cur:
                for sql in MARIADB_SCHEMA:
                    cur.execute(sql)
            conn.close()
        else:
            pg.create_database("shop")
            with pg.connect("shop", autocommit=True) as c:
                c.execute(SCHEMA)
        with LocalBroker(prefix="sluice-outbox-bench-") as broker:
            admin = AdminClient({"bootstrap.servers": broker.bootstrap})
            for t in ("bench.order", "bench.direct"):
                admin.create_topics([NewTopic(t, PARTITIONS, 1)])[t].result(30)
            port = free_port()
            log = open(ROOT / "target" / "outbox-bench-relay.log", "wb")

            def start_relay():
                proc = subprocess.Popen(
                    [str(ROOT / "target" / "release" / "sluice"), "outbox", "--source",
                     pg.url("shop"), "--table", "outbox", "--brokers", broker.bootstrap,
                     "--topic-prefix", "bench.", "--metrics-listen", f"127.0.0.1:{port}",
                     "--report-secs", "5"], stdout=log, stderr=subprocess.STDOUT)
                deadline = time.monotonic() + 60
                while True:
                    try:
                        with urllib.request.urlopen(f"http://127.0.0.1:{port}/status", timeout=2) as r:
                            if json.loads(r.read())["state"] == "active":
                                return proc
                    except OSError:
                        pass
                    if time.monotonic() > deadline or proc.poll() is not None:
                        raise SystemExit("the relay did not become active (target/outbox-bench-relay.log)")
                    time.sleep(0.2)

            relay = start_relay()

            # relay/max
            before = relay_rows(port)
            samples = []
            w = Writers(pg, "outbox", args.writers, args.max_rows_per_txn, None, args.seconds)
            sampler_stop = threading.Event()

            def sample():
                while not sampler_stop.is_set():
                    samples.append((time.monotonic(), relay_rows(port)))
                    time.sleep(1)
            sampler = threading.Thread(target=sample, daemon=True)
            sampler.start()
            w.run()
            written_end = time.monotonic()
            total = before + w.count
            while relay_rows(port) < total and time.monotonic() < written_end + 120:
                time.sleep(0.05)
            caught_up = time.monotonic() - written_end
            sampler_stop.set()
            sampler.join(5)
            in_window = [r for t, r in samples if t <= written_end]
            published = (in_window[-1] if in_window else before) - before
            per_second = [b - a for (_, a), (_, b) in zip(samples, samples[1:])]
            report["relay_max"] = {
                "written_rows_per_sec": round(w.count / w.took),
                "published_rows_per_sec_in_window": round(published / w.took),
                "published_rows_per_sec_incl_catch_up": round(w.count / (w.took + caught_up)),
                "catch_up_seconds": round(caught_up, 2),
                "min_published_in_a_second": min(per_second) if per_second else None,
                "rows": w.count, "seconds": round(w.took, 1)}
            print("relay/max", json.dumps(report["relay_max"]), flush=True)

            report["relay_latency"] = latency_run(pg, "outbox", broker, "bench.order", args)
            print("relay/latency", json.dumps(report["relay_latency"]), flush=True)

            # relay/backlog: the relay's own pace, whatever the writers can do. It stops (its
            # position is in Sluice), writers commit a backlog, and it starts again and catches up.
            relay.terminate()
            relay.wait(20)
            w = Writers(pg, "outbox", args.writers, args.max_rows_per_txn, None,
                        args.backlog_seconds).run()
            started = time.monotonic()
            relay = start_relay()
            active = time.monotonic()
            at_active = relay_rows(port)
            while relay_rows(port) < w.count and time.monotonic() < active + 300:
                time.sleep(0.05)
            done = time.monotonic()
            # From the process's start: connecting, taking the lease and resuming are counted.
            report["relay_backlog"] = {
                "rows": w.count, "published": relay_rows(port),
                "rows_per_sec_from_start": round(w.count / (done - started)),
                "seconds_from_start": round(done - started, 2),
                "seconds_to_active": round(active - started, 2),
                "published_when_seen_active": at_active}
            print("relay/backlog", json.dumps(report["relay_backlog"]), flush=True)

            w = Writers(pg, "direct", args.writers, args.max_rows_per_txn, None, args.seconds,
                        broker.bootstrap, "bench.direct").run()
            report["direct_max"] = {"rows_per_sec": round(w.count / w.took), "rows": w.count,
                                    "seconds": round(w.took, 1)}
            print("direct/max", json.dumps(report["direct_max"]), flush=True)

            report["direct_latency"] = latency_run(pg, "direct", broker, "bench.direct", args)
            print("direct/latency", json.dumps(report["direct_latency"]), flush=True)
            relay.terminate()
            relay.wait(20)
    finally:
        if relay and relay.poll() is None:
            relay.kill()
        pg.close()
    if args.json:
        Path(args.json).write_text(json.dumps(report, indent=2) + "\n")


if __name__ == "__main__":
    main()
