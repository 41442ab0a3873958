"""The new consumer group protocol (KIP-848, `group.protocol=consumer`) with librdkafka: the
broker assigns, members share partitions without a stop-the-world rebalance, a member that
leaves hands its partitions over at once and one that dies after the session timeout, commits
carry the member epoch, and tools list and describe the group."""

import json
import time
import urllib.request

from confluent_kafka import ConsumerGroupType, Consumer, KafkaError
from confluent_kafka.admin import AdminClient
from kafka import KafkaConsumer
from kafka.structs import TopicPartition

from conftest import wait_until
from broker.clients import create_topic
from .test_groups import Member, members, produce, values, wait_for_assignments  # noqa: F401

FAST = ["--group-consumer-heartbeat-interval-ms", "300", "--group-consumer-session-timeout-ms", "3000"]


def test_members_share_partitions_and_take_over(start_broker, members, tmp_path):  # noqa: F811
    broker = start_broker(FAST)
    create_topic(broker.bootstrap, "kip848", 6)
    for i in range(3):
        members.append(Member(broker, "g848", "kip848", tmp_path / f"m{i}", protocol="consumer"))
    assert wait_for_assignments(members, [2, 2, 2]) == [0, 1, 2, 3, 4, 5]
    produce(broker.bootstrap, "kip848", 0, 20_000, keyed=True)
    wait_until(lambda: sum(len(m.records()) for m in members) >= 20_000, 60, "all records consumed")
    got = [v for m in members for v in values(m.records())]
    assert sorted(got) == list(range(20_000)), "every record exactly once across the group"

    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    listed = {g.group_id: g for g in admin.list_consumer_groups().result(10).valid}
    assert listed["g848"].type == ConsumerGroupType.CONSUMER, listed["g848"]
    described = admin.describe_consumer_groups(["g848"])["g848"].result(10)
    assert len(described.members) == 3, described
    assert described.type == ConsumerGroupType.CONSUMER, "described through ConsumerGroupDescribe"
    assigned = sorted(tp.partition for m in described.members for tp in m.assignment.topic_partitions)
    assert assigned == [0, 1, 2, 3, 4, 5], "the group's description shows the broker's assignment"
    status = json.load(urllib.request.urlopen(broker.admin_url + "/api/groups/g848", timeout=5))
    assert status["state"] == "Stable" and len(status["members"]) == 3, "and so does the console's API"

    # A member that leaves (close) hands over at once; one that dies, after the session timeout.
    leaving, dying, staying = members
    leaving.stop()
    wait_for_assignments([dying, staying], [3, 3], timeout=10)
    died_at = time.time()
    dying.kill()
    wait_for_assignments([staying], [6], timeout=20)
    assert time.time() - died_at >= 2.5, "not before the session timeout"
    produce(broker.bootstrap, "kip848", 20_000, 5_000, keyed=True)
    wait_until(lambda: set(range(20_000, 25_000)) <= set(values(staying.records())), 60,
               "the survivor reads the new records of all six partitions")
    every = {v for m in members for v in values(m.records())}
    assert every == set(range(25_000)), "nothing lost across the hand-overs"

    # Commits carried the member epoch and were taken: the committed offsets are the ends. The
    # records are keyed so that every partition has some (a member commits only what it read;
    # a partition never read has no committed offset, as in Kafka).
    staying.stop()
    c = KafkaConsumer(bootstrap_servers=broker.bootstrap, group_id="g848", enable_auto_commit=False)
    try:
        tps = [TopicPartition("kip848", p) for p in range(6)]
        ends = c.end_offsets(tps)
        assert all(end > 0 for end in ends.values()), ends
        assert {tp: c.committed(tp) for tp in tps} == ends
    finally:
        c.close()


def test_members_keep_their_partitions_across_a_broker_restart(start_broker, members, tmp_path):  # noqa: F811
    """The group is written to `__consumer_offsets` whenever it changes, so a broker that
    restarts knows its members, their epochs and their partitions: they go on without losing
    anything to a rebalance and read nothing twice. (Membership used to be in memory only: after
    a restart every member got UNKNOWN_MEMBER_ID, lost its partitions and joined again.)"""
    # A session long enough for librdkafka's reconnect backoff across the restart.
    slow_session = ["--group-consumer-heartbeat-interval-ms", "300", "--group-consumer-session-timeout-ms", "15000"]
    broker = start_broker(slow_session)
    create_topic(broker.bootstrap, "kip848-restart", 4)
    for i in range(2):
        members.append(Member(broker, "g848r", "kip848-restart", tmp_path / f"m{i}", protocol="consumer"))
    assert wait_for_assignments(members, [2, 2]) == [0, 1, 2, 3]
    produce(broker.bootstrap, "kip848-restart", 0, 2_000, keyed=True)
    wait_until(lambda: sum(len(m.records()) for m in members) >= 2_000, 60, "the first records consumed")
    described = broker.admin_get("/api/groups/g848r")
    assert described["state"] == "Stable" and len(described["members"]) == 2, described
    events_before = [len(m.events()) for m in members]

    broker.kill()
    broker.start()
    # Known at once, before any member's heartbeat could have told the new process.
    restored = broker.admin_get("/api/groups/g848r")
    assert restored["state"] == "Stable", restored
    assert sorted(m["member_id"] for m in restored["members"]) == sorted(m["member_id"] for m in described["members"])
    produce(broker.bootstrap, "kip848-restart", 2_000, 2_000, keyed=True)
    wait_until(lambda: sum(len(m.records()) for m in members) >= 4_000, 60,
               "the records written after the restart consumed")
    time.sleep(1.0)  # a rebalance the restart caused would show in the callbacks by now
    assert [m.events()[n:] for m, n in zip(members, events_before)] == [[], []], \
        "no member lost or was given partitions across the restart"
    got = [v for m in members for v in values(m.records())]
    assert sorted(got) == list(range(4_000)), "every record once, none read twice"


def test_a_static_member_restarts_without_moving_partitions(start_broker, members, tmp_path):  # noqa: F811
    """KIP-848 static membership as on Kafka: a member with `group.instance.id` that closes
    leaves with epoch -2 and keeps its partitions until its session times out; its next
    process, under the same instance id, gets them back and nobody else is moved. (It used to
    be removed at once: its partitions went to the others, then came back: two rebalances per
    restarted member, and records read twice.)"""
    broker = start_broker(["--group-consumer-heartbeat-interval-ms", "300",
                           "--group-consumer-session-timeout-ms", "15000"])
    create_topic(broker.bootstrap, "kip848-static", 4)

    def member(name, instance):
        m = Member(broker, "g848s", "kip848-static", tmp_path / name, protocol="consumer", instance=instance)
        members.append(m)
        return m

    a, b = member("a", "member-a"), member("b", "member-b")
    wait_for_assignments([a, b], [2, 2])
    b_parts, a_events = sorted(b.assignment()), len(a.events())
    b.stop()
    assert b.proc.returncode == 0, b.stderr_tail()
    time.sleep(2.0)  # many heartbeats: a would have been given b's partitions by now
    assert a.events()[a_events:] == [], "the others are not moved when a static member closes"
    described = broker.admin_get("/api/groups/g848s")
    assert len(described["members"]) == 2, f"the closed static member keeps its place: {described}"
    b2 = member("b2", "member-b")
    wait_until(lambda: sorted(b2.assignment()) == b_parts, 30, f"the restarted member gets {b_parts} back")
    time.sleep(1.0)
    assert a.events()[a_events:] == [], "nor when it comes back"


def test_bad_requests_get_kafkas_errors(start_broker):
    broker = start_broker(FAST)
    create_topic(broker.bootstrap, "kip848-bad", 1)
    c = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "g-bad", "group.protocol": "consumer",
                  "group.remote.assignor": "bogus"})
    c.subscribe(["kip848-bad"])
    fatal = None
    deadline = time.time() + 10
    while fatal is None and time.time() < deadline:
        m = c.poll(0.2)
        if m is not None and m.error():
            fatal = m.error()
    c.close()
    # librdkafka raises the broker's UNSUPPORTED_ASSIGNOR as a fatal error naming it.
    assert fatal is not None and fatal.code() == KafkaError._FATAL, fatal
    assert "assignor" in fatal.str() and "not supported" in fatal.str()


def test_java_consumer_with_the_new_protocol(start_broker):
    """The Java client 4.3.1 with group.protocol=consumer (see GroupSmoke.java): every record
    once across members joining mid-stream, commits with member epochs, committed = ends."""
    import subprocess
    from conftest import ROOT
    broker = start_broker(FAST)
    subprocess.run([str(ROOT / "scripts" / "java-env")], check=True, timeout=600)
    java = ROOT / "tests" / "java"
    r = subprocess.run(["java", "-cp", f"{java / 'lib'}/*:{java}", "GroupSmoke", broker.bootstrap],
                       capture_output=True, text=True, timeout=240)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    assert r.stdout.startswith("OK 4000"), r.stdout


def test_admin_tools_describe_both_kinds_of_group(start_broker):
    """ConsumerGroupDescribe answers for a new-protocol group; a classic group gets
    GROUP_ID_NOT_FOUND there and the admin client falls back to DescribeGroups, as with Kafka."""
    broker = start_broker(FAST + ["--group-initial-rebalance-delay-ms", "0"])
    create_topic(broker.bootstrap, "both", 4)
    new = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "new", "group.protocol": "consumer"})
    old = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "old"})
    new.subscribe(["both"])
    old.subscribe(["both"])
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})

    def described():
        new.poll(0.1)
        old.poll(0.1)
        out = {g: f.result(10) for g, f in admin.describe_consumer_groups(["new", "old"]).items()}
        return out if all(len(d.members) == 1 and d.members[0].assignment.topic_partitions
                          for d in out.values()) else None

    groups = wait_until(described, 30, "both groups to have an assigned member")
    assert groups["new"].type == ConsumerGroupType.CONSUMER
    assert groups["old"].type == ConsumerGroupType.CLASSIC
    for d in groups.values():
        assert sorted(p.partition for p in d.members[0].assignment.topic_partitions) == [0, 1, 2, 3]
    new.close()
    old.close()
