"""Real clients produce and consume through Sluice: every codec, keys, headers, exact bytes,
per-partition order; the two clients read each other's writes."""

import pytest
from kafka import KafkaProducer

from .clients import (CODECS, check_complete_and_ordered, consume_confluent, consume_kafka_python,
                      create_topic, headers_for, produce_confluent, value_for)

COUNT = 100_000


@pytest.mark.parametrize("codec", CODECS)
def test_100k_keyed_records_round_trip_with_both_clients(broker, codec):
    topic = f"roundtrip-{codec}"
    create_topic(broker.bootstrap, topic, partitions=3)
    delivered = produce_confluent(broker.bootstrap, topic, COUNT, compression=codec)
    assert len(delivered) == COUNT
    assert {p for _, p, _ in delivered} == {0, 1, 2}, "keys spread over all partitions"

    by_partition = check_complete_and_ordered(consume_confluent(broker.bootstrap, topic, 3, COUNT), COUNT)
    # The offsets the producer was told are the offsets the consumer sees.
    reported = {seq: (p, o) for seq, p, o in delivered}
    for partition, items in by_partition.items():
        for offset, seq in items:
            assert reported[seq] == (partition, offset)

    check_complete_and_ordered(consume_kafka_python(broker.bootstrap, topic, 3, COUNT), COUNT)


@pytest.mark.parametrize("codec", CODECS)
def test_kafka_python_producer_is_read_by_librdkafka(broker, codec):
    topic = f"kp-{codec}"
    create_topic(broker.bootstrap, topic, partitions=3)
    count = 20_000
    producer = KafkaProducer(bootstrap_servers=broker.bootstrap, compression_type=None if codec == "none" else codec,
                             linger_ms=5, acks="all")  # idempotence is on by default in kafka-python 3
    futures = [producer.send(topic, key=f"key-{i}".encode(), value=value_for(i), headers=headers_for(i))
               for i in range(count)]
    producer.flush(60)
    offsets = [f.get(10) for f in futures]
    producer.close()
    assert len(offsets) == count
    check_complete_and_ordered(consume_confluent(broker.bootstrap, topic, 3, count), count)


def test_timestamps_create_time_and_log_append_time(broker):
    create_topic(broker.bootstrap, "ts-create", 1)
    create_topic(broker.bootstrap, "ts-append", 1, {"message.timestamp.type": "LogAppendTime"})
    from confluent_kafka import Producer, TIMESTAMP_CREATE_TIME, TIMESTAMP_LOG_APPEND_TIME
    p = Producer({"bootstrap.servers": broker.bootstrap})
    for topic in ["ts-create", "ts-append"]:
        for i in range(10):
            p.produce(topic, value=value_for(i), headers=headers_for(i), timestamp=1_000_000 + i)
    assert p.flush(15) == 0
    created = consume_confluent(broker.bootstrap, "ts-create", 1, 10)
    assert [r[5] for r in created] == [(TIMESTAMP_CREATE_TIME, 1_000_000 + i) for i in range(10)]
    appended = consume_confluent(broker.bootstrap, "ts-append", 1, 10)
    import time
    now_ms = time.time() * 1000
    for kind, ts in (r[5] for r in appended):
        assert kind == TIMESTAMP_LOG_APPEND_TIME
        assert abs(ts - now_ms) < 60_000, "the broker's clock, not the producer's"
