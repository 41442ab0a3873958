"""Consumer groups with real clients: partitions shared within a group, every group gets
every record, members that die are replaced after their session timeout, committed offsets
survive a broker restart, cooperative and static members rebalance as little as they should."""

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from confluent_kafka import Producer

from conftest import sluice_cli, wait_until
from broker.clients import create_topic

HERE = Path(__file__).resolve().parent
FAST = ["--group-initial-rebalance-delay-ms", "500", "--group-min-session-timeout-ms", "1000"]


class Member:
    def __init__(self, broker, group, topic, out, **opts):
        self.out = str(out)
        cmd = [sys.executable, str(HERE / "consumer_proc.py"), broker.bootstrap, group, topic, self.out]
        for k, v in opts.items():
            cmd += [f"--{k.replace('_', '-')}", str(v)]
        self.proc = subprocess.Popen(cmd, stderr=open(self.out + ".stderr", "w"))

    def _json(self, suffix, default):
        try:
            return json.loads(Path(self.out + suffix).read_text())
        except (FileNotFoundError, json.JSONDecodeError):
            return default

    def assignment(self):
        return self._json(".assignment", [])

    def events(self):
        return self._json(".events", [])

    def records(self):
        try:
            lines = Path(self.out + ".records").read_text().splitlines()
        except FileNotFoundError:
            return []
        return [tuple(int(x) if i < 2 else x for i, x in enumerate(l.split(" ", 2))) for l in lines if l.count(" ") >= 2]

    def stderr_tail(self, limit=2000):
        try:
            return Path(self.out + ".stderr").read_text()[-limit:]
        except FileNotFoundError:
            return ""

    def kill(self):
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(10)

    def stop(self):
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(20)
            except subprocess.TimeoutExpired:
                self.proc.kill()


@pytest.fixture
def members():
    started = []
    yield started
    for m in started:
        if m.proc.poll() is None:
            m.proc.kill()


def produce(bootstrap, topic, start, count, keyed=False):
    p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 2})
    for i in range(start, start + count):
        p.produce(topic, key=f"k{i}".encode() if keyed else None, value=str(i).encode())
        if i % 1000 == 0:
            p.poll(0)
    assert p.flush(30) == 0


def values(records):
    return [int(r[2]) for r in records]


def wait_for_assignments(group_members, sizes, timeout=60):
    def spread():
        got = sorted(len(m.assignment()) for m in group_members)
        parts = sorted(p for m in group_members for p in m.assignment())
        return got == sorted(sizes) and len(parts) == len(set(parts)) and parts
    try:
        return wait_until(spread, timeout, f"assignments of sizes {sizes}")
    except AssertionError as e:
        # Say what each member saw, so that a failure in CI can be read without a rerun.
        seen = [f"{m.out}: events {m.events()[-6:]}, stderr {m.stderr_tail()!r}" for m in group_members]
        raise AssertionError(f"{e}\n" + "\n".join(seen)) from None


@pytest.mark.parametrize("client", ["confluent", "kafka-python"])
def test_three_members_share_six_partitions_exactly_once(start_broker, members, tmp_path, client):
    broker = start_broker(FAST)
    create_topic(broker.bootstrap, "shared", 6)
    for i in range(3):
        members.append(Member(broker, "g1", "shared", tmp_path / f"m{i}", client=client))
    parts = wait_for_assignments(members, [2, 2, 2])
    assert parts == [0, 1, 2, 3, 4, 5]
    produce(broker.bootstrap, "shared", 0, 30_000)
    wait_until(lambda: sum(len(m.records()) for m in members) >= 30_000, 60, "all records consumed")
    got = [v for m in members for v in values(m.records())]
    assert sorted(got) == list(range(30_000)), "every record exactly once across the group"
    for m in members:
        assert {r[0] for r in m.records()} <= set(m.assignment()), "a member only reads its partitions"


def test_a_killed_member_is_replaced_and_offsets_survive_a_restart(start_broker, members, tmp_path):
    broker = start_broker(FAST)
    create_topic(broker.bootstrap, "takeover", 6)
    for i in range(3):
        members.append(Member(broker, "g2", "takeover", tmp_path / f"m{i}", session_ms=3000))
    wait_for_assignments(members, [2, 2, 2])
    produce(broker.bootstrap, "takeover", 0, 20_000)
    wait_until(lambda: sum(len(m.records()) for m in members) >= 20_000, 60, "first half consumed")
    victim = members[1]
    victim_parts = set(victim.assignment())
    killed_at = time.time()
    victim.kill()
    produce(broker.bootstrap, "takeover", 20_000, 20_000)
    survivors = [members[0], members[2]]
    wait_for_assignments(survivors, [3, 3], timeout=30)
    took_over = time.time() - killed_at
    assert took_over < 3.0 + 5.0, f"the group recovered {took_over:.1f}s after the kill (session 3 s)"
    wait_until(lambda: len({v for m in survivors for v in values(m.records())} | set(values(victim.records()))) >= 40_000,
               60, "every record consumed after the takeover")
    all_values = [v for m in members for v in values(m.records())]
    assert set(all_values) == set(range(40_000))
    # Duplicates only where the dead member had read without committing (its partitions).
    dupes = {v for v in all_values if all_values.count(v) > 1} if len(all_values) != len(set(all_values)) else set()
    dup_partitions = {r[0] for m in members for r in m.records() if int(r[2]) in dupes}
    assert dup_partitions <= victim_parts

    # Restart the broker: committed offsets are intact and a new member resumes at them.
    for m in survivors:
        m.stop()
    committed = sluice_cli("group", "describe", "g2", "-b", broker.bootstrap).stdout
    assert broker.stop() == 0
    broker.start()
    after = sluice_cli("group", "describe", "g2", "-b", broker.bootstrap).stdout
    rows = lambda text: sorted(l.split()[:3] for l in text.splitlines() if l.startswith("takeover"))
    assert rows(after) == rows(committed)
    # The group comes back as it was left (empty, at its last generation), not as an earlier
    # generation whose members are gone (which made their partitions look owned).
    header = lambda text: text.splitlines()[0]
    assert "State: Empty" in header(committed) and "Members: 0" in header(committed), committed
    assert header(after) == header(committed), after
    assert all(int(r[2]) > 0 for r in rows(after))
    produce(broker.bootstrap, "takeover", 40_000, 600)
    fresh = Member(broker, "g2", "takeover", tmp_path / "fresh")
    members.append(fresh)
    wait_until(lambda: len(fresh.records()) >= 600, 60, "the new member reads only what is new")
    time.sleep(1.0)
    assert sorted(values(fresh.records())) == list(range(40_000, 40_600)), "resumed at the committed offsets"


def test_two_groups_each_get_every_record(start_broker, members, tmp_path):
    broker = start_broker(FAST)
    create_topic(broker.bootstrap, "broadcast", 3)
    a = Member(broker, "ga", "broadcast", tmp_path / "a")
    b = Member(broker, "gb", "broadcast", tmp_path / "b", client="kafka-python")
    members += [a, b]
    wait_for_assignments([a], [3])
    wait_for_assignments([b], [3])
    produce(broker.bootstrap, "broadcast", 0, 5_000)
    for m in (a, b):
        wait_until(lambda m=m: len(m.records()) >= 5_000, 60, "a group consumed everything")
        assert sorted(values(m.records())) == list(range(5_000))


def test_cooperative_sticky_rebalances_incrementally(start_broker, members, tmp_path):
    broker = start_broker(FAST)
    create_topic(broker.bootstrap, "coop", 4)
    first = Member(broker, "gc", "coop", tmp_path / "first", strategy="cooperative-sticky")
    members.append(first)
    wait_for_assignments([first], [4])
    second = Member(broker, "gc", "coop", tmp_path / "second", strategy="cooperative-sticky")
    members.append(second)
    wait_for_assignments([first, second], [2, 2])
    revoked = [p for kind, parts, _ in first.events() if kind == "revoke" for p in parts]
    assert len(revoked) == 2, f"only the partitions that moved are revoked: {first.events()}"
    assert set(first.assignment()) | set(revoked) == {0, 1, 2, 3}


def test_static_member_rejoins_without_rebalancing_the_others(start_broker, members, tmp_path):
    broker = start_broker(FAST)
    create_topic(broker.bootstrap, "static", 4)
    a = Member(broker, "gs", "static", tmp_path / "a", instance="member-a", session_ms=10000)
    b = Member(broker, "gs", "static", tmp_path / "b", instance="member-b", session_ms=10000)
    members += [a, b]
    wait_for_assignments([a, b], [2, 2])
    events_before = len(a.events())
    b_parts = b.assignment()
    b.kill()
    b2 = Member(broker, "gs", "static", tmp_path / "b2", instance="member-b", session_ms=10000)
    members.append(b2)
    wait_until(lambda: sorted(b2.assignment()) == sorted(b_parts), 30, "the static member gets its partitions back")
    time.sleep(2.0)
    assert len(a.events()) == events_before, f"the other member saw no rebalance: {a.events()[events_before:]}"


def test_a_static_member_down_through_a_rebalance_keeps_its_partitions(start_broker, members, tmp_path):
    """KIP-345: a static member that has not rejoined when a rebalance times out stays in the
    group until its session expires; the new generation assigns it its share, which waits for
    it, and its restart moves no partition (Kafka would remove it one rebalance timeout later:
    docs/decisions/consumer-groups.md). kafka-python lets the session (20 s) outlast the
    rebalance timeout (3 s); librdkafka does not."""
    broker = start_broker(FAST)
    create_topic(broker.bootstrap, "static-down", 6)

    def member(name, instance=None):
        opts = {"instance": instance} if instance else {}
        m = Member(broker, "gsd", "static-down", tmp_path / name, client="kafka-python",
                   session_ms=20000, max_poll_ms=3000, **opts)
        members.append(m)
        return m

    a, b = member("a", "member-a"), member("b", "member-b")
    wait_for_assignments([a, b], [3, 3])
    b_before = set(b.assignment())
    b.kill()
    # Static too: kafka-python's range assignor drops members when static and dynamic ones
    # alternate in the JoinGroup answer (its itertools.groupby sees only adjacent runs).
    c = member("c", "member-c")
    # The rebalance completes at its timeout without b; b keeps a third of the partitions.
    wait_for_assignments([a, c], [2, 2], timeout=30)
    held = {0, 1, 2, 3, 4, 5} - set(a.assignment()) - set(c.assignment())
    assert len(held) == 2, f"two partitions wait for the static member: {a.assignment()} {c.assignment()}"
    seen = len(a.events()), len(c.events())
    b2 = member("b2", "member-b")
    wait_until(lambda: set(b2.assignment()) == held, 30,
               f"the restarted static member gets {held} (it had {b_before})")
    time.sleep(2.0)
    assert (len(a.events()), len(c.events())) == seen, \
        f"no rebalance when it came back: {a.events()[seen[0]:]} {c.events()[seen[1]:]}"


def committed_total(broker, group, topic):
    out = sluice_cli("group", "describe", group, "-b", broker.bootstrap).stdout
    rows = [l.split() for l in out.splitlines() if l.startswith(topic)]
    return sum(int(r[2]) for r in rows if r[2].isdigit())


def test_a_replaced_static_member_keeps_its_identity_across_a_broker_restart(
        start_broker, members, tmp_path):
    """A static member's process is replaced (a new member id for the same instance id), then
    the broker restarts. The group must come back with the new member id: it used to come back
    at its first generation, whose member id for that instance was the dead process's, and the
    running consumer was then fenced (FENCED_INSTANCE_ID, fatal for librdkafka)."""
    broker = start_broker(FAST)
    create_topic(broker.bootstrap, "static-restart", 2)

    def member_a_consumes(out, first):
        """A process of the static member `member-a`, once it has its partitions and the 100
        records produced from `first` on."""
        m = Member(broker, "gsr", "static-restart", tmp_path / out, instance="member-a",
                   session_ms=10000)
        members.append(m)
        wait_for_assignments([m], [2])
        produce(broker.bootstrap, "static-restart", first, 100)
        wait_until(lambda: len(m.records()) >= 100, 60, f"{out} consumed")
        return m

    a = member_a_consumes("a", 0)
    # Its records file is written before each commit: kill it only once the commits are in.
    wait_until(lambda: committed_total(broker, "gsr", "static-restart") == 100, 30,
               "the first member's commits")
    a.kill()
    a2 = member_a_consumes("a2", 100)

    assert broker.stop() == 0
    broker.start()
    produce(broker.bootstrap, "static-restart", 200, 100)
    wait_until(lambda: len(a2.records()) >= 200 or a2.proc.poll() is not None, 60,
               "the replacement to consume after the broker's restart")
    stderr = Path(a2.out + ".stderr").read_text()
    assert a2.proc.poll() is None, f"the consumer died after the broker's restart: {stderr[-2000:]}"
    assert "FENCED" not in stderr, stderr[-2000:]
    assert sorted(values(a2.records())) == list(range(100, 300))


def test_reset_offsets_every_mode(start_broker, members, tmp_path):
    broker = start_broker(FAST)
    b = ["-b", broker.bootstrap]
    create_topic(broker.bootstrap, "reset", 2)
    produce(broker.bootstrap, "reset", 0, 100)
    t_mid = int(time.time() * 1000)
    time.sleep(0.05)
    produce(broker.bootstrap, "reset", 100, 100)
    m = Member(broker, "gr", "reset", tmp_path / "m")
    members.append(m)
    wait_until(lambda: len(m.records()) >= 200, 60, "consumed")
    # An active group is refused.
    r = sluice_cli("group", "reset-offsets", "gr", "-t", "reset", "--to-earliest", *b, check=False)
    assert r.returncode == 1 and "active member" in r.stderr
    m.stop()
    wait_until(lambda: "Empty" in sluice_cli("group", "list", *b).stdout, 30, "the group to be empty")

    def committed():
        out = sluice_cli("group", "describe", "gr", *b).stdout
        return {int(l.split()[1]): int(l.split()[2]) for l in out.splitlines() if l.startswith("reset")}

    ends = committed()
    assert sum(ends.values()) == 200
    dry = sluice_cli("group", "reset-offsets", "gr", "-t", "reset", "--to-earliest", "--dry-run", *b).stdout
    assert "dry run" in dry and committed() == ends
    sluice_cli("group", "reset-offsets", "gr", "-t", "reset", "--to-earliest", *b)
    assert committed() == {0: 0, 1: 0}
    sluice_cli("group", "reset-offsets", "gr", "-t", "reset", "--to-latest", *b)
    assert committed() == ends
    sluice_cli("group", "reset-offsets", "gr", "-t", "reset", "--shift-by", "-10", *b)
    # Clamped at the log start, as Kafka's --shift-by (the producer's partitioner may leave
    # fewer than 10 records on a partition).
    assert committed() == {p: max(o - 10, 0) for p, o in ends.items()}
    sluice_cli("group", "reset-offsets", "gr", "-t", "reset", "--to-offset", "5", "-p", "0", *b)
    assert committed()[0] == 5
    sluice_cli("group", "reset-offsets", "gr", "-t", "reset", "--to-datetime", str(t_mid), *b)
    assert sum(committed().values()) == 100, "at the time between the two halves"
    sluice_cli("group", "reset-offsets", "gr", "-t", "reset", "--to-offset", "999999", *b)
    assert committed() == ends, "clamped to the end"
    r = sluice_cli("group", "reset-offsets", "gr", "-t", "reset", *b, check=False)
    assert r.returncode == 1 and "say where to" in r.stderr
    r = sluice_cli("group", "reset-offsets", "gr", "-t", "reset", "--to-datetime", "soon", *b, check=False)
    assert r.returncode == 1 and "--to-datetime" in r.stderr
    # The admin API shows the same facts.
    import urllib.request
    with urllib.request.urlopen(broker.admin_url + "/api/groups/gr") as resp:
        g = json.load(resp)
    assert g["state"] == "Empty" and sum(o["committed_offset"] for o in g["offsets"]) == 200
    assert all(o["lag"] == 0 for o in g["offsets"])
    with pytest.raises(Exception):
        urllib.request.urlopen(broker.admin_url + "/api/groups/nope")
    # Delete: the group and its offsets go.
    sluice_cli("group", "delete", "gr", *b)
    assert "gr" not in sluice_cli("group", "list", *b).stdout
    r = sluice_cli("group", "delete", "gr", *b, check=False)
    assert r.returncode == 1 and "GroupIdNotFound" in r.stderr


def test_compacted_topic_keeps_the_newest_value_per_key(start_broker, tmp_path):
    broker = start_broker(["--log-cleaner-interval-ms", "200"])
    create_topic(broker.bootstrap, "compacted", 1,
                 {"cleanup.policy": "compact", "segment.bytes": "4096", "delete.retention.ms": "0"})
    p = Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 0, "batch.num.messages": 20})
    for version in range(30):
        for k in range(20):
            p.produce("compacted", key=f"key-{k}".encode(), value=f"{k}:{version}".encode())
        p.flush(10)
    for k in range(15, 20):  # delete five keys
        p.produce("compacted", key=f"key-{k}".encode(), value=None)
    p.flush(10)
    # Push the tombstones and the newest values into sealed segments.
    for i in range(60):
        p.produce("compacted", key=b"filler", value=b"x" * 100)
    p.flush(10)
    # Records without a key are refused on a compacted topic.
    errors = []
    p.produce("compacted", value=b"keyless", on_delivery=lambda e, m: errors.append(e))
    p.flush(10)
    assert errors and errors[0] is not None

    from confluent_kafka import Consumer, OFFSET_BEGINNING, TopicPartition

    def read_all():
        c = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": f"read-{time.time()}", "enable.auto.commit": False})
        c.assign([TopicPartition("compacted", 0, OFFSET_BEGINNING)])
        out = []
        deadline = time.time() + 15
        while time.time() < deadline:
            msgs = c.consume(1000, 1.0)
            if not msgs and out:
                break  # a second of quiet after data: read to the end
            out += [(m.offset(), m.key(), m.value()) for m in msgs if not m.error()]
        c.close()
        return out

    def compacted():
        recs = read_all()
        latest = {}
        for _, k, v in recs:
            latest.setdefault(k, []).append(v)
        keyed = {k: vs for k, vs in latest.items() if k != b"filler"}
        return recs if keyed and all(len(vs) == 1 for vs in keyed.values()) else None

    recs = wait_until(compacted, 60, "the cleaner to compact the topic")
    by_key = {k: v for _, k, v in recs if k != b"filler"}
    assert by_key == {f"key-{k}".encode(): f"{k}:29".encode() for k in range(15)}, "newest values only, deleted keys gone"
    offsets = [o for o, _, _ in recs]
    assert offsets == sorted(offsets), "offsets keep their order (with gaps)"
    assert "compacted" in broker.log()
