#!/usr/bin/env python3
"""The matrix's checks through kafka-python, run by venv-kafka-python-2.0.2's python:

    venv-kafka-python-2.0.2/bin/python kafka_python_client.py 127.0.0.1:9092

kafka-python 2.0.2 has no idempotent producer and no transactions (later 2.x releases added them), so
produce_idempotent and transactions are not among its checks.
"""

import os
import sys

import kafka
from kafka import KafkaAdminClient, KafkaConsumer, KafkaProducer, TopicPartition
from kafka.admin import NewTopic
from kafka.structs import OffsetAndMetadata

from checks import Deadline, check, expect, name, watchdog

BOOTSTRAP = sys.argv[1]
watchdog(int(os.environ.get("COMPAT_DEADLINE", "150")))
CLIENT = "kafka-python"
print(f"CLIENT kafka-python {kafka.__version__}", flush=True)

TOPIC = name("main", CLIENT)
GROUP_TOPIC = name("grouped", CLIENT)
GROUP = name("group", CLIENT)

admin = KafkaAdminClient(bootstrap_servers=BOOTSTRAP, request_timeout_ms=15000)
# kafka-python guesses the broker's version from the ApiVersions answer (its check_version).
print(f"# kafka-python takes the broker for Kafka {admin.config['api_version']}", flush=True)


def create(topic, partitions=1):
    response = admin.create_topics([NewTopic(topic, num_partitions=partitions, replication_factor=1)],
                                   timeout_ms=10000)
    errors = [(t, code, *rest) for t, code, *rest in response.topic_errors if code != 0]
    expect(not errors, f"CreateTopics errors: {errors}")


def produce(values, topic, **extra):
    producer = KafkaProducer(bootstrap_servers=BOOTSTRAP, acks="all", linger_ms=5, **extra)
    try:
        futures = [producer.send(topic, key=f"k{i}".encode(), value=v.encode())
                   for i, v in enumerate(values)]
        return [f.get(timeout=20).offset for f in futures]
    finally:
        producer.close(timeout=10)


def read(consumer, want, seconds=20, settle=True):
    """Polls until `want` records arrived; with settle, polls once more (1 s) so that extra
    records would show. Returns [(offset, value)]."""
    got = []
    d = Deadline(seconds)
    while d.left() and len(got) < want:
        for records in consumer.poll(timeout_ms=int(min(500, d.left() * 1000))).values():
            got += [(r.offset, r.value.decode()) for r in records]
    if len(got) < want:
        d.fail(f"{want} records (got {len(got)}: {got[:5]}...)")
    if settle:
        for records in consumer.poll(timeout_ms=1000).values():
            got += [(r.offset, r.value.decode()) for r in records]
    return got


def assigned_consumer(topic, **extra):
    c = KafkaConsumer(bootstrap_servers=BOOTSTRAP, group_id=None, enable_auto_commit=False,
                      request_timeout_ms=15000, **extra)
    tp = TopicPartition(topic, 0)
    c.assign([tp])
    return c, tp


def topic_metadata(topic):
    topics = admin.describe_topics([topic])
    expect(len(topics) == 1 and topics[0]["topic"] == topic, f"metadata topics {topics}")
    expect(topics[0]["error_code"] == 0, f"metadata error code {topics[0]['error_code']}")
    return topics[0]


def admin_create_topic():
    create(TOPIC)
    expect(TOPIC in admin.list_topics(), f"{TOPIC} not listed")


def admin_describe_topic():
    t = topic_metadata(TOPIC)
    partitions = t["partitions"]
    expect([p["partition"] for p in partitions] == [0], f"partitions {partitions}")
    brokers = [b["node_id"] for b in admin.describe_cluster()["brokers"]]
    expect(partitions[0]["leader"] in brokers, f"leader {partitions[0]['leader']}, brokers {brokers}")


def produce_plain():
    offsets = produce([f"plain-{i}" for i in range(10)], TOPIC)
    expect(offsets == list(range(10)), f"offsets {offsets}, want 0..9")


def produce_compressed():
    """Batches of each codec (snappy in kafka-python's xerial framing) are stored and read back."""
    topic = name("compressed", CLIENT)
    create(topic)
    want = []
    for codec in ("gzip", "snappy", "lz4", "zstd"):
        values = [f"{codec}-{i}-" + "compressible " * 20 for i in range(5)]
        offsets = produce(values, topic, compression_type=codec)
        expect(offsets == list(range(len(want), len(want) + 5)), f"{codec}: offsets {offsets}")
        want += values
    c, tp = assigned_consumer(topic)
    try:
        c.seek_to_beginning(tp)
        got = [v for _, v in read(c, len(want))]
    finally:
        c.close()
    expect(got == want, f"read back {got}, want {want}")


def consume_from_beginning():
    c, tp = assigned_consumer(TOPIC)
    try:
        c.seek_to_beginning(tp)
        got = read(c, 10)
    finally:
        c.close()
    want = [(i, f"plain-{i}") for i in range(10)]
    expect(got == want, f"read {got}, want {want}")


def consume_from_end():
    c, tp = assigned_consumer(TOPIC)
    try:
        c.seek_to_end(tp)
        position = c.position(tp)  # resolves the end offset: the consumer is positioned
        expect(position == 10, f"end position {position}, want 10")
        produce([f"late-{i}" for i in range(3)], TOPIC)
        got = read(c, 3)
    finally:
        c.close()
    want = [(10 + i, f"late-{i}") for i in range(3)]
    expect(got == want, f"read {got}, want only the 3 records produced after positioning: {want}")


def group_consumer():
    return KafkaConsumer(bootstrap_servers=BOOTSTRAP, group_id=GROUP, enable_auto_commit=False,
                         auto_offset_reset="earliest", max_poll_records=4,
                         session_timeout_ms=10000, request_timeout_ms=15000)


def group_commit_and_resume():
    create(GROUP_TOPIC)
    produce([f"g-{i}" for i in range(10)], GROUP_TOPIC)
    tp = TopicPartition(GROUP_TOPIC, 0)
    a = group_consumer()
    a.subscribe([GROUP_TOPIC])
    try:
        got_a = read(a, 4, seconds=30, settle=False)[:4]
        a.commit({tp: OffsetAndMetadata(got_a[-1][0] + 1, None)})
    finally:
        a.close(autocommit=False)
    expect([o for o, _ in got_a] == [0, 1, 2, 3], f"A read {got_a}")
    b = group_consumer()
    b.subscribe([GROUP_TOPIC])
    try:
        got_b = read(b, 6, seconds=30)
        try:
            description = admin.describe_consumer_groups([GROUP])
        except Exception as e:  # reported by admin_describe_group
            description = e
    finally:
        b.close(autocommit=False)
    want = [(i, f"g-{i}") for i in range(4, 10)]
    expect(got_b == want, f"B read {got_b}, want exactly {want} (A committed 4)")
    return description


def admin_describe_group(description):
    if isinstance(description, Exception):
        raise description
    expect(len(description) == 1, f"descriptions {description}")
    g = description[0]
    expect(g.error_code == 0 and g.group == GROUP, f"description {g}")
    expect(g.state == "Stable", f"state {g.state}, want Stable")
    expect(g.protocol_type == "consumer", f"protocol type {g.protocol_type}")
    expect(len(g.members) == 1, f"{len(g.members)} members, want 1")
    assignment = g.members[0].member_assignment.assignment
    expect(assignment == [(GROUP_TOPIC, [0])], f"member assignment {assignment}")


def admin_delete_topic():
    response = admin.delete_topics([TOPIC], timeout_ms=10000)
    errors = [e for e in response.topic_error_codes if e[1] != 0]
    expect(not errors, f"DeleteTopics errors: {errors}")
    d = Deadline(15)
    while d.left():
        if TOPIC not in admin.list_topics():
            return
    d.fail(f"disappearance of {TOPIC} from metadata")


check("admin_create_topic", admin_create_topic)
check("admin_describe_topic", admin_describe_topic, needs=["admin_create_topic"])
check("produce", produce_plain, needs=["admin_create_topic"])
check("produce_compressed", produce_compressed)
check("consume_from_beginning", consume_from_beginning, needs=["produce"])
check("consume_from_end", consume_from_end, needs=["produce"])
description = check("group_commit_and_resume", group_commit_and_resume)
check("admin_describe_group", lambda: admin_describe_group(description),
      needs=["group_commit_and_resume"])
check("admin_delete_topic", admin_delete_topic, needs=["admin_create_topic"])
admin.close()
