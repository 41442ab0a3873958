"""A Sluice broker for the benchmark scripts: `target/release/sluice serve` on free loopback
ports and a fresh data directory under target/, ready when its /health answers, stopped and its
data removed on exit.

    with LocalBroker(["--log-flush-mode", "sync"]) as b:
        b.bootstrap, b.admin_url

With `listeners=("PLAINTEXT", "SASL_SSL")` it listens on one port per listener
(`b.address["SASL_SSL"]`; `b.bootstrap` is the PLAINTEXT one) and `b.create_user(name, pw)`
makes a SCRAM user through it; TLS needs the certificate flags in `extra`.
"""

import shutil
import socket
import subprocess
import tempfile
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class LocalBroker:
    def __init__(self, extra=(), prefix="sluice-bench-", binary=None, listeners=("PLAINTEXT",)):
        self.extra = list(extra)
        self.listeners = listeners
        self.prefix = prefix
        self.binary = Path(binary) if binary else ROOT / "target" / "release" / "sluice"

    def __enter__(self):
        self.data = Path(tempfile.mkdtemp(prefix=self.prefix, dir=ROOT / "target"))
        self.address = {name: f"127.0.0.1:{free_port()}" for name in self.listeners}
        admin = free_port()
        self.bootstrap = self.address["PLAINTEXT"]
        self.admin_url = f"http://127.0.0.1:{admin}"
        listen = ["--listen", self.bootstrap] if len(self.listeners) == 1 else \
            ["--listeners", ",".join(f"{n}://{a}" for n, a in self.address.items())]
        self.proc = subprocess.Popen([str(self.binary), "serve",
                                      *listen, "--admin-listen", f"127.0.0.1:{admin}",
                                      "--data-dir", str(self.data), "--log-level", "warn", *self.extra])
        deadline = time.monotonic() + 30
        while True:
            try:
                urllib.request.urlopen(self.admin_url + "/health", timeout=1)
                return self
            except OSError:
                if time.monotonic() > deadline or self.proc.poll() is not None:
                    self.__exit__(None, None, None)
                    raise RuntimeError("the broker did not start")
                time.sleep(0.05)

    def create_user(self, name, password):
        subprocess.run([str(self.binary), "user", "create", name, "-b", self.bootstrap],
                       input=password + "\n", text=True, check=True, capture_output=True)

    def __exit__(self, *exc):
        self.proc.terminate()
        try:
            self.proc.wait(20)
        except subprocess.TimeoutExpired:
            self.proc.kill()
        shutil.rmtree(self.data, ignore_errors=True)


def produce_all(producer, topic, value, count, on_delivery):
    """Hands `count` records to a confluent-kafka producer as fast as its queue takes them
    (waiting on a full queue), without flushing."""
    for _ in range(count):
        while True:
            try:
                producer.produce(topic, value=value, on_delivery=on_delivery)
                break
            except BufferError:
                producer.poll(0.001)
