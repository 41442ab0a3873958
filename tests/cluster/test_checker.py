"""The checker on small synthetic histories: a clean one passes, and each anomaly is found,
alone, in a history built to hold exactly that one (a checker that cannot fail is a defect)."""

import itertools

import pytest

from .checker import ABORTED, ANOMALY_KINDS, COMMITTED, READ_COMMITTED, READ_UNCOMMITTED, History, check

T = "t"


def history():
    ticks = itertools.count(1)
    return History(clock=lambda: float(next(ticks)))


def write(h, value, partition, offset, producer="p1", txn=None):
    s = h.invoke_send(producer, T, value, txn=txn)
    h.ack(s, partition, offset)
    return s


def drain(h, partition, records, isolation=READ_UNCOMMITTED, high=None):
    """records: {offset: value}."""
    h.drain_scope(T, partition, isolation, 0, high if high is not None else max(records, default=-1) + 1)
    for offset, value in sorted(records.items()):
        h.drain_read(T, partition, offset, value, isolation)


def polls(h, consumer, partition, offsets_values, isolation=READ_UNCOMMITTED):
    for offset, value in offsets_values:
        h.poll(consumer, T, partition, offset, value, isolation)


def base(p0=None):
    """Six acked writes over two partitions, drained; `p0` replaces partition 0's drain."""
    h = history()
    for i in range(6):
        write(h, f"w-{i}", i % 2, i // 2)
    drain(h, 0, p0 if p0 is not None else {0: "w-0", 1: "w-2", 2: "w-4"})
    drain(h, 1, {0: "w-1", 1: "w-3", 2: "w-5"})
    return h


def clean():
    """Everything the checker reads, all of it legitimate: failed and unknown sends, a committed
    and an aborted transaction (with marker holes in the offsets), read_committed and
    read_uncommitted drains and consumers, rebalances, overlapping commits."""
    h = history()
    for i in range(6):
        write(h, f"w-{i}", i % 2, i // 2)
    h.fail(h.invoke_send("p1", T, "w-failed"), "_MSG_TIMED_OUT")
    h.invoke_send("p1", T, "w-unknown")                     # no report; it did land, at p1/3
    h.begin_txn("tx-1", "tp")
    write(h, "w-7", 0, 3, producer="tp", txn="tx-1")
    h.commit_started("tx-1")
    h.txn_outcome("tx-1", COMMITTED)                        # marker at offset 4
    h.begin_txn("tx-2", "tp")
    write(h, "w-8", 0, 5, producer="tp", txn="tx-2")
    h.txn_outcome("tx-2", ABORTED)                          # marker at offset 6
    h.begin_txn("tx-3", "tp")
    h.invoke_send("tp", T, "w-9", txn="tx-3")               # the producer died mid-transaction

    polls(h, "c1", 0, [(0, "w-0"), (1, "w-2")])
    h.committed("g", T, 0, 2, start=h.clock())
    h.rebalance("c1")
    polls(h, "c1", 1, [(1, "w-3"), (2, "w-5"), (3, "w-unknown")])
    polls(h, "c2", 0, [(0, "w-0"), (1, "w-2"), (2, "w-4"), (3, "w-7")], READ_COMMITTED)
    polls(h, "c3", 0, [(3, "w-7"), (5, "w-8")])            # read_uncommitted sees the aborted write
    h.committed("g", T, 0, 4, start=20.0, end=30.0)
    h.committed("g", T, 0, 3, start=25.0, end=26.0)         # overlaps the commit of 4: no order
    h.committed("g", T, 0, 4, start=31.0)

    drain(h, 0, {0: "w-0", 1: "w-2", 2: "w-4", 3: "w-7", 5: "w-8"}, high=7)
    drain(h, 0, {0: "w-0", 1: "w-2", 2: "w-4", 3: "w-7"}, READ_COMMITTED, high=7)
    drain(h, 1, {0: "w-1", 1: "w-3", 2: "w-5", 3: "w-unknown"})
    return h


def lost_write():
    return base(p0={0: "w-0", 2: "w-4"}), {}


def lost_write_beyond_truncated_end():
    h = base()
    write(h, "w-6", 0, 3)                                   # acked, then the log end went back to 3
    return h, {}


def lost_write_seen_by_a_consumer():
    h = base()
    h.invoke_send("p1", T, "w-6")                           # outcome unknown, but a consumer saw it
    polls(h, "c1", 0, [(3, "w-6")])
    return h, {}


def inconsistent_offsets():
    # The ack said w-2 is at 1; the log has an unknown send there and w-2 later (a duplicate too,
    # which without idempotence is not an anomaly: only the offset disagreement is).
    h = base(p0={0: "w-0", 1: "w-6", 2: "w-4", 3: "w-2"})
    h.invoke_send("p1", T, "w-6")
    return h, {"idempotent": False}


def duplicate():
    return base(p0={0: "w-0", 1: "w-2", 2: "w-4", 3: "w-2"}), {}


def nonmonotonic_send():
    h = history()
    write(h, "w-0", 0, 0)
    write(h, "w-1", 0, 2)
    write(h, "w-2", 0, 1)                                   # produced after w-1, lands before it
    drain(h, 0, {0: "w-0", 1: "w-2", 2: "w-1"})
    return h, {}


def poll_skip():
    h = base()
    polls(h, "c1", 0, [(0, "w-0"), (2, "w-4")])
    return h, {}


def nonmonotonic_poll():
    h = base()
    polls(h, "c1", 0, [(0, "w-0"), (1, "w-2"), (1, "w-2")])
    return h, {}


def nonmonotonic_commit():
    h = base()
    h.committed("g", T, 0, 3, start=1.0, end=2.0)
    h.committed("g", T, 0, 1, start=3.0, end=4.0)
    return h, {}


def g1a():
    h = base()
    h.begin_txn("tx-1", "tp")
    write(h, "w-6", 0, 3, producer="tp", txn="tx-1")
    h.txn_outcome("tx-1", ABORTED)
    drain(h, 0, {0: "w-0", 1: "w-2", 2: "w-4", 3: "w-6"}, READ_COMMITTED, high=5)
    return h, {}


def precommitted_read():
    h = base(p0={0: "w-0", 1: "w-2", 2: "w-4", 3: "w-6"})
    h.begin_txn("tx-1", "tp")
    write(h, "w-6", 0, 3, producer="tp", txn="tx-1")
    h.poll("c1", T, 0, 3, "w-6", READ_COMMITTED, at=50.0)
    h.commit_started("tx-1", at=100.0)
    h.txn_outcome("tx-1", COMMITTED)
    return h, {}


CASES = {
    "lost-write": [lost_write, lost_write_beyond_truncated_end, lost_write_seen_by_a_consumer],
    "inconsistent-offsets": [inconsistent_offsets],
    "duplicate": [duplicate],
    "nonmonotonic-send": [nonmonotonic_send],
    "poll-skip": [poll_skip],
    "nonmonotonic-poll": [nonmonotonic_poll],
    "nonmonotonic-commit": [nonmonotonic_commit],
    "G1a": [g1a],
    "precommitted-read": [precommitted_read],
}


def test_every_anomaly_kind_has_a_case():
    assert set(CASES) == set(ANOMALY_KINDS)


def test_clean_history_is_valid():
    result = check(clean())
    assert result.valid, result
    assert result.anomalies == {}
    assert result.info["sends"] == {"ok": 8, "failed": 1, "unknown": 2}
    assert result.info["unknown sends visible"] == 1 and result.info["failed sends visible"] == 0


@pytest.mark.parametrize("kind,build", [(k, b) for k, builds in CASES.items() for b in builds],
                         ids=lambda x: getattr(x, "__name__", x))
def test_each_anomaly_is_found_alone(kind, build):
    h, options = build()
    result = check(h, **options)
    assert not result.valid
    assert set(result.anomalies) == {kind}, result
    assert kind in str(result)


def test_anomaly_examples_name_the_culprit():
    assert [e["value"] for e in check(lost_write()[0]).anomalies["lost-write"]] == ["w-2"]
    e, = check(lost_write_beyond_truncated_end()[0]).anomalies["lost-write"]
    assert (e["value"], e["offset"], e["drain_end_offset"]) == ("w-6", 3, 3)
    e, = check(inconsistent_offsets()[0], idempotent=False).anomalies["inconsistent-offsets"]
    assert (e["partition"], e["offset"], sorted(e["values"])) == (0, 1, ["w-2", "w-6"])
    e, = check(duplicate()[0]).anomalies["duplicate"]
    assert e == {"value": "w-2", "positions": [(T, 0, 1), (T, 0, 3)]}
    e, = check(nonmonotonic_send()[0]).anomalies["nonmonotonic-send"]
    assert e["values"] == ["w-1", "w-2"] and e["offsets"] == [2, 1]
    e, = check(poll_skip()[0]).anomalies["poll-skip"]
    assert (e["consumer"], e["offsets"], e["skipped"]) == ("c1", [0, 2], [1])
    e, = check(nonmonotonic_poll()[0]).anomalies["nonmonotonic-poll"]
    assert e["offsets"] == [1, 1]
    e, = check(nonmonotonic_commit()[0]).anomalies["nonmonotonic-commit"]
    assert e["offsets"] == [3, 1]
    e, = check(g1a()[0]).anomalies["G1a"]
    assert (e["value"], e["txn"], e["reader"]) == ("w-6", "tx-1", "drain")
    e, = check(precommitted_read()[0]).anomalies["precommitted-read"]
    assert (e["value"], e["read_time"], e["commit_start"]) == ("w-6", 50.0, 100.0)


def test_duplicates_are_allowed_without_idempotence():
    result = check(duplicate()[0], idempotent=False)
    assert result.valid, result
    assert result.info["duplicates (allowed without idempotence)"] == 1


def test_a_rebalance_resets_the_poll_order():
    h = base()
    polls(h, "c1", 0, [(0, "w-0"), (1, "w-2")])
    h.rebalance("c1")
    polls(h, "c1", 0, [(0, "w-0"), (2, "w-4")])            # re-reads, then jumps: after a rebalance
    result = check(h)
    assert set(result.anomalies) == {"poll-skip"}, result  # ...the jump 0 -> 2 still skips offset 1
    h = base()
    polls(h, "c1", 0, [(0, "w-0"), (1, "w-2")])
    h.rebalance("c1")
    polls(h, "c1", 0, [(0, "w-0"), (1, "w-2"), (2, "w-4")])
    assert check(h).valid


def test_consumers_are_judged_apart():
    h = base()
    polls(h, "c1", 0, [(0, "w-0"), (1, "w-2")])
    polls(h, "c2", 0, [(0, "w-0"), (1, "w-2")])
    assert check(h).valid


def test_read_uncommitted_may_see_aborted_writes():
    h = base()
    h.begin_txn("tx-1", "tp")
    write(h, "w-6", 0, 3, producer="tp", txn="tx-1")
    h.txn_outcome("tx-1", ABORTED)
    drain(h, 0, {0: "w-0", 1: "w-2", 2: "w-4", 3: "w-6"}, READ_UNCOMMITTED, high=5)
    polls(h, "c1", 0, [(3, "w-6")])
    assert check(h).valid


def test_acked_writes_of_an_aborted_transaction_may_vanish():
    h = base()
    h.begin_txn("tx-1", "tp")
    write(h, "w-6", 0, 3, producer="tp", txn="tx-1")
    h.txn_outcome("tx-1", ABORTED)
    assert check(h).valid


def test_a_history_that_cannot_be_judged_is_refused():
    h = base()
    h.ack(h.invoke_send("p1", T, "w-6"), 2, 0)              # partition 2 was never drained
    with pytest.raises(ValueError, match="never drained"):
        check(h)
    h = base()
    h.invoke_send("p1", T, "w-0")
    with pytest.raises(ValueError, match="sent twice"):
        check(h)


def test_dump_and_load_keep_the_verdict(tmp_path):
    for h in (clean(), poll_skip()[0], precommitted_read()[0]):
        path = tmp_path / "history.json"
        h.dump(path)
        again = History.load(path)
        assert str(check(again)) == str(check(h))
