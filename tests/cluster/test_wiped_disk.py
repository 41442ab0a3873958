"""A node that comes back with an empty data directory (a wiped or replaced disk) holds none of
its replicas' records, whatever the ISR says. It registers with its directory's new id, and the
controller takes it out of every ISR at once: it never leads from an empty log. Without this,
a partition whose last in-sync replica was that node got it back as leader, with an empty log
as the partition's history (the other replica, following it, truncates to match).

A partition left with nobody in sync stays offline until an operator asks for an unclean
election (`kafka-leader-election.sh --election-type unclean`, librdkafka's `elect_leaders`),
which elects the live replica holding the most of the log."""

import shutil
import subprocess
import time

import pytest
from confluent_kafka import Consumer, ElectionType, KafkaError, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from conftest import SLUICE, wait_until

from .harness import CLIENT_DEFAULTS

pytestmark = pytest.mark.timeout(240)

TOPIC = "wiped"


def produce(bootstrap, prefix, n):
    p = Producer({**CLIENT_DEFAULTS, "bootstrap.servers": bootstrap, "acks": "all",
                  "enable.idempotence": True, "message.timeout.ms": 30000})
    for i in range(n):
        p.produce(TOPIC, value=f"{prefix}-{i}".encode(), partition=0)
    assert p.flush(40) == 0, "records left unacknowledged"


def read_all(bootstrap, expected, timeout=30):
    c = Consumer({**CLIENT_DEFAULTS, "bootstrap.servers": bootstrap, "group.id": "wiped-reader",
                  "enable.auto.commit": False, "auto.offset.reset": "earliest"})
    c.assign([TopicPartition(TOPIC, 0, 0)])
    values = []
    deadline = time.monotonic() + timeout
    try:
        while len(values) < expected and time.monotonic() < deadline:
            m = c.poll(0.5)
            if m is not None and m.error() is None:
                values.append(m.value().decode())
        # Anything past what was expected would show as well.
        m = c.poll(1.0)
        if m is not None and m.error() is None:
            values.append(m.value().decode())
    finally:
        c.close()
    return values


def grown_from_node_1(cluster):
    """A cluster started as node 1 alone (`--cluster` naming only it), grown to three voters:
    2 and 3 join as learners and are made voters (AddRaftVoter)."""
    c = cluster(1)
    c.add_node(2)
    c.add_node(3)
    for node in (2, 3):
        r = subprocess.run([str(SLUICE), "cluster", "-b", c.bootstrap, "add-voter", str(node)],
                           capture_output=True, text=True, timeout=60)
        assert r.returncode == 0, r.stdout + r.stderr
    wait_until(lambda: c.metadata_leader(via=3) in (1, 2, 3), 20, "a metadata leader")
    return c


def elect_unclean(bootstrap):
    admin = AdminClient({**CLIENT_DEFAULTS, "bootstrap.servers": bootstrap})
    future = admin.elect_leaders(ElectionType.UNCLEAN, [TopicPartition(TOPIC, 0)])
    return future.result(30)


def test_a_wiped_node_never_leads_from_its_empty_log_and_an_unclean_election_picks_the_longest_copy(cluster):
    # Five voters, so that the metadata keeps a majority with the topic's two replicas down.
    c = cluster(5)
    c.create_topic(TOPIC, 1, replication_factor=2, config={"min.insync.replicas": "1"})
    p = c.partition(TOPIC, 0)
    a = c.wait_for_leader(TOPIC, 0)
    (b,) = [r for r in p.replicas if r != a]

    produce(c.bootstrap, "both", 20)          # on a and b
    c.kill(b)
    c.wait_for_isr(TOPIC, 0, nodes=[a], without=[b])
    produce(c.bootstrap, "only-a", 10)        # acknowledged by a alone (min.insync.replicas=1)
    c.kill(a)
    wait_until(lambda: c.leader_of(TOPIC, 0) is None and (c.partition(TOPIC, 0).isrs == [a]),
               20, f"{TOPIC}/0 offline with {a} its last in-sync replica")
    c.restart(b)                              # out of sync: it may not lead
    assert c.leader_of(TOPIC, 0) is None

    # a comes back with an empty disk. Before the guard it led at once (it was the last in
    # sync), and b then truncated its 20 records away to follow its empty log.
    c.wipe(a)
    deadline = time.monotonic() + 3
    while time.monotonic() < deadline:
        leader = c.leader_of(TOPIC, 0)
        assert leader is None, f"node {leader} leads {TOPIC}/0 after node {a}'s disk was wiped"
        time.sleep(0.1)
    seen = c.partition(TOPIC, 0)
    assert list(seen.isrs) == [], f"ISR {seen.isrs}: the wiped node {a} is still in sync"

    # An unclean election by the operator: b holds 20 records, the wiped a none: b leads.
    result = elect_unclean(c.bootstrap)
    assert result[TopicPartition(TOPIC, 0)] is None, result
    assert c.wait_for_leader(TOPIC, 0) == b
    values = read_all(c.bootstrap, 20)
    assert values == [f"both-{i}" for i in range(20)], values

    # Asked again, it is not needed; the partition takes writes, and a refills.
    again = elect_unclean(c.bootstrap)[TopicPartition(TOPIC, 0)]
    assert again is not None and again.code() == KafkaError.ELECTION_NOT_NEEDED, again
    produce(c.bootstrap, "after", 5)
    c.wait_for_isr(TOPIC, 0, nodes=[a, b])
    assert read_all(c.bootstrap, 25)[20:] == [f"after-{i}" for i in range(5)]



def committed_topic_only_on_x_and_y(c, x=1, y=2, z=3):
    """Creates topic "late" while z is stalled, so only x and y have it in their metadata log;
    then y and x are SIGKILLed and z left stalled (the caller resumes it)."""
    c.pause(z)
    # x passes CreateTopics on to the metadata leader: it must not be the stalled z.
    wait_until(lambda: c.metadata_leader(via=x) in (x, y), 20, "a metadata leader other than z")
    admin = AdminClient({**CLIENT_DEFAULTS, "bootstrap.servers": c.nodes[x].bootstrap})
    admin.create_topics([NewTopic("late", num_partitions=1, replication_factor=1)])["late"].result(30)
    wait_until(lambda: "late" in c.metadata("late", via=x).topics
               and c.metadata("late", via=x).topics["late"].error is None, 20, "late in x's metadata")
    c.kill(y)
    c.kill(x)


def assert_late_survives(c):
    c.wait_ready(c.ids, timeout=60)
    for i in c.ids:
        topics = c.metadata(via=i).topics
        assert "late" in topics, f"node {i} lists {sorted(topics)}: the committed topic was lost"


def test_a_wiped_metadata_voter_does_not_vote_a_committed_topic_away(cluster):
    """A topic is created while node z is stalled, so only x and y have it in their metadata
    log. y and x go down, x's disk is wiped, z wakes up and x comes back empty. Before the
    guard, x voted for z at once (any log is at least as long as an empty one) and z led the
    metadata from a log without the topic: when y returned it followed z and the committed
    topic was gone. Now x refuses to vote until a leader has refilled it, so nobody leads
    until y is back, and the topic survives."""
    c = cluster(3)
    x, y, z = c.ids
    try:
        committed_topic_only_on_x_and_y(c)
    finally:
        c.resume(z)
    shutil.rmtree(c.nodes[x].data_dir, ignore_errors=True)
    c.nodes[x].start(wait=False)
    # Time enough for several elections (each a few hundred ms) between x and z.
    time.sleep(6)
    c.nodes[y].start(wait=False)
    assert_late_survives(c)


def test_a_wiped_metadata_voter_that_reaches_nobody_at_its_start_waits_before_voting(cluster):
    """As above, but x comes back wiped while z is still stalled and y down: nobody answers its
    probe. It used to bootstrap then, as a new group's voter does, and vote for z as soon as z
    woke up. Now it refuses every vote until another voter answers; z's answer shows the group
    exists, so x waits for a leader elected without it (z and y, once y is back)."""
    c = cluster(3)
    x, y, z = c.ids
    try:
        committed_topic_only_on_x_and_y(c)
        shutil.rmtree(c.nodes[x].data_dir, ignore_errors=True)
        c.nodes[x].start(wait=False)
        time.sleep(3)           # x's probe: y refuses connections, z does not answer
    finally:
        c.resume(z)
    time.sleep(6)               # elections between x and z
    c.nodes[y].start(wait=False)
    assert_late_survives(c)


def test_a_voter_added_at_run_time_comes_back_wiped_and_does_not_vote_a_topic_away(cluster):
    """Node 1 grows into three voters (2 and 3 join as learners, then AddRaftVoter): their
    `--cluster` names node 1 only, so a wiped node 2 does not know it is a voter, but the
    group's membership says it is. The topic is created while 3 is stalled (only 1 and 2 log
    it), 2 and 1 go down, 2 comes back wiped, 3 wakes, 1 returns 6 s later: every node must
    still list the topic. The empty node 2 must not vote 3 (whose log lacks it) in."""
    c = grown_from_node_1(cluster)
    x, y, z = 2, 1, 3
    try:
        committed_topic_only_on_x_and_y(c, x, y, z)
        shutil.rmtree(c.nodes[x].data_dir, ignore_errors=True)
        c.nodes[x].start(wait=False)
        time.sleep(3)           # node 1 (its only --cluster voter) is down, 3 does not answer
    finally:
        c.resume(z)
    time.sleep(6)               # elections between 2 and 3
    c.nodes[y].start(wait=False)
    assert_late_survives(c)


def test_a_voter_that_started_before_the_others_votes_once_it_holds_its_leaders_entries(cluster):
    """Seen in CI (test_quorum.py, 2026-11-27): node 1 started before the others listened, so
    nobody answered its probe and it could not tell a new group from one it had been wiped out
    of; it held its votes until it could ask a leader how far the group had applied. The first
    leader died before node 1 asked it (its question waited for a 500 ms timer): node 1 then
    refused every vote, and the two nodes left never elected anyone (20 s, and about 30 terms later,
    still none). A node that saw its leader's election (and refused to vote in it) and has
    applied an entry of that leader's term holds every entry the group committed, so it votes
    again from then on, whatever happens to that leader.

    This run kills the leader once node 1 has applied a topic created in its term; the old code
    failed only when the kill came before node 1's next timer, so not in every run."""
    c = cluster(3, start=False)
    first, *others = c.ids
    c.nodes[first].start(wait=False)
    time.sleep(1.0)             # its probe: nobody listens yet
    for i in others:
        c.nodes[i].start(wait=False)
    c.wait_ready(c.ids)         # registered: a topic can be placed
    leader = wait_until(lambda: c.metadata_leader(via=first), 30, f"node {first} to know a leader")
    if leader == first:
        pytest.skip("node 1 answered the others' probes as empty and was elected: not the case")
    admin = AdminClient({**CLIENT_DEFAULTS, "bootstrap.servers": c.nodes[leader].bootstrap})
    for f in admin.create_topics([NewTopic("made-in-the-first-term", 1, 1)]).values():
        f.result(timeout=30)
    wait_until(lambda: "made-in-the-first-term" in c.metadata(via=first).topics, 30,
               f"node {first} to apply the topic")
    c.kill(leader)
    (other,) = [i for i in others if i != leader]
    new = wait_until(lambda: c.metadata_leader(via=other) not in (None, leader)
                     and c.metadata_leader(via=other), 20, "a new metadata leader")
    assert new in (first, other)
    # The group works: a topic made now is listed by both.
    admin = AdminClient({**CLIENT_DEFAULTS, "bootstrap.servers": c.nodes[new].bootstrap})
    for f in admin.create_topics([NewTopic("made-after", 1, 1)]).values():
        f.result(timeout=30)
    for i in (first, other):
        wait_until(lambda: "made-after" in c.metadata(via=i).topics, 30, f"node {i} to list made-after")


def test_a_node_stopped_while_its_vote_guard_held_is_guarded_again_until_refilled(cluster):
    """A wiped node's vote guard used to live in memory only: stopped part of the way through its
    refill, it came back with a store that was no longer empty and voted (and stood) at once,
    with a log that could lack what the group had committed with its lost acknowledgements. A
    guarded node now keeps a marker file (`cluster/vote-guard`) until its guard lifts. Here the
    marker is left in a stopped follower's directory, as a stop mid-refill would leave it: the
    node must start guarded, then lift the guard once a leader has refilled it, remove the
    marker, and serve the cluster's metadata."""
    c = cluster(3)
    c.create_topic("kept", 1, replication_factor=3)
    leader = wait_until(c.metadata_leader, 30, "a metadata leader")
    node = next(i for i in c.ids if i != leader)
    c.nodes[node].kill()
    marker = c.nodes[node].data_dir / "cluster" / "vote-guard"
    assert marker.parent.is_dir(), f"no metadata directory at {marker.parent}"
    marker.touch()
    c.nodes[node].start(wait=False)
    c.wait_ready([node])
    wait_until(lambda: not marker.exists(), 30, "the guard to lift and its marker to go")
    log = c.nodes[node].log()
    assert "stopped while its vote guard held" in log, "the marker was not read at start"
    assert "refilled up to what the group's leader had applied" in log or \
        "elected without it: voting again" in log, "the guard was not lifted by a refill"
    assert "kept" in c.metadata(via=node).topics


@pytest.mark.parametrize("was", ["leader", "follower"])
def test_a_wiped_node_whose_cluster_names_only_itself_rejoins_the_group_it_grew(cluster, was):
    """Node 1 started alone (`--cluster` naming only itself) and grew into three voters; wiped
    and restarted with the same settings it has nobody to ask whether a group exists. It used
    to start a new group at once, in term 1 with itself as leader like the old group's first
    term, so that group's next leader took node 1's own entries for the group's (same log ids)
    and node 1's metadata could diverge. Now it waits a few seconds to be called on: as the old
    metadata leader it gets the others' vote requests (they elect a successor); as a follower
    (leadership moved by restarting it first), their leader's appends. Either shows the group
    exists: node 1 neither starts a group nor votes until it holds the group's log again."""
    c = grown_from_node_1(cluster)
    # Node 1 is told that its --cluster lists none of the group's other voters; 2 and 3, whose
    # --cluster names node 1, a voter, are not.
    unlisted = "the metadata group's other voters are not in this node's --cluster"
    wait_until(lambda: unlisted in c.nodes[1].log(), 20, "node 1's warning about its --cluster")
    assert unlisted not in c.nodes[2].log() + c.nodes[3].log()
    c.create_topic(TOPIC, 1, replication_factor=3)
    produce(c.bootstrap, "before", 100)
    if was == "follower":
        c.kill(1)
        wait_until(lambda: c.metadata_leader(via=2) in (2, 3), 20, "a metadata leader without node 1")
        c.restart(1)
        wait_until(lambda: c.metadata_leader(via=1) in (2, 3), 20, "node 1 following")

    c.wipe(1, wait=False)
    c.wait_ready([1], timeout=60)

    def agreed():
        views = [c.metadata(via=i) for i in c.ids]
        leaders = {c.metadata_leader(via=i) for i in c.ids}
        same = all(sorted(v.brokers) == [1, 2, 3] and TOPIC in v.topics for v in views)
        return same and len(leaders) == 1 and leaders <= {1, 2, 3} and leaders
    wait_until(agreed, 30, "every node with the group's metadata and one metadata leader")
    after = c.nodes[1].log()  # this start's own log file
    assert "names only itself and its metadata store is empty" in after, after[-3000:]
    assert "no other node called on this one" not in after, after[-3000:]
    # A group of its own would have begun with node 1's candidacy in term 1.
    assert "T1-N1:uncommitted" not in after, f"node 1 started a group of its own: {after[-3000:]}"
    # Held: as a follower it hears the leader's append (seen by the guard's task, or by the
    # bootstrap openraft refuses when the append came first); as the old leader, the others'
    # candidacies, or its log already holding the term of the leader they elected without it,
    # whichever its guard sees first.
    # An election during the restart (slow heartbeats on a busy machine) can do either case's.
    held = ["a metadata leader reached this node", "a leader reached this node first",
            "another node asked this one for its vote",
            "applied an entry of the term of a leader elected without it"]
    wait_until(lambda: any(h in c.nodes[1].log() for h in held), 20, "node 1's vote guard holding")
    # Lifted once the log is refilled; logged by the guard's own task, which may come a moment
    # after the node answers metadata (the CI run that read the log at once found it missing).
    wait_until(lambda: "voting again" in c.nodes[1].log(), 20, "node 1's vote guard lifted")

    produce(c.bootstrap, "after", 50)
    got = read_all(c.nodes[1].bootstrap, 150)
    assert sorted(got) == sorted([f"before-{i}" for i in range(100)] + [f"after-{i}" for i in range(50)])
