"""ListOffsets: earliest, latest, by timestamp (both clients)."""

from confluent_kafka import Consumer, Producer, TopicPartition
from kafka import KafkaConsumer
from kafka import TopicPartition as KTP

from .clients import create_topic, value_for


def produce_with_timestamps(bootstrap, topic, timestamps):
    p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 0, "batch.num.messages": 1})
    for i, ts in enumerate(timestamps):
        p.produce(topic, value=value_for(i), timestamp=ts, partition=0)
        p.flush(10)  # one batch per record, so lookups must look inside batches too
    p2 = Producer({"bootstrap.servers": bootstrap, "linger.ms": 50, "compression.type": "lz4"})
    for i, ts in enumerate(timestamps):
        p2.produce(topic, value=value_for(i), timestamp=ts + 10_000, partition=0)
    assert p2.flush(10) == 0


def test_offsets_for_times_earliest_and_latest(broker):
    topic = "times"
    create_topic(broker.bootstrap, topic, 1)
    base = 1_700_000_000_000
    stamps = [base + 100 * i for i in range(50)]
    produce_with_timestamps(broker.bootstrap, topic, stamps)  # offsets 0..49, then 50..99 (+10 s)

    c = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "times"})
    try:
        def lookup(ts):
            return c.offsets_for_times([TopicPartition(topic, 0, ts)], timeout=10)[0].offset

        assert lookup(base) == 0
        assert lookup(base + 1) == 1
        assert lookup(base + 2_450) == 25
        assert lookup(base + 4_900) == 49
        assert lookup(base + 4_901) == 50, "inside the compressed batch of the second run"
        assert lookup(base + 10_000 + 2_550) == 76
        assert lookup(base + 10_000 + 4_901) == -1, "later than every record: end"
        low, high = c.get_watermark_offsets(TopicPartition(topic, 0), timeout=10)
        assert (low, high) == (0, 100)
    finally:
        c.close()

    k = KafkaConsumer(bootstrap_servers=broker.bootstrap)
    try:
        tp = KTP(topic, 0)
        found = k.offsets_for_times({tp: base + 2_450})[tp]
        assert (found.offset, found.timestamp) == (25, base + 2_500)
        assert k.offsets_for_times({tp: base + 20_000})[tp] is None
        assert k.beginning_offsets([tp])[tp] == 0
        assert k.end_offsets([tp])[tp] == 100
    finally:
        k.close()


def test_unknown_topic_and_partition_in_list_offsets(broker):
    create_topic(broker.bootstrap, "one-partition", 1)
    k = KafkaConsumer(bootstrap_servers=broker.bootstrap, request_timeout_ms=5000)
    try:
        import kafka.errors
        try:
            k.end_offsets([KTP("one-partition", 5)])
            raise AssertionError("a missing partition must not have an end offset")
        except kafka.errors.KafkaError:
            pass
    finally:
        k.close()
