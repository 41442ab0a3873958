"""DeleteRecords in a cluster (KIP-107): the answer waits until the in-sync followers have
moved their log start too (Kafka's low watermark), so a failover right after the answer does
not bring the deleted records back; a follower that does not follow within the request's
timeout makes the answer REQUEST_TIMED_OUT (the leader has deleted them; the follower
follows once it fetches again)."""

import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient

from conftest import wait_until

from .harness import CLIENT_DEFAULTS
from .harness import cluster  # noqa: F401  (fixture)

pytestmark = pytest.mark.timeout(150)


def produce(bootstrap, topic, n):
    p = Producer({**CLIENT_DEFAULTS, "bootstrap.servers": bootstrap, "acks": "all",
                  "enable.idempotence": True})
    for i in range(n):
        p.produce(topic, value=f"r-{i}".encode(), partition=0)
    assert p.flush(30) == 0, "records left unacknowledged"


def delete_before(bootstrap, topic, offset, timeout_s):
    """DeleteRecords through librdkafka's admin client; the partition's result or error."""
    admin = AdminClient({**CLIENT_DEFAULTS, "bootstrap.servers": bootstrap})
    futures = admin.delete_records([TopicPartition(topic, 0, offset)],
                                   operation_timeout=timeout_s, request_timeout=timeout_s + 20)
    (future,) = futures.values()
    try:
        return future.result(timeout_s + 30)
    except KafkaException as e:
        return e.args[0]


def log_start(bootstrap, topic):
    c = Consumer({**CLIENT_DEFAULTS, "bootstrap.servers": bootstrap, "group.id": "watermarks"})
    try:
        low, _ = c.get_watermark_offsets(TopicPartition(topic, 0), timeout=10)
        return low
    finally:
        c.close()


def test_deleted_records_stay_deleted_when_the_leader_dies_right_after_the_answer(cluster):
    c = cluster(3)
    topic = "purge"
    c.create_topic(topic, 1, replication_factor=3)
    produce(c.bootstrap, topic, 50)
    leader = c.wait_for_leader(topic, 0)
    c.wait_for_isr(topic, 0)

    result = delete_before(c.bootstrap, topic, 30, timeout_s=10)
    assert not isinstance(result, KafkaError), f"DeleteRecords failed: {result}"
    assert result.low_watermark == 30, result

    c.kill(leader)
    successor = c.wait_for_leader(topic, 0, not_node=leader)
    (starts,) = wait_until(lambda: (s := log_start(c.nodes[successor].bootstrap, topic)) >= 0 and (s,),
                           20, "the successor's log start")
    assert starts == 30, f"node {successor} leads from offset {starts}: deleted records came back"


def test_a_follower_that_does_not_follow_in_time_makes_the_answer_time_out(cluster):
    c = cluster(3)
    topic = "purge-slow"
    c.create_topic(topic, 1, replication_factor=3)
    produce(c.bootstrap, topic, 20)
    leader = c.wait_for_leader(topic, 0)
    c.wait_for_isr(topic, 0)
    follower = next(i for i in c.ids if i != leader)
    # A paused node stays in the ISR until the controller fences it when its session lapses
    # (1 s by default): the request's timeout is shorter, so the follower still counts.
    c.pause(follower)
    try:
        result = delete_before(c.nodes[leader].bootstrap, topic, 10, timeout_s=0.3)
        assert isinstance(result, KafkaError), f"answered {result} though node {follower} is paused"
        assert result.code() == KafkaError.REQUEST_TIMED_OUT, result
    finally:
        c.resume(follower)
    # The leader deleted them anyway; once the follower fetches again, a later request that
    # asks no more than that is answered at once.
    assert log_start(c.nodes[leader].bootstrap, topic) == 10
    result = delete_before(c.nodes[leader].bootstrap, topic, 10, timeout_s=10)
    assert not isinstance(result, KafkaError) and result.low_watermark == 10, result
