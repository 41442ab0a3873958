"""The client side of the cluster tests, recording into a checker.History: an idempotent acks=all
producer of unique values "w-<n>" at a bounded rate, a group consumer (for the soak), the final
drain of every partition, and the failover-time measurement. Everything is bounded in count and
in time; a client that cannot finish in time is reported, not waited for.
"""

import statistics
import sys
import threading
import time
import traceback

from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition

from conftest import ARTIFACTS, wait_until

from .checker import READ_UNCOMMITTED, check
from .harness import CLIENT_DEFAULTS

PRODUCER_DEFAULTS = {
    "acks": "all",
    "enable.idempotence": True,
    "linger.ms": 5,
    # A paused leader holds a request this long before the client gives up on it and retries.
    "request.timeout.ms": 5000,
    # A record waits this long for a (new) leader before its delivery fails.
    "message.timeout.ms": 30000,
    **CLIENT_DEFAULTS,
}


def describe(err):
    return f"{err.name()}: {err.str()}"


class ProducerWorkload:
    """Produces history.next_value() values (key = value, so they spread over the partitions, or
    all to `partition`) at `rate_per_s` until `max_count` were produced, `duration_s` passed or
    stop() was called; then flushes for at most `flush_timeout_s`. Every produce and every
    delivery report is recorded; a fatal client error ends the run (see `.fatal`)."""

    def __init__(self, bootstrap, topic, history, *, name="p1", rate_per_s=300, max_count=10_000,
                 duration_s=30.0, partition=None, conf=None, flush_timeout_s=None):
        self.topic, self.history, self.name, self.partition = topic, history, name, partition
        self.rate_per_s, self.max_count, self.duration_s = rate_per_s, max_count, duration_s
        self.conf = {**PRODUCER_DEFAULTS, "bootstrap.servers": bootstrap, **(conf or {}),
                     "error_cb": self._client_error}
        self.flush_timeout_s = flush_timeout_s or self.conf["message.timeout.ms"] / 1000 + 10
        self.produced = 0
        self.unflushed = None       # records still without a report after the flush
        self.fatal = None           # a fatal KafkaError (the idempotent producer is then unusable)
        self.client_errors = []     # the last non-fatal client errors, for diagnosis
        self.error = None           # an exception raised in the thread
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name=f"producer-{name}", daemon=True)

    def start(self):
        self._thread.start()
        return self

    def stop(self):
        self._stop.set()

    def join(self, timeout=None):
        self._thread.join(self.flush_timeout_s + 10 if timeout is None else timeout)
        assert not self._thread.is_alive(), f"producer {self.name} did not finish"
        if self.error is not None:
            raise self.error
        return self

    def finish(self):
        self.stop()
        return self.join()

    def abort(self, timeout=10):
        """Stops without waiting for outstanding reports (teardown after a failure)."""
        self.flush_timeout_s = 0
        self.stop()
        self._thread.join(timeout)

    def acked(self, since=None, partition=None):
        return self.history.acked_count(since=since, producer=self.name, partition=partition)

    def wait_acked(self, count, timeout=30, since=None, partition=None):
        """Waits for `count` acknowledged writes (to `partition`, since `since`); fails at once
        if the producer stopped first."""
        def state():
            acked = self.acked(since, partition)
            if acked >= count:
                return "done", acked
            if self.fatal is not None or self.error is not None or not self._thread.is_alive():
                return "stopped", acked
            # Raised, not returned, so that a timeout reports the latest count and errors.
            raise AssertionError(f"{acked} so far; recent client errors: {self.client_errors[-3:]}")
        where = "" if partition is None else f" on partition {partition}"
        outcome, acked = wait_until(state, timeout, f"{count} acknowledged writes{where} by {self.name}")
        assert outcome == "done", (f"producer {self.name} stopped at {acked} of {count} acknowledged writes{where}: "
                                   f"fatal {self.fatal}, error {self.error!r}, "
                                   f"recent client errors {self.client_errors[-3:]}")

    def _client_error(self, err):
        if err.fatal():
            self.fatal = err
        self.client_errors = self.client_errors[-19:] + [describe(err)]

    def _report(self, send, err, msg):
        if err is None:
            self.history.ack(send, msg.partition(), msg.offset())
        else:
            self.history.fail(send, describe(err), msg.partition())
            if err.fatal():
                self.fatal = err

    def _run(self):
        producer = None
        try:
            producer = Producer(self.conf)
            started = time.monotonic()
            deadline = started + self.duration_s
            while (self.produced < self.max_count and self.fatal is None and not self._stop.is_set()
                   and time.monotonic() < deadline):
                ahead = started + self.produced / self.rate_per_s - time.monotonic()
                if ahead > 0 and self._stop.wait(ahead):  # pacing to the rate, not a wait for state
                    break
                self._produce(producer, deadline)
                producer.poll(0)
            self.unflushed = producer.flush(self.flush_timeout_s)
        except BaseException as e:  # re-raised by join()
            self.error = e
        finally:
            producer = None         # the saved traceback would otherwise keep the client running

    def _produce(self, producer, deadline):
        value = self.history.next_value()
        send = self.history.invoke_send(self.name, self.topic, value)
        extra = {} if self.partition is None else {"partition": self.partition}
        while True:
            try:
                producer.produce(self.topic, key=value.encode(), value=value.encode(),
                                 on_delivery=lambda err, msg, send=send: self._report(send, err, msg), **extra)
                break
            except BufferError:     # the local queue is full: serve reports, bounded by the run
                if time.monotonic() > deadline or self._stop.is_set():
                    break           # never handed to the client: stays "unknown", harmlessly
                producer.poll(0.05)
        self.produced += 1


def produce_records(bootstrap, topic, history, count, *, partition=None, conf=None, timeout_s=15):
    """Produces `count` values with a new producer and waits (at most `timeout_s`) for their
    reports; returns their Sends."""
    name = f"once-{time.monotonic_ns()}"
    ProducerWorkload(bootstrap, topic, history, name=name, rate_per_s=1_000_000, max_count=count,
                     duration_s=timeout_s, partition=partition, conf=conf, flush_timeout_s=timeout_s).start().join()
    with history.lock:
        return [s for s in history.sends if s.producer == name][-count:]


class ConsumerWorkload:
    """A member of `group` subscribed to `topic`: records every record it polls, a rebalance
    marker at each assignment change, and the offsets each synchronous commit (one per
    non-empty batch) acknowledged. Runs until stop() or `duration_s`."""

    def __init__(self, bootstrap, topic, group, history, *, name="c1", isolation=READ_UNCOMMITTED,
                 duration_s=60.0, conf=None):
        self.topic, self.group, self.history, self.name = topic, group, history, name
        self.isolation, self.duration_s = isolation, duration_s
        self.conf = {"bootstrap.servers": bootstrap, "group.id": group, "enable.auto.commit": False,
                     "auto.offset.reset": "earliest", "isolation.level": isolation,
                     "session.timeout.ms": 6000, "heartbeat.interval.ms": 500, **CLIENT_DEFAULTS,
                     **(conf or {}), "error_cb": self._client_error}
        if self.conf.get("group.protocol") == "consumer":
            # KIP-848: the coordinator sets the session and heartbeat intervals, and librdkafka
            # refuses the classic protocol's settings.
            del self.conf["session.timeout.ms"], self.conf["heartbeat.interval.ms"]
        self.client_errors = []
        self.error = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name=f"consumer-{name}", daemon=True)

    def start(self):
        self._thread.start()
        return self

    def stop(self):
        self._stop.set()

    def finish(self, timeout=30):
        self.stop()
        self._thread.join(timeout)
        if self._thread.is_alive():
            frame = sys._current_frames().get(self._thread.ident)
            where = "".join(traceback.format_stack(frame)[-3:]) if frame is not None else "?"
            raise AssertionError(f"consumer {self.name} did not finish within {timeout}s; it is at:\n{where}"
                                 f"recent client errors: {self.client_errors[-5:]}")
        if self.error is not None:
            raise self.error

    def _client_error(self, err):
        self.client_errors = self.client_errors[-19:] + [describe(err)]

    def _run(self):
        consumer = None
        try:
            consumer = Consumer(self.conf)
            moved = lambda consumer, partitions: self.history.rebalance(self.name)  # noqa: E731
            consumer.subscribe([self.topic], on_assign=moved, on_revoke=moved, on_lost=moved)
            deadline = time.monotonic() + self.duration_s
            while not self._stop.is_set() and time.monotonic() < deadline:
                got = False
                for m in consumer.consume(200, 0.5):
                    if m.error() is not None:
                        self._client_error(m.error())
                        continue
                    self.history.poll(self.name, m.topic(), m.partition(), m.offset(),
                                      (m.value() or b"").decode(errors="replace"), self.isolation)
                    got = True
                if got:
                    self._commit(consumer)
        except BaseException as e:
            self.error = e
        finally:
            if consumer is not None:
                consumer.close()
            consumer = None

    def _commit(self, consumer):
        start = time.monotonic()
        try:
            committed = consumer.commit(asynchronous=False)
        except KafkaException as e:  # e.g. a rebalance in progress: the next batch commits
            self._client_error(e.args[0])
            return
        end = time.monotonic()
        for tp in committed or []:
            if tp.error is None and tp.offset >= 0:
                self.history.committed(self.group, tp.topic, tp.partition, tp.offset, start, end)


def drain(bootstrap, topic, history, isolation=READ_UNCOMMITTED, timeout_s=30):
    """Reads every partition of `topic` from its log start to its end offset (high watermark, or
    last stable offset for read_committed) as of the call, recording both; returns the number of
    records read. Raises if the end offsets are not reached within `timeout_s`: a short drain
    would report writes as lost."""
    deadline = time.monotonic() + timeout_s
    left = lambda: max(deadline - time.monotonic(), 0.1)  # noqa: E731
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"drain-{topic}-{time.monotonic_ns()}",
                         "enable.auto.commit": False, "isolation.level": isolation,
                         "enable.partition.eof": True, "fetch.wait.max.ms": 100, **CLIENT_DEFAULTS})
    try:
        partitions = wait_until(lambda: sorted(consumer.list_topics(topic, timeout=2).topics[topic].partitions),
                                left(), f"the partitions of {topic}")
        ends = {}
        for p in partitions:
            ends[p] = wait_until(lambda: consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=2,
                                                                        cached=False),
                                 left(), f"the end offsets of {topic}/{p}")
            history.drain_scope(topic, p, isolation, *ends[p])
        wanted = {p: high for p, (low, high) in ends.items() if high > low}
        consumer.assign([TopicPartition(topic, p, ends[p][0]) for p in wanted])
        read = 0
        while wanted:
            if time.monotonic() > deadline:
                positions = {tp.partition: tp.offset for tp in consumer.position(
                    [TopicPartition(topic, p) for p in wanted])}
                raise AssertionError(f"the drain of {topic} ({isolation}) stopped short after {timeout_s}s: "
                                     f"end offsets {wanted}, positions {positions}")
            for m in consumer.consume(500, 0.5):
                err = m.error()
                if err is None:
                    history.drain_read(topic, m.partition(), m.offset(),
                                       (m.value() or b"").decode(errors="replace"), isolation)
                    read += 1
                    if m.offset() + 1 >= wanted.get(m.partition(), float("inf")):
                        del wanted[m.partition()]
                elif err.code() == KafkaError._PARTITION_EOF:
                    if m.offset() >= wanted.get(m.partition(), float("inf")):
                        del wanted[m.partition()]
                elif err.fatal():
                    raise KafkaException(err)
        return read
    finally:
        consumer.close()


def drain_and_check(cluster, topic, history, label, isolations=(READ_UNCOMMITTED,), idempotent=True):
    """Drains `topic` at each isolation level and checks the history. When it is invalid, the
    history is saved as tests/artifacts/history-<label>.json (re-check it with
    `python -m cluster.checker`) and the result names it and the node logs."""
    for isolation in isolations:
        drain(cluster.bootstrap, topic, history, isolation)
    result = check(history, idempotent=idempotent)
    if not result.valid:
        ARTIFACTS.mkdir(parents=True, exist_ok=True)
        path = ARTIFACTS / f"history-{label}.json"
        history.dump(path)
        result.info["history"] = str(path)
        result.info["nodes"] = cluster.describe()
    return result


def failover_time(cluster, topic, history, partition=0, timeout_s=30):
    """SIGKILLs the leader of `topic`/`partition`; returns (seconds from the kill until the first
    acks=all write produced after it is acknowledged, the killed node's id). The producer is
    connected and has written before the kill, as an application's would have, so the time
    includes the client noticing the loss and finding the new leader."""
    name = f"failover-{time.monotonic_ns()}"
    producer = Producer({**PRODUCER_DEFAULTS, "bootstrap.servers": cluster.bootstrap,
                         "message.timeout.ms": timeout_s * 1000})
    reports = {}    # value -> (KafkaError or None, when the report arrived)

    def write():
        s = history.invoke_send(name, topic, history.next_value())

        def report(err, msg):
            reports[s.value] = (err, time.monotonic())
            if err is None:
                history.ack(s, msg.partition(), msg.offset())
            else:
                history.fail(s, describe(err), msg.partition())

        def served():
            producer.poll(0.01)
            return reports.get(s.value)

        producer.produce(topic, key=s.value.encode(), value=s.value.encode(), partition=partition,
                         on_delivery=report)
        return wait_until(served, timeout_s + 5, f"the report of {s.value} on {topic}/{partition}")

    leader = cluster.wait_for_leader(topic, partition, timeout=timeout_s)
    err, _ = write()
    assert err is None, f"the write before the kill failed: {describe(err)}"
    killed_at = time.monotonic()
    cluster.kill(leader)
    err, acked_at = write()
    assert err is None, f"the first write after killing node {leader} failed: {describe(err)}"
    return acked_at - killed_at, leader


def failover_times(cluster, topic, history, kills, partition=0, timeout_s=30):
    """`kills` failovers of one partition; between two, the killed node restarts and every
    partition of `topic` is back in sync. Returns the seconds of each."""
    times = []
    for _ in range(kills):
        seconds, killed = failover_time(cluster, topic, history, partition, timeout_s)
        times.append(seconds)
        cluster.restart(killed)
        cluster.wait_in_sync(topic, timeout_s)
    return times


def summarize(times):
    return (f"failover over {len(times)} kills: median {statistics.median(times):.2f} s, "
            f"worst {max(times):.2f} s ({', '.join(f'{t:.2f}' for t in times)})")
