"""A clock jump on one node (as an NTP step or a wrong hand-set clock does), injected for real:
every node runs under libfaketime (LD_PRELOAD) reading its wall-clock offset from a file of its
own, so one node's `SystemTime` can jump by an hour while the others' and every monotonic clock
stay put. Nothing that decides liveness may follow the wall clock: a controller whose clock
jumps back must still fence a dead leader (and the partition fail over in seconds, not after
the hour), and a jump forward on the controller or on a partition leader must not fence live
nodes, move leaders or shrink in-sync sets. The idempotent acks=all workload runs throughout
and the checker proves nothing acknowledged was lost.

libfaketime comes from Debian (`libfaketime`, installed by scripts/python-env)."""

import glob
import os
import time

import pytest

from .checker import History
from .test_leader_epochs import current_epoch
from .test_partitions import controller
from .workload import ProducerWorkload, drain_and_check

pytestmark = pytest.mark.timeout(150)

TOPIC = "clock"
PARTITIONS = 3
HOUR = 3600


def libfaketime_path():
    found = sorted(glob.glob("/usr/lib/*/faketime/libfaketime.so.1"))
    return found[0] if found else None


def libfaketime():
    path = libfaketime_path()
    if path is None:
        pytest.fail("this test needs libfaketime (apt-get install libfaketime; scripts/python-env does)")
    return path


def faketime_env(lib, clock_file):
    """A node's environment for a wall clock offset read from `clock_file` (at most once a
    second); the monotonic clock is left alone, as an NTP step leaves it."""
    return {
        "LD_PRELOAD": lib,
        "FAKETIME_TIMESTAMP_FILE": clock_file,
        "FAKETIME_CACHE_DURATION": "1",
        "FAKETIME_DONT_FAKE_MONOTONIC": "1",
    }


def set_offset(path, seconds):
    """libfaketime re-reads the file at most once a second (FAKETIME_CACHE_DURATION)."""
    tmp = f"{path}.tmp"
    with open(tmp, "w") as f:
        f.write(f"{seconds:+d}\n")
    os.replace(tmp, path)


def jump(c, clocks, node, seconds):
    """Sets `node`'s wall clock `seconds` away from the real one and waits until it shows."""
    uptime = c.nodes[node].status()["uptime_ms"]
    set_offset(clocks[node], seconds)
    wait_for_jump(c, node, uptime)


def wait_for_jump(c, node, uptime_before):
    """The node's uptime (wall-clock based) moves by about an hour, or to 0 when the clock went
    back past the start: a check that the fault really happened."""
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        now = c.nodes[node].status()["uptime_ms"]
        if abs(now - uptime_before) > HOUR * 500 or (now == 0 and uptime_before > 2000):
            return
        time.sleep(0.2)
    raise AssertionError(f"node {node}'s clock did not jump (uptime {uptime_before} -> {now} ms)")


def faked_cluster(cluster, tmp_path, extra=()):
    """Three nodes, each under libfaketime with a clock file of its own (offset 0), started;
    -> (cluster, {node: clock file})."""
    lib = libfaketime()
    c = cluster(3, start=False, extra=extra)
    clocks = {}
    for i in c.ids:
        clocks[i] = str(tmp_path / f"clock-{i}")
        set_offset(clocks[i], 0)
        c.nodes[i].env.update(faketime_env(lib, clocks[i]))
    c.start()
    return c, clocks


def view(c, p, via):
    """Partition p's metadata as node `via` answers it (a fresh client sometimes asks another
    node; harness.metadata raises then, and we ask again)."""
    for _ in range(10):
        try:
            return c.partition(TOPIC, p, via=via)
        except RuntimeError:
            time.sleep(0.05)
    raise AssertionError(f"node {via} did not answer Metadata itself")


def leadership(c):
    """{partition: (leader, epoch, isr)} as the leaders say."""
    out = {}
    for p in range(PARTITIONS):
        leader = c.wait_for_leader(TOPIC, p, timeout=10)
        meta = view(c, p, leader)
        out[p] = (leader, current_epoch(c.nodes[leader].bootstrap, TOPIC, p), tuple(sorted(meta.isrs)))
    return out


def steady_for(c, seconds, before, what):
    """Leaders, their epochs and the in-sync sets stay as they were for `seconds`."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        for p in range(PARTITIONS):
            meta = view(c, p, before[p][0])
            now = (meta.leader, tuple(sorted(meta.isrs))) if meta is not None else None
            assert now == (before[p][0], before[p][2]), \
                f"after {what}: {TOPIC}/{p} went from leader/ISR {before[p][0]}/{before[p][2]} to {now}"
        time.sleep(0.1)
    after = leadership(c)
    assert after == before, f"after {what}: leadership moved: {before} -> {after}"


def test_a_clock_jump_on_one_node_neither_stalls_failover_nor_moves_leaders(cluster, tmp_path):
    # No automatic rebalancing: a leader that moves back to its preferred node would look like
    # a move caused by the jump.
    c, clocks = faked_cluster(cluster, tmp_path, extra=("--leader-balance-interval-ms", "0"))
    c.create_topic(TOPIC, PARTITIONS, replication_factor=3)
    history = History()
    w = ProducerWorkload(c.bootstrap, TOPIC, history, rate_per_s=200, duration_s=100.0).start()
    try:
        w.wait_acked(300, timeout=20)
        boss = controller(c)

        # 1. The controller's clock goes back an hour as a partition leader stops answering
        #    (SIGSTOP: its connections stay open, so only its session's end can fence it). Its
        #    last heartbeat then lies in the controller's future, and the controller must still
        #    see the session end and elect a successor within seconds.
        led = leadership(c)
        victim_p = next((p for p in range(PARTITIONS) if led[p][0] != boss), None)
        assert victim_p is not None, f"the controller {boss} leads every partition: {led}"
        victim = led[victim_p][0]
        uptime = c.nodes[boss].status()["uptime_ms"]
        set_offset(clocks[boss], -HOUR)
        stopped_at = time.monotonic()
        c.pause(victim)
        wait_for_jump(c, boss, uptime)
        c.wait_for_leader(TOPIC, victim_p, not_node=victim, timeout=10)
        assert time.monotonic() - stopped_at < 10
        # librdkafka waits out its requests in flight to the frozen node before it goes on
        # (test_failover's paused-leader test); writes are checked from the resume on.
        c.resume(victim)
        w.wait_acked(100, timeout=20, since=time.monotonic(), partition=victim_p)
        c.wait_in_sync(TOPIC, timeout=30)

        # 2. The controller's clock jumps forward two hours (to an hour ahead): no node's
        #    session may end for it.
        before = leadership(c)
        jump(c, clocks, boss, +HOUR)
        steady_for(c, 5, before, f"controller {boss}'s clock jumped forward")

        # 3. A partition leader that is not the controller jumps an hour ahead: its followers
        #    must not look an hour behind, nor its own session lapsed.
        leader = next(before[p][0] for p in range(PARTITIONS) if before[p][0] != boss)
        jump(c, clocks, leader, +HOUR)
        steady_for(c, 5, before, f"leader {leader}'s clock jumped forward")

        # 4. Every clock back to the real time (an hour back for both).
        for i in (boss, leader):
            jump(c, clocks, i, 0)
        steady_for(c, 3, before, "the clocks were set back")
        w.wait_acked(100, timeout=15, since=time.monotonic())
        w.finish()
    finally:
        w.abort()
    assert w.fatal is None, w.fatal
    result = drain_and_check(c, TOPIC, history, "clock-jump")
    assert result.valid, str(result)


def test_a_clock_step_on_every_node_expires_no_group_session_and_no_transaction(cluster, tmp_path):
    """Every node's wall clock steps an hour ahead (an NTP step across the cluster) while a
    consumer group is stable and a transaction is open. Sessions and transaction timeouts are
    durations, measured on a clock that is not stepped: no member is expired (no rebalance)
    and the transaction commits. With the wall clock, the coordinators saw an hour without a
    heartbeat and an hour-old transaction: every member was expired at the next tick and the
    transaction aborted for its timeout."""
    from confluent_kafka import Consumer, Producer

    from .harness import CLIENT_DEFAULTS

    c, clocks = faked_cluster(cluster, tmp_path)
    c.create_topic("stepped", 3, replication_factor=3)

    events = []
    consumer = Consumer({**CLIENT_DEFAULTS, "bootstrap.servers": c.bootstrap, "group.id": "stepped",
                         "session.timeout.ms": 10000, "heartbeat.interval.ms": 1000,
                         "auto.offset.reset": "earliest"})
    consumer.subscribe(["stepped"], on_assign=lambda _c, ps: events.append(("assign", len(ps))),
                       on_revoke=lambda _c, ps: events.append(("revoke", len(ps))))
    producer = Producer({**CLIENT_DEFAULTS, "bootstrap.servers": c.bootstrap,
                         "transactional.id": "stepped-txn", "transaction.timeout.ms": 30000})
    try:
        deadline = time.monotonic() + 30
        while not any(e[0] == "assign" and e[1] == 3 for e in events) and time.monotonic() < deadline:
            consumer.poll(0.2)
        assert events and events[-1] == ("assign", 3), events
        producer.init_transactions(30)
        producer.begin_transaction()
        producer.produce("stepped", value=b"inside", partition=0)
        producer.flush(10)
        seen = list(events)

        uptimes = {i: c.nodes[i].status()["uptime_ms"] for i in c.ids}
        for i in c.ids:
            set_offset(clocks[i], +HOUR)
        for i in c.ids:
            wait_for_jump(c, i, uptimes[i])
        # Several coordinator ticks and heartbeats after every node shows the new time.
        until = time.monotonic() + 5
        while time.monotonic() < until:
            consumer.poll(0.2)
        assert events == seen, f"the group rebalanced after the clock step: {events[len(seen):]}"
        producer.commit_transaction(30)
    finally:
        consumer.close()
    got = []
    reader = Consumer({**CLIENT_DEFAULTS, "bootstrap.servers": c.bootstrap, "group.id": "stepped-read",
                       "isolation.level": "read_committed", "auto.offset.reset": "earliest"})
    try:
        from confluent_kafka import TopicPartition
        reader.assign([TopicPartition("stepped", 0, 0)])
        until = time.monotonic() + 20
        while not got and time.monotonic() < until:
            m = reader.poll(0.5)
            if m is not None and m.error() is None:
                got.append(m.value())
    finally:
        reader.close()
    assert got == [b"inside"], got
