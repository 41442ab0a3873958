"""Group requests hand-built on the wire: those a well-behaved client would not send, each
answered with the Kafka error a client expects, the group staying usable; and a request sent
again after a lost answer, answered as Kafka answers it."""

import threading
import time

from broker import raw
from broker.clients import create_topic

from .wire import commit_v7, describe_v4, heartbeat_v3, join_v5, sync_v3


def test_group_errors_on_the_wire(start_broker):
    broker = start_broker(["--group-initial-rebalance-delay-ms", "0"])
    create_topic(broker.bootstrap, "gt", 2)
    c = raw.Conn(broker.bootstrap)
    try:
        # A static member joins, syncs, and is stable.
        error, generation, leader, member = join_v5(c, "gbad", "", "inst-1")
        assert (error, generation) == (0, 1) and leader == member
        assert sync_v3(c, "gbad", 1, member, "inst-1", [(member, b"\x00\x00assignment")]) == 0
        assert heartbeat_v3(c, "gbad", 1, member, "inst-1") == 0

        assert heartbeat_v3(c, "gbad", 1, "nobody", None) == 25         # UNKNOWN_MEMBER_ID
        assert heartbeat_v3(c, "gbad", 0, member, "inst-1") == 22       # ILLEGAL_GENERATION
        assert heartbeat_v3(c, "no-such-group", 1, member, None) == 25  # UNKNOWN_MEMBER_ID
        assert sync_v3(c, "gbad", 7, member, "inst-1", []) == 22          # ILLEGAL_GENERATION
        assert commit_v7(c, "gbad", 0, member, "inst-1", "gt", 0, 5) == 22       # stale generation
        assert commit_v7(c, "gbad", 1, "nobody", None, "gt", 0, 5) == 25         # unknown member
        assert commit_v7(c, "gbad", 1, member, "inst-1", "gt", 9, 5) == 3        # no partition 9
        assert commit_v7(c, "gbad", 1, member, "inst-1", "nope", 0, 5) == 3      # no such topic
        assert commit_v7(c, "gbad", 1, member, "inst-1", "gt", 0, 5) == 0

        # The same instance id joins again: the old member is a zombie now and is fenced.
        error, generation2, _, member2 = join_v5(c, "gbad", "", "inst-1")
        assert error == 0 and member2 != member and generation2 == 1, "no rebalance for a static rejoin"
        assert heartbeat_v3(c, "gbad", 1, member, "inst-1") == 82                 # FENCED_INSTANCE_ID
        assert commit_v7(c, "gbad", 1, member, "inst-1", "gt", 0, 6) == 82
        assert heartbeat_v3(c, "gbad", 1, member2, "inst-1") == 0, "the group stays usable"
        assert commit_v7(c, "gbad", 1, member2, "inst-1", "gt", 0, 7) == 0
    finally:
        c.close()
    assert broker.alive()


def join_in_background(conn, group, instance_id, member):
    """Starts a JoinGroup of a new static member on `conn` in a thread, and returns once the
    group's generation-1 `member` (conn, member id, instance id) hears that it started a
    rebalance: the thread, and the dict where the join's answer lands (under "b")."""
    joined = {}
    joining = threading.Thread(target=lambda: joined.update(b=join_v5(conn, group, "", instance_id)), daemon=True)
    joining.start()
    deadline = time.monotonic() + 10
    while heartbeat_v3(member[0], group, 1, member[1], member[2]) != 27:  # REBALANCE_IN_PROGRESS
        assert time.monotonic() < deadline, "the join started no rebalance"
        time.sleep(0.05)
    return joining, joined


def test_a_member_rejoining_unchanged_while_the_leader_assigns_keeps_the_generation(start_broker):
    """A known member that asks JoinGroup again with what it joined with while the group waits
    for the leader's assignment (its JoinGroup answer was lost to a timeout or a reconnect) gets
    the current generation back, as on Kafka, and the rebalance completes. Sluice used to start
    another rebalance there: the rejoin waited for every member to join again, and the leader's
    SyncGroup got REBALANCE_IN_PROGRESS."""
    broker = start_broker(["--group-initial-rebalance-delay-ms", "0"])
    group = "g-rejoin"
    a, b = raw.Conn(broker.bootstrap, timeout=40), raw.Conn(broker.bootstrap, timeout=40)
    try:
        error, generation, leader, member_a = join_v5(a, group, "", "inst-a")
        assert (error, generation) == (0, 1) and leader == member_a
        assert sync_v3(a, group, 1, member_a, "inst-a", [(member_a, b"\x00\x00a")]) == 0
        # b joins, which starts a rebalance; a rejoins, which completes it (generation 2).
        joining, joined = join_in_background(b, group, "inst-b", (a, member_a, "inst-a"))
        error, generation, leader, _ = join_v5(a, group, member_a, "inst-a")
        joining.join(10)
        assert (error, generation) == (0, 2), (error, generation)
        assert "b" in joined, "b's JoinGroup was not answered"
        b_error, b_generation, b_leader, member_b = joined["b"]
        assert (b_error, b_generation, b_leader) == (0, 2, leader)

        # b asks again, unchanged, before the leader has assigned.
        b.sock.settimeout(5)
        try:
            again = join_v5(b, group, member_b, "inst-b")
        except TimeoutError:
            raise AssertionError("the rejoin was not answered in 5 s: it started another rebalance") from None
        assert again == (0, 2, leader, member_b), again

        conns = {member_a: a, member_b: b}
        follower = member_b if leader == member_a else member_a
        instance = {member_a: "inst-a", member_b: "inst-b"}
        assignments = [(member_a, b"\x00\x00a"), (member_b, b"\x00\x00b")]
        assert sync_v3(conns[leader], group, 2, leader, instance[leader], assignments) == 0, \
            "the leader's assignment was refused"
        assert sync_v3(conns[follower], group, 2, follower, instance[follower], []) == 0
        for m in (member_a, member_b):
            assert heartbeat_v3(conns[m], group, 2, m, instance[m]) == 0, "the group is not stable"
    finally:
        a.close()
        b.close()
    assert broker.alive()


def test_describe_groups_shows_assignments_only_while_the_group_is_stable(start_broker):
    """DescribeGroups names the protocol and shows each member's metadata and assignment only
    while the group is Stable, as Kafka does: during a rebalance the assignment held is the last
    generation's, which a tool (kafka-consumer-groups.sh --members --verbose) would show as
    current. The members are listed in every state."""
    broker = start_broker(["--group-initial-rebalance-delay-ms", "0"])
    group = "g-described"
    a, b, d = (raw.Conn(broker.bootstrap, timeout=40) for _ in range(3))
    try:
        error, generation, _, member_a = join_v5(a, group, "", "inst-a")
        assert (error, generation) == (0, 1)
        # The leader has not assigned yet.
        assert describe_v4(d, group) == (0, "CompletingRebalance", "consumer", "", [(member_a, b"", b"")])

        assert sync_v3(a, group, 1, member_a, "inst-a", [(member_a, b"\x00\x00a")]) == 0
        assert describe_v4(d, group) == (0, "Stable", "consumer", "range", [(member_a, b"meta", b"\x00\x00a")])

        # b joins: a rebalance, during which a's assignment of generation 1 is not shown.
        joining, joined = join_in_background(b, group, "inst-b", (a, member_a, "inst-a"))
        error, state, protocol_type, protocol, members = describe_v4(d, group)
        assert (error, state, protocol_type, protocol) == (0, "PreparingRebalance", "consumer", ""), \
            (error, state, protocol_type, protocol)
        assert member_a in [m for m, _, _ in members]
        assert all(metadata == b"" and assignment == b"" for _, metadata, assignment in members), members

        error, generation, leader, _ = join_v5(a, group, member_a, "inst-a")
        joining.join(10)
        assert (error, generation) == (0, 2) and "b" in joined, (error, generation, joined)
        member_b = joined["b"][3]
        conns = {member_a: (a, "inst-a"), member_b: (b, "inst-b")}
        follower = member_b if leader == member_a else member_a
        assignments = [(member_a, b"\x00\x00a2"), (member_b, b"\x00\x00b2")]
        assert sync_v3(conns[leader][0], group, 2, leader, conns[leader][1], assignments) == 0
        assert sync_v3(conns[follower][0], group, 2, follower, conns[follower][1], []) == 0
        error, state, _, protocol, members = describe_v4(d, group)
        assert (error, state, protocol) == (0, "Stable", "range")
        assert sorted(members) == sorted([(member_a, b"meta", b"\x00\x00a2"), (member_b, b"meta", b"\x00\x00b2")])
    finally:
        a.close()
        b.close()
        d.close()
    assert broker.alive()
