"""Apache Kafka as a 3-node KRaft cluster with the same interface as harness.Cluster, so that the
measurement scripts can run the same schedule against it in the same run (not used by the
tests). Kafka is installed from Maven Central by `sluice bench compare --install-only`; each
node is a combined broker+controller process on loopback with Kafka's default timeouts (broker
session 9 s)."""

import contextlib
import shutil
import socket
import subprocess
import tempfile
from pathlib import Path

from conftest import ARTIFACTS, SLUICE, log_prefix, setup_lock, wait_until

from .harness import Cluster, cluster_port

CLUSTER_ID = "c2x1aWNlZmFpbG92ZXJrYQ"


def kafka_libs():
    """The directory of Kafka's jars, installed (once, cached) by the sluice binary."""
    with setup_lock():
        r = subprocess.run([str(SLUICE), "bench", "compare", "--install-only"],
                           capture_output=True, text=True, timeout=900)
    assert r.returncode == 0, f"installing Kafka failed: {r.stderr[-2000:]}"
    return Path(r.stdout.strip().splitlines()[-1])


class KafkaNode:
    """One Kafka process; the attributes and methods harness.Cluster uses of a Node."""

    def __init__(self, node_id, data_dir, libs):
        self.node_id = node_id
        self.data_dir = Path(data_dir)
        self.libs = libs
        self.host = "127.0.0.1"
        self.port, self.controller_port = cluster_port(), cluster_port()
        self.voters = None
        self.proc = None
        self.log_path = None
        self.paused = False
        self.starts = 0

    @property
    def bootstrap(self):
        return f"{self.host}:{self.port}"

    @property
    def internal_address(self):
        return f"{self.host}:{self.controller_port}"

    def properties(self):
        path = self.data_dir.parent / f"kafka-{self.node_id}.properties"
        path.write_text(
            "process.roles=broker,controller\n"
            f"node.id={self.node_id}\ncontroller.quorum.voters={self.voters}\n"
            f"listeners=PLAINTEXT://{self.bootstrap},CONTROLLER://{self.internal_address}\n"
            f"advertised.listeners=PLAINTEXT://{self.bootstrap}\ncontroller.listener.names=CONTROLLER\n"
            "listener.security.protocol.map=PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT\n"
            f"log.dirs={self.data_dir}\nmin.insync.replicas=2\n"
            "offsets.topic.replication.factor=3\ntransaction.state.log.replication.factor=3\n"
            "transaction.state.log.min.isr=2\ngroup.initial.rebalance.delay.ms=0\n")
        return path

    def start(self, wait=True):
        assert not self.alive(), f"Kafka node {self.node_id} is already running"
        ARTIFACTS.mkdir(parents=True, exist_ok=True)
        self.starts += 1
        self.log_path = ARTIFACTS / f"{log_prefix()}kafka-{self.node_id}-{self.port}-{self.starts}.log"
        classpath = f"{self.libs}/*"
        config = self.properties()
        if not (self.data_dir / "meta.properties").exists():
            self.data_dir.mkdir(parents=True, exist_ok=True)
            subprocess.run(["java", "-cp", classpath, "kafka.tools.StorageTool", "format", "-t", CLUSTER_ID,
                            "-c", str(config)], check=True, capture_output=True, timeout=120)
        self.proc = subprocess.Popen(["java", "-Xms512m", "-Xmx512m", "-cp", classpath, "kafka.Kafka", str(config)],
                                     stdout=subprocess.DEVNULL, stderr=open(self.log_path, "wb"))
        self.paused = False
        if wait:
            self.wait_ready()
        return self

    def wait_ready(self, timeout=90):
        def listening():
            assert self.proc.poll() is None, f"Kafka node {self.node_id} exited: see {self.log_path}"
            with contextlib.suppress(OSError), socket.create_connection((self.host, self.port), 1):
                return True
            return False
        wait_until(listening, timeout, f"Kafka node {self.node_id} to listen")

    def kill(self):
        if self.proc and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(timeout=10)
        self.paused = False

    def alive(self):
        return self.proc is not None and self.proc.poll() is None

    def responsive(self):
        return self.alive() and not self.paused

    def describe(self):
        return f"Kafka node {self.node_id} ({'running' if self.alive() else 'down'}, {self.bootstrap}, log {self.log_path})"


class KafkaCluster(Cluster):
    """harness.Cluster over KafkaNodes: start, kill, restart, metadata and the waits work alike."""

    def __init__(self, n, base_dir, libs):  # noqa: super().__init__ would make Sluice nodes
        base_dir = Path(base_dir)
        self.nodes = {i: KafkaNode(i, base_dir / f"kafka-{i}", libs) for i in range(1, n + 1)}
        voters = ",".join(f"{i}@{node.internal_address}" for i, node in self.nodes.items())
        for node in self.nodes.values():
            node.voters = voters

    def start(self, timeout=120):
        return super().start(timeout)

    def restart(self, i, wait=True, timeout=90):
        return super().restart(i, wait, timeout)


@contextlib.contextmanager
def scratch_kafka_cluster(n, prefix):
    """A not yet started KafkaCluster in a fresh temporary directory, killed and removed at the end."""
    base = tempfile.mkdtemp(prefix=prefix)
    c = KafkaCluster(n, base, kafka_libs())
    try:
        yield c
    finally:
        c.kill_all()
        shutil.rmtree(base, ignore_errors=True)
