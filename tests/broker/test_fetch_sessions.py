"""Incremental fetch sessions (KIP-227) with the clients that use them (kafka-python and the
Java consumer open one per broker): every record of many partitions arrives exactly once and
in order while the session carries only changes, and bad session ids or epochs get Kafka's
errors."""

import random
import time

from kafka import KafkaConsumer
from kafka.structs import TopicPartition
from confluent_kafka import Producer

from . import raw
from .clients import create_topic
from .test_metrics import scrape

PARTITIONS = 24


def sessions_open(broker):
    return scrape(broker)["sluice_fetch_sessions"].samples[0].value


def test_many_partitions_through_one_incremental_session(broker):
    create_topic(broker.bootstrap, "sessioned", PARTITIONS)
    producer = Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 2})
    consumer = KafkaConsumer(bootstrap_servers=broker.bootstrap, enable_auto_commit=False,
                             auto_offset_reset="earliest", fetch_max_wait_ms=100)
    tps = [TopicPartition("sessioned", p) for p in range(PARTITIONS)]
    consumer.assign(tps)
    seen = {p: [] for p in range(PARTITIONS)}
    sent = {p: 0 for p in range(PARTITIONS)}
    rng = random.Random(7)
    try:
        # Rounds touching a few partitions each: most fetches carry only some of them.
        for round_ in range(30):
            for p in rng.sample(range(PARTITIONS), 3):
                for _ in range(rng.randint(1, 20)):
                    producer.produce("sessioned", value=f"{p}:{sent[p]}".encode(), partition=p)
                    sent[p] += 1
            producer.flush(10)
            if round_ == 10:
                consumer.pause(tps[0], tps[1])  # paused partitions are left out of the fetches
            if round_ == 20:
                consumer.resume(tps[0], tps[1])
            for records in consumer.poll(timeout_ms=200).values():
                for r in records:
                    seen[r.partition].append(r.value.decode())
        assert sessions_open(broker) >= 1, "kafka-python opened a fetch session"
        deadline = time.time() + 30
        while sum(map(len, seen.values())) < sum(sent.values()) and time.time() < deadline:
            for records in consumer.poll(timeout_ms=200).values():
                for r in records:
                    seen[r.partition].append(r.value.decode())
    finally:
        consumer.close()
    for p in range(PARTITIONS):
        assert seen[p] == [f"{p}:{i}" for i in range(sent[p])], f"partition {p}: every record once, in order"


def fetch_v12(session_id, epoch, topic="sessioned-raw"):
    """A Fetch v12 (flexible) of partition 0 from offset 0 in the given session."""
    import struct
    body = struct.pack(">iiiibii", -1, 100, 1, 1 << 20, 0, session_id, epoch)  # replica..epoch
    body += bytes([2])  # topics: compact array of 1
    name = topic.encode()
    body += bytes([len(name) + 1]) + name
    body += bytes([2]) + struct.pack(">iiqiqi", 0, -1, 0, -1, 0, 1 << 20) + bytes([0])  # partition + tags
    body += bytes([0])  # topic tags
    body += bytes([1])  # forgotten: empty compact array
    body += bytes([1])  # rack id: empty compact string
    body += bytes([0])  # request tags
    header = struct.pack(">hhi", 1, 12, 42) + raw.string("raw-test") + bytes([0])
    return raw.frame(header + body)


def session_answer(broker, session_id, epoch):
    import struct
    c = raw.Conn(broker.bootstrap)
    try:
        c.send(fetch_v12(session_id, epoch))
        payload = c.read_frame()
    finally:
        c.close()
    # correlation id, header tags, throttle, error code, session id
    _corr, _tags, _throttle, error, session = struct.unpack_from(">ibihi", payload, 0)
    return error, session


def test_bad_session_ids_and_epochs_get_kafkas_errors(broker):
    create_topic(broker.bootstrap, "sessioned-raw", 1)
    assert session_answer(broker, 0, -1) == (0, 0), "epoch -1: no session"
    error, session = session_answer(broker, 0, 0)
    assert error == 0 and session > 0, "epoch 0 opens a session"
    assert session_answer(broker, session, 1)[0] == 0, "its first incremental fetch"
    assert session_answer(broker, session, 1)[0] == 71, "a repeated epoch: INVALID_FETCH_SESSION_EPOCH"
    assert session_answer(broker, session, 2) == (0, session)
    assert session_answer(broker, session + 1000, 1)[0] == 70, "FETCH_SESSION_ID_NOT_FOUND"
    assert session_answer(broker, session, -1) == (0, 0), "epoch -1 closes it"
    assert session_answer(broker, session, 3)[0] == 70
