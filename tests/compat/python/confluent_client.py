#!/usr/bin/env python3
"""The matrix's checks through confluent-kafka, i.e. through the librdkafka its wheel bundles.

Run by the python of an old client's venv (venv-confluent-2.0.2 holds librdkafka 2.0.2):

    venv-confluent-2.0.2/bin/python confluent_client.py 127.0.0.1:9092
"""

import logging
import os
import re
import sys

from confluent_kafka import (OFFSET_BEGINNING, OFFSET_END, Consumer, KafkaError, Producer,
                             TopicPartition, libversion, version)
from confluent_kafka.admin import AdminClient, NewTopic

from checks import Deadline, check, expect, name, watchdog

BOOTSTRAP = sys.argv[1]
watchdog(int(os.environ.get("COMPAT_DEADLINE", "150")))
CLIENT = "librdkafka"
print(f"CLIENT confluent-kafka {version()[0]} librdkafka {libversion()[0]}", flush=True)

TOPIC = name("main", CLIENT)
GROUP_TOPIC = name("grouped", CLIENT)
GROUP = name("group", CLIENT)
TXN_TOPIC = name("txn", CLIENT)
TXN_IN = name("txn-in", CLIENT)
TXN_OUT = name("txn-out", CLIENT)
TXN_GROUP = name("txn-group", CLIENT)


def log_error(err):
    print(f"# client error: {err}", file=sys.stderr, flush=True)


def conf(**extra):
    c = {"bootstrap.servers": BOOTSTRAP, "error_cb": log_error, "socket.timeout.ms": 10000}
    c.update({k.replace("_", "."): v for k, v in extra.items()})
    return c


admin = AdminClient(conf())


def create(topic, partitions=1):
    futures = admin.create_topics([NewTopic(topic, num_partitions=partitions, replication_factor=1)],
                                  operation_timeout=10, request_timeout=15)
    futures[topic].result(timeout=20)


def produce(records, topic, **extra):
    """Produces (key, value) pairs; returns their offsets once all are acknowledged."""
    producer = Producer(conf(acks="all", linger_ms=5, **extra))
    reports = []

    def delivered(err, msg):
        reports.append((err, msg.offset() if err is None else None))

    for key, value in records:
        producer.produce(topic, key=key, value=value, on_delivery=delivered)
    left = producer.flush(20)
    expect(left == 0, f"{left} records still unacknowledged after 20s")
    errors = [str(e) for e, _ in reports if e is not None]
    expect(not errors, f"delivery errors: {errors}")
    return [o for _, o in reports]


def read(consumer, want, seconds=20, until_eof=False):
    """Polls until `want` records arrived (and, with until_eof, the partition end was seen after
    them, so extra records would show); returns [(offset, value)]."""
    got, eof = [], False
    d = Deadline(seconds)
    while d.left():
        if len(got) >= want and (eof or not until_eof):
            return got
        msg = consumer.poll(min(0.5, d.left()))
        if msg is None:
            continue
        if msg.error():
            if msg.error().code() == KafkaError._PARTITION_EOF:
                eof = len(got) >= want
                continue
            raise RuntimeError(f"consumer error: {msg.error()}")
        got.append((msg.offset(), msg.value().decode()))
    d.fail(f"{want} records (got {len(got)}: {got[:5]}...)")


def assigned_consumer(topic, offset, **extra):
    """A consumer of partition 0 without a group membership (assign, not subscribe)."""
    c = Consumer(conf(group_id=name("unused", CLIENT), enable_auto_commit=False,
                      enable_partition_eof=True, **extra))
    c.assign([TopicPartition(topic, 0, offset)])
    return c


def topic_partitions(topic):
    md = admin.list_topics(topic=topic, timeout=10)
    t = md.topics.get(topic)
    expect(t is not None, f"{topic} missing from metadata")
    expect(t.error is None, f"metadata error for {topic}: {t.error}")
    return md, t


# --- admin -------------------------------------------------------------------------------------

def admin_create_topic():
    create(TOPIC, partitions=1)
    topic_partitions(TOPIC)


def admin_describe_topic():
    md, t = topic_partitions(TOPIC)
    expect(sorted(t.partitions) == [0], f"partitions {sorted(t.partitions)}, want [0]")
    leader = t.partitions[0].leader
    expect(leader in md.brokers, f"leader {leader} is not among the brokers {list(md.brokers)}")
    expect(list(t.partitions[0].replicas) == [leader], f"replicas {t.partitions[0].replicas}")


# --- produce / consume ---------------------------------------------------------------------------

def produce_plain():
    offsets = produce([(f"k{i}".encode(), f"plain-{i}".encode()) for i in range(10)], TOPIC)
    expect(offsets == list(range(10)), f"offsets {offsets}, want 0..9")


def produce_idempotent():
    offsets = produce([(f"k{i}".encode(), f"idem-{i}".encode()) for i in range(10)], TOPIC,
                      enable_idempotence=True)
    expect(offsets == list(range(10, 20)), f"offsets {offsets}, want 10..19")


class LogCapture(logging.Handler):
    """librdkafka's log lines, through confluent-kafka's `logger` setting."""

    def __init__(self):
        super().__init__()
        self.lines = []
        self.logger = logging.getLogger(f"librdkafka-{id(self)}")
        self.logger.propagate = False
        self.logger.setLevel(logging.DEBUG)
        self.logger.addHandler(self)

    def emit(self, record):
        self.lines.append(record.getMessage())


def produce_compressed():
    """Each codec's batches leave librdkafka compressed (its `debug=msg` log names the codec of
    every ProduceRequest batch) and come back intact. librdkafka before 2.11.1 compresses with
    gzip, snappy and lz4 only when the broker's ApiVersions lists Produce v0 (librdkafka
    #4956); Kafka 4 lists Produce 0-N for that reason although it refuses v0-2 (KAFKA-18659)."""
    topic = name("compressed", CLIENT)
    create(topic)
    problems, want = [], []
    for codec in ("gzip", "snappy", "lz4", "zstd"):
        values = [f"{codec}-{i}-" + "compressible " * 20 for i in range(5)]
        want += values
        log = LogCapture()
        produce([(None, v.encode()) for v in values], topic, compression_type=codec, debug="msg",
                logger=log.logger)
        batches = re.findall(r"Produce MessageSet with \d+ message\(s\) \([^)]*, (\w+)\)",
                             "\n".join(log.lines))
        if not batches or any(b != codec for b in batches):
            said = re.search(r"Broker does not support compression type \w+", "\n".join(log.lines))
            problems.append(f"{codec} batches sent as {'/'.join(sorted(set(batches))) or '?'}"
                            + (f" (librdkafka: '{said.group(0)}')" if said else ""))
    c = assigned_consumer(topic, OFFSET_BEGINNING)
    try:
        got = [v for _, v in read(c, len(want), until_eof=True)]
    finally:
        c.close()
    expect(got == want, f"read back {len(got)} records, not the {len(want)} produced")
    expect(not problems, "; ".join(problems))


def consume_from_beginning():
    c = assigned_consumer(TOPIC, OFFSET_BEGINNING)
    try:
        got = read(c, 20, until_eof=True)
    finally:
        c.close()
    want = [(i, f"plain-{i}") for i in range(10)] + [(10 + i, f"idem-{i}") for i in range(10)]
    expect(got == want, f"read {got}, want {want}")


def consume_from_end():
    c = assigned_consumer(TOPIC, OFFSET_END)
    try:
        # The partition-end event says the consumer is positioned at the end.
        d = Deadline(20)
        while d.left():
            msg = c.poll(min(0.5, d.left()))
            if msg is None:
                continue
            if msg.error() and msg.error().code() == KafkaError._PARTITION_EOF:
                break
            expect(msg.error() is not None, f"read an old record at offset {msg.offset()}")
            raise RuntimeError(f"consumer error: {msg.error()}")
        else:
            d.fail("partition-end event (the consumer never got positioned)")
        produce([(None, f"late-{i}".encode()) for i in range(3)], TOPIC)
        got = read(c, 3, until_eof=True)
    finally:
        c.close()
    want = [(20 + i, f"late-{i}") for i in range(3)]
    expect(got == want, f"read {got}, want only the 3 records produced after positioning: {want}")


# --- consumer group ----------------------------------------------------------------------------

def group_consumer(group, **extra):
    return Consumer(conf(group_id=group, auto_offset_reset="earliest", enable_auto_commit=False,
                         enable_partition_eof=True, session_timeout_ms=10000, **extra))


def group_commit_and_resume():
    create(GROUP_TOPIC)
    produce([(None, f"g-{i}".encode()) for i in range(10)], GROUP_TOPIC)
    a = group_consumer(GROUP)
    a.subscribe([GROUP_TOPIC])
    try:
        got_a = read(a, 4, seconds=30)[:4]
        a.commit(offsets=[TopicPartition(GROUP_TOPIC, 0, got_a[-1][0] + 1)], asynchronous=False)
    finally:
        a.close()
    expect([o for o, _ in got_a] == [0, 1, 2, 3], f"A read {got_a}")
    b = group_consumer(GROUP)
    b.subscribe([GROUP_TOPIC])
    try:
        got_b = read(b, 6, seconds=30, until_eof=True)
        description = describe_group_while_member()
    finally:
        b.close()
    want = [(i, f"g-{i}") for i in range(4, 10)]
    expect(got_b == want, f"B read {got_b}, want exactly {want} (A committed 4)")
    return description


def describe_group_while_member():
    """Describes GROUP while consumer B is its only member (kept for admin_describe_group)."""
    try:
        return admin.describe_consumer_groups([GROUP], request_timeout=15)[GROUP].result(timeout=20)
    except Exception as e:  # reported by admin_describe_group, not by the group check
        return e


def admin_describe_group(description):
    if isinstance(description, Exception):
        raise description
    expect(description.group_id == GROUP, f"group id {description.group_id}")
    expect(str(description.state).endswith("STABLE"), f"state {description.state}, want STABLE")
    expect(len(description.members) == 1, f"{len(description.members)} members, want 1")
    assignment = description.members[0].assignment.topic_partitions
    expect([(tp.topic, tp.partition) for tp in assignment] == [(GROUP_TOPIC, 0)],
           f"member assignment {assignment}")


# --- transactions ------------------------------------------------------------------------------

def transactions():
    create(TXN_TOPIC)
    p = Producer(conf(transactional_id=name("txn-id", CLIENT), acks="all"))
    p.init_transactions(20)
    for label, commit in (("commit", True), ("abort", False), ("commit2", True)):
        p.begin_transaction()
        for i in range(3):
            p.produce(TXN_TOPIC, value=f"{label}-{i}".encode())
        if commit:
            p.commit_transaction(20)
        else:
            expect(p.flush(20) == 0, "aborted records not acknowledged")
            p.abort_transaction(20)
    committed = [f"{l}-{i}" for l in ("commit", "commit2") for i in range(3)]
    c = assigned_consumer(TXN_TOPIC, OFFSET_BEGINNING, isolation_level="read_committed")
    try:
        got = [v for _, v in read(c, 6, until_eof=True)]
    finally:
        c.close()
    expect(got == committed, f"read_committed read {got}, want {committed}")
    c = assigned_consumer(TXN_TOPIC, OFFSET_BEGINNING, isolation_level="read_uncommitted")
    try:
        got = [v for _, v in read(c, 9, until_eof=True)]
    finally:
        c.close()
    expect(sorted(got) == sorted(committed + [f"abort-{i}" for i in range(3)]),
           f"read_uncommitted read {got}, want all 9 records (the aborted ones were written)")


def transactions_send_offsets():
    """Consume-transform-produce: the input offsets commit with the output records."""
    create(TXN_IN)
    create(TXN_OUT)
    produce([(None, f"in-{i}".encode()) for i in range(5)], TXN_IN)
    c = group_consumer(TXN_GROUP, isolation_level="read_committed")
    c.subscribe([TXN_IN])
    p = Producer(conf(transactional_id=name("txn-id-eos", CLIENT), acks="all"))
    try:
        p.init_transactions(20)
        records = read(c, 5, seconds=30)
        p.begin_transaction()
        for _, v in records:
            p.produce(TXN_OUT, value=v.replace("in-", "out-").encode())
        p.send_offsets_to_transaction([TopicPartition(TXN_IN, 0, records[-1][0] + 1)],
                                      c.consumer_group_metadata(), 20)
        p.commit_transaction(20)
        committed = c.committed([TopicPartition(TXN_IN, 0)], timeout=15)
    finally:
        c.close()
    expect(committed[0].offset == 5, f"group's committed offset {committed[0].offset}, want 5")
    out = assigned_consumer(TXN_OUT, OFFSET_BEGINNING, isolation_level="read_committed")
    try:
        got = [v for _, v in read(out, 5, until_eof=True)]
    finally:
        out.close()
    expect(got == [f"out-{i}" for i in range(5)], f"output {got}")


def admin_delete_topic():
    admin.delete_topics([TOPIC], operation_timeout=10, request_timeout=15)[TOPIC].result(timeout=20)
    d = Deadline(15)
    while d.left():
        if TOPIC not in admin.list_topics(timeout=10).topics:
            return
    d.fail(f"disappearance of {TOPIC} from metadata")


check("admin_create_topic", admin_create_topic)
check("admin_describe_topic", admin_describe_topic, needs=["admin_create_topic"])
check("produce", produce_plain, needs=["admin_create_topic"])
check("produce_idempotent", produce_idempotent, needs=["produce"])
check("produce_compressed", produce_compressed)
check("consume_from_beginning", consume_from_beginning, needs=["produce_idempotent"])
check("consume_from_end", consume_from_end, needs=["produce_idempotent"])
description = check("group_commit_and_resume", group_commit_and_resume)
check("admin_describe_group", lambda: admin_describe_group(description),
      needs=["group_commit_and_resume"])
check("transactions", transactions)
check("transactions_send_offsets", transactions_send_offsets)
check("admin_delete_topic", admin_delete_topic, needs=["admin_create_topic"])
