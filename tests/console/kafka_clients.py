"""Real Kafka clients for the console's browser test, run by ui.mjs between browser steps:

    python kafka_clients.py produce BOOTSTRAP TOPIC COUNT
        COUNT records with key order-<i> and JSON value {"order": i, "amount": i * 10}
        (confluent-kafka, acks=all).
    python kafka_clients.py consume BOOTSTRAP TOPIC GROUP COUNT
        Reads exactly COUNT records in group GROUP (kafka-python), commits, prints the group's
        lag as kafka-python sees it ("lag=N"), leaves the group.
    python kafka_clients.py earliest BOOTSTRAP TOPIC PARTITION
        Prints the partition's earliest offset as ListOffsets answers it (kafka-python).
"""

import json
import sys
import time


def produce(bootstrap, topic, count):
    from confluent_kafka import Producer

    p = Producer({"bootstrap.servers": bootstrap, "acks": "all"})
    failed = []
    for i in range(count):
        p.produce(topic, key=f"order-{i}".encode(), value=json.dumps({"order": i, "amount": i * 10}).encode(),
                  headers=[("source", b"console-test")], on_delivery=lambda e, m: e and failed.append(e))
    left = p.flush(30)
    if left or failed:
        sys.exit(f"produce: {left} undelivered, errors {failed[:3]}")


def consume(bootstrap, topic, group, count):
    from kafka import KafkaConsumer, OffsetAndMetadata, TopicPartition

    c = KafkaConsumer(topic, bootstrap_servers=bootstrap, group_id=group, auto_offset_reset="earliest",
                      enable_auto_commit=False, max_poll_records=count)
    got = 0
    deadline = time.time() + 60
    try:
        while got < count and time.time() < deadline:
            batches = c.poll(timeout_ms=500, max_records=count - got)
            for tp, records in batches.items():
                got += len(records)
                # Commit exactly what was read, per partition.
                c.commit({TopicPartition(tp.topic, tp.partition): OffsetAndMetadata(records[-1].offset + 1, "", -1)})
        if got != count:
            sys.exit(f"consume: read {got} of {count} records")
        # The group's lag as Kafka tools count it: over the partitions it has committed.
        parts = [TopicPartition(topic, p) for p in c.partitions_for_topic(topic)]
        ends = c.end_offsets(parts)
        lag = 0
        for tp in parts:
            committed = c.committed(tp)
            if committed is not None:
                lag += ends[tp] - committed
        print(f"lag={lag}")
    finally:
        c.close()


def earliest(bootstrap, topic, partition):
    from kafka import KafkaConsumer, TopicPartition

    c = KafkaConsumer(bootstrap_servers=bootstrap)
    try:
        tp = TopicPartition(topic, partition)
        print(f"earliest={c.beginning_offsets([tp])[tp]}")
    finally:
        c.close()


if __name__ == "__main__":
    cmd, args = sys.argv[1], sys.argv[2:]
    if cmd == "produce":
        produce(args[0], args[1], int(args[2]))
    elif cmd == "consume":
        consume(args[0], args[1], args[2], int(args[3]))
    elif cmd == "earliest":
        earliest(args[0], args[1], int(args[2]))
    else:
        sys.exit(f"unknown command {cmd}")
