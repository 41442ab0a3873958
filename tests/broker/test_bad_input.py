"""Bad input gets the Kafka error a client expects, or the offending connection is closed;
the broker logs it and keeps serving everyone else."""

import os
import random
import struct
import subprocess

import pytest
from confluent_kafka import Consumer, KafkaError, Producer, TopicPartition

from conftest import wait_until
from . import raw
from .clients import consume_confluent, create_topic, produce_confluent


def still_serving(broker, topic="alive-check"):
    """A well-behaved client can still create, write and read."""
    create_topic(broker.bootstrap, topic, 1)
    produce_confluent(broker.bootstrap, topic, 10)
    assert len(consume_confluent(broker.bootstrap, topic, 1, 10, timeout=10)) == 10
    assert broker.alive()


def produce_raw(broker, records, topic="raw", partition=0, acks=-1):
    c = raw.Conn(broker.bootstrap)
    try:
        c.send(raw.produce_v3(topic, partition, records, acks=acks))
        payload = c.read_frame()
        assert payload is not None, "the broker closed the connection instead of answering"
        return raw.parse_produce_v3(payload)
    finally:
        c.close()


@pytest.fixture
def raw_topic(broker):
    create_topic(broker.bootstrap, "raw", 1)
    return broker


def test_batch_errors_get_kafka_error_codes(raw_topic):
    broker = raw_topic
    good = raw.record_batch()
    assert produce_raw(broker, good) == [("raw", 0, 0, 0)]

    corrupt = bytearray(good)
    corrupt[-1] ^= 0xFF
    assert produce_raw(broker, bytes(corrupt))[0][2] == 2  # CORRUPT_MESSAGE

    truncated = good[:-5]
    assert produce_raw(broker, truncated)[0][2] == 2  # CORRUPT_MESSAGE

    old_magic = bytearray(good)
    old_magic[16] = 1
    assert produce_raw(broker, bytes(old_magic))[0][2] == 87  # INVALID_RECORD

    assert produce_raw(broker, good + good)[0][2] == 87  # two batches in one partition: INVALID_RECORD

    big = raw.record_batch(count=1, value=os.urandom(1_100_000))
    assert produce_raw(broker, big)[0][2] == 10  # MESSAGE_TOO_LARGE

    assert produce_raw(broker, good, acks=5)[0][2] == 21  # INVALID_REQUIRED_ACKS
    assert produce_raw(broker, good, partition=7)[0][2] == 3  # UNKNOWN_TOPIC_OR_PARTITION
    assert produce_raw(broker, good, topic="bad/name")[0][2] == 17  # INVALID_TOPIC_EXCEPTION

    # Nothing that was refused was stored: the log holds the first batch and what follows now.
    assert produce_raw(broker, good) == [("raw", 0, 0, 3)]
    records = consume_confluent(broker.bootstrap, "raw", 1, 6, timeout=10)
    assert [r[1] for r in records] == list(range(6))


def peak_rss_kib(broker):
    with open(f"/proc/{broker.proc.pid}/status") as f:
        return next(int(line.split()[1]) for line in f if line.startswith("VmHWM:"))


def test_compressed_records_are_checked_and_bombs_refused(raw_topic):
    """A CRC-correct batch whose compressed records are garbage, or miscounted, or inflate to
    hundreds of MiB, is refused with INVALID_RECORD before it is stored or held in memory."""
    import gzip
    import zstandard
    broker = raw_topic
    gzipped = raw.record_batch(count=3, compression=1)
    assert produce_raw(broker, gzipped) == [("raw", 0, 0, 0)]
    assert produce_raw(broker, raw.with_records_section(gzipped, b"not gzip at all"))[0][2] == 87
    # Valid gzip, but of two records where the header says three.
    two = raw.record_batch(count=2)
    assert produce_raw(broker, raw.with_records_section(gzipped, gzip.compress(two[61:])))[0][2] == 87
    before = peak_rss_kib(broker)
    zeros = bytes(256 << 20)
    for codec, bomb in [(1, gzip.compress(zeros, 9)), (4, zstandard.ZstdCompressor().compress(zeros))]:
        assert len(bomb) < 1_000_000, "fits in one produce request"
        header = raw.record_batch(count=3, compression=codec)
        assert produce_raw(broker, raw.with_records_section(header, bomb))[0][2] == 87
    grown_mib = (peak_rss_kib(broker) - before) / 1024
    assert grown_mib < 160, f"the broker's peak memory grew by {grown_mib:.0f} MiB for 256 MiB bombs"
    assert produce_raw(broker, gzipped) == [("raw", 0, 0, 3)], "nothing refused was stored"
    still_serving(broker)


def test_unknown_topic_with_auto_create_off(start_broker):
    broker = start_broker(["--auto-create-topics", "false"])
    assert produce_raw(broker, raw.record_batch(), topic="missing")[0][2] == 3
    p = Producer({"bootstrap.servers": broker.bootstrap, "message.timeout.ms": 3000})
    errors = []
    p.produce("missing", b"x", on_delivery=lambda e, m: errors.append(e))
    p.flush(10)
    assert errors and errors[0] is not None and errors[0].code() in (KafkaError.UNKNOWN_TOPIC_OR_PART,
                                                                      KafkaError._UNKNOWN_TOPIC,
                                                                      KafkaError._MSG_TIMED_OUT)


def test_fetch_out_of_range_offset(broker):
    create_topic(broker.bootstrap, "range", 1)
    produce_confluent(broker.bootstrap, "range", 5)
    c = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "r", "auto.offset.reset": "error"})
    c.assign([TopicPartition("range", 0, 1_000_000)])
    try:
        def range_error():
            m = c.poll(0.5)
            return m is not None and m.error() is not None and m.error().code() == KafkaError._AUTO_OFFSET_RESET
        wait_until(range_error, 15, "OFFSET_OUT_OF_RANGE")
    finally:
        c.close()
    from kafka import KafkaConsumer, TopicPartition as KTP
    import kafka.errors
    k = KafkaConsumer(bootstrap_servers=broker.bootstrap, auto_offset_reset="none", enable_auto_commit=False)
    k.assign([KTP("range", 0)])
    k.seek(KTP("range", 0), 99)
    with pytest.raises(kafka.errors.OffsetOutOfRangeError):
        for _ in range(20):
            k.poll(timeout_ms=500)
    k.close()


def closes(broker, data, expect_response=False):
    c = raw.Conn(broker.bootstrap, timeout=10)
    try:
        c.send(data)
        if expect_response:
            return c.read_frame()
        assert c.closed_by_peer(), "the broker kept the connection open"
    finally:
        c.close()


def test_protocol_violations_close_only_that_connection(start_broker):
    broker = start_broker(["--socket-request-max-bytes", "1048576"])
    create_topic(broker.bootstrap, "alive-check", 1)
    bystander = raw.Conn(broker.bootstrap)  # an idle healthy connection must survive all of this

    closes(broker, raw.frame(struct.pack(">hhi", 999, 0, 1) + raw.string("x")))          # unknown API key
    closes(broker, raw.frame(raw.header_v1(3, 99, 2)))                                    # Metadata v99
    closes(broker, raw.frame(raw.header_v1(3, 4, 3) + b"\xff\xff"))                        # malformed body
    closes(broker, raw.frame(b"\x00\x03"))                                                # shorter than a header
    closes(broker, struct.pack(">i", 2 * 1024 * 1024))                                     # over the frame limit
    closes(broker, struct.pack(">i", -5))                                                 # negative size
    # An array count of 2^32-2 in three bytes: must not allocate for it (and not abort).
    closes(broker, raw.frame(bytes([0, 3, 0, 12, 0, 0, 0, 1, 0, 0, 0, 0xFF, 0xFF, 0xFF, 0xFF, 0x0F, 0, 0])))
    closes(broker, raw.frame(raw.header_v1(3, 4, 4) + struct.pack(">i", 0x7FFFFFF0)))    # Metadata v4 huge array

    # A client that disconnects mid-request.
    c = raw.Conn(broker.bootstrap)
    c.send(struct.pack(">i", 1000) + b"\x00" * 10)
    c.close()

    # ApiVersions of a version we do not know is answered (KIP-511) with v0 and our versions.
    payload = closes(broker, raw.frame(raw.header_v1(18, 99, 5)), expect_response=True)
    correlation, error, count = struct.unpack_from(">ihi", payload, 0)
    assert (correlation, error) == (5, 35) and count >= 10

    # Random garbage from many connections.
    rng = random.Random(7)
    for _ in range(50):
        c = raw.Conn(broker.bootstrap, timeout=5)
        try:
            c.send(raw.frame(bytes(rng.randrange(256) for _ in range(rng.randrange(1, 300)))))
            c.closed_by_peer()
        except OSError:
            pass
        finally:
            c.close()

    bystander.send(raw.frame(raw.header_v1(18, 0, 77)))
    reply = bystander.read_frame()
    assert reply is not None and struct.unpack_from(">i", reply)[0] == 77, "the bystander connection was hurt"
    bystander.close()
    still_serving(broker, "alive-after-garbage")
    log = broker.log()
    assert "unknown API key 999" in log
    assert "exceeds socket.request.max.bytes" in log
    assert "disconnected mid-request" in log
    assert "panicked" not in log


def mount_tmpfs(path, size):
    path.mkdir(parents=True, exist_ok=True)
    r = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(path)], capture_output=True, text=True)
    assert r.returncode == 0, f"this test needs root to mount a small tmpfs: {r.stderr}"


def test_disk_full_is_a_storage_error_and_reads_continue(start_broker, tmp_path):
    disk = tmp_path / "small-disk"
    mount_tmpfs(disk, "8m")
    try:
        broker = start_broker(data_dir=disk / "data")
        create_topic(broker.bootstrap, "full", 1)
        ballast = disk / "ballast"
        ballast.write_bytes(b"\0" * (2 * 1024 * 1024))

        p = Producer({"bootstrap.servers": broker.bootstrap, "acks": "all", "retries": 0, "linger.ms": 0,
                      "message.timeout.ms": 10000})
        acked, failed = [], []

        def report(err, msg):
            (failed if err else acked).append((err, msg.offset(), msg.value()))

        value = bytes(range(256)) * 40  # 10 KiB
        for i in range(1200):  # 12 MiB: more than the disk holds
            p.produce("full", value=value + struct.pack(">i", i), on_delivery=report)
            p.poll(0)
            if i % 50 == 0:
                p.flush(10)
        assert p.flush(30) == 0
        assert failed, "the disk never filled"
        assert all(e.code() == KafkaError.KAFKA_STORAGE_ERROR for e, _, _ in failed), failed[:3]
        assert "append failed" in broker.log()

        # Every acknowledged record is readable, intact, and nothing half-written is served.
        records = consume_confluent(broker.bootstrap, "full", 1, len(acked), timeout=30)
        assert sorted(r[1] for r in records) == sorted(o for _, o, _ in acked)
        assert {r[3] for r in records} == {v for _, _, v in acked}
        assert broker.alive()

        # Space comes back: writes work again without a restart.
        ballast.unlink()
        later = []
        p.produce("full", value=b"after", on_delivery=lambda e, m: later.append(e))
        assert p.flush(10) == 0 and later == [None]
    finally:
        subprocess.run(["pkill", "-9", "-f", str(disk)], capture_output=True)
        subprocess.run(["umount", "-l", str(disk)], capture_output=True)
