"""Failover of a 3-node cluster under a live idempotent acks=all producer: a SIGKILLed leader, a
paused (SIGSTOP) leader that wakes up, every node killed at once, a follower whose disk is wiped,
and a majority lost. After each, the topic is drained and the history checked (checker.py): no
acknowledged write lost, one value per offset, no duplicates. Each test should take well under
60 s on a working broker; the timeout mark is the hard stop for a hung one."""

import time

import pytest

from .checker import FAILED, OK, History
from .workload import ProducerWorkload, drain_and_check, failover_times, produce_records, summarize

pytestmark = pytest.mark.timeout(120)

PARTITIONS = 3


@pytest.fixture
def start(cluster):
    """start(topic) -> (cluster, history, producer): a 3-node cluster, a 3-partition topic
    replicated on all three, and a running producer on it (aborted at teardown)."""
    producers = []

    def make(topic, **workload):
        c = cluster(3)
        c.create_topic(topic, PARTITIONS, replication_factor=3)
        history = History()
        w = ProducerWorkload(c.bootstrap, topic, history, **{"rate_per_s": 300, "duration_s": 45.0, **workload})
        producers.append(w)
        return c, history, w.start()

    yield make
    for w in producers:
        w.abort()


def verify(c, topic, history, label, **info):
    """Drains and checks; `info` goes into the result, shown if it fails."""
    result = drain_and_check(c, topic, history, label)
    result.info.update(info)
    assert result.valid, str(result)
    return result


def failures(history, producer):
    with history.lock:
        return [(s.value, s.status, s.error) for s in history.sends if s.producer == producer and s.status != OK]


def test_sigkill_of_a_leader_mid_workload_loses_nothing(start):
    c, history, w = start("kill-leader")
    w.wait_acked(1000, timeout=20)
    leader = c.wait_for_leader("kill-leader", 0)
    killed_at = time.monotonic()
    c.kill(leader)
    c.wait_for_leader("kill-leader", 0, not_node=leader, timeout=15)
    # The workload goes on: the producer retries what was in flight, then writes to the new leader.
    w.wait_acked(200, timeout=20, since=killed_at, partition=0)
    w.finish()
    assert w.fatal is None, w.fatal
    assert not failures(history, w.name), f"the producer's retries should have hidden the failover: " \
                                          f"{failures(history, w.name)[:5]}"
    verify(c, "kill-leader", history, "kill-leader")


def test_a_paused_leader_that_resumes_loses_nothing_it_acknowledged(start):
    c, history, w = start("pause-leader")
    w.wait_acked(500, timeout=20)
    leader = c.wait_for_leader("pause-leader", 0)
    paused_at = time.monotonic()
    c.pause(leader)
    c.wait_for_leader("pause-leader", 0, not_node=leader, timeout=20)
    # The fault itself, not a wait for a condition: the old leader stays frozen for more than
    # 3 s, then wakes up still believing it leads, with clients' requests in its socket buffers.
    time.sleep(max(0.0, paused_at + 4.0 - time.monotonic()))
    resumed_at = time.monotonic()
    c.resume(leader)
    w.wait_acked(300, timeout=20, since=resumed_at, partition=0)
    c.wait_for_isr("pause-leader", 0, nodes=[leader], timeout=20)
    w.finish()
    assert w.fatal is None, w.fatal
    # Everything acknowledged after the resume (by whichever node) is in the drain, as is the rest.
    verify(c, "pause-leader", history, "pause-leader")


def test_every_node_killed_at_once_keeps_every_acknowledged_write(start):
    c, history, w = start("kill-all")
    w.wait_acked(1000, timeout=20)
    c.kill_all()
    c.restart_all()
    restarted_at = time.monotonic()
    for p in range(PARTITIONS):
        c.wait_for_leader("kill-all", p, timeout=20)
    w.wait_acked(300, timeout=30, since=restarted_at)
    w.finish()
    assert w.fatal is None, w.fatal
    verify(c, "kill-all", history, "kill-all")


def test_a_wiped_follower_refills_and_a_later_leader_kill_loses_nothing(start):
    c, history, w = start("wipe-follower")
    w.wait_acked(1500, timeout=20)
    leader = c.wait_for_leader("wipe-follower", 0)
    wiped = next(i for i in c.ids if i != leader)
    # Down until it has left every ISR, so that coming back shows a refill. (Not a quick wipe:
    # if a majority acknowledges, a write held by the leader and the wiped node alone is gone
    # after a second fault, legitimately.)
    c.wipe(wiped, leave_isr_of="wipe-follower")
    # It refills while the producer keeps writing, and the leaders say so: it is back in every ISR.
    for p in range(PARTITIONS):
        c.wait_for_isr("wipe-follower", p, nodes=[wiped], timeout=30)
    # Now lose one of the two nodes that kept their data: the wiped one's copy must be whole.
    leaders = [c.wait_for_leader("wipe-follower", p) for p in range(PARTITIONS)]
    victim = next((i for i in leaders if i != wiped), next(i for i in c.ids if i != wiped))
    killed_at = time.monotonic()
    c.kill(victim)
    after = [c.wait_for_leader("wipe-follower", p, not_node=victim, timeout=15) for p in range(PARTITIONS)]
    w.wait_acked(300, timeout=20, since=killed_at)
    w.finish()
    assert w.fatal is None, w.fatal
    verify(c, "wipe-follower", history, "wipe-follower", wiped=wiped, killed=victim, leaders_after_kill=after)


def test_an_acks_all_write_without_a_majority_is_never_acknowledged(cluster):
    c = cluster(3)
    c.create_topic("no-majority", PARTITIONS, replication_factor=3)
    history = History()
    before = produce_records(c.bootstrap, "no-majority", history, 5)
    assert all(s.status == OK for s in before), before
    leader = c.wait_for_leader("no-majority", 0)
    others = [i for i in c.ids if i != leader]
    for i in others:
        c.kill(i)
    # The survivor may still think it leads partition 0; alone it must not acknowledge anything.
    sends = produce_records(c.bootstrap, "no-majority", history, 10, timeout_s=15,
                            conf={"message.timeout.ms": 5000, "request.timeout.ms": 5000})
    acknowledged = [(s.value, s.partition, s.offset) for s in sends if s.status == OK]
    assert not acknowledged, f"acknowledged with 2 of 3 nodes down: {acknowledged}"
    assert all(s.status == FAILED for s in sends), [(s.value, s.status) for s in sends]
    # With the majority back the cluster serves again, and nothing acknowledged is lost (the
    # failed writes may or may not appear: a delivery error is indefinite).
    for i in others:
        c.restart(i)
    c.wait_in_sync("no-majority", timeout=30)
    after = produce_records(c.bootstrap, "no-majority", history, 5)
    assert all(s.status == OK for s in after), after
    verify(c, "no-majority", history, "no-majority")


def test_failover_time_is_under_10_s(cluster):
    """scripts/cluster-failover-time measures more kills; CI bounds the worst of three."""
    c = cluster(3)
    c.create_topic("failover-time", 1, replication_factor=3)
    history = History()
    times = failover_times(c, "failover-time", history, kills=3)
    print(summarize(times))
    assert max(times) < 10.0, summarize(times)
    verify(c, "failover-time", history, "failover-time")



def test_a_dead_process_is_fenced_before_its_session_ends_and_a_paused_one_is_not(cluster):
    """The controller probes a node whose heartbeat connection closed: a refused connection
    (nothing listens: the process is gone) ends its session at once. With a 30 s session, a
    SIGKILLed leader must be replaced long before 30 s, while a SIGSTOPped one (its listener
    still accepts) keeps its leadership until the session would end."""
    c = cluster(3, extra=("--cluster-session-timeout-ms", "30000"))
    c.create_topic("probe", 1, replication_factor=3)
    leader = c.wait_for_leader("probe", 0)
    c.pause(leader)
    time.sleep(5)
    others = [i for i in c.ids if i != leader]
    assert all(c.leader_of("probe", 0, via=i) == leader for i in others), \
        "a paused node was fenced before its session ended"
    c.resume(leader)
    c.wait_for_isr("probe", 0)
    leader = c.wait_for_leader("probe", 0)
    killed_at = time.monotonic()
    c.kill(leader)
    new = c.wait_for_leader("probe", 0, not_node=leader, timeout=25)
    took = time.monotonic() - killed_at
    assert new != leader and took < 25, f"replaced after {took:.1f} s"
    history = History()
    sends = produce_records(c.bootstrap, "probe", history, 5)
    assert all(s.status == OK for s in sends), sends
