"""Helpers that drive the real clients (confluent-kafka / librdkafka and kafka-python)."""

import time

from confluent_kafka import OFFSET_BEGINNING, Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

CODECS = ["none", "gzip", "snappy", "lz4", "zstd"]


def value_for(i):
    """Deterministic, varied-length, binary record value for sequence number i."""
    n = 40 + (i * 7919) % 160
    return bytes(((i * 31 + j * 17) % 256) for j in range(n))


def headers_for(i):
    return [("seq", str(i).encode()), ("bin", bytes([i % 256, 0, 255])), ("empty", b"")]


def create_topic(bootstrap, name, partitions=1, config=None):
    admin = AdminClient({"bootstrap.servers": bootstrap})
    futures = admin.create_topics([NewTopic(name, partitions, 1, config=config or {})])
    futures[name].result(15)


def produce_confluent(bootstrap, topic, count, compression="none", extra=None, key=lambda i: f"key-{i}".encode()):
    """Produces `count` records; returns the delivery reports as (seq, partition, offset)."""
    conf = {"bootstrap.servers": bootstrap, "compression.type": compression, "linger.ms": 5,
            "acks": "all", **(extra or {})}
    p = Producer(conf)
    delivered, errors = [], []

    def report(seq, err, msg):
        if err:
            errors.append((seq, err))
        else:
            delivered.append((seq, msg.partition(), msg.offset()))

    for i in range(count):
        while True:
            try:
                p.produce(topic, key=key(i), value=value_for(i), headers=headers_for(i),
                          on_delivery=lambda err, msg, i=i: report(i, err, msg))
                break
            except BufferError:
                p.poll(0.05)
        if i % 1000 == 0:
            p.poll(0)
    left = p.flush(60)
    assert left == 0, f"{left} records not delivered"
    assert not errors, f"delivery errors: {errors[:5]}"
    return delivered


def consume_confluent(bootstrap, topic, partitions, expected, timeout=60, extra=None):
    """Reads every partition from the beginning until `expected` records arrived."""
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": f"verify-{topic}-{time.monotonic_ns()}",
                  "enable.auto.commit": False, "auto.offset.reset": "earliest", "check.crcs": True,
                  **(extra or {})})
    c.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in range(partitions)])
    records = []
    deadline = time.monotonic() + timeout
    try:
        while len(records) < expected and time.monotonic() < deadline:
            for m in c.consume(num_messages=10000, timeout=0.5):
                assert not m.error(), m.error()
                records.append((m.partition(), m.offset(), m.key(), m.value(), m.headers() or [], m.timestamp()))
    finally:
        c.close()
    return records


def consume_kafka_python(bootstrap, topic, partitions, expected, timeout=60):
    from kafka import KafkaConsumer
    from kafka import TopicPartition as KTP

    c = KafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False, auto_offset_reset="earliest",
                      check_crcs=True, max_partition_fetch_bytes=1 << 20)
    c.assign([KTP(topic, p) for p in range(partitions)])
    c.seek_to_beginning()
    records = []
    deadline = time.monotonic() + timeout
    try:
        while len(records) < expected and time.monotonic() < deadline:
            for tp, batch in c.poll(timeout_ms=500, max_records=10000).items():
                for m in batch:
                    records.append((m.partition, m.offset, m.key, m.value, list(m.headers or []), m.timestamp))
    finally:
        c.close()
    return records


def check_complete_and_ordered(records, count, key=lambda i: f"key-{i}".encode()):
    """Every sequence number exactly once, exact bytes, offsets dense and seq increasing per partition."""
    seen = {}
    by_partition = {}
    for partition, offset, k, v, headers, _ts in records:
        headers = [(h, bytes(x) if x is not None else b"") for h, x in headers]
        seq = int(dict(headers)["seq"])
        assert seq not in seen, f"seq {seq} delivered twice"
        seen[seq] = (partition, offset)
        assert k == key(seq), f"seq {seq}: key {k!r}"
        assert v == value_for(seq), f"seq {seq}: value differs"
        assert headers == headers_for(seq), f"seq {seq}: headers {headers}"
        by_partition.setdefault(partition, []).append((offset, seq))
    assert len(seen) == count, f"{count - len(seen)} records missing"
    for partition, items in by_partition.items():
        offsets = [o for o, _ in items]
        assert offsets == sorted(offsets), f"partition {partition} out of offset order"
        assert offsets == list(range(offsets[0], offsets[0] + len(offsets))), f"partition {partition} has gaps"
        seqs = [s for _, s in items]
        assert seqs == sorted(seqs), f"partition {partition}: records not in production order"
    return by_partition


def total_records(bootstrap, topic, partitions):
    """Sum of the high watermarks (every partition starts at 0 here)."""
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "watermarks"})
    try:
        return sum(c.get_watermark_offsets(TopicPartition(topic, p), timeout=10)[1] for p in range(partitions))
    finally:
        c.close()
