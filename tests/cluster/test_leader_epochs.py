"""OffsetForLeaderEpoch on a 3-node cluster (KIP-101/KIP-320): the leader says where each epoch
ended in its log, fences a client with an older current epoch, tells one with a newer epoch it
has not caught up, and followers refuse; and a confluent-kafka consumer — which validates its
position with this API after a leader change — goes on across a failover without resetting
its offset or reading a record twice."""

import logging
import struct
import time

import pytest
from confluent_kafka import Consumer, TopicPartition

from conftest import sluice_cli, wait_until

from broker.raw import call, frame, header_v1, one_partition, string
from .checker import History
from .harness import CLIENT_DEFAULTS
from .workload import produce_records

pytestmark = pytest.mark.timeout(120)

NONE, UNKNOWN_TOPIC_OR_PARTITION, NOT_LEADER_OR_FOLLOWER = 0, 3, 6
FENCED_LEADER_EPOCH, UNKNOWN_LEADER_EPOCH = 74, 75


class RequestLog(logging.Handler):
    """Keeps librdkafka's log lines."""

    def __init__(self):
        super().__init__()
        self.lines = []

    def emit(self, record):
        self.lines.append(record.getMessage())

    def saw(self, text):
        return any(text in line for line in self.lines)


def end_for_epoch(bootstrap, topic, partition, current, epoch):
    """OffsetForLeaderEpoch v3 for one partition -> (error, leader epoch, end offset)."""
    body = struct.pack(">i", -1)  # replica id: a consumer
    body += struct.pack(">i", 1) + string(topic)
    body += struct.pack(">i", 1) + struct.pack(">iii", partition, current, epoch)
    payload = call(bootstrap, frame(header_v1(23, 3, 11) + body))
    at = one_partition(payload, 4 + 4, topic)  # past the correlation id and throttle time
    error, index, leader_epoch, end = struct.unpack_from(">hiiq", payload, at)
    assert index == partition
    return error, leader_epoch, end


def list_offset(bootstrap, topic, partition, timestamp):
    """ListOffsets v4 for one partition -> (error, offset, leader epoch)."""
    body = struct.pack(">ib", -1, 0)  # replica id: a consumer; read_uncommitted
    body += struct.pack(">i", 1) + string(topic)
    body += struct.pack(">i", 1) + struct.pack(">iiq", partition, -1, timestamp)
    payload = call(bootstrap, frame(header_v1(2, 4, 12) + body))
    at = one_partition(payload, 4 + 4, topic)  # past the correlation id and throttle time
    index, error, _timestamp, offset, leader_epoch = struct.unpack_from(">ihqqi", payload, at)
    assert index == partition
    return error, offset, leader_epoch


def current_epoch(bootstrap, topic, partition):
    """The leader's epoch: the one current epoch it neither fences nor does not know."""
    for epoch in range(0, 100):
        error, _, _ = end_for_epoch(bootstrap, topic, partition, epoch, epoch)
        if error == NONE:
            return epoch
        assert error == FENCED_LEADER_EPOCH, f"epoch {epoch}: error {error}"
    raise AssertionError("no current leader epoch below 100")


def test_offset_for_leader_epoch_across_a_failover(cluster):
    c = cluster(3)
    topic = "epochs"
    c.create_topic(topic, 1, replication_factor=3)
    history = History()
    produce_records(c.bootstrap, topic, history, 10)
    leader = c.leader_of(topic, 0)
    at = c.node(leader).bootstrap
    first = current_epoch(at, topic, 0)
    assert end_for_epoch(at, topic, 0, first, first) == (NONE, first, 10)
    assert end_for_epoch(at, topic, 0, -1, first) == (NONE, first, 10)
    assert end_for_epoch(at, topic, 0, first + 1, first)[0] == UNKNOWN_LEADER_EPOCH
    follower = next(i for i in c.ids if i != leader)
    assert end_for_epoch(c.node(follower).bootstrap, topic, 0, -1, first)[0] == NOT_LEADER_OR_FOLLOWER
    assert end_for_epoch(at, "no-such-topic", 0, -1, 0)[0] == UNKNOWN_TOPIC_OR_PARTITION

    # A consumer reads the first ten records, then the leader dies. Its protocol log shows
    # whether it validated its position with OffsetForLeaderEpoch.
    sent = RequestLog()
    logger = logging.getLogger("rdkafka-epochs")
    logger.addHandler(sent)
    logger.propagate = False
    logger.setLevel(logging.DEBUG)
    consumer = Consumer({"bootstrap.servers": c.bootstrap, "group.id": "epochs", "enable.auto.commit": False,
                         "auto.offset.reset": "earliest", "isolation.level": "read_uncommitted",
                         "fetch.wait.max.ms": 100, "debug": "protocol", **CLIENT_DEFAULTS},
                        logger=logger)
    seen = []
    try:
        consumer.assign([TopicPartition(topic, 0, 0)])
        deadline = time.monotonic() + 20
        while len(seen) < 10 and time.monotonic() < deadline:
            seen += [m.offset() for m in consumer.consume(10, 0.5) if m.error() is None]
        assert seen == list(range(10)), seen
        c.kill(leader)
        new = c.wait_for_leader(topic, 0, not_node=leader, timeout=20)
        before_second = int(time.time() * 1000)
        produce_records(c.bootstrap, topic, history, 5)
        at = c.node(new).bootstrap
        second = current_epoch(at, topic, 0)
        assert second > first
        # The old epoch ended where the new leader's began; the new one ends at the log end.
        assert end_for_epoch(at, topic, 0, second, first) == (NONE, first, 10)
        assert end_for_epoch(at, topic, 0, second, second) == (NONE, second, 15)
        assert end_for_epoch(at, topic, 0, first, first)[0] == FENCED_LEADER_EPOCH
        # ListOffsets names the epoch that wrote the offset it found (the current one beside
        # the latest offset), as Kafka does: a consumer validates a position it seeks to
        # against that epoch.
        assert list_offset(at, topic, 0, -2) == (NONE, 0, first), "earliest"
        assert list_offset(at, topic, 0, before_second) == (NONE, 10, second), "by timestamp"
        assert list_offset(at, topic, 0, -1) == (NONE, 15, second), "latest"
        # The consumer validates its position with the new leader and goes on from offset 10:
        # no reset to the start, nothing read twice, nothing skipped.
        deadline = time.monotonic() + 30
        while len(seen) < 15 and time.monotonic() < deadline:
            seen += [m.offset() for m in consumer.consume(10, 0.5) if m.error() is None]
        assert seen == list(range(15)), seen
        assert sent.saw("Sent OffsetForLeaderEpochRequest"), "the consumer never validated its position"
    finally:
        consumer.close()


def test_a_move_that_drops_a_replica_starts_a_new_epoch_under_the_same_leader(cluster):
    """A reassignment that completes drops the leaving replica: the leader stays, in a new
    epoch, so a fetch the dropped replica sent before it deleted its log is fenced (the
    simulation found that such a fetch let the node, added back, join the ISR with an empty
    log). Records before and after are all there, and the epoch that ended says where."""
    c = cluster(4)
    topic = "epoch-move"
    c.create_topic(topic, 1, replication_factor=3)
    history = History()
    produce_records(c.bootstrap, topic, history, 10)
    p = c.partition(topic, 0)
    leader = p.leader
    at = c.node(leader).bootstrap
    first = current_epoch(at, topic, 0)
    follower = next(r for r in p.replicas if r != leader)
    spare = next(n for n in c.ids if n not in p.replicas)
    target = [leader] + [r for r in p.replicas if r not in (leader, follower)] + [spare]
    r = sluice_cli("topic", "-b", c.bootstrap, "reassign", topic, "--replicas",
                   ",".join(map(str, target)), "--wait", "30", timeout=60)
    assert "done" in r.stdout, r.stdout
    wait_until(lambda: sorted(c.partition(topic, 0).replicas) == sorted(target), 20,
               f"{topic}-0 on {target}")
    assert c.partition(topic, 0).leader == leader
    second = current_epoch(at, topic, 0)
    assert second == first + 1, (first, second)
    produce_records(c.bootstrap, topic, history, 5)
    assert end_for_epoch(at, topic, 0, second, first) == (NONE, first, 10)
    assert end_for_epoch(at, topic, 0, second, second) == (NONE, second, 15)
