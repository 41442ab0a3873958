"""SIGKILL the broker while producers write with acks=all to a flush.mode=sync topic; after a
restart every acknowledged record is there exactly once, in order, and nothing corrupt is
served (the consumers check every CRC)."""

import threading
import time

from confluent_kafka import Producer

from .clients import (check_complete_and_ordered, consume_confluent, consume_kafka_python, create_topic, headers_for,
                      total_records, value_for)


class BackgroundProducer(threading.Thread):
    """Produces sequence numbers 0..count-1 at `rate` records/s (so that the stream spans the
    crashes); records what was acknowledged."""

    def __init__(self, bootstrap, topic, count, conf, rate=8_000):
        super().__init__(daemon=True)
        self.topic, self.count, self.rate = topic, count, rate
        self.producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 2, **conf})
        self.acked, self.failed = {}, {}
        self.lock = threading.Lock()

    def report(self, seq, err, msg):
        with self.lock:
            if err:
                self.failed[seq] = err
            else:
                self.acked[seq] = (msg.partition(), msg.offset())

    def run(self):
        start = time.monotonic()
        for i in range(self.count):
            if i % 100 == 0:
                ahead = start + i / self.rate - time.monotonic()
                if ahead > 0:
                    time.sleep(ahead)
            while True:
                try:
                    self.producer.produce(self.topic, key=f"key-{i}".encode(), value=value_for(i), headers=headers_for(i),
                                          on_delivery=lambda e, m, i=i: self.report(i, e, m))
                    break
                except BufferError:
                    self.producer.poll(0.05)
            self.producer.poll(0)
        self.producer.flush(120)

    def acked_count(self):
        with self.lock:
            return len(self.acked)


def crash_while_producing(broker, topic, conf, count=30_000, kills=3):
    create_topic(broker.bootstrap, topic, 3, {"flush.mode": "sync"})
    producer = BackgroundProducer(broker.bootstrap, topic, count, conf)
    producer.start()
    for k in range(kills):
        target = (k + 1) * count // (kills + 2)
        deadline = time.monotonic() + 60
        while producer.acked_count() < target and time.monotonic() < deadline:
            time.sleep(0.01)
        assert producer.acked_count() >= target, "producer made no progress"
        # The kill lands mid-stream: the producer is still sending.
        assert producer.is_alive() and producer.acked_count() < count, "the producer finished before the crash"
        broker.kill()
        broker.start()
        assert "recovered" in broker.log() or "sluice is serving" in broker.log()
    producer.join(180)
    assert not producer.is_alive()
    return producer


def test_idempotent_producer_through_crashes_gets_everything_exactly_once(broker):
    producer = crash_while_producing(broker, "crash-idem", {"enable.idempotence": True})
    assert not producer.failed, list(producer.failed.items())[:3]
    assert len(producer.acked) == 30_000
    records = consume_confluent(broker.bootstrap, "crash-idem", 3, 30_000)
    by_partition = check_complete_and_ordered(records, 30_000)
    for partition, items in by_partition.items():
        for offset, seq in items:
            assert producer.acked[seq] == (partition, offset), "acknowledged offset differs from stored offset"
    check_complete_and_ordered(consume_kafka_python(broker.bootstrap, "crash-idem", 3, 30_000), 30_000)


def test_acknowledged_records_survive_crashes_exactly_once(broker):
    # No retries: a record is sent once, so duplicates are impossible from the client side;
    # every acknowledged one must be stored exactly once at its acknowledged offset.
    producer = crash_while_producing(broker, "crash-plain", {"retries": 0, "enable.idempotence": False},
                                     count=20_000)
    assert producer.acked, "nothing was acknowledged"
    # Read to the end: unacknowledged records may be present too (written, not yet answered).
    total = total_records(broker.bootstrap, "crash-plain", 3)
    assert total >= len(producer.acked)
    stored = consume_confluent(broker.bootstrap, "crash-plain", 3, total, timeout=30)
    assert len(stored) == total
    by_position = {(r[0], r[1]): r for r in stored}
    for seq, (partition, offset) in producer.acked.items():
        r = by_position.get((partition, offset))
        assert r is not None, f"acknowledged seq {seq} at {partition}/{offset} is missing"
        assert r[3] == value_for(seq), f"acknowledged seq {seq}: different bytes at its offset"
    seqs = [int(dict(r[4])["seq"]) for r in stored]
    assert len(seqs) == len(set(seqs)), "a record is stored twice"
    for partition in range(3):
        in_partition = [int(dict(r[4])["seq"]) for r in sorted(stored, key=lambda r: r[1]) if r[0] == partition]
        assert in_partition == sorted(in_partition)
