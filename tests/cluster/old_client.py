"""A producer or a group consumer written with an old client (confluent-kafka 2.0.2, i.e.
librdkafka 2.0.2, or kafka-python 2.0.2), run by test_old_clients.py in that client's venv
(tests/compat/python/setup). It writes one JSON line per delivery report or record to OUT.

    old_client.py confluent|kafka-python produce BOOTSTRAP TOPIC OUT COUNT RATE
    old_client.py confluent|kafka-python consume BOOTSTRAP TOPIC OUT GROUP SECONDS
    old_client.py confluent transform BOOTSTRAP SOURCE OUT GROUP SECONDS SINK TXN_ID TOTAL

A producer sends "<prefix>-<n>" (key = value) at RATE per second, then waits for every report
(at most 60 s); it says "first record acknowledged" on stderr once one is. A consumer reads from the earliest offset for SECONDS, committing automatically. A transform
copies SOURCE to SINK exactly once (consume-transform-produce: read_committed, the input offsets
in each transaction) until its group has committed TOTAL input records or SECONDS passed,
writing a line per commit or error; on an error it starts again with new clients (the new
producer of the same transactional id fences the old one), as an application recovers.
"""

import json
import sys
import time

client, mode, bootstrap, topic, out = sys.argv[1:6]
prefix = "ck" if client == "confluent" else "kp"


def paced(count, rate):
    """Yields 0..count-1, each at its due time."""
    start = time.monotonic()
    for i in range(count):
        wait = start + i / rate - time.monotonic()
        if wait > 0:
            time.sleep(wait)
        yield i


def confluent_produce(f, count, rate):
    from confluent_kafka import Producer
    p = Producer({"bootstrap.servers": bootstrap, "acks": "all", "enable.idempotence": True,
                  "linger.ms": 5, "request.timeout.ms": 5000, "message.timeout.ms": 30000,
                  "reconnect.backoff.max.ms": 1000})

    def report(err, msg):
        if err is None and not acked:
            acked.append(msg)
            print("first record acknowledged", file=sys.stderr, flush=True)
        f.write(json.dumps({"v": msg.value().decode(), "err": str(err) if err else None,
                            "p": msg.partition(), "o": msg.offset()}) + "\n")

    acked = []

    for i in paced(count, rate):
        p.produce(topic, key=f"{prefix}-{i}", value=f"{prefix}-{i}", on_delivery=report)
        p.poll(0)
    if p.flush(60):
        print("records without a report after 60 s", file=sys.stderr)


def confluent_consume(f, group, seconds):
    from confluent_kafka import Consumer
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "auto.offset.reset": "earliest",
                  "auto.commit.interval.ms": 500, "reconnect.backoff.max.ms": 1000,
                  "session.timeout.ms": 10000})
    c.subscribe([topic])
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        m = c.poll(0.5)
        if m is None:
            continue
        if m.error():
            f.write(json.dumps({"error": str(m.error())}) + "\n")
        else:
            f.write(json.dumps({"v": m.value().decode(), "p": m.partition(), "o": m.offset()}) + "\n")
    c.close()


def kafka_python_produce(f, count, rate):
    # kafka-python 2.0.2 has no idempotent producer: a retried batch may be stored twice.
    from kafka import KafkaProducer
    p = KafkaProducer(bootstrap_servers=bootstrap, acks="all", retries=10, linger_ms=5,
                      max_in_flight_requests_per_connection=1, request_timeout_ms=5000,
                      reconnect_backoff_max_ms=1000, retry_backoff_ms=200)
    sent = []
    for i in paced(count, rate):
        sent.append((f"{prefix}-{i}", p.send(topic, key=f"{prefix}-{i}".encode(), value=f"{prefix}-{i}".encode())))
        if i == 0:
            sent[0][1].get(timeout=30)
            print("first record acknowledged", file=sys.stderr, flush=True)
    p.flush(60)
    for value, future in sent:
        try:
            md = future.get(timeout=30)
            f.write(json.dumps({"v": value, "err": None, "p": md.partition, "o": md.offset}) + "\n")
        except Exception as e:  # the client's own words, for the test to show
            f.write(json.dumps({"v": value, "err": repr(e)}) + "\n")
    p.close(10)


def kafka_python_consume(f, group, seconds):
    from kafka import KafkaConsumer
    c = KafkaConsumer(topic, bootstrap_servers=bootstrap, group_id=group, auto_offset_reset="earliest",
                      auto_commit_interval_ms=500, reconnect_backoff_max_ms=1000,
                      session_timeout_ms=10000)
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        for records in c.poll(timeout_ms=500).values():
            for m in records:
                f.write(json.dumps({"v": m.value.decode(), "p": m.partition, "o": m.offset}) + "\n")
    c.close()


def confluent_transform(f, group, seconds, sink, txn_id, total):
    # test_transactions.Processor's loop, written again here: this runs in the old client's
    # venv, which has neither pytest nor the suite's modules to import it from.
    from confluent_kafka import Consumer, KafkaException, Producer
    end = time.monotonic() + seconds
    consumer = producer = None
    commits = 0
    while time.monotonic() < end:
        try:
            if consumer is None:
                consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group,
                                     "isolation.level": "read_committed", "enable.auto.commit": False,
                                     "auto.offset.reset": "earliest", "session.timeout.ms": 6000,
                                     "reconnect.backoff.max.ms": 1000})
                consumer.subscribe([topic])
                producer = Producer({"bootstrap.servers": bootstrap, "transactional.id": txn_id,
                                     "acks": "all", "linger.ms": 5, "transaction.timeout.ms": 10000,
                                     "message.timeout.ms": 10000, "reconnect.backoff.max.ms": 1000})
                producer.init_transactions(30)
            msgs = [m for m in consumer.consume(20, 0.5) if m.error() is None]
            if not msgs:
                assignment = consumer.assignment()
                done = sum(max(tp.offset, 0) for tp in consumer.committed(assignment, timeout=10))
                if assignment and done >= total:
                    f.write(json.dumps({"done": done, "commits": commits}) + "\n")
                    return
                continue
            producer.begin_transaction()
            for m in msgs:
                producer.produce(sink, key=m.key(), value=m.value())
            producer.send_offsets_to_transaction(consumer.position(consumer.assignment()),
                                                 consumer.consumer_group_metadata(), 30)
            producer.commit_transaction(30)
            commits += 1
            f.write(json.dumps({"commit": commits}) + "\n")
            f.flush()
        except KafkaException as e:
            f.write(json.dumps({"error": str(e.args[0])}) + "\n")
            f.flush()
            if consumer is not None:
                try:
                    consumer.close()
                except KafkaException:
                    pass
            consumer = producer = None
            time.sleep(0.2)


with open(out, "w", buffering=1) as f:  # line by line: the test reads as it goes
    run = {("confluent", "produce"): confluent_produce, ("confluent", "consume"): confluent_consume,
           ("kafka-python", "produce"): kafka_python_produce,
           ("kafka-python", "consume"): kafka_python_consume,
           ("confluent", "transform"): confluent_transform}[(client, mode)]
    if mode == "produce":
        run(f, int(sys.argv[6]), float(sys.argv[7]))
    elif mode == "transform":
        run(f, sys.argv[6], float(sys.argv[7]), sys.argv[8], sys.argv[9], int(sys.argv[10]))
    else:
        run(f, sys.argv[6], float(sys.argv[7]))
