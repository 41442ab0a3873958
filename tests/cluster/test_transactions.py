"""Transactions on a 3-node cluster: `__transaction_state` is replicated, a transactional id's
coordinator is the leader of its partition, and a transaction's markers and group offsets reach
partitions and group coordinators on other nodes. A consume-transform-produce processor
(confluent-kafka, read_committed, offsets sent to the transaction) must turn every input record
into exactly one committed output record — across a SIGKILL of the transaction coordinator, of
the group coordinator, or of an output partition's leader — and leave no transaction hanging.
Each test is bounded; the timeout mark is the hard stop for a hung one."""

import re
import struct
import subprocess
import threading
import time
from collections import Counter

import pytest
from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition

from broker.raw import Conn, frame, header_v1, parse_produce_v3, string
from conftest import ROOT, SLUICE, wait_until

from .checker import ABORTED, COMMITTED, READ_COMMITTED, History
from .harness import CLIENT_DEFAULTS
from .test_groups import java_partition_for
from .test_partitions import controller, network  # noqa: F401  (network: a fixture)
from .workload import drain, drain_and_check, produce_records

pytestmark = pytest.mark.timeout(180)

TXN_TOPIC = "__transaction_state"
OFFSETS = "__consumer_offsets"
# Each client call's bound: short enough that a stuck processor fails with its own report (its
# errors and restarts) well before the test's timeout. librdkafka does not always keep it: a
# coordinator request waiting on a retired broker ignores it (librdkafka #5456, #5511; see
# docs/decisions/cluster-follower-reads.md for why Sluice no longer triggers that).
CALL_TIMEOUT_S = 15
INVALID_TXN_STATE = 48


def coordinator_node(c, topic, key):
    """The leader of `key`'s partition of the internal topic `topic`, once it exists."""
    md = wait_until(lambda: c.metadata(topic).topics.get(topic), 30, f"{topic} in Metadata")
    partition = java_partition_for(key, len(md.partitions))
    return c.wait_for_leader(topic, partition)


def find_txn_coordinator(bootstrap, txn_id):
    """FindCoordinator v1 for a transactional id (key type 1) -> the node id it names."""
    conn = Conn(bootstrap)
    try:
        conn.send(frame(header_v1(10, 1, 5) + string(txn_id) + struct.pack(">b", 1)))
        payload = conn.read_frame()
    finally:
        conn.sock.close()
    assert payload is not None, "the broker closed the connection"
    at = 4 + 4  # correlation id, throttle time
    (error,) = struct.unpack_from(">h", payload, at)
    assert error == 0, f"FindCoordinator error {error}"
    (n,) = struct.unpack_from(">h", payload, at + 2)
    at += 2 + 2 + max(n, 0)
    (node,) = struct.unpack_from(">i", payload, at)
    return node


def key_coordinated_off(c, topic, prefix, avoid):
    """The first key `<prefix><n>` whose coordinator (the leader of its partition of the
    internal topic `topic`) is none of the nodes `avoid`, and that node."""
    for n in range(200):
        node = coordinator_node(c, topic, f"{prefix}{n}")
        if node not in avoid:
            return f"{prefix}{n}", node
    raise AssertionError(f"no {prefix}<n> coordinated off nodes {avoid}")


def spread_leaders(c, topic, partitions):
    """The leaders of `topic`'s partitions: the test needs them on more than one node."""
    leaders = {p: c.leader_of(topic, p) for p in range(partitions)}
    assert len(set(leaders.values())) > 1, f"{topic}: every partition led by one node {leaders}"
    return leaders


def transactional_producer(bootstrap, txn_id):
    p = Producer({"bootstrap.servers": bootstrap, "transactional.id": txn_id, "enable.idempotence": True,
                  "acks": "all", "linger.ms": 5, "transaction.timeout.ms": 10_000,
                  "message.timeout.ms": 10_000, **CLIENT_DEFAULTS})
    p.init_transactions(CALL_TIMEOUT_S)
    return p


def test_a_transaction_spans_partitions_led_by_different_nodes(cluster):
    """Commits and aborts alternate over three partitions led by different nodes: read_committed
    sees exactly the committed transactions' records, read_uncommitted every acknowledged one."""
    c = cluster(3)
    topic, txn_id = "txn-spread", "t-spread"
    c.create_topic(topic, 3, replication_factor=3)
    spread_leaders(c, topic, 3)
    history = History()
    producer = transactional_producer(c.bootstrap, txn_id)
    try:
        for n in range(12):
            txn = f"{txn_id}-{n}"
            history.begin_txn(txn, txn_id)
            producer.begin_transaction()
            for p in range(3):
                for _ in range(3):
                    send = history.invoke_send(txn_id, topic, history.next_value(), txn=txn)
                    producer.produce(topic, value=send.value.encode(), partition=p,
                                     on_delivery=lambda err, msg, s=send: history.ack(s, msg.partition(), msg.offset())
                                     if err is None else history.fail(s, str(err)))
            producer.flush(15)
            if n % 3 == 2:
                producer.abort_transaction(30)
                history.txn_outcome(txn, ABORTED)
            else:
                history.commit_started(txn)
                producer.commit_transaction(30)
                history.txn_outcome(txn, COMMITTED)
    finally:
        producer.flush(5)
    # The transaction state lives on three replicas, like any cluster topic.
    # FindCoordinator names the leader of the id's transaction state partition.
    node = coordinator_node(c, TXN_TOPIC, txn_id)
    assert find_txn_coordinator(c.node(c.ids[0]).bootstrap, txn_id) == node
    md = wait_until(lambda: c.metadata(TXN_TOPIC).topics[TXN_TOPIC], 10, f"{TXN_TOPIC} in Metadata")
    assert all(sorted(p.replicas) == [1, 2, 3] for p in md.partitions.values()), md.partitions
    result = drain_and_check(c, topic, history, "txn-spread", isolations=("read_uncommitted", READ_COMMITTED))
    assert result.valid, str(result)
    committed = sum(1 for s in history.sends if s.status == "ok" and history.txns[s.txn].status == COMMITTED)
    assert committed == 8 * 9


class Processor:
    """A consume-transform-produce loop: reads `source` (read_committed, group `group`), writes
    each record's value to `sink` and its input offsets to the same transaction. On any error it
    drops its clients and starts again from the group's committed offsets, with a producer of
    the same transactional id (which fences and aborts the old one): the way an application
    recovers, and the way exactly-once must survive."""

    def __init__(self, bootstrap, source, sink, group, txn_id, batch=20, protocol="classic"):
        self.bootstrap, self.source, self.sink = bootstrap, source, sink
        # KIP-848 (`consumer`): the coordinator sets the session timeout; librdkafka refuses it.
        self.group_conf = ({"group.protocol": "consumer"} if protocol == "consumer"
                           else {"session.timeout.ms": 6000})
        self.group, self.txn_id, self.batch = group, txn_id, batch
        self.commits = 0
        self.restarts = 0
        self.errors = []

    def _clients(self):
        consumer = Consumer({"bootstrap.servers": self.bootstrap, "group.id": self.group,
                             "isolation.level": "read_committed", "enable.auto.commit": False,
                             "auto.offset.reset": "earliest", **self.group_conf, **CLIENT_DEFAULTS})
        consumer.subscribe([self.source])
        return consumer, transactional_producer(self.bootstrap, self.txn_id)

    def done(self, consumer, ends):
        assignment = consumer.assignment()
        if len(assignment) != len(ends):
            return False
        committed = consumer.committed(assignment, timeout=10)
        return all(tp.offset >= ends[tp.partition] for tp in committed)

    def run(self, ends, deadline, on_commit=None):
        """Processes until the group's committed offsets reach `ends` (partition -> end offset)."""
        consumer = producer = None
        while time.monotonic() < deadline:
            try:
                if consumer is None:
                    consumer, producer = self._clients()
                msgs = [m for m in consumer.consume(self.batch, 0.5) if m.error() is None]
                if not msgs:
                    if self.done(consumer, ends):
                        return
                    continue
                producer.begin_transaction()
                for m in msgs:
                    producer.produce(self.sink, key=m.key(), value=m.value())
                producer.send_offsets_to_transaction(consumer.position(consumer.assignment()),
                                                     consumer.consumer_group_metadata(), CALL_TIMEOUT_S)
                producer.commit_transaction(CALL_TIMEOUT_S)
                self.commits += 1
                if on_commit:
                    on_commit(self.commits)
            except KafkaException as e:
                self.errors.append(str(e.args[0]))
                self.restarts += 1
                if consumer is not None:
                    try:
                        consumer.close()
                    except KafkaException:
                        pass
                # The next producer with this transactional id fences this one.
                consumer = producer = None
                time.sleep(0.2)
        raise AssertionError(f"the processor did not finish in time: {self.commits} commits, "
                             f"{self.restarts} restarts, errors {self.errors[-8:]}")


def end_offsets(bootstrap, topic, partitions):
    """Per partition: (last stable offset, high watermark), each from a consumer of that
    isolation level (librdkafka's default is read_committed)."""
    ends = {}
    for isolation in ("read_committed", "read_uncommitted"):
        consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"ends-{isolation}",
                             "isolation.level": isolation, **CLIENT_DEFAULTS})
        try:
            ends[isolation] = [consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=10, cached=False)[1]
                               for p in range(partitions)]
        finally:
            consumer.close()
    return list(zip(ends["read_committed"], ends["read_uncommitted"]))


def exactly_once(c, source, sink, timeout=40):
    """Every input value appears exactly once in the sink under read_committed."""
    inputs, outputs = History(), History()
    drain(c.bootstrap, source, inputs, "read_uncommitted", timeout_s=timeout)
    drain(c.bootstrap, sink, outputs, READ_COMMITTED, timeout_s=timeout)
    expected = Counter(r.value for r in inputs.drain_reads)
    got = Counter(r.value for r in outputs.drain_reads)
    missing = sorted(set(expected) - set(got))
    doubled = sorted(v for v, n in got.items() if n > 1)
    unknown = sorted(set(got) - set(expected))
    assert not missing and not doubled and not unknown, (
        f"{len(missing)} input records never output (e.g. {missing[:5]}), {len(doubled)} output more "
        f"than once (e.g. {doubled[:5]}), {len(unknown)} unknown outputs")
    return len(expected)


@pytest.mark.parametrize("victim,protocol", [("transaction-coordinator", "classic"), ("group-coordinator", "classic"),
                                              ("output-leader", "classic"), ("group-coordinator", "consumer")])
def test_consume_transform_produce_is_exactly_once_across_a_node_kill(cluster, victim, protocol):
    # KIP-848: the coordinator's session timeout (45 s by default) bounds how long a member
    # that the processor dropped without a goodbye (its coordinator was dead) holds partitions.
    c = cluster(3, env={"SLUICE_GROUP_CONSUMER_SESSION_TIMEOUT_MS": "6000"} if protocol == "consumer" else None)
    source, sink, group, txn_id = "ctp-in", "ctp-out", "g-ctp", "t-ctp"
    c.create_topic(source, 3, replication_factor=3)
    c.create_topic(sink, 3, replication_factor=3)
    spread_leaders(c, sink, 3)
    history = History()
    produce_records(c.bootstrap, source, history, 1500)
    ends = {}
    for s in history.sends:
        assert s.status == "ok", s
        ends[s.partition] = max(ends.get(s.partition, 0), s.offset + 1)

    processor = Processor(c.bootstrap, source, sink, group, txn_id, protocol=protocol)
    killed = {}

    def kill_once(commits):
        if commits != 15 or killed:
            return
        if victim == "transaction-coordinator":
            node = coordinator_node(c, TXN_TOPIC, txn_id)
        elif victim == "group-coordinator":
            node = coordinator_node(c, OFFSETS, group)
        else:
            node = c.leader_of(sink, 0)
        killed["node"], killed["at"] = node, time.monotonic()
        c.kill(node)

    processor.run(ends, time.monotonic() + 90, on_commit=kill_once)
    assert killed, f"the processor finished after {processor.commits} commits, before the kill"
    assert processor.commits > 15
    # Every input record was turned into exactly one committed output record: none lost in a
    # failover, none written twice by a retried or replayed transaction.
    assert exactly_once(c, source, sink) == 1500
    # No transaction hangs on the sink: every partition's last stable offset is its high
    # watermark.
    for p, (lso, high) in enumerate(end_offsets(c.bootstrap, sink, 3)):
        assert lso == high, f"{sink}/{p}: last stable offset {lso} < high watermark {high}"


def test_a_transaction_left_open_by_a_killed_coordinator_is_aborted_by_its_successor(cluster):
    """A producer writes in a transaction and never ends it; its coordinator's node is killed.
    The new coordinator (the new leader of the id's partition) aborts it once its timeout passes:
    read_committed readers are not blocked for ever, and the open records never become visible."""
    c = cluster(3)
    topic, txn_id = "txn-hang", "t-hang"
    c.create_topic(topic, 3, replication_factor=3)
    history = History()
    producer = transactional_producer(c.bootstrap, txn_id)
    txn = f"{txn_id}-open"
    history.begin_txn(txn, txn_id)
    producer.begin_transaction()
    for p in range(3):
        send = history.invoke_send(txn_id, topic, history.next_value(), txn=txn)
        producer.produce(topic, value=send.value.encode(), partition=p,
                         on_delivery=lambda err, msg, s=send: history.ack(s, msg.partition(), msg.offset())
                         if err is None else history.fail(s, str(err)))
    assert producer.flush(15) == 0
    coordinator = coordinator_node(c, TXN_TOPIC, txn_id)
    c.kill(coordinator)
    # Committed records written after the open ones stay invisible under read_committed until
    # the open transaction ends; after its 10 s timeout the successor aborts it.
    produce_records(c.bootstrap, topic, history, 30)
    started = time.monotonic()
    held = end_offsets(c.bootstrap, topic, 3)
    assert all(lso < high for lso, high in held), f"the open transaction should hold every LSO back: {held}"
    wait_until(lambda: all(lso == high for lso, high in end_offsets(c.bootstrap, topic, 3)), 60,
               "the open transaction to be aborted by the new coordinator")
    # Aborted at its 10 s timeout by the successor, not much later (the wait allows 60 s so
    # that a slow abort still shows up as this failure rather than a timeout).
    assert time.monotonic() - started < 30, f"aborted only after {time.monotonic() - started:.1f}s"
    history.txn_outcome(txn, ABORTED)
    # The aborted records are hidden from read_committed (a G1a otherwise); the later plain
    # ones are readable (a lost-write otherwise).
    result = drain_and_check(c, topic, history, "txn-hang", isolations=(READ_COMMITTED,))
    assert result.valid, str(result)


def late_transactional_write(bootstrap, txn_id, topic, partition, producer_id, epoch, sequence):
    """A transactional Produce v3 for a transaction that has ended (as a request delayed in the
    network past its transaction's abort would arrive) -> its error code."""
    from kafka.record.default_records import DefaultRecordBatchBuilder
    b = DefaultRecordBatchBuilder(magic=2, compression_type=0, is_transactional=True, producer_id=producer_id,
                                  producer_epoch=epoch, base_sequence=sequence, batch_size=1 << 20)
    b.append(0, timestamp=int(time.time() * 1000), key=b"late", value=b"late", headers=[])
    records = bytes(b.build())
    body = string(txn_id) + struct.pack(">hi", -1, 10_000)
    body += struct.pack(">i", 1) + string(topic)
    body += struct.pack(">i", 1) + struct.pack(">i", partition) + struct.pack(">i", len(records)) + records
    conn = Conn(bootstrap)
    try:
        conn.send(frame(header_v1(0, 3, 9) + body))
        payload = conn.read_frame()
    finally:
        conn.sock.close()
    assert payload is not None, "the broker closed the connection"
    [(_, _, error, _)] = parse_produce_v3(payload)
    return error


def test_a_late_write_of_an_ended_transaction_is_refused_by_a_leader_on_another_node(cluster):
    """KIP-890 part 1 across nodes: a partition leader that does not run the transaction's
    coordinator asks it before the partition's first transactional write of a transaction. A
    write for a transaction that has already been committed (same producer epoch, the next
    sequence: everything the partition alone checks is right) is refused with
    INVALID_TXN_STATE, and opens no transaction that nobody would end — the last stable offset
    stays at the high watermark, so read_committed consumers are not stuck behind it."""
    c = cluster(3)
    topic, txn_id = "late", "late-writer"
    c.create_topic(topic, 3, replication_factor=3)
    p = transactional_producer(c.bootstrap, txn_id)
    coordinator = find_txn_coordinator(c.nodes[1].bootstrap, txn_id)
    leaders = {q: c.wait_for_leader(topic, q) for q in range(3)}
    partition = next((q for q, leader in leaders.items() if leader != coordinator), None)
    assert partition is not None, f"coordinator {coordinator} leads every partition: {leaders}"
    p.begin_transaction()
    for i in range(3):
        p.produce(topic, value=f"in-{i}".encode(), partition=partition)
    p.commit_transaction(CALL_TIMEOUT_S)
    described = subprocess.run([str(SLUICE), "txn", "-b", c.bootstrap, "describe", txn_id],
                               capture_output=True, text=True, timeout=30)
    m = re.search(r"Producer: (\d+) epoch (\d+)", described.stdout)
    assert m, described.stdout + described.stderr
    producer_id, epoch = int(m.group(1)), int(m.group(2))

    error = late_transactional_write(c.nodes[leaders[partition]].bootstrap, txn_id, topic, partition,
                                     producer_id, epoch, sequence=3)
    assert error == INVALID_TXN_STATE, f"a write of an ended transaction got error {error}"
    lso, hw = end_offsets(c.bootstrap, topic, 3)[partition]
    assert lso == hw, f"{topic}-{partition}: last stable offset {lso} behind the high watermark {hw}"

    # The producer goes on: its next transaction's writes are verified and taken.
    p.begin_transaction()
    p.produce(topic, value=b"next", partition=partition)
    p.commit_transaction(CALL_TIMEOUT_S)
    lso2, hw2 = end_offsets(c.bootstrap, topic, 3)[partition]
    assert lso2 == hw2 and hw2 > hw, (lso2, hw2, hw)


def test_java_client_uses_transactions_version_2_across_nodes(cluster):
    """Transactions version 2 (KIP-890 part 2) is finalized in a cluster too: the Java client
    4.3.1 adds partitions by producing to them (Produce v12+), and a partition leader on
    another node than the transaction's coordinator adds the partition there and waits for
    that to be committed before appending. TxnSmoke runs consume-transform-produce with an
    abort, checks the epoch was bumped by every commit and abort (TV2 only: the classic
    protocol leaves it), read_committed against read_uncommitted, and fencing; the topics have
    3 replicas, so their 4 partitions' leaders spread over the nodes and the coordinator's."""
    c = cluster(3)
    subprocess.run([str(ROOT / "scripts" / "java-env")], check=True, timeout=600)
    java = ROOT / "tests" / "java"
    r = subprocess.run(["java", "-cp", f"{java / 'lib'}/*:{java}", "TxnSmoke", c.bootstrap, "3"],
                       capture_output=True, text=True, timeout=240)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    assert r.stdout.strip().endswith("OK")
    coordinator = find_txn_coordinator(c.nodes[1].bootstrap, "jtx-1")
    leaders = {(t, q): c.wait_for_leader(t, q) for t in ("jtx-in", "jtx-out") for q in range(2)}
    assert any(leader != coordinator for (t, _), leader in leaders.items() if t == "jtx-out"), \
        f"every output partition is led by the coordinator {coordinator}: {leaders}"


def test_pipelined_batches_of_a_new_transaction_are_appended_in_order(cluster):
    """Several batches of a new transaction reach a partition before the first is verified
    with the coordinator (Java client, 1 KiB batches, no linger): each waits for the one
    before it, so none fails its sequence check (before the fix: 2–3 of 20 transactions per
    partition aborted with OutOfOrderSequenceException), and read_committed reads every record
    once. Three partitions, so some leaders are not the coordinator's node and one may be."""
    c = cluster(3)
    c.create_topic("pipeline", 3, replication_factor=3)
    subprocess.run([str(ROOT / "scripts" / "java-env")], check=True, timeout=600)
    java = ROOT / "tests" / "java"
    r = subprocess.run(["java", "-cp", f"{java / 'lib'}/*:{java}", "TxnPipelineSmoke", c.bootstrap, "pipeline", "3"],
                       capture_output=True, text=True, timeout=240)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    assert r.stdout.strip().endswith("OK")


def test_an_open_transactions_offsets_are_unstable_on_a_group_coordinator_on_another_node(cluster):
    """KIP-447 across nodes: a transaction's offsets sit with its coordinator until it commits,
    and the group's coordinator may be another node. A read_committed consumer asking for the
    group's offsets meanwhile (librdkafka sends `require_stable`) must not be given the old
    offset, which the commit would move a moment later (its records processed twice): it gets
    them only once the transaction has ended — the new offset after a commit, the old one
    after an abort."""
    c = cluster(3)
    topic, group = "stable-in", "stable-g"
    c.create_topic(topic, 1, replication_factor=3)
    consumer = Consumer({"bootstrap.servers": c.bootstrap, "group.id": group,
                         "isolation.level": "read_committed", "enable.auto.commit": False,
                         **CLIENT_DEFAULTS})

    def committed(timeout):
        return consumer.committed([TopicPartition(topic, 0)], timeout)[0].offset

    producer = None
    try:
        # The group's first lookup makes the offsets topic, a first producer the transaction
        # state topic; then a transactional id coordinated away from the group is chosen.
        assert committed(CALL_TIMEOUT_S) < 0
        transactional_producer(c.bootstrap, "stable-first").flush(1)
        for internal in (OFFSETS, TXN_TOPIC):
            wait_until(lambda t=internal: len(getattr(c.metadata(t).topics.get(t), "partitions", {})) or None,
                       30, f"{internal}'s partitions")
        group_node = coordinator_node(c, OFFSETS, group)
        txn_id, _ = key_coordinated_off(c, TXN_TOPIC, "stable-t", [group_node])
        producer = transactional_producer(c.bootstrap, txn_id)
        for offset, commit in ((5, True), (9, False)):
            producer.begin_transaction()
            producer.send_offsets_to_transaction([TopicPartition(topic, 0, offset)],
                                                 consumer.consumer_group_metadata(), CALL_TIMEOUT_S)
            # Open: librdkafka retries UNSTABLE_OFFSET_COMMIT until its timeout.
            with pytest.raises(KafkaException, match="(?i)timed out|unstable"):
                committed(3)
            if commit:
                producer.commit_transaction(CALL_TIMEOUT_S)
            else:
                producer.abort_transaction(CALL_TIMEOUT_S)
            assert wait_until(lambda: committed(5) == 5 or None, 15, "the offset after the transaction")
    finally:
        consumer.close()
        if producer is not None:
            producer.flush(5)


def test_an_aborts_offsets_stay_unstable_until_the_groups_coordinator_is_told(network, cluster):
    """The group's coordinator holds a transaction's offsets as pending until it hears how the
    transaction ended (KIP-447; they are kept on the transaction's own node until then). Here
    the link between the two coordinators is cut before an abort, so its notice cannot be
    delivered: a read_committed consumer asking for the group's offsets keeps getting
    UNSTABLE_OFFSET_COMMIT, the transaction stays unfinished, and the coordinator tells again
    every 2 s. Once the link heals the consumer gets the old offset, and a new instance of the
    producer starts. (Until 2026-12-01 the abort completed without the notice, and the offsets
    stayed unstable for 15 minutes.) Both coordinators are chosen off the metadata leader, so
    that the cut leaves each its controller session."""
    c = cluster(3, network=network)
    topic = "told-in"
    c.create_topic(topic, 1, replication_factor=3)
    consumer, producers = None, []

    def committed(timeout):
        return consumer.committed([TopicPartition(topic, 0)], timeout)[0].offset

    try:
        # A first group and producer make the two internal topics; then ids coordinated on
        # two different nodes, neither of them the controller, are chosen.
        first = Consumer({"bootstrap.servers": c.bootstrap, "group.id": "told-first", **CLIENT_DEFAULTS})
        try:
            first.committed([TopicPartition(topic, 0)], CALL_TIMEOUT_S)
        finally:
            first.close()
        producers.append(transactional_producer(c.bootstrap, "told-first"))
        for internal in (OFFSETS, TXN_TOPIC):
            wait_until(lambda t=internal: len(getattr(c.metadata(t).topics.get(t), "partitions", {})) or None,
                       30, f"{internal}'s partitions")
        boss = controller(c)
        group, group_node = key_coordinated_off(c, OFFSETS, "told-g", [boss])
        txn_id, txn_node = key_coordinated_off(c, TXN_TOPIC, "told-t", [boss, group_node])
        consumer = Consumer({"bootstrap.servers": c.bootstrap, "group.id": group,
                             "isolation.level": "read_committed", "enable.auto.commit": False,
                             **CLIENT_DEFAULTS})
        producer = transactional_producer(c.bootstrap, txn_id)
        producers.append(producer)
        producer.begin_transaction()
        producer.send_offsets_to_transaction([TopicPartition(topic, 0, 5)],
                                             consumer.consumer_group_metadata(), CALL_TIMEOUT_S)
        producer.commit_transaction(CALL_TIMEOUT_S)
        assert wait_until(lambda: committed(5) == 5 or None, 15, "the first transaction's offset")

        producer.begin_transaction()
        producer.send_offsets_to_transaction([TopicPartition(topic, 0, 9)],
                                             consumer.consumer_group_metadata(), CALL_TIMEOUT_S)
        network.cut(txn_node, group_node)
        # The abort is decided once its PrepareAbort is committed: after the group's node, which
        # can no longer fetch, leaves the ISR of the transaction log's partition
        # (replica.lag.time.max.ms, 10 s). An EndTxn whose write is not committed within 5 s is
        # answered with a retriable error (the node's log says so), and a retried EndTxn finds
        # the abort unfinished (CONCURRENT_TRANSACTIONS), so abort_transaction waits for it.
        aborted = []
        aborting = threading.Thread(target=lambda: aborted.append(catch(lambda: producer.abort_transaction(90))),
                                    daemon=True)
        aborting.start()
        failed_notice = "cannot tell a group coordinator of an aborted transaction's offsets"
        wait_until(lambda: c.nodes[txn_node].log().count(failed_notice) >= 3, 45,
                   f"node {txn_node} to fail to tell node {group_node} of the abort three times")
        assert aborting.is_alive(), f"abort_transaction returned before the abort was told: {aborted}"
        # Still held: librdkafka retries UNSTABLE_OFFSET_COMMIT until its timeout.
        for _ in range(2):
            with pytest.raises(KafkaException, match="(?i)timed out|unstable"):
                committed(3)
        network.heal(txn_node, group_node)
        healed_at = time.monotonic()
        assert wait_until(lambda: committed(3) == 5 or None, 30, "the old offset once the abort is told")
        print(f"the old offset {time.monotonic() - healed_at:.1f} s after the heal")
        aborting.join(60)
        assert aborted == [None], f"abort_transaction: {aborted or 'still waiting'}"
        # The transaction completed: a new instance of the producer is not kept waiting.
        producers.append(transactional_producer(c.bootstrap, txn_id))
    finally:
        network.heal_all()
        if consumer is not None:
            consumer.close()
        for p in producers:
            p.flush(5)


def catch(call):
    """`call()`'s exception, or None if it returned."""
    try:
        call()
    except Exception as e:
        return e
    return None
