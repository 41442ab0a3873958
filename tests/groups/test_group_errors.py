"""Group requests a well-behaved client would not send, hand-built on the wire: each gets the
Kafka error a client expects, and the group stays usable."""

import struct

from broker import raw
from broker.clients import create_topic


def string(s):
    return raw.string(s)


def nullable(s):
    return struct.pack(">h", -1) if s is None else raw.string(s)


def call(conn, api_key, version, body, correlation_id=1):
    conn.send(raw.frame(raw.header_v1(api_key, version, correlation_id) + body))
    payload = conn.read_frame()
    assert payload is not None, "the broker closed the connection"
    assert struct.unpack_from(">i", payload)[0] == correlation_id
    return payload[4:]


def read_string(buf, at):
    (n,) = struct.unpack_from(">h", buf, at)
    return (buf[at + 2:at + 2 + n].decode() if n >= 0 else None), at + 2 + max(n, 0)


def join_v5(conn, group, member_id, instance_id):
    body = string(group) + struct.pack(">ii", 6000, 30000) + string(member_id) + nullable(instance_id)
    body += string("consumer") + struct.pack(">i", 1) + string("range") + struct.pack(">i", 4) + b"meta"
    r = call(conn, 11, 5, body)
    # v5: throttle, error, generation, protocol name, leader, member id, members
    _throttle, error, generation = struct.unpack_from(">ihi", r, 0)
    _protocol, at = read_string(r, 10)
    leader, at = read_string(r, at)
    member, at = read_string(r, at)
    return error, generation, leader, member


def sync_v3(conn, group, generation, member_id, instance_id, assignments):
    body = string(group) + struct.pack(">i", generation) + string(member_id) + nullable(instance_id)
    body += struct.pack(">i", len(assignments))
    for m, a in assignments:
        body += string(m) + struct.pack(">i", len(a)) + a
    r = call(conn, 14, 3, body)
    return struct.unpack_from(">h", r, 4)[0]  # after throttle


def heartbeat_v3(conn, group, generation, member_id, instance_id):
    body = string(group) + struct.pack(">i", generation) + string(member_id) + nullable(instance_id)
    r = call(conn, 12, 3, body)
    return struct.unpack_from(">h", r, 4)[0]


def commit_v7(conn, group, generation, member_id, instance_id, topic, partition, offset):
    body = string(group) + struct.pack(">i", generation) + string(member_id) + nullable(instance_id)
    body += struct.pack(">i", 1) + string(topic) + struct.pack(">i", 1)
    body += struct.pack(">iqi", partition, offset, -1) + nullable("")
    r = call(conn, 8, 7, body)
    # throttle, topics[1]: name, partitions[1]: index, error
    _, at = read_string(r, 8)
    return struct.unpack_from(">h", r, at + 8)[0]


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
