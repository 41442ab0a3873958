"""Shared fixtures: start a real `sluice serve` process on free loopback ports with its own
data directory, and helpers that wait on conditions with deadlines (never bare sleeps)."""

import base64
import contextlib
import fcntl
import json
import re
import os
import random
import shutil
import signal
import socket
import subprocess
import tempfile
import time
import urllib.request
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
SLUICE = Path(os.environ.get("SLUICE_BIN", ROOT / "target" / "release" / "sluice"))
ARTIFACTS = ROOT / "tests" / "artifacts"


def pytest_addoption(parser):
    parser.addoption("--long", action="store_true",
                     help="also run the long randomized cluster fault run (tests/cluster/test_soak.py; minutes)")
    parser.addoption("--long-seconds", type=float, default=600, help="how long --long injects faults")
    parser.addoption("--long-seed", type=int, default=None, help="replay this seed with --long")


def log_prefix():
    """`<test name>--` while pytest runs a test, so that a node log is not overwritten by a later
    test's node that drew the same port; empty outside pytest (scripts)."""
    current = os.environ.get("PYTEST_CURRENT_TEST", "")
    name = current.split("::")[-1].split(" ")[0]
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", name)[:100] + "--" if name else ""


MIN_FREE_DISK_MB = 300


def pytest_runtest_setup(item):
    """Fails a test at once, saying why, when the disk holding the temporary directories is
    nearly full: every broker would otherwise fail to start with a message that hides the cause
    (seen in CI: one test filled the disk and the rest of the suite errored at setup)."""
    free_mb = shutil.disk_usage(tempfile.gettempdir()).free // (1 << 20)
    if free_mb < MIN_FREE_DISK_MB:
        pytest.fail(f"only {free_mb} MB free on {tempfile.gettempdir()} (below {MIN_FREE_DISK_MB} MB): "
                    "the disk is nearly full, not a failure of this test", pytrace=False)


_taken_ports = set()


def worker_slice(low, high):
    """This test process's share of [low, high): all of it, or under pytest-xdist (scripts/test
    runs the suite in several worker processes) worker i's i-th of n equal slices, so that
    workers never draw the same port or network."""
    try:
        i = int(os.environ.get("PYTEST_XDIST_WORKER", "gw0").removeprefix("gw"))
        n = max(int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1")), i + 1)
    except ValueError:
        i, n = 0, 1
    width = (high - low) // n
    return low + i * width, low + (i + 1) * width


@contextlib.contextmanager
def setup_lock():
    """Held while installing a test dependency (apt, Maven, npm, Go): test processes running
    side by side must not install at once (apt takes a lock and fails; Maven's local repository
    is not safe for concurrent writes). scripts/java-env takes the same lock with flock(1), at
    the same path (${TMPDIR:-/tmp}). scripts/test installs everything before the tests start, so
    that in a test this is a no-op that does not count against its timeout."""
    path = Path(os.environ.get("TMPDIR") or "/tmp") / "sluice-test-setup.lock"
    with open(path, "w") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


def free_port():
    """A free loopback port below the kernel's ephemeral range, never handed out twice in one
    run. A port drawn from the ephemeral range (bind to port 0) may be taken as the source port
    of any outgoing connection (a client, a node dialing a peer) before the broker binds it,
    and the broker then fails to start ("Address already in use": seen in CI)."""
    try:
        with open("/proc/sys/net/ipv4/ip_local_port_range") as f:
            ephemeral_low = int(f.read().split()[0])
    except (OSError, ValueError, IndexError):
        ephemeral_low = 0
    low, high = worker_slice(10_000, ephemeral_low)
    for _ in range(200 if high > low + 1 else 0):
        port = random.randrange(low, high)
        if port in _taken_ports:
            continue
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
        _taken_ports.add(port)
        return port
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def write_cert(ca, directory, name, **issue):
    """A certificate for 127.0.0.1 with common name `name`, issued by the trustme `ca`: its
    chain and key as PEM files in `directory`, {"cert": path, "key": path}."""
    cert = ca.issue_cert("127.0.0.1", common_name=name, **issue)
    files = {"cert": directory / f"{name}.pem", "key": directory / f"{name}.key"}
    with open(files["cert"], "wb") as f:
        for blob in cert.cert_chain_pems:
            f.write(blob.bytes())
    cert.private_key_pem.write_to_path(str(files["key"]))
    return files


def cluster_certificates(directory):
    """A new CA (ca.pem) and one certificate for 127.0.0.1 (CN=node) it issued, as PEM files:
    {"ca", "cert", "key"}."""
    import trustme
    ca = trustme.CA()
    ca.cert_pem.write_to_path(str(directory / "ca.pem"))
    return {"ca": directory / "ca.pem", **write_cert(ca, directory, "node")}


def wait_until(predicate, timeout, what):
    """Polls `predicate` until it returns a truthy value or `timeout` seconds pass."""
    deadline = time.monotonic() + timeout
    last_error = None
    while time.monotonic() < deadline:
        try:
            value = predicate()
            if value:
                return value
        except Exception as e:  # the condition may raise until it holds
            last_error = e
        time.sleep(0.02)
    raise AssertionError(f"timed out after {timeout}s waiting for {what} (last error: {last_error!r})")


class Broker:
    """One broker process. `extra` are extra `sluice serve` flags; `env` extra environment."""

    def __init__(self, data_dir, extra=(), env=None, name="broker"):
        self.data_dir = Path(data_dir)
        self.host = "127.0.0.1"
        self.port = free_port()
        self.admin_port = free_port()
        self.extra = list(extra)
        self.env = dict(env or {})
        self.name = name
        self.proc = None
        self.log_path = None
        self.starts = 0
        self.prefix = []            # e.g. ["ip", "netns", "exec", NAME]: where the process runs
        self.admin_login = None     # (user, password): HTTP basic on the admin port (authorizer on)

    @property
    def bootstrap(self):
        return f"{self.host}:{self.port}"

    @property
    def admin_url(self):
        return f"http://{self.host}:{self.admin_port}"

    def command(self):
        return [
            *self.prefix, str(SLUICE), "serve",
            "--listen", self.bootstrap,
            "--admin-listen", f"{self.host}:{self.admin_port}",
            "--data-dir", str(self.data_dir),
            *self.extra,
        ]

    def start(self, wait=True):
        assert SLUICE.exists(), f"{SLUICE} is missing: build it with `cargo build --release -p sluice` (scripts/test builds target/ci/sluice and sets SLUICE_BIN)"
        ARTIFACTS.mkdir(parents=True, exist_ok=True)
        self.starts += 1
        self.log_path = ARTIFACTS / f"{log_prefix()}{self.name}-{self.port}-{self.starts}.log"
        env = {**os.environ, "RUST_LOG": os.environ.get("SLUICE_TEST_LOG", "info"), **self.env}
        self.proc = subprocess.Popen(self.command(), stdout=subprocess.DEVNULL,
                                     stderr=open(self.log_path, "wb"), env=env)
        if wait:
            self.wait_ready()
        return self

    def wait_ready(self, timeout=30):
        def ready():
            if self.proc.poll() is not None:
                raise AssertionError(f"broker exited with {self.proc.returncode}: {self.log()}")
            return self.health()
        wait_until(ready, timeout, "the broker to serve")

    def health(self):
        """Whether the admin port answers /health (open without a login)."""
        try:
            with urllib.request.urlopen(self.admin_url + "/health", timeout=2) as r:
                return r.status == 200
        except OSError:
            return False

    def admin_request(self, path):
        """A request for `path` on the admin port, with this broker's login if it needs one."""
        request = urllib.request.Request(self.admin_url + path)
        if self.admin_login:
            token = base64.b64encode(f"{self.admin_login[0]}:{self.admin_login[1]}".encode()).decode()
            request.add_header("Authorization", "Basic " + token)
        elif self.env.get("SLUICE_ADMIN_TOKEN"):
            request.add_header("Authorization", "Bearer " + self.env["SLUICE_ADMIN_TOKEN"])
        return request

    def status(self):
        return self.admin_get("/api/status")

    def admin_get(self, path):
        """GET `path` from the admin API, as JSON."""
        with urllib.request.urlopen(self.admin_request(path), timeout=2) as r:
            return json.load(r)

    def log(self):
        return self.log_path.read_text(errors="replace") if self.log_path and self.log_path.exists() else ""

    def kill(self):
        """SIGKILL: the crash case."""
        if self.proc and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait(timeout=10)

    def stop(self):
        """SIGTERM: a clean shutdown; returns the exit code."""
        if self.proc and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                return self.proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                raise AssertionError("broker did not stop within 20 s of SIGTERM")
        return self.proc.returncode if self.proc else None

    def alive(self):
        return self.proc is not None and self.proc.poll() is None


@pytest.fixture
def start_broker(tmp_path):
    """Factory: start_broker(extra_flags, env=...) -> Broker; all are stopped at teardown."""
    started = []

    def start(extra=(), env=None, data_dir=None, name="broker"):
        b = Broker(data_dir or tmp_path / f"data{len(started)}", extra, env, name)
        started.append(b)
        return b.start()

    yield start
    for b in started:
        b.kill()


@pytest.fixture
def broker(start_broker):
    return start_broker()


def sluice_cli(*args, stdin=None, check=True, timeout=60):
    """Runs the `sluice` binary; returns CompletedProcess with text output."""
    r = subprocess.run([str(SLUICE), *args], input=stdin, capture_output=True, text=True, timeout=timeout)
    if check and r.returncode != 0:
        raise AssertionError(f"sluice {' '.join(args)} failed ({r.returncode}): {r.stderr}")
    return r
