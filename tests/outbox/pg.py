"""A throwaway PostgreSQL server for the outbox tests: Debian's binaries (scripts/db-env),
`initdb` in a temporary directory, started as the user 'postgres' on a free loopback port with
wal_level=logical, stopped (or killed) by the test. Nothing of the machine's own PostgreSQL
is used."""

import glob
import os
import pwd
import shutil
import signal
import subprocess
import tempfile
import time
from pathlib import Path

import psycopg

from conftest import ARTIFACTS, free_port, log_prefix, wait_until


def pg_bin():
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"),
                   key=lambda p: [int(x) for x in Path(p).parts[-3].split(".") if x.isdigit()])
    if not found:
        raise RuntimeError("PostgreSQL's server binaries are missing: run scripts/db-env")
    return Path(found[-1]).parent


def as_postgres():
    user = pwd.getpwnam("postgres")
    return {"user": user.pw_uid, "group": user.pw_gid} if os.geteuid() == 0 else {}


class Postgres:
    def __init__(self, wal_level="logical"):
        self.bin = pg_bin()
        self.dir = Path(tempfile.mkdtemp(prefix="sluice-pg-"))
        self.data = self.dir / "data"
        self.port = free_port()
        self.wal_level = wal_level
        self.proc = None
        self.log_path = ARTIFACTS / f"{log_prefix()}postgres-{self.port}.log"
        ARTIFACTS.mkdir(parents=True, exist_ok=True)
        if os.geteuid() == 0:
            user = pwd.getpwnam("postgres")
            os.chown(self.dir, user.pw_uid, user.pw_gid)
        subprocess.run([str(self.bin / "initdb"), "-D", str(self.data), "-U", "postgres",
                        "--auth=trust", "-E", "UTF8", "--no-sync"],
                       check=True, capture_output=True, timeout=120, **as_postgres())

    def url(self, db="postgres", user="postgres"):
        return f"postgres://{user}@127.0.0.1:{self.port}/{db}"

    def start(self):
        log = open(self.log_path, "ab")
        self.proc = subprocess.Popen(
            [str(self.bin / "postgres"), "-D", str(self.data), "-p", str(self.port),
             "-k", str(self.dir), "-c", "listen_addresses=127.0.0.1",
             "-c", f"wal_level={self.wal_level}", "-c", "max_replication_slots=10",
             "-c", "max_wal_senders=10", "-c", "max_connections=60",
             "-c", "shared_buffers=64MB"],
            stdout=log, stderr=subprocess.STDOUT, **as_postgres())
        log.close()
        wait_until(self.ready, 60, f"PostgreSQL on port {self.port} ({self.log_path})")
        return self

    def ready(self):
        if self.proc.poll() is not None:
            raise RuntimeError(f"PostgreSQL exited: {self.log_path.read_text()[-2000:]}")
        try:
            with psycopg.connect(self.url(), connect_timeout=2):
                return True
        except psycopg.OperationalError:
            return False

    def stop(self, mode="fast"):
        """fast: SIGINT (a clean shutdown); immediate: SIGQUIT (no checkpoint: recovery on
        the next start, as after a crash)."""
        if self.proc and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGINT if mode == "fast" else signal.SIGQUIT)
            self.proc.wait(timeout=60)

    def restart(self, mode="fast"):
        self.stop(mode)
        return self.start()

    def connect(self, db="postgres", **kw):
        return psycopg.connect(self.url(db), connect_timeout=5, **kw)

    def create_database(self, name):
        with self.connect(autocommit=True) as c:
            c.execute(f'CREATE DATABASE "{name}"')

    def close(self):
        self.stop("immediate")
        shutil.rmtree(self.dir, ignore_errors=True)
