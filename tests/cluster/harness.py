"""A cluster of `sluice serve` processes on loopback, one per node, each with its own ports and
data directory, and the faults the tests inject into it: SIGKILL, SIGTERM, SIGSTOP/SIGCONT,
restart on the same ports and data, and a wiped data directory.

    node i:  --listen 127.0.0.1:K_i (Kafka)  --admin-listen 127.0.0.1:A_i (status)
             --cluster 1@127.0.0.1:C_1,2@127.0.0.1:C_2,... (internal: Raft and replication)
             --data-dir <base>/node-i     logs: tests/artifacts/[<test>--]cluster-<i>-<K_i>-<start>.log

Who leads a partition is what the Kafka Metadata API says (as clients see it), asked of a node
that is running and not paused. Every wait has a deadline (conftest.wait_until).
"""

import contextlib
import os
import re
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from pathlib import Path

import pytest
from confluent_kafka import KafkaError, KafkaException
from confluent_kafka.admin import AdminClient, NewTopic

from conftest import SLUICE, Broker, free_port, wait_until

# librdkafka's defaults back off reconnects up to 10 s; a restarted node must be seen sooner.
CLIENT_DEFAULTS = {"reconnect.backoff.max.ms": 1000, "socket.connection.setup.timeout.ms": 5000}
# SLUICE_TEST_RDKAFKA_DEBUG=eos,cgrp,... turns on librdkafka's debug log (to stderr, shown for a
# failed test): for diagnosing a client that waits, not for CI.
if os.environ.get("SLUICE_TEST_RDKAFKA_DEBUG"):
    CLIENT_DEFAULTS["debug"] = os.environ["SLUICE_TEST_RDKAFKA_DEBUG"]


def cluster_port():
    """A free loopback port below the kernel's ephemeral range (conftest.free_port): a cluster
    keeps 3 ports per node across many restarts, and a port in the ephemeral range could be
    taken as the source port of an outgoing connection while its node is down."""
    return free_port()


def cluster_cli_missing():
    """Why `sluice serve` cannot run a cluster node, or None if it can. A missing binary is not a
    reason: the tests then fail with the build hint, as the single-broker tests do."""
    if not SLUICE.exists():
        return None
    r = subprocess.run([str(SLUICE), "serve", "--help"], capture_output=True, text=True, timeout=30)
    if re.search(r"--cluster[\s=<]", r.stdout + r.stderr):
        return None
    return f"{SLUICE} serve has no --cluster flag (replication is not in this build yet)"


class Node(Broker):
    """One cluster member: a conftest Broker with a node id, an internal listener and a rack."""

    def __init__(self, node_id, data_dir, extra=(), env=None, rack=None, network=None):
        super().__init__(data_dir, extra, env, name=f"cluster-{node_id}")
        self.node_id = node_id
        if network is None:
            self.port, self.admin_port = cluster_port(), cluster_port()
            self.internal_port = cluster_port()
        else:
            # A network namespace of its own (netns.py): its own address, so fixed ports.
            self.host = network.address(node_id)
            self.prefix = network.exec_prefix(node_id)
            self.port, self.admin_port, self.internal_port = 9092, 8080, 9093
            # Not loopback: the admin API then needs a token (status() sends it).
            self.env.setdefault("SLUICE_ADMIN_TOKEN", "netns-test-admin-token-000000")
        self.rack = rack
        self.voters = None          # the --cluster list; the Cluster sets it
        self.learner = False        # not in --cluster: joins with --internal-listen
        self.paused = False

    @property
    def internal_address(self):
        return f"{self.host}:{self.internal_port}"

    def command(self):
        flags = ["--node-id", str(self.node_id), "--cluster", self.voters]
        if self.learner:
            flags += ["--internal-listen", self.internal_address]
        if self.rack is not None:
            flags += ["--rack", self.rack]
        return super().command() + flags

    def start(self, wait=True):
        assert not self.alive(), f"node {self.node_id} is already running"
        self.paused = False
        return super().start(wait)

    def wait_ready(self, timeout=30):
        """As Broker.wait_ready, but a node that exits fails at once, not at the deadline."""
        def ready():
            code = self.proc.poll()
            if code is not None:
                return "exited", code
            return self.health() and ("ready", None)
        state, code = wait_until(ready, timeout, f"node {self.node_id} to serve ({self.log_path})")
        assert state == "ready", f"node {self.node_id} exited with {code}: {self.log()[-3000:]}"

    def kill(self):
        super().kill()              # SIGKILL stops a stopped process too
        self.paused = False

    def stop(self):
        if self.paused and self.alive():
            self.resume()           # SIGTERM would wait for SIGCONT anyway
        return super().stop()

    def pause(self):
        assert self.alive() and not self.paused, f"node {self.node_id} is not running"
        self.proc.send_signal(signal.SIGSTOP)
        self.paused = True

    def resume(self):
        assert self.paused, f"node {self.node_id} is not paused"
        self.proc.send_signal(signal.SIGCONT)
        self.paused = False

    def responsive(self):
        return self.alive() and not self.paused

    def describe(self):
        state = "paused" if self.paused else "running" if self.alive() else "down"
        return f"node {self.node_id} ({state}, kafka {self.bootstrap}, log {self.log_path})"


class Cluster:
    """Nodes 1..n (3 or 5 in the tests). `extra`: flags for every node; `racks`: one per node."""

    def __init__(self, n, base_dir, extra=(), env=None, racks=None, network=None):
        assert n >= 1 and (racks is None or len(racks) == n)
        base_dir = Path(base_dir)
        self.nodes = {i: Node(i, base_dir / f"node-{i}", extra, env, racks[i - 1] if racks else None, network)
                      for i in range(1, n + 1)}
        voters = ",".join(f"{i}@{node.internal_address}" for i, node in self.nodes.items())
        for node in self.nodes.values():
            node.voters = voters

    # --- membership and processes -------------------------------------------------------------

    def add_node(self, i, extra=(), env=None, rack=None, start=True, timeout=30):
        """A new node `i` outside the voters: it joins as a non-voting member (a learner that
        hosts replicas)."""
        assert i not in self.nodes
        first = next(iter(self.nodes.values()))
        node = Node(i, first.data_dir.parent / f"node-{i}", extra, env, rack)
        node.voters, node.learner = first.voters, True
        self.nodes[i] = node
        if start:
            node.start(wait=False)
            self.wait_ready([i], timeout)
        return node

    @property
    def ids(self):
        return list(self.nodes)

    def node(self, i):
        return self.nodes[i]

    @property
    def bootstrap(self):
        return ",".join(node.bootstrap for node in self.nodes.values())

    def live(self):
        """Ids of the nodes that run and are not paused."""
        return [i for i, node in self.nodes.items() if node.responsive()]

    def describe(self):
        return "; ".join(node.describe() for node in self.nodes.values())

    def start(self, timeout=30):
        """Starts every node at once (none can be ready before a quorum is up), then waits until
        each serves and lists all the others as brokers."""
        for node in self.nodes.values():
            node.start(wait=False)
        self.wait_ready(self.ids, timeout)
        return self

    def wait_ready(self, ids, timeout=30):
        deadline = time.monotonic() + timeout
        for i in ids:
            self.nodes[i].wait_ready(max(deadline - time.monotonic(), 0.1))
        self.wait_formed(max(deadline - time.monotonic(), 0.1))

    def wait_formed(self, timeout=30):
        """Every live node's Metadata lists every live node, and the cluster counts them all as
        live (DescribeCluster lists unfenced nodes only): Metadata lists fenced nodes too, and a
        node restarted a moment ago is fenced until its first heartbeat, so a replication factor
        3 topic made before that is refused (INVALID_REPLICATION_FACTOR)."""
        deadline = time.monotonic() + timeout
        for i in self.live():
            wait_until(lambda: set(self.live()) <= set(self.metadata(via=i).brokers),
                       max(deadline - time.monotonic(), 0.1), f"node {i} to list brokers {self.live()}")
        wait_until(lambda: set(self.live()) <= self.unfenced(),
                   max(deadline - time.monotonic(), 0.1), f"nodes {self.live()} to be unfenced")

    def unfenced(self, admin=None):
        """Ids of the nodes DescribeCluster lists (the unfenced ones), asked of a live node; an
        `admin` client may be given where the anonymous user may not describe the cluster."""
        live = self.live()
        assert live, f"no live node to ask: {self.describe()}"
        anonymous = admin is None
        if anonymous:
            admin = AdminClient({"bootstrap.servers": self.nodes[live[0]].bootstrap, **CLIENT_DEFAULTS})
        try:
            result = admin.describe_cluster(request_timeout=5).result(timeout=10)
        except KafkaException as e:
            if e.args[0].code() == KafkaError.CLUSTER_AUTHORIZATION_FAILED and anonymous:
                return set(live)   # only Metadata to go by (the fixture asks again as admin)
            raise
        return {n.id for n in result.nodes}

    def kill(self, i):
        """SIGKILL: the crash case."""
        self.nodes[i].kill()

    def stop(self, i):
        """SIGTERM: a clean shutdown; returns the exit code."""
        return self.nodes[i].stop()

    def pause(self, i):
        """SIGSTOP: the node keeps its sockets but answers nothing (a GC pause, a VM stall)."""
        self.nodes[i].pause()

    def resume(self, i):
        """SIGCONT."""
        self.nodes[i].resume()

    def restart(self, i, wait=True, timeout=30):
        """Starts node i again on its ports and data directory (killing it first if it runs)."""
        self.nodes[i].kill()
        self.nodes[i].start(wait=False)
        if wait:
            self.wait_ready([i], timeout)

    def wipe(self, i, wait=True, timeout=30, leave_isr_of=None):
        """Kills node i, deletes its data directory and starts it empty: a replaced disk.

        With `leave_isr_of` (a topic) the node stays down until it has left the ISR of every
        partition of that topic, so that its return to those ISRs shows that it refilled: a
        quick restart can still be listed in sync from before the wipe."""
        self.nodes[i].kill()
        if leave_isr_of is not None:
            deadline = time.monotonic() + timeout
            for p in wait_until(lambda: self.partitions_of(leave_isr_of), timeout, f"the partitions of {leave_isr_of}"):
                self.wait_for_isr(leave_isr_of, p, without=[i], timeout=max(deadline - time.monotonic(), 0.1))
        shutil.rmtree(self.nodes[i].data_dir, ignore_errors=True)
        self.restart(i, wait, timeout)

    def kill_all(self):
        """SIGKILLs every running node at once (all signals sent before any wait)."""
        running = [node for node in self.nodes.values() if node.alive()]
        for node in running:
            node.proc.send_signal(signal.SIGKILL)
        for node in running:
            node.kill()

    def restart_all(self, timeout=30):
        self.kill_all()
        self.start(timeout)

    # --- what clients see ---------------------------------------------------------------------

    def metadata(self, topic=None, via=None, timeout=3):
        """Metadata (confluent_kafka ClusterMetadata) answered by node `via` (default: any live
        node, asked through the first). Raises if another node answered when `via` was named:
        librdkafka may route the request to any broker it is connected to."""
        # librdkafka sends the request over any connection it has; once it has learned the other
        # nodes it may pick one of them. A fresh client usually asks its bootstrap node, so ask
        # again a few times before giving up.
        answered = []
        anyone = via is None
        if via is None:
            live = self.live()
            assert live, f"no live node to ask: {self.describe()}"
            via = live[0]
        for attempt in range(10):
            if attempt:
                # A node just restarted may be slow to answer on its bootstrap connection, and
                # librdkafka then asks another: five quick tries in a row met that in CI.
                time.sleep(0.2)
            admin = AdminClient({"bootstrap.servers": self.nodes[via].bootstrap, **CLIENT_DEFAULTS})
            md = admin.list_topics(topic, timeout=timeout)
            # -1: the answer came over the bootstrap connection, before it learned the node's id.
            # Asked of no node in particular, any live node's answer will do.
            if md.orig_broker_id in (-1, via) or (anyone and md.orig_broker_id in self.live()):
                return md
            answered.append(md.orig_broker_id)
        raise RuntimeError(f"asked node {via}, nodes {answered} answered")

    def metadata_leader(self, via=None):
        """The metadata group's leader (Kafka's active controller) as node `via` (default: the
        first live node) knows it, from its admin API; None while it knows none. Metadata's
        controller_id is no use for this: each node names itself there (as Kafka in KRaft mode
        names a random live broker)."""
        if via is None:
            live = self.live()
            assert live, f"no live node to ask: {self.describe()}"
            via = live[0]
        leader = self.nodes[via].admin_get("/api/overview")["controller_id"]
        return leader if leader in self.ids else None

    def partition(self, topic, partition, via=None):
        """PartitionMetadata (.leader, .replicas, .isrs, .error) as node `via` sees it, or None if
        that node does not know the partition."""
        t = self.metadata(topic, via).topics.get(topic)
        if t is None or t.error is not None:
            return None
        return t.partitions.get(partition)

    def leader_of(self, topic, partition, via=None):
        """The leader's node id as a live node (`via`, or the first one that answers) reports
        it; None while there is none."""
        for i in [via] if via is not None else self.live():
            try:
                p = self.partition(topic, partition, via=i)
            except Exception:  # that node did not answer in time; ask the next
                continue
            return p.leader if p is not None and p.error is None and p.leader >= 0 else None
        return None

    def wait_for_leader(self, topic, partition, not_node=None, timeout=30):
        """Waits until a majority of the live nodes name one leader that is live, is not
        `not_node`, and names itself. One node's view is not enough: a follower's can be stale
        right after a failover, and a node that has just restarted can still name itself from
        its metadata of before it went down (seen as failovers "timed" at 0.01 s)."""
        def settled():
            live = self.live()
            views = [self.leader_of(topic, partition, via=i) for i in live]
            for leader in set(views):
                if leader is None or leader == not_node or leader not in live:
                    continue
                if views.count(leader) * 2 > len(live) and \
                        self.leader_of(topic, partition, via=leader) == leader:
                    return leader
            return None
        return wait_until(settled, timeout, f"a leader of {topic}/{partition} other than {not_node} "
                                            f"({self.describe()})")

    def wait_for_isr(self, topic, partition, nodes=None, without=(), timeout=30):
        """Waits until the partition's leader reports `nodes` (default: all its replicas but
        `without`) in the ISR and none of `without`; returns the ISR."""
        def in_sync():
            leader = self.leader_of(topic, partition)
            if leader is None or leader not in self.live():
                return None
            p = self.partition(topic, partition, via=leader)
            if p is None or p.leader != leader:
                return None
            want = set(p.replicas if nodes is None else nodes) - set(without)
            isr = set(p.isrs)
            return sorted(isr) if want <= isr and not isr & set(without) else None
        return wait_until(in_sync, timeout, f"{topic}/{partition} to have {nodes or 'every replica'} in its ISR"
                                            f"{f' and not {list(without)}' if without else ''} ({self.describe()})")

    def partitions_of(self, topic):
        return sorted(self.metadata(topic).topics[topic].partitions)

    def wait_in_sync(self, topic, timeout=30):
        """Every partition of `topic` has a live leader and all its replicas in the ISR."""
        deadline = time.monotonic() + timeout
        for p in wait_until(lambda: self.partitions_of(topic), timeout, f"the partitions of {topic}"):
            self.wait_for_isr(topic, p, timeout=max(deadline - time.monotonic(), 0.1))

    def wait_all_in_sync(self, timeout=60):
        """Every partition of every topic (internal ones too) has a leader and all its replicas
        in the ISR, as one node's Metadata tells it (one request per look)."""
        def in_sync():
            try:
                md = self.metadata()
            except Exception:  # the node asked did not answer in time: look again
                return False
            return all(p.leader >= 0 and set(p.replicas) <= set(p.isrs)
                       for t in md.topics.values() for p in t.partitions.values())
        wait_until(in_sync, timeout, f"every partition to be fully in sync ({self.describe()})")

    def create_topic(self, name, partitions=1, replication_factor=3, config=None, timeout=30):
        """Creates the topic and waits until every partition is led and fully in sync."""
        admin = AdminClient({"bootstrap.servers": self.bootstrap, **CLIENT_DEFAULTS})
        futures = admin.create_topics([NewTopic(name, num_partitions=partitions,
                                                replication_factor=replication_factor, config=config or {})])
        futures[name].result(timeout)
        wait_until(lambda: len(self.partitions_of(name)) == partitions, timeout, f"{name} in Metadata")
        self.wait_in_sync(name, timeout)


@contextlib.contextmanager
def scratch_cluster(n, prefix, keep=False, env=None, network=None):
    """For the scripts outside pytest: a not yet started Cluster of `n` nodes in a fresh
    temporary directory; every node is SIGKILLed at the end and the directory removed unless
    `keep`."""
    base = tempfile.mkdtemp(prefix=prefix)
    c = Cluster(n, base, env=env, network=network)
    try:
        yield c
    finally:
        c.kill_all()
        if keep:
            print(f"data directories kept under {base}; node logs in tests/artifacts/*cluster-*.log")
        else:
            shutil.rmtree(base, ignore_errors=True)


@pytest.fixture
def cluster(tmp_path):
    """Factory: cluster(n=3, extra=(), env=None, racks=None, start=True, network=None) -> Cluster;
    every node is SIGKILLed at teardown. `network`: a netns.Network to run each node in a
    network namespace of its own (links can then be cut)."""
    made = []

    def make(n=3, extra=(), env=None, racks=None, start=True, network=None):
        c = Cluster(n, tmp_path / f"cluster-{len(made)}", extra, env, racks, network)
        made.append(c)
        return c.start() if start else c

    yield make
    for c in made:
        c.kill_all()
