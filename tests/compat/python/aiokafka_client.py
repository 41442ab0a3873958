#!/usr/bin/env python3
"""The matrix's checks through aiokafka (its own asyncio protocol stack), run by
venv-aiokafka's python:

    venv-aiokafka/bin/python aiokafka_client.py 127.0.0.1:9092

Besides the standard checks: compressed batches, the null error message of a successful
CreateTopics, fencing of a transactional producer by a newer one with the same id, and two
rebalance checks. aiokafka commits a member's consumed offsets while it prepares to rejoin
(auto-commit), and applications commit in their rebalance listener's on_partitions_revoked;
both commits reach the broker while the group is preparing a rebalance, and a refused one is
only logged by aiokafka, so the checks look for what it would cost: records delivered twice.
"""

import asyncio
import logging
import os
import sys

import aiokafka
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, ConsumerRebalanceListener, TopicPartition
from aiokafka.admin import AIOKafkaAdminClient, NewTopic

from checks import Deadline, check, expect, name, watchdog

BOOTSTRAP = sys.argv[1]
watchdog(int(os.environ.get("COMPAT_DEADLINE", "150")))
CLIENT = "aiokafka"
logging.basicConfig(level=logging.WARNING, stream=sys.stderr,
                    format="# %(asctime)s %(name)s %(levelname)s %(message)s")
print(f"CLIENT aiokafka {aiokafka.__version__}", flush=True)

TOPIC = name("main", CLIENT)
GROUP_TOPIC = name("grouped", CLIENT)
GROUP = name("group", CLIENT)
TXN_TOPIC = name("txn", CLIENT)
TXN_IN = name("txn-in", CLIENT)
TXN_OUT = name("txn-out", CLIENT)
TXN_GROUP = name("txn-group", CLIENT)

loop = asyncio.new_event_loop()


def sync(coroutine_fn):
    """Runs an async check on the program's event loop (checks.check is synchronous)."""
    return lambda *a: loop.run_until_complete(coroutine_fn(*a))


async def admin_client():
    a = AIOKafkaAdminClient(bootstrap_servers=BOOTSTRAP, request_timeout_ms=15000)
    await a.start()
    return a


async def create(topic, partitions=1):
    a = await admin_client()
    try:
        r = await a.create_topics([NewTopic(topic, num_partitions=partitions, replication_factor=1)],
                                  timeout_ms=10000)
    finally:
        await a.close()
    errors = [e for e in r.topic_errors if e[1] != 0]
    expect(not errors, f"CreateTopics errors: {errors}")
    return r


async def produce(values, topic, partition=None, **extra):
    """Sends values and waits for each acknowledgement; returns the offsets."""
    p = AIOKafkaProducer(bootstrap_servers=BOOTSTRAP, acks="all", request_timeout_ms=15000, **extra)
    await p.start()
    try:
        offsets = []
        for i, v in enumerate(values):
            md = await asyncio.wait_for(
                p.send_and_wait(topic, key=f"k{i}".encode(), value=v.encode(), partition=partition), 20)
            offsets.append(md.offset)
        return offsets
    finally:
        await p.stop()


async def read(consumers, want, seconds=20, settle=1.0):
    """getmany() on each consumer until `want` records arrived in all, then `settle` seconds more
    so that extra records would show. Returns [(partition, offset, value)] sorted."""
    got = []
    d = Deadline(seconds)

    async def drain(c, timeout_ms):
        for tp, records in (await c.getmany(timeout_ms=timeout_ms)).items():
            got.extend((tp.partition, r.offset, r.value.decode()) for r in records)

    while d.left() and len(got) < want:
        await asyncio.gather(*(drain(c, int(min(300, d.left() * 1000))) for c in consumers))
    if len(got) < want:
        d.fail(f"{want} records (got {len(got)}: {sorted(got)[:5]}...)")
    if settle:
        await asyncio.gather(*(drain(c, int(settle * 1000)) for c in consumers))
    return sorted(got)


async def assigned_consumer(topic, **extra):
    c = AIOKafkaConsumer(bootstrap_servers=BOOTSTRAP, group_id=None, enable_auto_commit=False,
                         request_timeout_ms=15000, **extra)
    await c.start()
    tp = TopicPartition(topic, 0)
    c.assign([tp])
    return c, tp


# --- admin -------------------------------------------------------------------------------------

created = []


@sync
async def admin_create_topic():
    created.append(await create(TOPIC))
    a = await admin_client()
    try:
        expect(TOPIC in await a.list_topics(), f"{TOPIC} not listed")
    finally:
        await a.close()


def admin_create_topic_null_message():
    """A created topic's result has a null error message, as Kafka answers (aiokafka's own
    test_admin asserts it; the CreateTopics v1+ schema: "the error message, or null if there
    was no error")."""
    (response,) = created
    messages = [(t, m) for t, code, m in response.topic_errors]
    expect(all(m is None for _, m in messages),
           f"CreateTopics v{response.API_VERSION} success carries error messages {messages}, want null")


@sync
async def admin_describe_topic():
    a = await admin_client()
    try:
        topics = await a.describe_topics([TOPIC])
        cluster = await a.describe_cluster()
    finally:
        await a.close()
    expect(len(topics) == 1 and topics[0]["topic"] == TOPIC, f"topics {topics}")
    expect(topics[0]["error_code"] == 0, f"error code {topics[0]['error_code']}")
    partitions = topics[0]["partitions"]
    expect([p["partition"] for p in partitions] == [0], f"partitions {partitions}")
    brokers = [b["node_id"] for b in cluster["brokers"]]
    expect(partitions[0]["leader"] in brokers, f"leader {partitions[0]['leader']}, brokers {brokers}")


# --- produce / consume ---------------------------------------------------------------------------

@sync
async def produce_plain():
    offsets = await produce([f"plain-{i}" for i in range(10)], TOPIC)
    expect(offsets == list(range(10)), f"offsets {offsets}, want 0..9")


@sync
async def produce_idempotent():
    offsets = await produce([f"idem-{i}" for i in range(10)], TOPIC, enable_idempotence=True)
    expect(offsets == list(range(10, 20)), f"offsets {offsets}, want 10..19")


@sync
async def produce_compressed():
    """Batches of each codec are stored and read back."""
    topic = name("compressed", CLIENT)
    await create(topic)
    want = []
    for codec in ("gzip", "snappy", "lz4", "zstd"):
        values = [f"{codec}-{i}-" + "compressible " * 20 for i in range(5)]
        offsets = await produce(values, topic, compression_type=codec)
        expect(offsets == list(range(len(want), len(want) + 5)), f"{codec}: offsets {offsets}")
        want += values
    c, tp = await assigned_consumer(topic)
    try:
        await c.seek_to_beginning(tp)
        got = [v for _, _, v in await read([c], len(want))]
    finally:
        await c.stop()
    expect(got == want, f"read back {got}, want {want}")


@sync
async def consume_from_beginning():
    c, tp = await assigned_consumer(TOPIC)
    try:
        await c.seek_to_beginning(tp)
        got = await read([c], 20)
    finally:
        await c.stop()
    want = [(0, i, f"plain-{i}") for i in range(10)] + [(0, 10 + i, f"idem-{i}") for i in range(10)]
    expect(got == want, f"read {got}, want {want}")


@sync
async def consume_from_end():
    c, tp = await assigned_consumer(TOPIC)
    try:
        await c.seek_to_end(tp)
        position = await asyncio.wait_for(c.position(tp), 20)  # resolved: positioned at the end
        expect(position == 20, f"end position {position}, want 20")
        await produce([f"late-{i}" for i in range(3)], TOPIC)
        got = await read([c], 3)
    finally:
        await c.stop()
    want = [(0, 20 + i, f"late-{i}") for i in range(3)]
    expect(got == want, f"read {got}, want only the 3 records produced after positioning: {want}")


# --- consumer groups ---------------------------------------------------------------------------

def group_consumer(group, **extra):
    settings = dict(bootstrap_servers=BOOTSTRAP, group_id=group, enable_auto_commit=False,
                    auto_offset_reset="earliest", session_timeout_ms=10000,
                    heartbeat_interval_ms=1000, request_timeout_ms=15000)
    settings.update(extra)
    return AIOKafkaConsumer(**settings)


@sync
async def group_commit_and_resume():
    await create(GROUP_TOPIC)
    await produce([f"g-{i}" for i in range(10)], GROUP_TOPIC)
    tp = TopicPartition(GROUP_TOPIC, 0)
    a = group_consumer(GROUP, max_poll_records=4)
    await a.start()
    try:
        a.subscribe([GROUP_TOPIC])
        got_a = (await read([a], 4, seconds=30, settle=0))[:4]
        await a.commit({tp: got_a[-1][1] + 1})
    finally:
        await a.stop()
    expect([o for _, o, _ in got_a] == [0, 1, 2, 3], f"A read {got_a}")
    b = group_consumer(GROUP)
    await b.start()
    try:
        b.subscribe([GROUP_TOPIC])
        got_b = await read([b], 6, seconds=30)
        description = await describe_group(GROUP)
    finally:
        await b.stop()
    want = [(0, i, f"g-{i}") for i in range(4, 10)]
    expect(got_b == want, f"B read {got_b}, want exactly {want} (A committed 4)")
    return description


async def describe_group(group):
    try:
        a = await admin_client()
        try:
            return await a.describe_consumer_groups([group])
        finally:
            await a.close()
    except Exception as e:  # reported by admin_describe_group
        return e


def admin_describe_group(description):
    if isinstance(description, Exception):
        raise description
    groups = [g for response in description for g in response.groups]
    expect(len(groups) == 1, f"groups {groups}")
    error_code, group, state, protocol_type, protocol, members = groups[0][:6]
    expect(error_code == 0 and group == GROUP, f"description {groups[0]}")
    expect(state == "Stable", f"state {state}, want Stable")
    expect(protocol_type == "consumer", f"protocol type {protocol_type}")
    expect(len(members) == 1, f"{len(members)} members, want 1")
    expect(members[0][4], "the member's assignment is empty")


async def committed_offsets(group):
    a = await admin_client()
    try:
        offsets = await a.list_consumer_group_offsets(group)
    finally:
        await a.close()
    return {tp.partition: om.offset for tp, om in offsets.items()}


async def rebalance_check(kind, make_consumer):
    """A reads a 2-partition topic alone (nothing committed by interval); B joins; A's offsets
    must be committed while the group prepares the rebalance (by `make_consumer`'s means), so
    B, starting from the committed offsets, reads nothing old, and new records reach exactly
    one of them."""
    topic, group = name(f"rebalance-{kind}", CLIENT), name(f"rebalance-{kind}", CLIENT)
    await create(topic, partitions=2)
    for partition in (0, 1):
        await produce([f"old-{partition}-{i}" for i in range(5)], topic, partition=partition)
    a = make_consumer(group)
    await a.start()
    b = None
    try:
        a.subscribe([topic], listener=getattr(a, "listener", None))
        got_a = await read([a], 10, seconds=30, settle=0)
        expect(len(got_a) == 10, f"A read {got_a}")
        b = make_consumer(group)
        await b.start()
        b.subscribe([topic], listener=getattr(b, "listener", None))
        # Both consume while the group rebalances: A must rejoin (committing first), B joins.
        d = Deadline(30)
        early = []
        while d.left():
            early += await read([a, b], 0, settle=0.3)
            if a.assignment() and b.assignment() and not (a.assignment() & b.assignment()):
                break
        else:
            d.fail(f"rebalance to 2 members (A {a.assignment()}, B {b.assignment()})")
        for member in (a, b):
            errors = getattr(getattr(member, "listener", None), "errors", [])
            expect(not errors, f"the rebalance listener's commit failed: {errors}")
        committed = await committed_offsets(group)
        expect(committed == {0: 5, 1: 5}, f"committed {committed} after the rebalance, want 5 and 5")
        for partition in (0, 1):
            await produce([f"new-{partition}-{i}" for i in range(2)], topic, partition=partition)
        got = early + await read([a, b], 4, seconds=20)
    finally:
        await a.stop()
        if b is not None:
            await b.stop()
    want = sorted((p, 5 + i, f"new-{p}-{i}") for p in (0, 1) for i in range(2))
    expect(sorted(got) == want, f"after the rebalance A and B read {sorted(got)}, want {want}")


def autocommit_consumer(group):
    # The interval commit never comes within the check: only the rebalance's commit counts.
    return group_consumer(group, enable_auto_commit=True, auto_commit_interval_ms=600000)


class CommitOnRevoke(ConsumerRebalanceListener):
    def __init__(self, consumer):
        self.consumer = consumer
        self.errors = []

    async def on_partitions_revoked(self, revoked):
        if revoked:
            try:
                await self.consumer.commit()
            except Exception as e:  # aiokafka would only log it; the check reports it
                self.errors.append(e)
                raise

    async def on_partitions_assigned(self, assigned):
        pass


def listener_consumer(group):
    c = group_consumer(group)
    c.listener = CommitOnRevoke(c)
    return c


@sync
async def group_rebalance_autocommit():
    await rebalance_check("auto", autocommit_consumer)


@sync
async def group_rebalance_listener_commit():
    await rebalance_check("listener", listener_consumer)


# --- transactions ------------------------------------------------------------------------------

@sync
async def transactions():
    await create(TXN_TOPIC)
    p = AIOKafkaProducer(bootstrap_servers=BOOTSTRAP, transactional_id=name("txn-id", CLIENT),
                         request_timeout_ms=15000)
    await p.start()
    try:
        for label, commit in (("commit", True), ("abort", False), ("commit2", True)):
            await asyncio.wait_for(p.begin_transaction(), 20)
            for i in range(3):
                await asyncio.wait_for(p.send_and_wait(TXN_TOPIC, value=f"{label}-{i}".encode()), 20)
            await asyncio.wait_for(p.commit_transaction() if commit else p.abort_transaction(), 20)
    finally:
        await p.stop()
    committed = [f"{label}-{i}" for label in ("commit", "commit2") for i in range(3)]
    results = {}
    for isolation, want in (("read_committed", 6), ("read_uncommitted", 9)):
        c, tp = await assigned_consumer(TXN_TOPIC, isolation_level=isolation)
        try:
            await c.seek_to_beginning(tp)
            results[isolation] = [v for _, _, v in await read([c], want)]
        finally:
            await c.stop()
    expect(results["read_committed"] == committed,
           f"read_committed read {results['read_committed']}, want {committed}")
    all9 = sorted(committed + [f"abort-{i}" for i in range(3)])
    expect(sorted(results["read_uncommitted"]) == all9,
           f"read_uncommitted read {results['read_uncommitted']}, want all 9 (the aborted were written)")


@sync
async def transactions_fenced():
    """A second producer with the same transactional id fences the first: the first's next
    transaction fails with ProducerFenced. aiokafka speaks AddPartitionsToTxn v0, so the broker
    must say INVALID_PRODUCER_EPOCH (47): PRODUCER_FENCED (90) only exists from v2 (KIP-588),
    and aiokafka knows only 47."""
    from aiokafka.errors import ProducerFenced
    await create(TXN_TOPIC + "-fenced")
    tid = name("txn-id-fenced", CLIENT)
    producers = [AIOKafkaProducer(bootstrap_servers=BOOTSTRAP, transactional_id=tid,
                                  request_timeout_ms=15000) for _ in range(2)]
    try:
        for p in producers:
            await asyncio.wait_for(p.start(), 20)
        old, new = producers
        await asyncio.wait_for(new.begin_transaction(), 20)
        await asyncio.wait_for(new.send_and_wait(TXN_TOPIC + "-fenced", b"new"), 20)
        await asyncio.wait_for(new.commit_transaction(), 20)
        try:
            await asyncio.wait_for(old.begin_transaction(), 20)
            await asyncio.wait_for(old.send_and_wait(TXN_TOPIC + "-fenced", b"old"), 20)
            await asyncio.wait_for(old.commit_transaction(), 20)
        except ProducerFenced:
            return
        except Exception as e:
            cause = f" (caused by {type(e.__cause__).__name__}: {e.__cause__})" if e.__cause__ else ""
            raise AssertionError(f"the fenced producer got {type(e).__name__}: {e}{cause}, "
                                 "want ProducerFenced") from e
        raise AssertionError("the fenced producer committed a transaction")
    finally:
        for p in producers:
            try:
                await asyncio.wait_for(p.stop(), 10)
            except Exception:
                pass


@sync
async def transactions_send_offsets():
    """Consume-transform-produce: the input offsets commit with the output records; an aborted
    round commits neither."""
    await create(TXN_IN)
    await create(TXN_OUT)
    await produce([f"in-{i}" for i in range(6)], TXN_IN)
    tp = TopicPartition(TXN_IN, 0)
    c = group_consumer(TXN_GROUP, isolation_level="read_committed", max_poll_records=3)
    p = AIOKafkaProducer(bootstrap_servers=BOOTSTRAP, transactional_id=name("txn-id-eos", CLIENT),
                         request_timeout_ms=15000)
    await c.start()
    await p.start()
    try:
        c.subscribe([TXN_IN])
        for commit in (True, False):
            batch = (await read([c], 3, seconds=30, settle=0))[:3]
            await asyncio.wait_for(p.begin_transaction(), 20)
            for _, _, v in batch:
                await p.send_and_wait(TXN_OUT, value=v.replace("in-", "out-").encode())
            await p.send_offsets_to_transaction({tp: batch[-1][1] + 1}, TXN_GROUP)
            await asyncio.wait_for(p.commit_transaction() if commit else p.abort_transaction(), 20)
        committed = await committed_offsets(TXN_GROUP)
    finally:
        await c.stop()
        await p.stop()
    expect(committed == {0: 3}, f"group's committed offsets {committed}, want {{0: 3}} (round 2 aborted)")
    out, out_tp = await assigned_consumer(TXN_OUT, isolation_level="read_committed")
    try:
        await out.seek_to_beginning(out_tp)
        got = [v for _, _, v in await read([out], 3)]
    finally:
        await out.stop()
    expect(got == [f"out-{i}" for i in range(3)], f"committed output {got}")


@sync
async def admin_delete_topic():
    a = await admin_client()
    try:
        r = await a.delete_topics([TOPIC], timeout_ms=10000)
        errors = [e for e in r.topic_error_codes if e[1] != 0]
        expect(not errors, f"DeleteTopics errors: {errors}")
        d = Deadline(15)
        while d.left():
            if TOPIC not in await a.list_topics():
                return
            await asyncio.sleep(0.1)
        d.fail(f"disappearance of {TOPIC} from metadata")
    finally:
        await a.close()


check("admin_create_topic", admin_create_topic)
check("admin_create_topic_null_message", admin_create_topic_null_message,
      needs=["admin_create_topic"])
check("admin_describe_topic", admin_describe_topic, needs=["admin_create_topic"])
check("produce", produce_plain, needs=["admin_create_topic"])
check("produce_idempotent", produce_idempotent, needs=["produce"])
check("produce_compressed", produce_compressed)
check("consume_from_beginning", consume_from_beginning, needs=["produce_idempotent"])
check("consume_from_end", consume_from_end, needs=["produce_idempotent"])
description = check("group_commit_and_resume", group_commit_and_resume)
check("admin_describe_group", lambda: admin_describe_group(description),
      needs=["group_commit_and_resume"])
check("group_rebalance_autocommit", group_rebalance_autocommit)
check("group_rebalance_listener_commit", group_rebalance_listener_commit)
check("transactions", transactions)
check("transactions_send_offsets", transactions_send_offsets)
check("transactions_fenced", transactions_fenced)
check("admin_delete_topic", admin_delete_topic, needs=["admin_create_topic"])
loop.close()
