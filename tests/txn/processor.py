"""An exactly-once processor (consume-transform-produce with confluent-kafka transactions):
reads `eos-in` in group `eos` (read_committed), writes `out-<value>` to `eos-out` and commits
its input offsets in the same transaction (send_offsets_to_transaction). Killed and restarted
by test_transactions.py; exits 0 once it has committed the end of every input partition.

    python processor.py BOOTSTRAP [PAUSE_S]

PAUSE_S (default 0) is slept inside each transaction, so that a kill lands mid-stream.
"""

import sys
import time

from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition


def main(bootstrap, pause):
    # Static membership: a restarted instance takes its predecessor's place at once.
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "eos", "auto.offset.reset": "earliest",
                         "enable.auto.commit": False, "isolation.level": "read_committed",
                         "group.instance.id": "eos-processor-1", "session.timeout.ms": 6000})
    producer = Producer({"bootstrap.servers": bootstrap, "transactional.id": "eos-processor",
                         "transaction.timeout.ms": 10000, "linger.ms": 5})
    producer.init_transactions(30)
    consumer.subscribe(["eos-in"])
    idle = 0
    while True:
        msgs = [m for m in consumer.consume(50, 0.5) if m.error() is None]
        if not msgs:
            idle += 1
            if idle >= 6 and done(consumer):
                return 0
            continue
        idle = 0
        producer.begin_transaction()
        for m in msgs:
            producer.produce("eos-out", key=m.key(), value=b"out-" + m.value())
        time.sleep(pause)
        positions = consumer.position(consumer.assignment())
        producer.send_offsets_to_transaction(positions, consumer.consumer_group_metadata(), 30)
        try:
            producer.commit_transaction(30)
        except KafkaException as e:
            if e.args[0].txn_requires_abort():
                producer.abort_transaction(30)
                rewind(consumer)
            else:
                raise


def rewind(consumer):
    committed = consumer.committed(consumer.assignment(), 10)
    for tp in committed:
        consumer.seek(TopicPartition(tp.topic, tp.partition, tp.offset if tp.offset >= 0 else 0))


def done(consumer):
    assignment = consumer.assignment()
    if not assignment:
        return False
    committed = consumer.committed(assignment, 10)
    for tp in committed:
        _, high = consumer.get_watermark_offsets(tp, 10)
        if tp.offset < high:
            return False
    return len(committed) == 3


if __name__ == "__main__":
    sys.exit(main(sys.argv[1], float(sys.argv[2]) if len(sys.argv) > 2 else 0.0))
