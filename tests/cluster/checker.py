"""A history of a Kafka workload, and a checker that names its anomalies the way Jepsen's kafka
workload does (jepsen.tests.kafka; the definitions below are ours, written from its docs).

A history holds
  - sends: every produce a producer made, in the order it called produce(), with its outcome:
    "ok" (a delivery report with partition and offset), "failed" (a delivery error: librdkafka
    retries internally, so a final error may still have been written) or "unknown" (no report);
  - the final drain: every record read from the start to the end offsets of every partition,
    once per isolation level, with the end offsets that bounded it;
  - consumer events: records returned by poll, per consumer, with rebalance markers between
    assignments; committed offsets seen over time;
  - transactions: which sends each one holds, when its commit began, and how it ended.

    send ──► ack (partition, offset) ─┐
                                      ├─► one value per offset, one offset per value, acked ⊆ drain
    drain / poll ──► (offset, value) ─┘

Anomalies (all make the result invalid):
  lost-write            acknowledged (or seen by a consumer) but absent from the drain of its
                        partition
  inconsistent-offsets  one offset of a partition holds two different values across acks and reads
  duplicate             one value at two offsets (only with idempotence; else reported as info)
  nonmonotonic-send     a producer's acks for one partition, in produce order, do not increase
  poll-skip             a consumer, between rebalances, jumps over offsets the drain holds
  nonmonotonic-poll     a consumer, between rebalances, reads an offset at or below its last one
  nonmonotonic-commit   a group's committed offset, observed after another observation ended,
                        is lower than it
  G1a                   a read_committed read returns a write of an aborted transaction
  precommitted-read     a read_committed read returns a transaction's write before that
                        transaction began to commit

    python -m cluster.checker HISTORY.json [--no-idempotence]     re-checks a dumped history
"""

import bisect
import dataclasses
import itertools
import json
import sys
import threading
import time
from collections import defaultdict
from dataclasses import dataclass, field

OK, FAILED, UNKNOWN = "ok", "failed", "unknown"
COMMITTED, ABORTED = "committed", "aborted"
READ_COMMITTED, READ_UNCOMMITTED = "read_committed", "read_uncommitted"
DRAIN = "drain"

ANOMALY_KINDS = ("lost-write", "inconsistent-offsets", "duplicate", "nonmonotonic-send", "poll-skip",
                 "nonmonotonic-poll", "nonmonotonic-commit", "G1a", "precommitted-read")


@dataclass
class Send:
    producer: str
    seq: int
    topic: str
    value: str
    txn: str | None = None
    status: str = UNKNOWN
    partition: int | None = None
    offset: int | None = None
    error: str | None = None
    invoke_time: float = 0.0
    complete_time: float | None = None


@dataclass(frozen=True)
class Read:
    """One record returned to `reader` (DRAIN or a consumer id)."""
    reader: str
    topic: str
    partition: int
    offset: int
    value: str
    isolation: str = READ_UNCOMMITTED
    time: float | None = None


@dataclass(frozen=True)
class Rebalance:
    """The consumer's assignment changed (or it restarted): its positions start afresh."""
    consumer: str
    time: float | None = None


@dataclass(frozen=True)
class DrainScope:
    topic: str
    partition: int
    isolation: str
    low: int
    high: int


@dataclass(frozen=True)
class CommittedOffset:
    """`offset` was the group's committed offset at some moment in [start, end] (a commit's
    acknowledgement or an OffsetFetch answer)."""
    group: str
    topic: str
    partition: int
    offset: int
    start: float
    end: float


@dataclass
class Txn:
    id: str
    producer: str
    status: str = UNKNOWN
    commit_start: float | None = None


class History:
    """Thread-safe recorder; delivery callbacks and pollers append from their own threads."""

    def __init__(self, clock=time.monotonic):
        self.clock = clock
        self.lock = threading.Lock()
        self.sends: list[Send] = []
        self.drain_reads: list[Read] = []
        self.drain_scopes: list[DrainScope] = []
        self.consumer_events: list[Read | Rebalance] = []
        self.commits: list[CommittedOffset] = []
        self.txns: dict[str, Txn] = {}
        self._values = itertools.count()
        self._seqs = defaultdict(itertools.count)
        self._acked = 0

    def next_value(self):
        with self.lock:
            return f"w-{next(self._values)}"

    def invoke_send(self, producer, topic, value, txn=None):
        with self.lock:
            s = Send(producer, next(self._seqs[producer]), topic, value, txn=txn, invoke_time=self.clock())
            self.sends.append(s)
            return s

    def ack(self, send, partition, offset):
        with self.lock:
            assert send.status == UNKNOWN, f"second outcome for {send}"
            send.status, send.partition, send.offset, send.complete_time = OK, partition, offset, self.clock()
            self._acked += 1

    def fail(self, send, error, partition=None):
        with self.lock:
            assert send.status == UNKNOWN, f"second outcome for {send}"
            send.status, send.error, send.partition, send.complete_time = FAILED, str(error), partition, self.clock()

    def acked_count(self, since=None, producer=None, partition=None):
        """Acknowledged sends (by `producer`, to `partition`, acknowledged at or after `since`)."""
        with self.lock:
            if since is None and producer is None and partition is None:
                return self._acked
            return sum(1 for s in self.sends if s.status == OK and (producer is None or s.producer == producer)
                       and (partition is None or s.partition == partition)
                       and (since is None or s.complete_time >= since))

    def drain_scope(self, topic, partition, isolation, low, high):
        with self.lock:
            self.drain_scopes.append(DrainScope(topic, partition, isolation, low, high))

    def drain_read(self, topic, partition, offset, value, isolation=READ_UNCOMMITTED):
        with self.lock:
            self.drain_reads.append(Read(DRAIN, topic, partition, offset, value, isolation, self.clock()))

    def poll(self, consumer, topic, partition, offset, value, isolation=READ_UNCOMMITTED, at=None):
        with self.lock:
            self.consumer_events.append(Read(consumer, topic, partition, offset, value, isolation,
                                             self.clock() if at is None else at))

    def rebalance(self, consumer, at=None):
        with self.lock:
            self.consumer_events.append(Rebalance(consumer, self.clock() if at is None else at))

    def committed(self, group, topic, partition, offset, start, end=None):
        with self.lock:
            self.commits.append(CommittedOffset(group, topic, partition, offset, start,
                                                start if end is None else end))

    def begin_txn(self, txn_id, producer):
        with self.lock:
            assert txn_id not in self.txns, f"transaction {txn_id} recorded twice"
            self.txns[txn_id] = Txn(txn_id, producer)

    def commit_started(self, txn_id, at=None):
        with self.lock:
            self.txns[txn_id].commit_start = self.clock() if at is None else at

    def txn_outcome(self, txn_id, status):
        assert status in (COMMITTED, ABORTED, UNKNOWN), status
        with self.lock:
            self.txns[txn_id].status = status

    def dump(self, path):
        with self.lock:
            data = {
                "sends": [dataclasses.asdict(s) for s in self.sends],
                "drain_reads": [dataclasses.asdict(r) for r in self.drain_reads],
                "drain_scopes": [dataclasses.asdict(d) for d in self.drain_scopes],
                "consumer_events": [{"kind": type(e).__name__, **dataclasses.asdict(e)}
                                    for e in self.consumer_events],
                "commits": [dataclasses.asdict(c) for c in self.commits],
                "txns": [dataclasses.asdict(t) for t in self.txns.values()],
            }
        with open(path, "w") as f:
            json.dump(data, f)

    @classmethod
    def load(cls, path):
        with open(path) as f:
            data = json.load(f)
        h = cls()
        h.sends = [Send(**s) for s in data["sends"]]
        h._acked = sum(1 for s in h.sends if s.status == OK)
        h.drain_reads = [Read(**r) for r in data["drain_reads"]]
        h.drain_scopes = [DrainScope(**d) for d in data["drain_scopes"]]
        kinds = {"Read": Read, "Rebalance": Rebalance}
        h.consumer_events = [kinds[e.pop("kind")](**e) for e in data["consumer_events"]]
        h.commits = [CommittedOffset(**c) for c in data["commits"]]
        h.txns = {t["id"]: Txn(**t) for t in data["txns"]}
        return h


@dataclass
class Result:
    anomalies: dict = field(default_factory=dict)   # kind -> list of example dicts (all of them)
    info: dict = field(default_factory=dict)        # counts and non-anomalies worth a look

    @property
    def valid(self):
        return not any(self.anomalies.values())

    def __str__(self):
        lines = [f"valid: {self.valid}"]
        for kind, examples in self.anomalies.items():
            lines.append(f"  {kind}: {len(examples)}")
            lines += [f"    {e}" for e in examples[:5]]
        lines.append(f"  info: {self.info}")
        return "\n".join(lines)


def check(history, *, idempotent=True):
    """Checks a finished history; see the module docstring for what each anomaly means.

    Raises ValueError when the history cannot be judged (two sends of one value, or records
    acknowledged or polled on a partition the drain never covered): a checker that silently
    passes an incomplete history is worse than none."""
    with history.lock:
        sends = list(history.sends)
        drain_reads = list(history.drain_reads)
        scopes = list(history.drain_scopes)
        events = list(history.consumer_events)
        commits = list(history.commits)
        txns = dict(history.txns)
    polls = [e for e in events if isinstance(e, Read)]
    send_of = {}
    for s in sends:
        if s.value in send_of:
            raise ValueError(f"value {s.value!r} was sent twice: values must be unique")
        send_of[s.value] = s

    drained = defaultdict(dict)                      # (topic, partition) -> isolation -> DrainScope
    for d in scopes:
        drained[(d.topic, d.partition)][d.isolation] = d
    for tp in {(s.topic, s.partition) for s in sends if s.status == OK} | {(r.topic, r.partition) for r in polls}:
        if tp not in drained:
            raise ValueError(f"partition {tp} has acknowledged or polled records but was never drained")

    def txn_of(value):
        s = send_of.get(value)
        return txns.get(s.txn) if s is not None and s.txn is not None else None

    result = Result(anomalies={kind: [] for kind in ANOMALY_KINDS})
    a = result.anomalies
    _offsets_and_duplicates(sends, drain_reads, polls, a, result.info, idempotent)
    _lost_writes(sends, drain_reads, polls, drained, txn_of, a)
    _nonmonotonic_sends(sends, a)
    _polls(events, drain_reads, drained, txn_of, a)
    _commits(commits, a)
    _transactional_reads(drain_reads + polls, txn_of, a)
    result.anomalies = {k: v for k, v in a.items() if v}
    _info(sends, drain_reads, polls, send_of, result.info)
    return result


def _offsets_and_duplicates(sends, drain_reads, polls, anomalies, info, idempotent):
    at = defaultdict(lambda: defaultdict(list))     # (topic, partition, offset) -> value -> sources
    where = defaultdict(set)                         # value -> {(topic, partition, offset)}
    for s in sends:
        if s.status == OK and s.offset is not None and s.offset >= 0:
            at[(s.topic, s.partition, s.offset)][s.value].append(f"ack to {s.producer}")
            where[s.value].add((s.topic, s.partition, s.offset))
    for r in drain_reads + polls:
        at[(r.topic, r.partition, r.offset)][r.value].append(f"{r.reader} ({r.isolation})")
        where[r.value].add((r.topic, r.partition, r.offset))
    for (topic, partition, offset), values in sorted(at.items()):
        if len(values) > 1:
            anomalies["inconsistent-offsets"].append({
                "topic": topic, "partition": partition, "offset": offset,
                "values": {v: sorted(set(src))[:3] for v, src in values.items()}})
    duplicates = [{"value": v, "positions": sorted(p)} for v, p in where.items() if len(p) > 1]
    if idempotent:
        anomalies["duplicate"] += duplicates
    else:
        info["duplicates (allowed without idempotence)"] = len(duplicates)


def _lost_writes(sends, drain_reads, polls, drained, txn_of, anomalies):
    present = defaultdict(set)                       # (topic, partition, isolation) -> values
    for r in drain_reads:
        present[(r.topic, r.partition, r.isolation)].add(r.value)
    expected = {}                                    # (topic, partition, value) -> (offset, evidence)
    for s in sends:
        t = txn_of(s.value)
        if s.status == OK and (t is None or t.status == COMMITTED):
            expected[(s.topic, s.partition, s.value)] = (s.offset, f"acked to {s.producer}")
    for r in polls:
        t = txn_of(r.value)
        if t is None or t.status != ABORTED:
            expected.setdefault((r.topic, r.partition, r.value), (r.offset, f"polled by {r.reader}"))
    for (topic, partition, value), (offset, evidence) in sorted(expected.items(), key=lambda kv: kv[1][0] or 0):
        for isolation, scope in sorted(drained[(topic, partition)].items()):
            t = txn_of(value)
            if isolation == READ_COMMITTED and t is not None and t.status != COMMITTED:
                continue  # polled uncommitted data of an undecided transaction: hidden, rightly
            if value not in present[(topic, partition, isolation)]:
                anomalies["lost-write"].append({
                    "value": value, "topic": topic, "partition": partition, "offset": offset,
                    "evidence": evidence, "drain": isolation, "drain_end_offset": scope.high})


def _nonmonotonic_sends(sends, anomalies):
    acked = defaultdict(list)
    for s in sends:
        if s.status == OK and s.offset is not None and s.offset >= 0:
            acked[(s.producer, s.topic, s.partition)].append(s)
    for (producer, topic, partition), ss in acked.items():
        ss.sort(key=lambda s: s.seq)
        for prev, cur in zip(ss, ss[1:]):
            if cur.offset <= prev.offset:
                anomalies["nonmonotonic-send"].append({
                    "producer": producer, "topic": topic, "partition": partition,
                    "values": [prev.value, cur.value], "offsets": [prev.offset, cur.offset]})


def _polls(events, drain_reads, drained, txn_of, anomalies):
    """Between two rebalances a consumer reads each partition in log order with no gaps; the log
    order is the drain's (offsets can have holes: transaction markers, aborted records)."""
    by_drain = defaultdict(list)                     # (topic, partition, isolation) -> [(offset, value)]
    for r in drain_reads:
        by_drain[(r.topic, r.partition, r.isolation)].append((r.offset, r.value))
    orders = {}

    def order(topic, partition, isolation):
        key = (topic, partition, isolation)
        if key not in orders:
            isolations = drained[(topic, partition)]
            use = isolation if isolation in isolations else next(iter(sorted(isolations)))
            records = by_drain[(topic, partition, use)]
            if isolation == READ_COMMITTED and use != READ_COMMITTED:
                records = [(o, v) for o, v in records if (txn_of(v) is None or txn_of(v).status != ABORTED)]
            orders[key] = sorted(o for o, _ in records)
        return orders[key]

    last = defaultdict(dict)                         # consumer -> (topic, partition) -> offset
    for e in events:
        if isinstance(e, Rebalance):
            last[e.consumer].clear()
            continue
        tp = (e.topic, e.partition)
        prev = last[e.reader].get(tp)
        last[e.reader][tp] = e.offset
        if prev is None:
            continue
        if e.offset <= prev:
            anomalies["nonmonotonic-poll"].append({
                "consumer": e.reader, "topic": e.topic, "partition": e.partition, "offsets": [prev, e.offset]})
            continue
        offsets = order(e.topic, e.partition, e.isolation)
        skipped = offsets[bisect.bisect_right(offsets, prev):bisect.bisect_left(offsets, e.offset)]
        if skipped:
            anomalies["poll-skip"].append({
                "consumer": e.reader, "topic": e.topic, "partition": e.partition, "offsets": [prev, e.offset],
                "skipped": skipped[:5], "skipped_count": len(skipped)})


def _commits(commits, anomalies):
    """Committed offsets only move forward: an observation that began after another one ended
    must not see a lower offset (intervals, since a commit is in flight for a while)."""
    by_partition = defaultdict(list)
    for c in commits:
        by_partition[(c.group, c.topic, c.partition)].append(c)
    for (group, topic, partition), cs in by_partition.items():
        cs.sort(key=lambda c: c.end)
        ends = [c.end for c in cs]
        highest = list(itertools.accumulate(cs, lambda best, c: c if c.offset > best.offset else best))
        for c in cs:
            k = bisect.bisect_left(ends, c.start)
            if k and highest[k - 1].offset > c.offset:
                before = highest[k - 1]
                anomalies["nonmonotonic-commit"].append({
                    "group": group, "topic": topic, "partition": partition,
                    "offsets": [before.offset, c.offset], "times": [before.end, c.start]})


def _transactional_reads(reads, txn_of, anomalies):
    for r in reads:
        if r.isolation != READ_COMMITTED:
            continue
        t = txn_of(r.value)
        if t is None:
            continue
        example = {"value": r.value, "txn": t.id, "reader": r.reader, "topic": r.topic,
                   "partition": r.partition, "offset": r.offset}
        if t.status == ABORTED:
            anomalies["G1a"].append(example)
        elif r.time is not None and (t.commit_start is None or r.time < t.commit_start):
            anomalies["precommitted-read"].append({**example, "read_time": r.time, "commit_start": t.commit_start})


def _info(sends, drain_reads, polls, send_of, info):
    status = defaultdict(int)
    for s in sends:
        status[s.status] += 1
    info["sends"] = dict(status)
    info["drained records"] = len(drain_reads)
    info["polled records"] = len(polls)
    seen = {r.value for r in drain_reads + polls}
    # A delivery error is indefinite (librdkafka may have written an earlier attempt), so a
    # failed send that shows up is not an anomaly; worth knowing how often, though.
    info["failed sends visible"] = sum(1 for s in sends if s.status == FAILED and s.value in seen)
    info["unknown sends visible"] = sum(1 for s in sends if s.status == UNKNOWN and s.value in seen)
    info["values read but never sent"] = len(seen - send_of.keys())
    if polls:
        polled = {r.value for r in polls}
        info["acked but never polled"] = sum(1 for s in sends if s.status == OK and s.value not in polled)


def main(argv):
    if not argv or argv[0].startswith("-"):
        print(__doc__.strip().splitlines()[-1].strip(), file=sys.stderr)
        return 2
    result = check(History.load(argv[0]), idempotent="--no-idempotence" not in argv)
    print(result)
    return 0 if result.valid else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
