"""Retention by time and by size deletes whole segments; the log start moves and reads below
it get OFFSET_OUT_OF_RANGE (which a consumer resolves with auto.offset.reset)."""

import os
import time

import pytest
from confluent_kafka import Consumer, KafkaError, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource

from conftest import wait_until
from .clients import create_topic, value_for


def segment_files(broker, topic, partition=0):
    d = broker.data_dir / "topics" / f"{topic}-{partition}"
    return sorted(f for f in os.listdir(d) if f.endswith(".log"))


def fill(bootstrap, topic, count, timestamp=None):
    # Small batches, so that segments hold several (a batch larger than segment.bytes gets a
    # segment of its own, as in Kafka).
    p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 1, "batch.size": 4096})
    for i in range(count):
        kwargs = {"timestamp": timestamp} if timestamp else {}
        p.produce(topic, value=value_for(i) * 4, partition=0, **kwargs)
    assert p.flush(20) == 0


def test_retention_by_time_deletes_old_segments(start_broker):
    broker = start_broker(["--log-retention-check-interval-ms", "200"])
    topic = "expiring"
    # Retention is set to an hour only once the log is written: with it from the start, a check
    # (every 200 ms) may trim the old segments while they are written (seen on a loaded machine),
    # and the count taken before would already be the trimmed one.
    create_topic(broker.bootstrap, topic, 1, {"segment.bytes": "16384", "retention.ms": "-1"})
    old = int(time.time() * 1000) - 2 * 3600 * 1000
    fill(broker.bootstrap, topic, 2000, timestamp=old)      # two hours old
    fill(broker.bootstrap, topic, 200)                      # now
    before = segment_files(broker, topic)
    assert len(before) > 5 and before[0] == f"{0:020}.log"
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    resource = ConfigResource(ConfigResource.Type.TOPIC, topic,
                              incremental_configs=[ConfigEntry("retention.ms", "3600000",
                                                               incremental_operation=AlterConfigOpType.SET)])
    admin.incremental_alter_configs([resource])[resource].result(10)

    def trimmed():
        s = broker.status()
        p = [t for t in s["topics"] if t["name"] == topic][0]["partitions"][0]
        return p if p["log_start_offset"] > 0 else None
    p = wait_until(trimmed, 20, "retention to delete old segments")
    assert p["log_end_offset"] == 2200
    assert p["log_start_offset"] <= 2000, "recent records are kept"
    after = segment_files(broker, topic)
    assert len(after) < len(before)
    assert after[0] > before[0], "the oldest segment files are gone from disk"

    # Reading below the log start: OFFSET_OUT_OF_RANGE, resolved by auto.offset.reset.
    c = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "g", "auto.offset.reset": "error"})
    c.assign([TopicPartition(topic, 0, 0)])
    try:
        def out_of_range():
            m = c.poll(0.5)
            return m is not None and m.error() is not None and m.error().code() == KafkaError._AUTO_OFFSET_RESET
        wait_until(out_of_range, 15, "an offset-out-of-range error")
    finally:
        c.close()
    c = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "g2", "auto.offset.reset": "earliest"})
    c.assign([TopicPartition(topic, 0, 0)])
    try:
        first = wait_until(lambda: (lambda m: m if m is not None and not m.error() else None)(c.poll(0.5)),
                           15, "a record after reset")
        assert first.offset() == p["log_start_offset"]
    finally:
        c.close()


def test_retention_by_bytes(start_broker):
    broker = start_broker(["--log-retention-check-interval-ms", "200"])
    topic = "bounded"
    create_topic(broker.bootstrap, topic, 1, {"segment.bytes": "16384", "retention.bytes": "65536"})
    fill(broker.bootstrap, topic, 3000)

    limit = 65536

    def bounded():
        s = broker.status()
        p = [t for t in s["topics"] if t["name"] == topic][0]["partitions"][0]
        sizes = [os.path.getsize(broker.data_dir / "topics" / f"{topic}-0" / f) for f in segment_files(broker, topic)]
        # Kafka's rule: delete the oldest segment while the rest would still hold `limit`.
        return (p, sizes) if p["log_start_offset"] > 0 and sum(sizes) - sizes[0] < limit else None
    p, sizes = wait_until(bounded, 20, "retention.bytes to bound the partition")
    assert p["log_end_offset"] == 3000
    assert sum(sizes) >= limit, f"more deleted than needed: {sizes}"
    assert p["size_bytes"] == sum(sizes)


def earliest(bootstrap, topic):
    from kafka import KafkaConsumer
    from kafka.structs import TopicPartition as KTP
    c = KafkaConsumer(bootstrap_servers=bootstrap)
    try:
        return c.beginning_offsets([KTP(topic, 0)])[KTP(topic, 0)]
    finally:
        c.close()


def offsets_from_beginning(bootstrap, topic):
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": f"from-start-{time.time_ns()}",
                  "auto.offset.reset": "earliest", "enable.auto.commit": False})
    c.assign([TopicPartition(topic, 0, -2)])  # OFFSET_BEGINNING
    offsets, deadline = [], time.time() + 15
    while time.time() < deadline:
        got = [m.offset() for m in c.consume(1000, 1.0) if m.error() is None]
        if not got and offsets:
            break
        offsets += got
    c.close()
    return offsets


def test_delete_records_moves_the_log_start_for_good(start_broker):
    """DeleteRecords (kafka-delete-records.sh, AdminClient.delete_records) from both clients:
    the log start moves into a segment, whole segments below it go, consumers and ListOffsets
    start there, it survives a restart and a crash, and bad requests get Kafka's errors."""
    from confluent_kafka import KafkaException
    from confluent_kafka.admin import AdminClient
    from kafka.admin import KafkaAdminClient
    from kafka.errors import UnknownTopicOrPartitionError
    from kafka.structs import TopicPartition as KTP

    broker = start_broker()
    topic = "purged"
    create_topic(broker.bootstrap, topic, 1, {"segment.bytes": "16384"})
    fill(broker.bootstrap, topic, 1000)
    segments_before = segment_files(broker, topic)
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})

    def delete(offset, t=topic, partition=0):
        futures = admin.delete_records([TopicPartition(t, partition, offset)], operation_timeout=10)
        return list(futures.values())[0].result(10)

    assert delete(555).low_watermark == 555
    assert earliest(broker.bootstrap, topic) == 555
    offsets = offsets_from_beginning(broker.bootstrap, topic)
    assert offsets[0] == 555 and offsets[-1] == 999 and len(offsets) == 445
    assert len(segment_files(broker, topic)) < len(segments_before), "whole segments below the start are deleted"
    assert delete(100).low_watermark == 555, "the start never moves back"

    # kafka-python's admin client, then a clean restart and a crash.
    kp = KafkaAdminClient(bootstrap_servers=broker.bootstrap)
    kp.delete_records({KTP(topic, 0): 700})
    kp.close()
    broker.stop()
    broker.start()
    assert earliest(broker.bootstrap, topic) == 700
    broker.kill()
    broker.start()
    assert earliest(broker.bootstrap, topic) == 700
    assert offsets_from_beginning(broker.bootstrap, topic)[0] == 700

    # Bad input: Kafka's error codes.
    def error_of(offset, t=topic, partition=0):
        try:
            delete(offset, t, partition)
        except KafkaException as e:
            return e.args[0].name()
        return None

    assert error_of(1001) == "OFFSET_OUT_OF_RANGE", "past the high watermark"
    # librdkafka refuses an unknown partition itself (_NOENT); kafka-python sends it.
    assert error_of(5, partition=3) == "_NOENT"
    kp = KafkaAdminClient(bootstrap_servers=broker.bootstrap)
    node = kp.describe_cluster()["brokers"][0]["broker_id"]
    with pytest.raises(UnknownTopicOrPartitionError):
        kp.delete_records({KTP(topic, 3): 5}, partition_leader_id=node)
    kp.close()
    assert error_of(0, t="__consumer_offsets") == "TOPIC_EXCEPTION"  # librdkafka's name for INVALID_TOPIC_EXCEPTION (17)
    create_topic(broker.bootstrap, "compact-only", 1, {"cleanup.policy": "compact"})
    assert error_of(0, t="compact-only") == "POLICY_VIOLATION"
    # -1 (OFFSET_END): everything up to the high watermark.
    assert delete(-1).low_watermark == 1000
    assert earliest(broker.bootstrap, topic) == 1000
    fill(broker.bootstrap, topic, 5)
    assert offsets_from_beginning(broker.bootstrap, topic) == [1000, 1001, 1002, 1003, 1004]
