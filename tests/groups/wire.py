"""Hand-built group requests (JoinGroup v5, SyncGroup v3, Heartbeat v3, OffsetCommit v7) and
the fields of their answers the tests check."""

import struct

from broker import raw


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


def join_v5_body(group, member_id, instance_id, session_ms=6000, metadata=b"meta"):
    """A JoinGroup v5 of protocol type "consumer" with one protocol, "range", of `metadata`."""
    body = string(group) + struct.pack(">ii", session_ms, 30000) + string(member_id) + nullable(instance_id)
    return body + string("consumer") + struct.pack(">i", 1) + string("range") + struct.pack(">i", len(metadata)) + metadata


def parse_join_v5(r):
    """(error, generation, leader, member id) of a JoinGroup v5 answer."""
    # v5: throttle, error, generation, protocol name, leader, member id, members
    _throttle, error, generation = struct.unpack_from(">ihi", r, 0)
    _protocol, at = read_string(r, 10)
    leader, at = read_string(r, at)
    member, at = read_string(r, at)
    return error, generation, leader, member


def join_v5(conn, group, member_id, instance_id, session_ms=6000, metadata=b"meta", correlation_id=1):
    return parse_join_v5(call(conn, 11, 5, join_v5_body(group, member_id, instance_id, session_ms, metadata),
                              correlation_id))


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


def read_bytes(buf, at):
    (n,) = struct.unpack_from(">i", buf, at)
    return (buf[at + 4:at + 4 + n] if n >= 0 else None), at + 4 + max(n, 0)


def describe_v4(conn, group):
    """(error, state, protocol type, protocol, [(member id, metadata, assignment)]) of one group
    by DescribeGroups v4."""
    r = call(conn, 15, 4, struct.pack(">i", 1) + string(group) + b"\x00")
    # throttle, groups[1]: error, id, state, protocol type, protocol, members, authorized ops
    (count,) = struct.unpack_from(">i", r, 4)
    assert count == 1, count
    (error,) = struct.unpack_from(">h", r, 8)
    _group, at = read_string(r, 10)
    state, at = read_string(r, at)
    protocol_type, at = read_string(r, at)
    protocol, at = read_string(r, at)
    (n,) = struct.unpack_from(">i", r, at)
    at += 4
    members = []
    for _ in range(n):
        member, at = read_string(r, at)
        _instance, at = read_string(r, at)
        _client, at = read_string(r, at)
        _host, at = read_string(r, at)
        metadata, at = read_bytes(r, at)
        assignment, at = read_bytes(r, at)
        members.append((member, metadata, assignment))
    return error, state, protocol_type, protocol, members
