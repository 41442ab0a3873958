"""Consumer groups on a 3-node cluster: `__consumer_offsets` is replicated like any topic and a
group's coordinator is the leader of the group's offsets partition. Killing that node moves the
coordinator with the leadership; the group's members (classic or KIP-848) find the new one by
themselves and no committed offset is lost or moves backwards. Each test is bounded; the timeout mark is the hard
stop for a hung one."""

import os
import struct
import threading
import time

import pytest
from confluent_kafka import Consumer, KafkaException, TopicPartition

from broker import raw
from conftest import wait_until
from groups.wire import heartbeat_v3, join_v5, sync_v3

from .checker import History, Rebalance
from .harness import CLIENT_DEFAULTS
from .workload import ConsumerWorkload, ProducerWorkload, drain_and_check, produce_records

pytestmark = pytest.mark.timeout(150)

OFFSETS = "__consumer_offsets"


def java_partition_for(group, partitions):
    """Kafka's `abs(group.hashCode()) % partitions` (Java's String.hashCode over UTF-16 units)."""
    h = 0
    units = group.encode("utf-16-be")
    for i in range(0, len(units), 2):
        h = (h * 31 + int.from_bytes(units[i:i + 2], "big")) & 0xFFFFFFFF
    return (h & 0x7FFFFFFF) % partitions


def coordinator_of(c, group):
    """(offsets partition, its leader) for `group`, once the offsets topic exists and is led."""
    md = wait_until(lambda: c.metadata(OFFSETS).topics.get(OFFSETS), 30, f"{OFFSETS} in Metadata")
    partition = java_partition_for(group, len(md.partitions))
    return partition, c.wait_for_leader(OFFSETS, partition)


def committed_offsets(bootstrap, group, topic, partitions, timeout=20):
    """The group's committed offsets as a fresh client reads them (OffsetFetch)."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "enable.auto.commit": False,
                         **CLIENT_DEFAULTS})
    try:
        got = consumer.committed([TopicPartition(topic, p) for p in partitions], timeout=timeout)
        return {tp.partition: tp.offset for tp in got}
    finally:
        consumer.close()


def last_commits(history, group, topic):
    """The newest offset the group's commits acknowledged, per partition."""
    with history.lock:
        out = {}
        for cm in history.commits:
            if cm.group == group and cm.topic == topic:
                out[cm.partition] = max(out.get(cm.partition, -1), cm.offset)
        return out


def commits_since(history, group, since):
    with history.lock:
        return sum(1 for cm in history.commits if cm.group == group and cm.start >= since)


def test_the_offsets_topic_is_replicated_and_marked_internal(cluster):
    c = cluster(3)
    c.create_topic("plain", 1, replication_factor=3)
    history = History()
    produce_records(c.bootstrap, "plain", history, 10)
    consumer = Consumer({"bootstrap.servers": c.bootstrap, "group.id": "g-meta", "enable.auto.commit": False,
                         "auto.offset.reset": "earliest", **CLIENT_DEFAULTS})
    try:
        consumer.assign([TopicPartition("plain", 0, 5)])
        consumer.commit(offsets=[TopicPartition("plain", 0, 5)], asynchronous=False)
    finally:
        consumer.close()
    partition, _ = coordinator_of(c, "g-meta")
    isr = c.wait_for_isr(OFFSETS, partition)
    assert isr == [1, 2, 3], f"{OFFSETS}/{partition} should be on every node, ISR {isr}"
    for node in c.ids:
        p = c.partition(OFFSETS, partition, via=node)
        assert p is not None and sorted(p.replicas) == [1, 2, 3], f"node {node} sees {p}"
    assert committed_offsets(c.bootstrap, "g-meta", "plain", [0]) == {0: 5}


@pytest.mark.parametrize("protocol", ["classic", "consumer"])
def test_killing_the_group_coordinator_loses_no_committed_offset(cluster, protocol):
    # KIP-848's session timeout is the coordinator's (45 s by default): 6 s, as the classic
    # member asks for.
    # Heartbeats every second, so one late heartbeat on a loaded machine does not expire the
    # member (the test checks that its assignment does not change).
    c = cluster(3, env={"SLUICE_GROUP_CONSUMER_SESSION_TIMEOUT_MS": "6000",
                        "SLUICE_GROUP_CONSUMER_HEARTBEAT_INTERVAL_MS": "1000"} if protocol == "consumer" else None)
    topic, group = "grp-kill", "g-kill"
    c.create_topic(topic, 3, replication_factor=3)
    history = History()
    producer = ProducerWorkload(c.bootstrap, topic, history, rate_per_s=200, duration_s=40.0).start()
    consumer = ConsumerWorkload(c.bootstrap, topic, group, history, duration_s=90.0,
                                conf={"group.protocol": protocol}).start()
    try:
        wait_until(lambda: commits_since(history, group, 0) >= 5, 30, "the group's first commits")
        partition, coordinator = coordinator_of(c, group)
        before = last_commits(history, group, topic)
        killed_at = time.monotonic()
        c.kill(coordinator)
        new = c.wait_for_leader(OFFSETS, partition, not_node=coordinator, timeout=20)
        assert new != coordinator
        # The member finds the new coordinator by itself and goes on committing.
        wait_until(lambda: commits_since(history, group, killed_at) >= 5, 40,
                   f"commits after the coordinator (node {coordinator}) was killed; "
                   f"client errors {consumer.client_errors[-5:]}")
        producer.finish()
        assert producer.fatal is None, producer.fatal
        # Everything the producer wrote gets consumed and committed.
        ends = {}
        with history.lock:
            for s in history.sends:
                if s.status == "ok" and s.partition is not None:
                    ends[s.partition] = max(ends.get(s.partition, 0), s.offset + 1)
        wait_until(lambda: all(last_commits(history, group, topic).get(p, -1) >= e for p, e in ends.items()),
                   40, f"the group to commit up to {ends}")
    finally:
        finished_at = time.monotonic()  # closing the consumer revokes its partitions
        producer.abort()
        consumer.finish()
    after = last_commits(history, group, topic)
    for p, offset in before.items():
        assert after.get(p, -1) >= offset, f"partition {p}: committed {offset} before the kill, {after.get(p)} after"
    if protocol == "consumer":
        # A KIP-848 group is written to its offsets partition whenever it changes: the new
        # coordinator knows the member, its epoch and its partitions, and the member goes on
        # without losing them (it used to get UNKNOWN_MEMBER_ID, lose its partitions and rejoin).
        with history.lock:
            moved = [e.time - killed_at for e in history.consumer_events
                     if isinstance(e, Rebalance) and killed_at < e.time < finished_at]
        assert moved == [], f"the member's assignment changed {moved} s after the coordinator's kill"
    # A new client reads exactly what the group committed last, from the new coordinator.
    fetched = committed_offsets(c.bootstrap, group, topic, sorted(after))
    assert fetched == after, f"OffsetFetch {fetched} != last acknowledged commits {after}"
    result = drain_and_check(c, topic, history, "group-coordinator-kill")
    assert result.valid, str(result)


def test_committed_offsets_survive_every_node_killed_at_once(cluster):
    c = cluster(3)
    topic, group = "grp-all", "g-all"
    c.create_topic(topic, 2, replication_factor=3)
    history = History()
    produce_records(c.bootstrap, topic, history, 40)
    wanted = {0: 7, 1: 11}
    consumer = Consumer({"bootstrap.servers": c.bootstrap, "group.id": group, "enable.auto.commit": False,
                         **CLIENT_DEFAULTS})
    try:
        consumer.commit(offsets=[TopicPartition(topic, p, o) for p, o in wanted.items()], asynchronous=False)
    finally:
        consumer.close()
    c.restart_all()
    coordinator_of(c, group)
    assert committed_offsets(c.bootstrap, group, topic, sorted(wanted)) == wanted


def test_asking_for_the_offsets_topic_creates_it_as_the_offsets_topic_and_it_cannot_grow(cluster):
    from confluent_kafka.admin import AdminClient, NewPartitions

    c = cluster(3)
    # A Metadata request naming it (auto-creation allowed) makes the offsets topic with its own
    # partition count (offsets_topic_partitions, 16), not a client topic's default (1).
    md = wait_until(lambda: c.metadata(OFFSETS).topics.get(OFFSETS) if
                    c.metadata(OFFSETS).topics.get(OFFSETS).error is None else None, 30, f"{OFFSETS} created")
    assert len(md.partitions) == 16, f"{OFFSETS} has {len(md.partitions)} partitions"
    admin = AdminClient({"bootstrap.servers": c.bootstrap, **CLIENT_DEFAULTS})
    future = admin.create_partitions([NewPartitions(OFFSETS, 20)])[OFFSETS]
    with pytest.raises(Exception) as refused:
        future.result(15)
    assert "INVALID_PARTITIONS" in str(refused.value) or "cannot get more partitions" in str(refused.value), \
        str(refused.value)
    assert len(c.metadata(OFFSETS).topics[OFFSETS].partitions) == 16


def offset_commit_v2(group, topic, partition, offset):
    """OffsetCommit v2 of one offset, outside any generation (a simple consumer's commit)."""
    body = raw.string(group) + struct.pack(">i", -1) + raw.string("") + struct.pack(">q", -1)
    body += struct.pack(">i", 1) + raw.string(topic)
    body += struct.pack(">iiq", 1, partition, offset) + raw.string("")
    return raw.frame(raw.header_v1(8, 2, 1) + body)


def offset_commit_error(payload):
    at = raw.one_partition(payload, 4)
    _partition, error = struct.unpack_from(">ih", payload, at)
    return error


def offset_fetch_v1(group, topic, partition):
    body = raw.string(group) + struct.pack(">i", 1) + raw.string(topic) + struct.pack(">ii", 1, partition)
    return raw.frame(raw.header_v1(9, 1, 2) + body)


def fetched_offset(payload):
    """(offset, error) of a one-partition OffsetFetch v1 response."""
    at = raw.one_partition(payload, 4)
    _partition, offset, n = struct.unpack_from(">iqh", payload, at)
    at += 14 + max(n, 0)
    (error,) = struct.unpack_from(">h", payload, at)
    return offset, error


def describe_groups_v0(group):
    return raw.frame(raw.header_v1(15, 0, 3) + struct.pack(">i", 1) + raw.string(group))


def described_group_error(payload):
    """The first group's error code in a DescribeGroups v0 response."""
    count, error = struct.unpack_from(">ih", payload, 4)
    assert count == 1, count
    return error


def listed_groups(payload):
    """(error code, group ids) of a ListGroups v0 response."""
    error, count = struct.unpack_from(">hi", payload, 4)
    at, groups = 10, []
    for _ in range(count):
        for field in range(2):  # group id, protocol type
            (n,) = struct.unpack_from(">h", payload, at)
            if field == 0:
                groups.append(payload[at + 2:at + 2 + n].decode())
            at += 2 + n
    return error, groups


def stop_fully(c, i):
    """SIGSTOPs node `i` and waits until every one of its threads has stopped, so that nothing
    it was sending slips out after the signal."""
    c.pause(i)
    tasks = f"/proc/{c.node(i).proc.pid}/task"
    wait_until(lambda: all(open(f"{tasks}/{t}/stat").read().rsplit(")", 1)[1].split()[0] == "T"
                           for t in os.listdir(tasks)), 5, f"node {i} to stop")


def fetch_from(node, group):
    """(offset, error) of the group's plain/0 offset as `node` answers, or None if it did not."""
    try:
        return fetched_offset(raw.call(node.bootstrap, offset_fetch_v1(group, "plain", 0), timeout=8))
    except (OSError, AssertionError):
        return None


def test_an_offset_commit_no_quorum_holds_is_never_read_back(cluster):
    """A coordinator applies a commit to its state when it writes it, before a quorum holds
    it. With both followers of the group's offsets partition paused, a commit is written on the
    leader only and waits for followers that do not fetch; an OffsetFetch sent meanwhile must
    not answer it (before the fix the leader answered it at once). On 3 nodes the pause also
    takes the metadata quorum: the leader's session lapses after about a second and it steps
    down, both requests then answered NOT_COORDINATOR, while its coordinator still holds the
    commit. The leader is then SIGKILLed and restarted as the followers come back: every
    answer any node gives while the partition changes hands must be an offset the group keeps
    in the end (the new epoch keeps the commit only if its leader's log has it).

    Not on 5 nodes: there the controller fences the paused followers and takes them out of
    the ISR within about a second, and the commit is then committed on the leader alone (as in
    Kafka with `min.insync.replicas=1`), so answering it is right."""
    c = cluster(3)
    c.create_topic("plain", 1, replication_factor=3)
    produce_records(c.bootstrap, "plain", History(), 10)

    def commit_3(group):
        consumer = Consumer({"bootstrap.servers": c.bootstrap, "group.id": group, "enable.auto.commit": False,
                             **CLIENT_DEFAULTS})
        try:
            consumer.commit(offsets=[TopicPartition("plain", 0, 3)], asynchronous=False)
        finally:
            consumer.close()
    group = "g-unreplicated"
    commit_3(group)
    partition, leader = coordinator_of(c, group)
    c.wait_for_isr(OFFSETS, partition)
    followers = [n for n in c.partition(OFFSETS, partition).replicas if n != leader]
    assert len(followers) == 2, followers
    assert fetch_from(c.node(leader), group) == (3, 0)

    for f in followers:
        stop_fully(c, f)  # no fetch of the commit below may slip out after the signal
    try:
        # The commit is appended at once and then waits for followers that do not fetch; the
        # OffsetFetch, sent meanwhile, reads the coordinator's state with the commit applied.
        committing = raw.Conn(c.node(leader).bootstrap, timeout=20)
        committing.send(offset_commit_v2(group, "plain", 0, 7))
        time.sleep(0.3)
        # Descriptions and listings read the same state: they wait on the same fence.
        describing = raw.Conn(c.node(leader).bootstrap, timeout=20)
        describing.send(describe_groups_v0(group))
        listing = raw.Conn(c.node(leader).bootstrap, timeout=20)
        listing.send(raw.frame(raw.header_v1(16, 0, 4)))
        got = fetch_from(c.node(leader), group)
        assert got is not None, "the leader did not answer an OffsetFetch in 8 s"
        offset, error = got
        assert offset != 7, "the leader answered a commit no quorum holds"
        assert (offset == -1 and error != 0) or (offset, error) == (3, 0), (offset, error)
        described, listed = describing.read_frame(), listing.read_frame()
        describing.close()
        listing.close()
        assert described is not None and described_group_error(described) != 0, \
            "the leader described the group from a state no quorum holds"
        # Once the leader has let the partition go (its session lapsed), it lists no group of it.
        assert listed is not None, "the leader closed the connection of a ListGroups"
        listed_error, listed_ids = listed_groups(listed)
        assert listed_error != 0 or group not in listed_ids, \
            "the leader listed its groups from a state no quorum holds"
        answer = committing.read_frame()
        committing.close()
        assert answer is not None and offset_commit_error(answer) != 0, \
            "a commit no follower holds was acknowledged"
        c.kill(leader)
        c.node(leader).start(wait=False)
    finally:
        for f in followers:
            if c.node(f).paused:
                c.resume(f)

    # Every node's answers while the partition moves to a new epoch.
    answers = []
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline and len(answers) < 20:
        for n in c.ids:
            got = fetch_from(c.node(n), group)
            if got is not None and got[1] == 0:
                answers.append((n, got[0]))
        time.sleep(0.2)
    c.wait_ready(c.ids)
    c.wait_for_leader(OFFSETS, partition)

    def settled_offset():
        try:
            got = committed_offsets(c.bootstrap, group, "plain", [0], timeout=10).get(0)
        except KafkaException:
            return None
        return got if got in (3, 7) else None
    final = wait_until(settled_offset, 60, "the group's offset once the cluster is whole again")
    wait_until(lambda: fetch_from(c.node(coordinator_of(c, group)[1]), group) == (final, 0), 30,
               f"the coordinator to answer {final}")
    assert answers, "no node answered an OffsetFetch in 20 s while the partition changed hands"
    wrong = [(n, offset) for n, offset in answers if offset != final and offset != 3]
    assert not wrong, f"answered offsets the group does not keep (it keeps {final}): {wrong}"


def test_an_assignment_committed_on_too_few_replicas_reaches_no_member(cluster):
    """The leader's SyncGroup appends the group's assignment and waits, as a write, until it is
    committed with at least `min.insync.replicas` (2 of 3) in sync. With both followers of the
    group's offsets partition paused, 5 nodes keep their metadata quorum: the controller fences
    the two and the ISR shrinks to the leader, which commits the record alone. The leader's
    SyncGroup must fail then, and so must the other member's, waiting for the same record (as on
    Kafka, which answers every member with the store's error): before, the follower was handed
    the assignment while the group dropped it and rebalanced. The group works again once the
    followers are back."""
    c = cluster(5)
    c.create_topic("plain", 1, replication_factor=3)
    committed_offsets(c.bootstrap, "g-first", "plain", [0])  # creates the offsets topic
    wait_until(lambda: c.metadata(OFFSETS).topics[OFFSETS].partitions, 30, f"{OFFSETS}'s partitions")
    meta = c.metadata_leader()
    for n in range(200):
        group = f"g-sync-{n}"
        partition, leader = coordinator_of(c, group)
        replicas = c.partition(OFFSETS, partition).replicas
        followers = [r for r in replicas if r != leader]
        # Pausing the metadata leader would add an election to the wait.
        if meta not in followers:
            break
    else:
        raise AssertionError(f"no group's offsets partition is followed off node {meta}")
    assert len(followers) == 2, replicas
    c.wait_for_isr(OFFSETS, partition)
    bootstrap = c.node(leader).bootstrap
    # Sessions of 30 s: the members wait through the pause and the followers' return unheard.
    session = 30_000
    a, b = raw.Conn(bootstrap, timeout=40), raw.Conn(bootstrap, timeout=40)

    def in_thread(target):
        thread = threading.Thread(target=target, daemon=True)
        thread.start()
        return thread

    try:
        error, generation, first, _ = join_v5(a, group, "", "inst-a", session)
        assert (error, generation) == (0, 1)
        assert sync_v3(a, group, 1, first, "inst-a", [(first, b"\x00\x00a")]) == 0
        # b joins, a rejoins: generation 2.
        joined = {}
        joining = in_thread(lambda: joined.update(b=join_v5(b, group, "", "inst-b", session)))
        wait_until(lambda: heartbeat_v3(a, group, 1, first, "inst-a") == 27, 10, "b's join to start a rebalance")
        error, generation, group_leader, member_a = join_v5(a, group, first, "inst-a", session)
        joining.join(10)
        assert "b" in joined, "b's JoinGroup was not answered"
        assert (error, generation) == (0, 2) and joined["b"][:2] == (0, 2), (error, generation, joined)
        member_b = joined["b"][3]
        conns = {member_a: a, member_b: b}
        instance = {member_a: "inst-a", member_b: "inst-b"}
        assignments = [(member_a, b"\x00\x00a"), (member_b, b"\x00\x00b")]
        follower = member_b if group_leader == member_a else member_a

        # The follower waits in SyncGroup for the leader's assignment.
        synced = {}
        syncing = in_thread(
            lambda: synced.update(error=sync_v3(conns[follower], group, 2, follower, instance[follower], [])))
        time.sleep(0.5)
        logged = len(c.node(leader).log())
        for f in followers:
            stop_fully(c, f)
        try:
            started = time.monotonic()
            leader_error = sync_v3(conns[group_leader], group, 2, group_leader, instance[group_leader], assignments)
            waited = time.monotonic() - started
            syncing.join(15)
        finally:
            for f in followers:
                if c.node(f).paused:
                    c.resume(f)
        assert "error" in synced, "the follower's SyncGroup was not answered"
        # COORDINATOR_NOT_AVAILABLE, as Kafka answers a store that failed. The record was taken
        # and waited for (the followers are fenced about a second after the pause), then
        # refused for want of in-sync replicas: not refused up front, not a wait that timed out.
        assert leader_error == 15 and 0.5 < waited < 5, (leader_error, waited)
        refused = [line for line in c.node(leader).log()[logged:].splitlines()
                   if "a coordinator write failed" in line and f"{OFFSETS}-{partition}: " in line]
        assert refused, "the assignment was not refused for want of in-sync replicas"
        assert synced["error"] == 15, f"the follower got {synced['error']}: the assignment the group dropped"

        # The group rebalances; once the followers are back in sync, it is stable again.
        joined = {}
        joining = in_thread(lambda: joined.update(b=join_v5(b, group, member_b, "inst-b", session)))
        error, generation, group_leader, _ = join_v5(a, group, member_a, "inst-a", session)
        joining.join(40)
        assert "b" in joined, "b's JoinGroup was not answered"
        assert error == 0 and joined["b"][:3] == (0, generation, group_leader), (error, generation, joined)
        assert generation > 2
        c.wait_for_isr(OFFSETS, partition, timeout=60)
        follower = member_b if group_leader == member_a else member_a
        syncing = in_thread(
            lambda: synced.update(again=sync_v3(conns[follower], group, generation, follower, instance[follower], [])))
        assert sync_v3(conns[group_leader], group, generation, group_leader, instance[group_leader], assignments) == 0
        syncing.join(15)
        assert synced.get("again") == 0, synced
    finally:
        a.close()
        b.close()
