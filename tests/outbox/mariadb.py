"""A throwaway MariaDB server for the outbox tests: Debian's `mariadb-server` binaries
(scripts/db-env), `mariadb-install-db` in a temporary directory, started as the user 'mysql' on
a free loopback port with the binary log on in row format. Nothing of the machine's own MariaDB
is used."""

import os
import pwd
import shutil
import signal
import subprocess
import tempfile
from pathlib import Path

import pymysql

from conftest import ARTIFACTS, free_port, log_prefix, wait_until


class MariaDB:
    def __init__(self, binlog=True, binlog_format="ROW", extra=()):
        if not shutil.which("mariadbd", path="/usr/sbin:/usr/bin"):
            raise RuntimeError("MariaDB's server is missing: run scripts/db-env")
        self.dir = Path(tempfile.mkdtemp(prefix="sluice-mariadb-"))
        self.data = self.dir / "data"
        self.port = free_port()
        self.binlog, self.binlog_format, self.extra = binlog, binlog_format, list(extra)
        self.proc = None
        self.log_path = ARTIFACTS / f"{log_prefix()}mariadb-{self.port}.log"
        ARTIFACTS.mkdir(parents=True, exist_ok=True)
        if os.geteuid() == 0:
            user = pwd.getpwnam("mysql")
            os.chown(self.dir, user.pw_uid, user.pw_gid)
        subprocess.run(["mariadb-install-db", "--no-defaults", f"--datadir={self.data}",
                        "--user=mysql", "--auth-root-authentication-method=normal",
                        "--skip-test-db"],
                       check=True, capture_output=True, timeout=180)

    def url(self, db="shop", user="root"):
        return f"mysql://{user}@127.0.0.1:{self.port}/{db}"

    def start(self):
        log = open(self.log_path, "ab")
        args = ["/usr/sbin/mariadbd", "--no-defaults", f"--datadir={self.data}", "--user=mysql",
                f"--port={self.port}", "--bind-address=127.0.0.1",
                f"--socket={self.dir / 'mysqld.sock'}", f"--pid-file={self.dir / 'mysqld.pid'}",
                "--server-id=1", "--innodb-buffer-pool-size=64M", "--skip-log-error"]
        if self.binlog:
            args += [f"--log-bin={self.data / 'binlog'}", f"--binlog-format={self.binlog_format}"]
        self.proc = subprocess.Popen(args + self.extra, stdout=log, stderr=subprocess.STDOUT)
        log.close()
        wait_until(self.ready, 60, f"MariaDB on port {self.port} ({self.log_path})")
        return self

    def ready(self):
        if self.proc.poll() is not None:
            raise RuntimeError(f"MariaDB exited: {self.log_path.read_text()[-2000:]}")
        try:
            self.connect(None).close()
            return True
        except pymysql.err.OperationalError:
            return False

    def connect(self, db="shop", **kw):
        return pymysql.connect(host="127.0.0.1", port=self.port, user="root", database=db,
                               connect_timeout=5, **kw)

    def stop(self, mode="fast"):
        """fast: SIGTERM (a clean shutdown); immediate: SIGKILL (recovery on the next start)."""
        if self.proc and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM if mode == "fast" else signal.SIGKILL)
            self.proc.wait(timeout=60)

    def restart(self, mode="fast"):
        self.stop(mode)
        return self.start()

    def close(self):
        self.stop("immediate")
        shutil.rmtree(self.dir, ignore_errors=True)
