"""Leadership goes back to preferred replicas: by itself on the controller's timer once a
returning node is in sync again, and on request through ElectLeaders (confluent-kafka's
`elect_leaders`, what `kafka-leader-election.sh` sends) — never to a node that is down."""

import time

from confluent_kafka import ElectionType, KafkaError, KafkaException, TopicPartition
from confluent_kafka.admin import AdminClient

from conftest import wait_until

from .harness import CLIENT_DEFAULTS, cluster  # noqa: F401  (fixture)
from .checker import History
from .workload import produce_records


def preferred(c, topic, partitions):
    """Each partition's preferred replica: the first of its replicas (wait_until retries when
    another node than the one asked answers, which the harness refuses)."""
    return wait_until(lambda: {p: c.partition(topic, p).replicas[0] for p in range(partitions)},
                      10, f"the replicas of {topic}")


def in_sync_topic(c, topic, partitions=3):
    """Creates `topic` on all three nodes, waits until every replica is in sync; returns each
    partition's preferred replica."""
    c.create_topic(topic, partitions, replication_factor=3)
    for p in range(partitions):
        c.wait_for_isr(topic, p)
    return preferred(c, topic, partitions)


def code(error):
    """The Kafka error code of an elect_leaders result (None: elected)."""
    if error is None:
        return None
    return (error.args[0] if isinstance(error, KafkaException) else error).code()


def leaders(c, topic, partitions):
    return {p: c.leader_of(topic, p) for p in range(partitions)}


def kill_and_return(c, node, topic, partitions):
    """SIGKILLs `node`, waits for its partitions to move, restarts it and waits until it is back
    in every ISR."""
    c.kill(node)
    for p in range(partitions):
        c.wait_for_leader(topic, p, not_node=node)
    c.restart(node)
    for p in range(partitions):
        c.wait_for_isr(topic, p)


def test_leadership_returns_to_preferred_replicas_by_itself(cluster):
    c = cluster(3, extra=("--leader-balance-interval-ms", "2000"))
    topic = "lb-auto"
    want = in_sync_topic(c, topic)
    assert sorted(want.values()) == [1, 2, 3], want
    history = History()
    produce_records(c.bootstrap, topic, history, 60)
    victim = want[0]
    kill_and_return(c, victim, topic, 3)
    wait_until(lambda: leaders(c, topic, 3) == want, 20,
               f"leaders to return to the preferred replicas {want}")
    produce_records(c.bootstrap, topic, history, 60)
    assert all(s.status == "ok" for s in history.sends), [s for s in history.sends if s.status != "ok"][:3]


def test_elect_leaders_moves_leadership_to_the_preferred_replica(cluster):
    c = cluster(3, extra=("--leader-balance-interval-ms", "0"))
    topic = "lb-elect"
    want = in_sync_topic(c, topic)
    victim = want[0]
    kill_and_return(c, victim, topic, 3)
    time.sleep(2)
    assert c.leader_of(topic, 0) != victim, "the timer is off: nothing moves by itself"

    admin = AdminClient({"bootstrap.servers": c.bootstrap, **CLIENT_DEFAULTS})
    result = admin.elect_leaders(ElectionType.PREFERRED, [TopicPartition(topic, 0)]).result(30)
    assert [code(e) for e in result.values()] == [None], result
    wait_until(lambda: c.leader_of(topic, 0) == victim, 10, "the preferred replica to lead")

    # Asked again: nothing to do. An unknown partition is named as such.
    result = admin.elect_leaders(ElectionType.PREFERRED,
                                 [TopicPartition(topic, 0), TopicPartition(topic, 99)]).result(30)
    codes = {tp.partition: code(e) for tp, e in result.items()}
    assert codes == {0: KafkaError.ELECTION_NOT_NEEDED, 99: KafkaError.UNKNOWN_TOPIC_OR_PART}, codes

    # Every partition: those still away from their preferred replica move back.
    admin.elect_leaders(ElectionType.PREFERRED, None).result(30)
    wait_until(lambda: leaders(c, topic, 3) == want, 10, f"every leader to be preferred {want}")

    # A preferred replica that is down is not elected.
    other = want[1]
    c.kill(other)
    c.wait_for_leader(topic, 1, not_node=other)
    result = admin.elect_leaders(ElectionType.PREFERRED, [TopicPartition(topic, 1)]).result(30)
    assert code(result[TopicPartition(topic, 1)]) == KafkaError.PREFERRED_LEADER_NOT_AVAILABLE, result

    # An unclean election is made only for a partition without a leader.
    result = admin.elect_leaders(ElectionType.UNCLEAN, [TopicPartition(topic, 2)]).result(30)
    assert code(result[TopicPartition(topic, 2)]) == KafkaError.ELECTION_NOT_NEEDED, result


def test_a_restarted_node_answers_no_client_before_its_metadata_is_current(cluster):
    """A node that led a partition is SIGKILLed; the partition fails over; the node restarts.
    Its own metadata log still names it leader until the metadata leader's newer entries
    arrive, so it answers Kafka clients only once it has caught up (clients wait in the listen
    backlog meanwhile): its very first Metadata answer names the new leader."""
    c = cluster(3)
    topic = "restart-view"
    c.create_topic(topic, 1, replication_factor=3)
    for round in range(3):
        old = c.wait_for_leader(topic, 0)
        c.kill(old)
        new = c.wait_for_leader(topic, 0, not_node=old, timeout=20)
        c.nodes[old].start(wait=False)

        def first_answer():
            try:
                return c.partition(topic, 0, via=old) or None
            except Exception:  # not listening yet, or answered by another node: ask again
                return None
        seen = wait_until(first_answer, 30, f"node {old}'s first Metadata answer after its restart")
        assert seen.leader != old, (f"round {round}: restarted node {old} named itself leader "
                                    f"(the leader is {new}): stale metadata")
        c.nodes[old].wait_ready()
        c.wait_for_isr(topic, 0, timeout=30)
