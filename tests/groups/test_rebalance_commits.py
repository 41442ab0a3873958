"""Commits made while a group rebalances: a member of the current generation may commit while
the group is PreparingRebalance (as in Apache Kafka), so what a consumer commits in its revoke
callback is kept and the next owner of the partition starts right after it: no record is
processed twice across three rebalances, none is lost. Only between the join and the
assignment (CompletingRebalance) is a plain commit refused.

The end-to-end tests run their consumers as threads of this process. With
REBALANCE_COMMITS_BOOTSTRAP=host:port they run against that broker instead of a Sluice they
start (used once by hand to check the same scenario against Apache Kafka)."""

import os
import struct
import threading
import time
import uuid
from collections import Counter

import pytest

from broker import raw
from broker.clients import create_topic
from conftest import wait_until

from .wire import call, commit_v7, heartbeat_v3, join_v5, join_v5_body, read_string, sync_v3

EXTERNAL = os.environ.get("REBALANCE_COMMITS_BOOTSTRAP")
FLAGS = ["--group-initial-rebalance-delay-ms", "300", "--group-min-session-timeout-ms", "1000"]

PARTITIONS = 6
PER_PARTITION = 500
TOTAL = PARTITIONS * PER_PARTITION
PACE_S = 0.002           # "processing" time per record: slow enough that rebalances land mid-stream
COMMIT_EVERY_S = 2.5     # periodic commits are rare, so each revoke commit carries real work
WORKER_LIMIT_S = 100     # no consumer thread runs longer than this


@pytest.fixture
def bootstrap(start_broker):
    if EXTERNAL:
        return EXTERNAL
    return start_broker(FLAGS).bootstrap


def unique(prefix):
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def produce_all(bootstrap, topic):
    from confluent_kafka import Producer
    # Small batches, fetched a little at a time (max partition fetch bytes below): consumers
    # get every partition's records interleaved, so each revocation finds work on most of them.
    p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5, "acks": "all", "batch.num.messages": 10})
    for i in range(TOTAL):
        p.produce(topic, value=str(i).encode(), partition=i % PARTITIONS)
        if i % 500 == 0:
            p.poll(0)
    assert p.flush(30) == 0, "records not delivered"


class Worker:
    """One group consumer on its own thread: processes records one by one (appends
    (partition, offset, name) to the shared `processed` list), commits what it processed every
    COMMIT_EVERY_S, synchronously in its revoke callback, and before it closes.

    (Before closing: with cooperative-sticky, librdkafka 2.16 may send LeaveGroup before the
    commit of the revoke callback that close() runs, which then goes out with an empty member
    id and gets UNKNOWN_MEMBER_ID, from Apache Kafka as from Sluice.)"""

    def __init__(self, name, client, bootstrap, group, topic, processed, strategy):
        self.name, self.client, self.bootstrap = name, client, bootstrap
        self.group, self.topic, self.strategy = group, topic, strategy
        self.processed = processed          # shared list of (partition, offset, worker name)
        self.owned = set()                  # partitions currently assigned
        self.position = {}                  # partition -> next offset after what was processed
        self.committed = {}                 # partition -> last offset committed in this ownership
        self.first = {}                     # partition -> first offset processed in this ownership
        self.events = []                    # (kind, partitions, detail)
        self.errors = []                    # failed commits, unexpected exceptions
        self.revoke_carried = 0             # records whose commit only a rebalance's revoke callback made
        self.close_carried = 0              # the same for the revoke callback run by close()
        self.closing = False
        self.stop_event = threading.Event()
        self.thread = threading.Thread(target=self._run, name=name, daemon=True)

    def start(self):
        self.thread.start()
        return self

    def stop(self, timeout=30):
        self.stop_event.set()
        self.thread.join(timeout)
        assert not self.thread.is_alive(), f"{self.name} did not close within {timeout}s"

    def count(self):
        return sum(1 for r in self.processed if r[2] == self.name)

    def revokes(self):
        """Partitions given up in a rebalance (not on close; kafka-python also reports an
        empty revocation before its first join)."""
        return [e for e in self.events if e[0] == "revoke" and e[1]]

    # Shared by both clients; called on the consumer's own callback path.
    def _assigned(self, partitions):
        self.owned |= set(partitions)
        for p in partitions:   # a new ownership: it starts from what the group committed
            self.position.pop(p, None)
            self.committed.pop(p, None)
            self.first.pop(p, None)
        self.events.append(("assign", sorted(partitions), None))

    def _offsets_to_commit(self, partitions):
        return {p: self.position[p] for p in partitions
                if p in self.position and self.committed.get(p) != self.position[p]}

    def _revoke_offsets(self, partitions):
        """What the revoke callback commits: all it processed of `partitions` and has not
        committed yet."""
        return self._offsets_to_commit(partitions)

    def _revoke_done(self, partitions, offsets, error, started):
        detail = {"offsets": offsets, "at": started, "done": time.time()}
        if error is not None:
            self.errors.append(("revoke commit", offsets, repr(error)))
            detail["error"] = repr(error)
        elif offsets:
            carried = sum(o - self.committed.get(p, self.first[p]) for p, o in offsets.items())
            self.committed.update(offsets)
            if self.closing:
                self.close_carried += carried
            else:
                self.revoke_carried += carried
        self.owned -= set(partitions)
        for p in partitions:
            self.position.pop(p, None)
        self.events.append(("close-revoke" if self.closing else "revoke", sorted(partitions), detail))

    def _process(self, partition, offset):
        if partition not in self.owned:
            self.events.append(("skipped", [partition], offset))  # fetched before a revocation
            return
        time.sleep(PACE_S)
        self.processed.append((partition, offset, self.name))
        self.first.setdefault(partition, offset)
        self.position[partition] = offset + 1

    def _periodic(self, last, commit):
        if time.monotonic() - last < COMMIT_EVERY_S:
            return last
        offsets = self._offsets_to_commit(self.owned)
        if offsets:
            try:
                commit(offsets)
                self.committed.update(offsets)
            except Exception as e:  # noqa: BLE001 - retried at the next commit or revoke
                self.events.append(("periodic commit failed", sorted(offsets), repr(e)))
        return time.monotonic()

    def _final_commit(self, commit, poll):
        """A consumer that stops commits what it processed, then closes. A rebalance may be
        under way: then poll (what it returns is not processed) and try again, a few times;
        the revoke callback that close() runs commits whatever is still left."""
        for _ in range(10):
            offsets = self._offsets_to_commit(self.owned)
            if not offsets:
                return
            try:
                commit(offsets)
                self.committed.update(offsets)
                return
            except Exception as e:  # noqa: BLE001 - retried
                self.events.append(("final commit failed", sorted(offsets), repr(e)))
                poll()

    def _run(self):
        try:
            (self._run_confluent if self.client == "confluent" else self._run_kafka_python)()
        except Exception as e:  # noqa: BLE001 - reported by the test
            self.errors.append(("worker", None, repr(e)))

    def _run_confluent(self):
        from confluent_kafka import Consumer, KafkaException, TopicPartition
        c = Consumer({"bootstrap.servers": self.bootstrap, "group.id": self.group,
                      "enable.auto.commit": False, "auto.offset.reset": "earliest",
                      "partition.assignment.strategy": self.strategy,
                      "session.timeout.ms": 6000, "heartbeat.interval.ms": 300,
                      "fetch.wait.max.ms": 100, "max.partition.fetch.bytes": 1024})

        def commit(offsets):
            done = c.commit(offsets=[TopicPartition(self.topic, p, o) for p, o in offsets.items()],
                            asynchronous=False)
            failed = [(tp.partition, tp.error) for tp in done or [] if tp.error]
            if failed:
                raise KafkaException(failed[0][1])

        def on_lost(consumer, partitions):
            self.owned -= {tp.partition for tp in partitions}
            self.events.append(("lost", sorted(tp.partition for tp in partitions), None))

        def on_revoke(consumer, partitions):
            revoked = {tp.partition for tp in partitions}
            offsets, error, started = self._revoke_offsets(revoked), None, time.time()
            if offsets:
                try:
                    commit(offsets)   # synchronous
                except Exception as e:  # noqa: BLE001 - reported by the test
                    error = e
            self._revoke_done(revoked, offsets, error, started)

        c.subscribe([self.topic],
                    on_assign=lambda consumer, parts: self._assigned([tp.partition for tp in parts]),
                    on_revoke=on_revoke, on_lost=on_lost)
        deadline = time.monotonic() + WORKER_LIMIT_S
        last = time.monotonic()
        try:
            while not self.stop_event.is_set() and time.monotonic() < deadline:
                m = c.poll(0.05)
                if m is not None and not m.error():
                    self._process(m.partition(), m.offset())
                last = self._periodic(last, commit)
            self._final_commit(commit, lambda: c.poll(0.1))
        finally:
            self.closing = True
            c.close()   # runs the revoke callback

    def _run_kafka_python(self):
        from kafka import KafkaConsumer
        from kafka.consumer.subscription_state import AsyncConsumerRebalanceListener
        from kafka.coordinator.assignors.cooperative_sticky import CooperativeStickyAssignor
        from kafka.coordinator.assignors.range import RangePartitionAssignor
        from kafka.coordinator.assignors.roundrobin import RoundRobinPartitionAssignor
        from kafka.structs import OffsetAndMetadata, TopicPartition

        assignor = {"range": RangePartitionAssignor, "roundrobin": RoundRobinPartitionAssignor,
                    "cooperative-sticky": CooperativeStickyAssignor}[self.strategy]
        c = KafkaConsumer(bootstrap_servers=self.bootstrap, group_id=self.group,
                          enable_auto_commit=False, auto_offset_reset="earliest",
                          session_timeout_ms=6000, heartbeat_interval_ms=300,
                          partition_assignment_strategy=[assignor], fetch_max_wait_ms=100,
                          max_partition_fetch_bytes=1024)

        def as_kafka(offsets):
            return {TopicPartition(self.topic, p): OffsetAndMetadata(o, "", -1) for p, o in offsets.items()}

        worker = self

        # kafka-python runs rebalance listeners on its IO thread (while poll() blocks the
        # caller), where only an async listener may wait for a commit.
        class Listener(AsyncConsumerRebalanceListener):
            async def on_partitions_revoked(self, revoked):
                partitions = {tp.partition for tp in revoked}
                offsets, error, started = worker._revoke_offsets(partitions), None, time.time()
                if offsets:
                    try:
                        await c.commit_async(as_kafka(offsets))   # waits for the answer
                    except Exception as e:  # noqa: BLE001 - reported by the test
                        error = e
                worker._revoke_done(partitions, offsets, error, started)

            async def on_partitions_assigned(self, assigned):
                worker._assigned({tp.partition for tp in assigned})

            async def on_partitions_lost(self, lost):
                worker.owned -= {tp.partition for tp in lost}
                worker.events.append(("lost", sorted(tp.partition for tp in lost), None))

        c.subscribe([self.topic], listener=Listener())
        deadline = time.monotonic() + WORKER_LIMIT_S
        last = time.monotonic()
        try:
            while not self.stop_event.is_set() and time.monotonic() < deadline:
                batches = c.poll(timeout_ms=50, max_records=20)
                for tp, records in batches.items():
                    for r in records:
                        self._process(tp.partition, r.offset)
                last = self._periodic(last, lambda offsets: c.commit(as_kafka(offsets)))
            self._final_commit(lambda offsets: c.commit(as_kafka(offsets)),
                               lambda: c.poll(timeout_ms=100, max_records=1))
        finally:
            self.closing = True
            c.close(autocommit=False)   # runs on_partitions_revoked


def run_three_rebalances(bootstrap, client, strategy):
    """A consumes alone, B joins, C joins, B leaves (three rebalances while records are being
    processed); A and C close; D drains the rest. Returns (workers, processed, how many were
    processed before the drain, topic, group)."""
    topic, group = unique("rc"), unique("grc")
    create_topic(bootstrap, topic, PARTITIONS)
    produce_all(bootstrap, topic)
    processed = []
    workers = {}

    def start(name):
        workers[name] = Worker(name, client, bootstrap, group, topic, processed, strategy).start()
        return workers[name]

    def wait_for(condition, timeout, what):
        """Like wait_until, but a worker's failure ends the wait at once."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            for w in workers.values():
                assert not w.errors, f"{w.name} failed while waiting for {what}: {w.errors}"
            if condition():
                return
            time.sleep(0.02)
        raise AssertionError(f"timed out after {timeout}s waiting for {what}: "
                             f"{len(processed)} processed, owned {({n: sorted(w.owned) for n, w in workers.items()})}")

    def progress(at_least, *owners, what):
        wait_for(lambda: len(processed) >= at_least and all(workers[n].owned for n in owners), 45, what)

    try:
        a = start("A")
        progress(TOTAL // 10, "A", what="A to process 10% alone")
        b = start("B")
        progress(TOTAL * 3 // 10, "A", "B", what="rebalance 1 (B joins), then 30% processed")
        c = start("C")
        progress(TOTAL * 5 // 10, "A", "B", "C", what="rebalance 2 (C joins), then 50% processed")
        b.stop()
        wait_for(lambda: a.owned | c.owned == set(range(PARTITIONS)), 30, "rebalance 3 (B left)")
        progress(TOTAL * 7 // 10, "A", "C", what="70% processed")
        a.stop()
        c.stop()
        done_before_drain = len(processed)
        d = start("D")
        wait_for(lambda: len({(p, o) for p, o, _ in processed}) >= TOTAL and len(d.owned) == PARTITIONS,
                 45, "the last consumer to drain what is left")
        # A record the group processed already would come to D right after what is left:
        # give it a moment to show up.
        time.sleep(1)
        d.stop()
    finally:
        for w in workers.values():
            if w.thread.is_alive():
                w.stop_event.set()
        for w in workers.values():
            w.thread.join(20)
    return workers, processed, done_before_drain, topic, group


def committed_offsets(bootstrap, topic, group):
    from confluent_kafka import Consumer, TopicPartition
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "enable.auto.commit": False})
    try:
        got = c.committed([TopicPartition(topic, p) for p in range(PARTITIONS)], timeout=15)
        return {tp.partition: tp.offset for tp in got}
    finally:
        c.close()


def check_outcome(workers, processed):
    for w in workers.values():
        assert not w.errors, f"{w.name}: {w.errors}"
        assert not [e for e in w.events if e[0] == "lost"], f"{w.name} lost partitions: {w.events}"
    seen = Counter((p, o) for p, o, _ in processed)
    twice = sorted(k for k, n in seen.items() if n > 1)
    who = {k: [name for p, o, name in processed if (p, o) == k] for k in twice[:10]}
    assert not twice, f"{len(twice)} records processed more than once, e.g. {who}"
    expected = {(p, o) for p in range(PARTITIONS) for o in range(PER_PARTITION)}
    missing = sorted(expected - set(seen))
    assert not missing, f"{len(missing)} records never processed, e.g. {missing[:10]}"
    assert set(seen) == expected


def summary(workers, processed, started, done_before_drain):
    return {"seconds": round(time.monotonic() - started, 1), "processed": len(processed),
            "before_drain": done_before_drain,
            "by_worker": {n: w.count() for n, w in workers.items()},
            "revokes": {n: len(w.revokes()) for n, w in workers.items()},
            "revoke_carried": {n: w.revoke_carried for n, w in workers.items()},
            "close_carried": {n: w.close_carried for n, w in workers.items()},
            "skipped": {n: sum(1 for e in w.events if e[0] == "skipped") for n, w in workers.items()},
            "periodic_failed": {n: [e for e in w.events if e[0] == "periodic commit failed"]
                                for n, w in workers.items()}}


@pytest.mark.timeout(120)
@pytest.mark.parametrize("client,strategy", [
    ("confluent", "range"), ("kafka-python", "roundrobin"),
    ("confluent", "cooperative-sticky"), ("kafka-python", "cooperative-sticky")])
def test_revoke_commits_survive_three_rebalances(bootstrap, client, strategy):
    started = time.monotonic()
    workers, processed, done_before_drain, topic, group = run_three_rebalances(bootstrap, client, strategy)
    info = summary(workers, processed, started, done_before_drain)
    print(client, strategy, info)
    check_outcome(workers, processed)
    a, b, c = workers["A"], workers["B"], workers["C"]
    if strategy == "cooperative-sticky":
        # Incremental: A gives B and then C some partitions; B's leaving only adds to A and C.
        assert len(a.revokes()) >= 2, a.events
    else:
        # Eager: A gave up all its partitions when B joined, when C joined and when B left;
        # B when C joined; C when B left.
        assert len(a.revokes()) >= 3, a.events
        assert len(b.revokes()) >= 1 and len(c.revokes()) >= 1, (b.events, c.events)
    # The revoke callbacks' commits carried records that no periodic commit covered: had the
    # broker refused them, the next owners would have processed those records again.
    assert sum(w.revoke_carried for w in (a, b, c)) > 0, info
    assert committed_offsets(bootstrap, topic, group) == {p: PER_PARTITION for p in range(PARTITIONS)}


# -- the error codes, on the wire ------------------------------------------------------------

def _subscription(topic):
    """A consumer protocol subscription (v0) to `topic`."""
    return struct.pack(">h", 0) + struct.pack(">i", 1) + raw.string(topic) + struct.pack(">i", -1)


def _join(conn, group, topic, member_id=""):
    """A dynamic member's JoinGroup v5, answering MEMBER_ID_REQUIRED (79) as clients do."""
    error, generation, leader, member = join_v5(conn, group, member_id, None, metadata=_subscription(topic),
                                                correlation_id=11)
    if error == 79:
        error, generation, leader, member = join_v5(conn, group, member, None, metadata=_subscription(topic),
                                                    correlation_id=12)
    return error, generation, leader, member


def _committed_v5(conn, group, topic):
    body = raw.string(group) + struct.pack(">i", 1) + raw.string(topic) + struct.pack(">i", 1)
    body += struct.pack(">i", 0)
    r = call(conn, 9, 5, body, 9)
    _, at = read_string(r, 8)   # throttle, topics count
    _partitions, _index, offset = struct.unpack_from(">iiq", r, at)
    return offset


@pytest.mark.timeout(60)
def test_commit_error_codes_while_preparing_a_rebalance(bootstrap):
    topic, group = unique("rcw"), unique("grcw")
    create_topic(bootstrap, topic, 1)
    first, second = raw.Conn(bootstrap), raw.Conn(bootstrap)
    try:
        error, gen, leader, m1 = _join(first, group, topic)
        assert error == 0 and leader == m1, (error, leader, m1)
        assert sync_v3(first, group, gen, m1, None, [(m1, b"")]) == 0
        assert commit_v7(first, group, gen, m1, None, topic, 0, 10) == 0, "a stable member commits"

        # A second member joins: its JoinGroup waits for m1 to rejoin, so the group stays
        # PreparingRebalance, as m1's heartbeat shows.
        error, _, _, m2 = join_v5(second, group, "", None, metadata=_subscription(topic), correlation_id=21)
        if error == 79:
            second.send(raw.frame(raw.header_v1(11, 5, 22)
                                  + join_v5_body(group, m2, None, metadata=_subscription(topic))))
        else:  # a broker that does not ask for a member id: the join itself is pending
            assert error == 0, error
        wait_until(lambda: heartbeat_v3(first, group, gen, m1, None) == 27, 10, "REBALANCE_IN_PROGRESS")

        assert commit_v7(first, group, gen, m1, None, topic, 0, 20) == 0, "the revoke-callback commit"
        assert _committed_v5(first, group, topic) == 20
        assert commit_v7(first, group, gen, "nobody", None, topic, 0, 30) == 25      # UNKNOWN_MEMBER_ID
        assert commit_v7(first, group, gen - 1, m1, None, topic, 0, 30) == 22        # ILLEGAL_GENERATION
        assert commit_v7(first, group, gen + 1, m1, None, topic, 0, 30) == 22        # ILLEGAL_GENERATION
        assert _committed_v5(first, group, topic) == 20, "refused commits change nothing"

        # m1 rejoins: the join completes (CompletingRebalance) and a plain commit must wait for
        # the assignment.
        error, gen2, leader2, _ = _join(first, group, topic, m1)
        assert (error, gen2) == (0, gen + 1), (error, gen2)
        answer = second.read_frame()
        assert answer is not None and struct.unpack_from(">h", answer, 8)[0] == 0, "m2 joined too"
        assert commit_v7(first, group, gen2, m1, None, topic, 0, 40) == 27            # REBALANCE_IN_PROGRESS
        assert commit_v7(first, group, gen, m1, None, topic, 0, 40) == 22             # the old generation
        assert leader2 == m1
        assert sync_v3(first, group, gen2, m1, None, [(m1, b""), (m2, b"")]) == 0
        assert commit_v7(first, group, gen2, m1, None, topic, 0, 50) == 0
        assert _committed_v5(first, group, topic) == 50
    finally:
        first.close()
        second.close()
