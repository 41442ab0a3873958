"""Transactions through real clients: exactly-once consume-transform-produce with a processor
SIGKILLed at random points, aborted transactions hidden from read_committed consumers,
fencing, the transaction timeout, the Java client (KIP-890 protocol), and `sluice txn`."""

import json
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition
from kafka import KafkaConsumer
from kafka.structs import TopicPartition as KTP

from conftest import ROOT, sluice_cli, wait_until
from broker.clients import create_topic

HERE = Path(__file__).parent


def read_values(bootstrap, topic, isolation, timeout=15, expect=None):
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": f"reader-{time.time_ns()}",
                  "auto.offset.reset": "earliest", "isolation.level": isolation, "enable.auto.commit": False})
    c.subscribe([topic])
    values = []
    deadline = time.time() + timeout
    quiet = 0
    while time.time() < deadline:
        batch = c.consume(500, 0.5)
        got = [m.value() for m in batch if m.error() is None]
        values += got
        quiet = quiet + 1 if not got else 0
        if values and quiet >= 4 and (expect is None or len(values) >= expect):
            break
    c.close()
    return values


def end_offsets(bootstrap, topic, partitions, isolation):
    c = KafkaConsumer(bootstrap_servers=bootstrap, isolation_level=isolation)
    ends = c.end_offsets([KTP(topic, p) for p in range(partitions)])
    c.close()
    return [ends[KTP(topic, p)] for p in range(partitions)]


def test_read_committed_skips_aborted_and_waits_for_open_transactions(broker):
    create_topic(broker.bootstrap, "txn-data", 2)
    p = Producer({"bootstrap.servers": broker.bootstrap, "transactional.id": "writer"})
    p.init_transactions(10)
    p.begin_transaction()
    for i in range(20):
        p.produce("txn-data", key=str(i), value=f"committed-{i}")
    p.commit_transaction(10)
    p.begin_transaction()
    for i in range(10):
        p.produce("txn-data", key=str(i), value=f"aborted-{i}")
    p.flush(10)
    p.abort_transaction(10)
    # An open transaction: read_committed consumers stop before it.
    p.begin_transaction()
    for i in range(5):
        p.produce("txn-data", key=str(i), value=f"late-{i}")
    p.flush(10)
    hw = end_offsets(broker.bootstrap, "txn-data", 2, "read_uncommitted")
    lso = end_offsets(broker.bootstrap, "txn-data", 2, "read_committed")
    # 35 records, and a commit and an abort marker on each partition (every transaction's keys
    # span both partitions); the open transaction has no marker yet.
    assert sum(hw) == 35 + 2 + 2, hw
    assert all(l < h for l, h in zip(lso, hw)), (lso, hw)
    committed = read_values(broker.bootstrap, "txn-data", "read_committed", expect=20)
    assert sorted(committed) == sorted(f"committed-{i}".encode() for i in range(20))
    p.commit_transaction(10)
    committed = read_values(broker.bootstrap, "txn-data", "read_committed", expect=25)
    assert len(committed) == 25 and not any(v.startswith(b"aborted") for v in committed)
    everything = read_values(broker.bootstrap, "txn-data", "read_uncommitted", expect=35)
    assert len(everything) == 35 and sum(v.startswith(b"aborted") for v in everything) == 10
    # kafka-python (its own read_committed implementation) agrees.
    k = KafkaConsumer("txn-data", bootstrap_servers=broker.bootstrap, isolation_level="read_committed",
                      auto_offset_reset="earliest", consumer_timeout_ms=4000, group_id=None)
    kv = [m.value for m in k]
    k.close()
    assert len(kv) == 25 and not any(v.startswith(b"aborted") for v in kv)


def test_a_second_producer_fences_the_first(broker):
    create_topic(broker.bootstrap, "fenced", 1)
    first = Producer({"bootstrap.servers": broker.bootstrap, "transactional.id": "same-id"})
    first.init_transactions(10)
    first.begin_transaction()
    first.produce("fenced", value=b"zombie")
    first.flush(10)
    second = Producer({"bootstrap.servers": broker.bootstrap, "transactional.id": "same-id"})
    second.init_transactions(10)
    try:
        first.commit_transaction(10)
        raise AssertionError("the fenced producer committed")
    except KafkaException as e:
        assert e.args[0].fatal() or "fenced" in str(e).lower(), e
    second.begin_transaction()
    second.produce("fenced", value=b"new")
    second.commit_transaction(10)
    assert read_values(broker.bootstrap, "fenced", "read_committed", expect=1) == [b"new"]


ABANDON = """
import os, sys
from confluent_kafka import Producer
p = Producer({"bootstrap.servers": sys.argv[1], "transactional.id": "abandoned", "transaction.timeout.ms": 2000})
p.init_transactions(10)
p.begin_transaction()
for i in range(5):
    p.produce("abandoned", value=b"never-committed")
p.flush(10)
os.kill(os.getpid(), 9)
"""


def test_an_abandoned_transaction_is_aborted_at_its_timeout(broker):
    create_topic(broker.bootstrap, "abandoned", 1)
    subprocess.run([sys.executable, "-c", ABANDON, broker.bootstrap], timeout=60)
    assert end_offsets(broker.bootstrap, "abandoned", 1, "read_committed") == [0]
    out = sluice_cli("txn", "describe", "abandoned", "-b", broker.bootstrap).stdout
    assert "State: Ongoing" in out and "abandoned-0" in out, out
    wait_until(lambda: end_offsets(broker.bootstrap, "abandoned", 1, "read_committed") == [6], 15,
               "the timed-out transaction to be aborted and the LSO to move past it")
    assert "CompleteAbort" in sluice_cli("txn", "describe", "abandoned", "-b", broker.bootstrap).stdout
    assert read_values(broker.bootstrap, "abandoned", "read_committed", timeout=3) == []


def test_operators_abort_hanging_transactions_with_the_cli(broker):
    create_topic(broker.bootstrap, "hang", 1)
    abandon = ABANDON.replace('"abandoned", "transaction.timeout.ms": 2000', '"stuck", "transaction.timeout.ms": 600000')
    abandon = abandon.replace('p.produce("abandoned"', 'p.produce("hang"')
    subprocess.run([sys.executable, "-c", abandon, broker.bootstrap], timeout=60)
    listed = sluice_cli("txn", "list", "--state", "Ongoing", "-b", broker.bootstrap).stdout
    assert "stuck" in listed and "Ongoing" in listed, listed
    assert end_offsets(broker.bootstrap, "hang", 1, "read_committed") == [0]
    out = sluice_cli("txn", "abort", "--transactional-id", "stuck", "-b", broker.bootstrap).stdout
    assert "fenced at epoch 1" in out, out
    assert end_offsets(broker.bootstrap, "hang", 1, "read_committed") == [6]
    assert "CompleteAbort" in sluice_cli("txn", "describe", "stuck", "-b", broker.bootstrap).stdout
    # On one partition, by producer id.
    subprocess.run([sys.executable, "-c", abandon.replace('"stuck"', '"stuck2"'), broker.bootstrap], timeout=60)
    pid = next(l.split("\t")[1] for l in sluice_cli("txn", "list", "-b", broker.bootstrap).stdout.splitlines()
               if l.startswith("stuck2\t"))
    out = sluice_cli("txn", "abort", "--topic", "hang", "--partition", "0",
                     "--producer-id", pid, "-b", broker.bootstrap).stdout
    assert "began at offset 6" in out, out
    assert end_offsets(broker.bootstrap, "hang", 1, "read_committed") == [12]
    # Bad input: clear messages, non-zero exit.
    r = sluice_cli("txn", "describe", "nobody", "-b", broker.bootstrap, check=False)
    assert r.returncode != 0 and "TransactionalIdNotFound" in r.stderr, r.stderr
    r = sluice_cli("txn", "abort", "--topic", "hang", "--partition", "0",
                   "--producer-id", pid, "-b", broker.bootstrap, check=False)
    assert r.returncode != 0 and "no open transaction" in r.stderr, r.stderr
    r = sluice_cli("txn", "list", "--state", "Sleeping", "-b", broker.bootstrap, check=False)
    assert r.returncode != 0 and "unknown transaction state" in r.stderr, r.stderr


def test_exactly_once_processing_survives_sigkill(broker):
    create_topic(broker.bootstrap, "eos-in", 3)
    create_topic(broker.bootstrap, "eos-out", 3)
    n = 3000
    p = Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 5})
    for i in range(n):
        p.produce("eos-in", key=str(i).encode(), value=str(i).encode())
    assert p.flush(30) == 0
    rng = random.Random(7)
    kills = 0
    deadline = time.time() + 240
    while time.time() < deadline:
        proc = subprocess.Popen([sys.executable, str(HERE / "processor.py"), broker.bootstrap, "0.02"],
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        if kills < 4:
            # Kill it mid-stream: once it has written something, after a random moment.
            before = sum(end_offsets(broker.bootstrap, "eos-out", 3, "read_uncommitted"))
            wait_until(lambda: proc.poll() is not None
                       or sum(end_offsets(broker.bootstrap, "eos-out", 3, "read_uncommitted")) > before,
                       60, "the processor to make progress")
            time.sleep(rng.uniform(0.0, 0.5))
            if proc.poll() is None:
                proc.send_signal(signal.SIGKILL)
                proc.wait(10)
                kills += 1
                continue
        try:
            proc.wait(120)
        finally:
            if proc.poll() is None:
                proc.kill()
        assert proc.returncode == 0, proc.stderr.read()
        break
    assert kills >= 3, f"the processor was killed only {kills} times"
    outputs = read_values(broker.bootstrap, "eos-out", "read_committed", timeout=30, expect=n)
    assert len(outputs) == n, f"{len(outputs)} outputs for {n} inputs"
    assert sorted(outputs) == sorted(f"out-{i}".encode() for i in range(n)), "each input exactly once"
    c = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "eos"})
    committed = c.committed([TopicPartition("eos-in", q) for q in range(3)], 10)
    ends = [c.get_watermark_offsets(TopicPartition("eos-in", q), 10)[1] for q in range(3)]
    c.close()
    assert [tp.offset for tp in committed] == ends, "the committed input offsets are the end of the input"
    # The uncommitted view holds the aborted outputs of the killed transactions too.
    assert len(read_values(broker.bootstrap, "eos-out", "read_uncommitted", timeout=20, expect=n)) >= n


def test_java_client_transactions_with_kip_890(broker):
    subprocess.run([str(ROOT / "scripts" / "java-env")], check=True, timeout=600)
    java = ROOT / "tests" / "java"
    r = subprocess.run(["java", "-cp", f"{java / 'lib'}/*:{java}", "TxnSmoke", broker.bootstrap],
                       capture_output=True, text=True, timeout=240)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    assert r.stdout.strip().endswith("OK")


def test_kafka_streams_exactly_once_word_count(broker, tmp_path):
    """Kafka Streams 4.3.1, unchanged, with exactly_once_v2: a counted repartitioned stream
    with a compacted changelog; every count exact, the repartition topic purged with
    DeleteRecords (see StreamsSmoke.java)."""
    subprocess.run([str(ROOT / "scripts" / "java-env")], check=True, timeout=600)
    java = ROOT / "tests" / "java"
    r = subprocess.run(["java", "-cp", f"{java / 'lib'}/*:{java}", "StreamsSmoke", broker.bootstrap, "8000",
                        str(tmp_path / "streams-state")], capture_output=True, text=True, timeout=240)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    assert r.stdout.strip().startswith("OK counts="), r.stdout
    assert "records deleted" in broker.log(), "Streams purged its repartition topic through DeleteRecords"


def test_transactions_survive_a_broker_crash(start_broker):
    b = start_broker(extra=["--log-flush-mode", "sync"], name="txn-crash")
    create_topic(b.bootstrap, "durable-txn", 2)
    p = Producer({"bootstrap.servers": b.bootstrap, "transactional.id": "crash-writer", "transaction.timeout.ms": 60000})
    p.init_transactions(10)
    p.begin_transaction()
    for i in range(100):
        p.produce("durable-txn", key=str(i), value=f"v{i}")
    p.flush(10)
    b.kill()
    b.start()
    # The coordinator's state and the partitions' open transactions came back: commit works.
    p.commit_transaction(30)
    values = read_values(b.bootstrap, "durable-txn", "read_committed", expect=100)
    assert sorted(values) == sorted(f"v{i}".encode() for i in range(100))
    # And an abort after another crash.
    p.begin_transaction()
    for i in range(10):
        p.produce("durable-txn", key=str(i), value=b"doomed")
    p.flush(10)
    b.kill()
    b.start()
    p.abort_transaction(30)
    p.begin_transaction()
    p.produce("durable-txn", key=b"last", value=b"last")
    p.commit_transaction(30)
    values = read_values(b.bootstrap, "durable-txn", "read_committed", expect=101)
    assert len(values) == 101 and b"doomed" not in values and b"last" in values


def test_the_transaction_log_is_internal(broker):
    from confluent_kafka import KafkaError
    from confluent_kafka.admin import AdminClient

    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    assert "__transaction_state" in admin.list_topics(timeout=10).topics
    errors = []
    p = Producer({"bootstrap.servers": broker.bootstrap, "retries": 0})
    p.produce("__transaction_state", key=b"forged", value=b"{}", on_delivery=lambda e, m: errors.append(e))
    p.flush(10)
    assert errors and errors[0] is not None and errors[0].code() == KafkaError.TOPIC_EXCEPTION, errors
    try:
        admin.delete_topics(["__transaction_state"])["__transaction_state"].result(10)
        raise AssertionError("the transaction log was deleted")
    except KafkaException as e:
        assert e.args[0].code() == KafkaError.TOPIC_EXCEPTION, e


def read_pairs(bootstrap, topic, isolation, timeout=15):
    """Every (key, value) of partition 0 from the beginning, read to a second of quiet."""
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": f"pairs-{time.time_ns()}",
                  "isolation.level": isolation, "enable.auto.commit": False})
    c.assign([TopicPartition(topic, 0, 0)])
    pairs = []
    deadline = time.time() + timeout
    while time.time() < deadline:
        got = [(m.key(), m.value()) for m in c.consume(1000, 1.0) if m.error() is None]
        if not got and pairs:
            break
        pairs += got
    c.close()
    return pairs


def test_compaction_keeps_committed_values_over_aborted_ones(start_broker):
    """An aborted (or still open) transaction's record must not make the cleaner drop the
    committed value of its key; the aborted records themselves are cleaned away."""
    broker = start_broker(["--log-cleaner-interval-ms", "200"])
    create_topic(broker.bootstrap, "txn-compacted", 1,
                 {"cleanup.policy": "compact", "segment.bytes": "4096", "delete.retention.ms": "0"})
    p = Producer({"bootstrap.servers": broker.bootstrap, "transactional.id": "compacting-writer"})
    p.init_transactions(10)
    p.begin_transaction()
    p.produce("txn-compacted", key=b"account-1", value=b"balance=100")
    p.produce("txn-compacted", key=b"account-2", value=b"balance=200")
    p.commit_transaction(10)
    p.begin_transaction()
    p.produce("txn-compacted", key=b"account-1", value=b"balance=-999 (aborted)")
    p.flush(10)
    p.abort_transaction(10)
    plain = Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 0})
    for i in range(80):  # small batches that seal the segments holding the above
        plain.produce("txn-compacted", key=b"filler", value=b"x" * 100)
        if i % 5 == 4:
            plain.flush(10)

    def cleaned():
        pairs = read_pairs(broker.bootstrap, "txn-compacted", "read_uncommitted")
        return pairs if sum(k == b"filler" for k, _ in pairs) < 40 else None

    everything = wait_until(cleaned, 60, "the cleaner to compact the topic")
    assert (b"account-1", b"balance=-999 (aborted)") not in everything, "aborted records are cleaned away"
    committed = dict(read_pairs(broker.bootstrap, "txn-compacted", "read_committed"))
    assert committed[b"account-1"] == b"balance=100"
    assert committed[b"account-2"] == b"balance=200"
    p.flush(1)


def test_read_committed_reads_a_committed_transaction_after_the_cleaner_removed_an_earlier_abort(start_broker):
    """One producer aborts a transaction, then commits the next. Once the cleaner has removed
    the aborted record and, past delete.retention.ms, its abort marker, the aborted
    transaction must go from what Fetch reports too: a read_committed client told of it skips
    the producer's records until it meets that marker, and would skip the committed ones."""
    broker = start_broker(["--log-cleaner-interval-ms", "200"])
    topic = "txn-compacted-abort-first"
    create_topic(broker.bootstrap, topic, 1,
                 {"cleanup.policy": "compact", "segment.bytes": "4096", "delete.retention.ms": "0"})
    p = Producer({"bootstrap.servers": broker.bootstrap, "transactional.id": "abort-then-commit"})
    p.init_transactions(10)
    p.begin_transaction()
    p.produce(topic, key=b"account-1", value=b"balance=-999 (aborted)")
    p.flush(10)
    p.abort_transaction(10)
    p.begin_transaction()
    p.produce(topic, key=b"account-1", value=b"balance=100")
    p.produce(topic, key=b"account-2", value=b"balance=200")
    p.commit_transaction(10)
    plain = Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 0})
    for i in range(80):
        plain.produce(topic, key=b"filler", value=b"x" * 100)
        if i % 5 == 4:
            plain.flush(10)
    plain.flush(10)
    segments = broker.data_dir / "topics" / f"{topic}-0"

    def markers():
        return sum(len(control_batch_positions(s)) for s in segments.glob("*.log"))

    def cleaned():
        pairs = read_pairs(broker.bootstrap, topic, "read_uncommitted")
        return pairs if sum(k == b"filler" for k, _ in pairs) < 40 and markers() == 1 else None

    everything = wait_until(cleaned, 60, "the cleaner to remove the aborted record and its marker")
    assert (b"account-1", b"balance=-999 (aborted)") not in everything
    committed = dict(read_pairs(broker.bootstrap, topic, "read_committed"))
    assert committed.get(b"account-1") == b"balance=100", committed
    assert committed.get(b"account-2") == b"balance=200", committed
    p.flush(1)


def control_batch_positions(segment):
    """Byte positions of the control batches (transaction markers) in a segment file."""
    data = segment.read_bytes()
    at, found = 0, []
    while at + 61 <= len(data):
        length = int.from_bytes(data[at + 8:at + 12], "big", signed=True)
        attributes = int.from_bytes(data[at + 21:at + 23], "big")
        if attributes & 0x20:
            found.append(at)
        at += 12 + length
    return found


@pytest.mark.parametrize("ending", ["commit", "abort"])
def test_a_marker_lost_in_a_power_failure_is_written_again_at_start_up(start_broker, tmp_path, ending):
    """The coordinator's state (flush.mode=sync) says how a transaction ended, but the data
    partition (interval flush, never fsynced here) lost the marker's tail in a power failure:
    start-up writes the marker again, so committed data shows and the LSO is not stuck."""
    b = start_broker(name=f"lost-marker-{ending}")
    create_topic(b.bootstrap, "lost-marker", 1, {"flush.interval.ms": "3600000"})
    p = Producer({"bootstrap.servers": b.bootstrap, "transactional.id": f"lost-marker-{ending}"})
    p.init_transactions(10)
    p.begin_transaction()
    for i in range(10):
        p.produce("lost-marker", key=str(i), value=f"{ending}-{i}")
    p.flush(10)
    getattr(p, f"{ending}_transaction")(10)
    b.kill()
    # What a power failure does to a file written but never fsynced: its tail is gone. Here
    # exactly the marker is cut off; the data before it stays.
    segment = b.data_dir / "topics" / "lost-marker-0" / "00000000000000000000.log"
    markers = control_batch_positions(segment)
    assert len(markers) == 1, markers
    with open(segment, "r+b") as f:
        f.truncate(markers[0])
    b.start()
    assert "settled a transaction left open by a crash" in b.log()
    assert control_batch_positions(segment), "the marker is written again"
    ends = end_offsets(b.bootstrap, "lost-marker", 1, "read_committed")
    assert ends == end_offsets(b.bootstrap, "lost-marker", 1, "read_uncommitted") == [11], "the LSO is not stuck"
    if ending == "commit":
        values = read_values(b.bootstrap, "lost-marker", "read_committed", expect=10)
        assert sorted(values) == sorted(f"commit-{i}".encode() for i in range(10))
    else:
        p.begin_transaction()
        p.produce("lost-marker", key=b"after", value=b"after")
        p.commit_transaction(30)
        assert read_values(b.bootstrap, "lost-marker", "read_committed", expect=1) == [b"after"]
    # The producer goes on with its next transaction.
    p.begin_transaction()
    p.produce("lost-marker", key=b"next", value=b"next")
    p.commit_transaction(30)
    assert b"next" in read_values(b.bootstrap, "lost-marker", "read_committed")


def batches(segment):
    """(position, bytes) of each record batch in a segment file."""
    data = segment.read_bytes()
    at, found = 0, []
    while at + 61 <= len(data):
        length = int.from_bytes(data[at + 8:at + 12], "big", signed=True)
        found.append((at, data[at:at + 12 + length]))
        at += 12 + length
    return found


@pytest.mark.parametrize("ending", ["commit", "abort"])
def test_a_completion_lost_in_a_power_failure_is_finished_again(start_broker, ending):
    """EndTxn is answered once its decision (`Prepare*`) is durable and the markers are
    written; the completed state after it is not waited on. A power failure that loses it
    leaves the decision: start-up finishes the transaction again from it. Committed records
    (and the group offsets that came with them) show exactly once, aborted ones never, and the
    producer goes on."""
    b = start_broker(extra=["--log-flush-mode", "sync"], name=f"lost-completion-{ending}")
    create_topic(b.bootstrap, "lc-in", 1)
    create_topic(b.bootstrap, "lc-out", 2)
    feed = Producer({"bootstrap.servers": b.bootstrap})
    for i in range(5):
        feed.produce("lc-in", value=f"in-{i}")
    feed.flush(10)
    tid = f"lost-completion-{ending}"
    p = Producer({"bootstrap.servers": b.bootstrap, "transactional.id": tid})
    p.init_transactions(10)
    c = Consumer({"bootstrap.servers": b.bootstrap, "group.id": f"lc-{ending}", "auto.offset.reset": "earliest",
                  "enable.auto.commit": False, "isolation.level": "read_committed"})
    c.subscribe(["lc-in"])
    got = []
    deadline = time.time() + 15
    while len(got) < 5 and time.time() < deadline:
        got += [m for m in c.consume(10, 0.5) if m.error() is None]
    assert len(got) == 5
    p.begin_transaction()
    for i in range(10):
        p.produce("lc-out", key=str(i), value=f"{ending}-{i}")
    p.send_offsets_to_transaction(c.position(c.assignment()), c.consumer_group_metadata(), 10)
    getattr(p, f"{ending}_transaction")(10)
    c.close()
    b.kill()
    # The completed state is the last batch written for this id; a power failure may cut it
    # off (nothing after it was fsynced). The decision before it stays.
    cut = 0
    for part in (b.data_dir / "topics").glob("__transaction_state-*"):
        for segment in part.glob("*.log"):
            mine = [(at, batch) for at, batch in batches(segment) if tid.encode() in batch]
            if mine:
                at, last = mine[-1]
                assert b"Complete" in last, last
                assert b"Prepare" in mine[-2][1], mine[-2][1]
                with open(segment, "r+b") as f:
                    f.truncate(at)
                cut += 1
    assert cut == 1
    b.start()
    deadline = time.time() + 15
    while time.time() < deadline:
        r = sluice_cli("txn", "describe", tid, "-b", b.bootstrap, check=False)
        if "Complete" in r.stdout:
            break
        time.sleep(0.2)
    assert ("CompleteCommit" if ending == "commit" else "CompleteAbort") in r.stdout, r.stdout + r.stderr
    values = read_values(b.bootstrap, "lc-out", "read_committed", expect=10 if ending == "commit" else None,
                         timeout=8)
    committed = Consumer({"bootstrap.servers": b.bootstrap, "group.id": f"lc-{ending}"}).committed(
        [TopicPartition("lc-in", 0)], 10)[0].offset
    if ending == "commit":
        assert sorted(values) == sorted(f"commit-{i}".encode() for i in range(10)), values
        assert committed == 5
    else:
        assert values == []
        assert committed < 0, "an aborted transaction's offsets are not committed"
    # The producer goes on; its next transaction is not ended by the decision taken again.
    p.begin_transaction()
    p.produce("lc-out", key=b"next", value=b"next")
    p.commit_transaction(30)
    values = read_values(b.bootstrap, "lc-out", "read_committed", expect=(11 if ending == "commit" else 1))
    assert values.count(b"next") == 1 and len(values) == (11 if ending == "commit" else 1), values
