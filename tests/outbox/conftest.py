"""Fixtures of the outbox relay tests: a PostgreSQL server (pg.py), the outbox table in the
Debezium layout, and `sluice outbox` processes."""

import json
import subprocess
import time
import urllib.request

import pytest

from conftest import ARTIFACTS, SLUICE, free_port, log_prefix, wait_until
from outbox.pg import Postgres

OUTBOX_DDL = """
CREATE TABLE outbox (
    id uuid PRIMARY KEY,
    aggregatetype text NOT NULL,
    aggregateid text NOT NULL,
    type text NOT NULL,
    payload bytea,
    created_at timestamptz NOT NULL DEFAULT now()
);
CREATE TABLE aggregates (id text PRIMARY KEY, version int NOT NULL);
"""


@pytest.fixture
def postgres():
    pg = Postgres().start()
    pg.create_database("shop")
    with pg.connect("shop", autocommit=True) as c:
        c.execute(OUTBOX_DDL)
    yield pg
    pg.close()


class Relay:
    """One `sluice outbox` process with /status and /metrics on its own port. `pg`: a database
    fixture (its `url(db)` is the source) or a source URL."""

    def __init__(self, pg, broker, *extra, db="shop", name="relay"):
        self.metrics_port = free_port()
        source = pg if isinstance(pg, str) else pg.url(db)
        self.args = [str(SLUICE), "outbox", "--source", source, "--table", "outbox",
                     "--brokers", broker.bootstrap, "--metrics-listen",
                     f"127.0.0.1:{self.metrics_port}", "--report-secs", "1", *extra]
        self.log_path = ARTIFACTS / f"{log_prefix()}outbox-{name}-{self.metrics_port}.log"
        self.proc = None

    def start(self):
        log = open(self.log_path, "ab")
        self.proc = subprocess.Popen(self.args, stdout=log, stderr=subprocess.STDOUT)
        log.close()
        return self

    def status(self):
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.metrics_port}/status",
                                        timeout=2) as r:
                return json.loads(r.read())
        except OSError:
            return None

    def state(self):
        s = self.status()
        return s and s["state"]

    def metrics(self):
        with urllib.request.urlopen(f"http://127.0.0.1:{self.metrics_port}/metrics",
                                    timeout=2) as r:
            return r.read().decode()

    def log(self):
        return self.log_path.read_text(errors="replace")

    def wait_state(self, state, timeout=30):
        wait_until(lambda: self.state() == state, timeout,
                   f"relay to be {state} (is {self.state()}): {self.log()[-2000:]}")

    def kill(self):
        if self.proc and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(timeout=10)

    def stop(self):
        if self.proc and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=10)


@pytest.fixture
def relays():
    started = []

    def start(pg, broker, *extra, db="shop", name="relay"):
        r = Relay(pg, broker, *extra, db=db, name=name).start()
        started.append(r)
        return r

    yield start
    for r in started:
        r.stop()


def run_relay(pg, broker, *extra, db="shop", table="outbox", timeout=60):
    """Runs `sluice outbox` expecting it to stop by itself; returns (exit code, output, took)."""
    args = [str(SLUICE), "outbox", "--source", pg if isinstance(pg, str) else pg.url(db),
            "--table", table, "--brokers", broker.bootstrap, "--report-secs", "0", *extra]
    start = time.monotonic()
    p = subprocess.run(args, capture_output=True, text=True, timeout=timeout)
    return p.returncode, p.stdout + p.stderr, time.monotonic() - start
