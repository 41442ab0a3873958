"""The cap on a node catching up (`replica.recovery.max.bytes.per.sec`, issue 13: catch-up is
throttled so that a recovering node does not starve client traffic): a node back from a crash
copies its backlog within the cap, and still rejoins the ISR when the partition grows faster
than the cap, because its pace rises by itself. Set, shown and refused as a dynamic broker
config, with librdkafka's admin client (as kafka-configs.sh sets it)."""

import threading
import time

from confluent_kafka import Producer
from confluent_kafka.admin import (AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource,
                                   ConfigSource)

from broker.test_metrics import scrape, value
from conftest import wait_until

from security.test_kafka_tools import configs

from .harness import CLIENT_DEFAULTS, cluster  # noqa: F401  (fixture)
from .kafka_cluster import kafka_libs

CAP = "replica.recovery.max.bytes.per.sec"
DEFAULT_CAP = str(100 * 1024 * 1024)


def set_cap(c, node, rate):
    """Node `node`'s cap (None: back to the default). A client sends a broker's configs to that
    broker, so the node must run."""
    admin = AdminClient({"bootstrap.servers": c.bootstrap, **CLIENT_DEFAULTS})
    op = AlterConfigOpType.DELETE if rate is None else AlterConfigOpType.SET
    res = ConfigResource(ConfigResource.Type.BROKER, str(node),
                         incremental_configs=[ConfigEntry(CAP, rate, incremental_operation=op)])
    admin.incremental_alter_configs([res])[res].result(20)  # the admin kept alive until then


def described_cap(c, node):
    """The cap as node `node` describes it."""
    admin = AdminClient({"bootstrap.servers": c.node(node).bootstrap, **CLIENT_DEFAULTS})
    res = ConfigResource(ConfigResource.Type.BROKER, str(node))
    return admin.describe_configs([res])[res].result(20).get(CAP)


def source(entry):
    """A described config's source as Kafka's number."""
    return int(getattr(entry.source, "value", entry.source))


def log_end(c, node, topic):
    try:
        got = value(scrape(c.node(node)), "sluice_log_end_offset", topic=topic, partition=0)
    except OSError:
        return None
    return None if got is None else int(got)


def produce(bootstrap, topic, count, size, per_second=None, stop=None):
    """`count` records of `size` bytes to partition 0, acks=all; at `per_second` when given
    (until `stop` is set)."""
    p = Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 5, **CLIENT_DEFAULTS})
    failed = []
    started = time.monotonic()
    for i in range(count):
        if stop is not None and stop.is_set():
            break
        if per_second:
            ahead = started + i / per_second - time.monotonic()
            if ahead > 0:
                time.sleep(ahead)
        p.produce(topic, value=bytes(size), partition=0,
                  on_delivery=lambda err, _m: err and failed.append(err))
        p.poll(0)
    assert p.flush(30) == 0, "not every record was delivered"
    assert not failed, failed[:3]


def recovering_cluster(cluster, topic):
    """3 nodes, `topic` (RF=3, min.insync.replicas=2); the victim leads nothing of it:
    (cluster, leader, victim)."""
    c = cluster(3)
    c.create_topic(topic, 1, replication_factor=3, config={"min.insync.replicas": "2"})
    leader = c.wait_for_leader(topic, 0)
    victim = next(i for i in c.ids if i != leader)
    return c, leader, victim


def test_the_cap_is_a_dynamic_broker_config_with_a_default(cluster):
    c = cluster(3)
    entry = described_cap(c, 2)
    assert entry.value == DEFAULT_CAP and entry.is_default and not entry.is_read_only
    set_cap(c, 2, "1048576")
    entry = described_cap(c, 2)
    assert entry.value == "1048576" and not entry.is_default
    assert described_cap(c, 3).value == DEFAULT_CAP, "node 3 keeps the default"
    # Kept in the metadata log: still set after the node restarts.
    c.restart(2)
    assert wait_until(lambda: described_cap(c, 2).value == "1048576" or None, 30, "the cap after a restart")
    for bad in ("-1", "fast", "1000"):  # "1000": below the smallest cap, 64 KiB/s
        try:
            set_cap(c, 2, bad)
        except Exception as e:  # noqa: BLE001
            assert "INVALID_CONFIG" in str(e) and CAP in str(e), e
        else:
            raise AssertionError(f"{bad!r} was taken")
    set_cap(c, 2, None)
    assert described_cap(c, 2).is_default


def test_a_cluster_wide_default_reaches_every_node_and_a_node_s_own_value_wins(cluster):
    """Kafka's own `kafka-configs.sh --entity-type brokers --entity-default` (the broker
    resource named "", which librdkafka cannot name) sets the value of every node that has
    none of its own."""
    libs = kafka_libs()
    c = cluster(3)

    def default_cap(*args):
        r = configs(libs, c.bootstrap, *args, "--entity-type", "brokers", "--entity-default")
        assert r.returncode == 0, r.stdout + r.stderr
        return r.stdout

    assert CAP not in default_cap("--describe"), "no cluster-wide default set"
    default_cap("--alter", "--add-config", f"{CAP}=2097152")
    assert f"{CAP}=2097152" in default_cap("--describe")
    for node in c.ids:
        entry = wait_until(lambda: (lambda e: e if e.value == "2097152" else None)(described_cap(c, node)),
                           20, f"the default on node {node}")
        assert source(entry) == ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG.value, (node, entry)
    set_cap(c, 3, "4194304")
    assert described_cap(c, 3).value == "4194304"
    assert source(described_cap(c, 3)) == ConfigSource.DYNAMIC_BROKER_CONFIG.value
    assert described_cap(c, 1).value == "2097152", "the others keep the default"
    # Kept in the metadata log: every node has it after all restart.
    c.restart_all()
    for node, value in ((1, "2097152"), (2, "2097152"), (3, "4194304")):
        wait_until(lambda: described_cap(c, node).value == value or None, 30,
                   f"node {node}'s cap after a restart of all")
    default_cap("--alter", "--delete-config", CAP)
    wait_until(lambda: described_cap(c, 1).is_default or None, 20, "the built-in default on node 1")
    assert described_cap(c, 3).value == "4194304", "its own value stays"
    assert CAP not in default_cap("--describe")


def copy_time(c, victim, topic, target):
    """Starts `victim` and times its copy of `topic` up to `target`: from the first record it
    copies, not from its start (a loaded machine may take seconds to start a node)."""
    c.node(victim).start(wait=False)
    # Its end as it starts (the metrics answer once it runs), then the first record copied.
    held = wait_until(lambda: (lambda end: None if end is None else [end])(log_end(c, victim, topic)),
                      60, f"node {victim} to start")[0]
    wait_until(lambda: (log_end(c, victim, topic) or 0) > held or held >= target or None, 60,
               f"node {victim} to start copying")
    started = time.monotonic()
    wait_until(lambda: (log_end(c, victim, topic) or 0) >= target or None, 90,
               f"node {victim} to copy its backlog")
    return time.monotonic() - started


def test_a_node_back_from_a_crash_copies_within_the_cap(cluster):
    topic = "capped"
    c, leader, victim = recovering_cluster(cluster, topic)
    set_cap(c, victim, str(1 << 20))  # 1 MiB/s
    c.kill(victim)
    produce(c.bootstrap, topic, 6000, 1024)  # ~6.3 MB with the batches' headers
    took = copy_time(c, victim, topic, log_end(c, leader, topic))
    # ~6 MiB at 1 MiB/s (the bucket starts with a fifth of a second's worth).
    assert took >= 3.5, f"the backlog was copied in {took:.1f} s: not capped"
    c.wait_for_isr(topic, 0)

    # With no cap (0), the same backlog goes in well under that.
    set_cap(c, victim, "0")
    c.kill(victim)
    produce(c.bootstrap, topic, 6000, 1024)
    uncapped = copy_time(c, victim, topic, log_end(c, leader, topic))
    assert uncapped < took / 2, f"{uncapped:.1f} s without a cap, {took:.1f} s with"
    c.wait_for_isr(topic, 0)


def test_a_partition_growing_faster_than_the_cap_is_still_caught_up(cluster):
    """At 256 KiB/s a node never reaches a partition written at ~1 MB/s; its pace doubles
    every 5 s that it does not gain on it, so it rejoins the ISR while the writes go on."""
    topic = "outgrown"
    c, leader, victim = recovering_cluster(cluster, topic)
    set_cap(c, victim, str(256 << 10))
    c.kill(victim)
    produce(c.bootstrap, topic, 2000, 1024)
    stop = threading.Event()
    failures = []

    def write():
        try:
            produce(c.bootstrap, topic, 120_000, 1024, 1000, stop)
        except BaseException as e:  # noqa: BLE001  (reported by the test below)
            failures.append(e)

    writer = threading.Thread(target=write)
    writer.start()
    try:
        c.node(victim).start(wait=False)
        c.wait_for_isr(topic, 0, timeout=90)
        assert writer.is_alive(), "the writes ended before the node caught up: nothing shown"
    finally:
        stop.set()
        writer.join(60)
    assert not failures, failures
    assert "copying 2 times faster" in c.node(victim).log(), "the pace did not rise"
