"""Run inside an old client's venv (tests/compat/python/venv-*): log in with SASL and make a
produce/consume round trip. argv: client address listener mechanism user password topic.
Prints OK or raises."""

import sys
import time

client, address, listener, mechanism, user, password, topic = sys.argv[1:8]
values = [b"old-%d" % i for i in range(5)]
if client == "confluent":
    from confluent_kafka import Consumer, Producer
    conf = {"bootstrap.servers": address, "security.protocol": listener,
            "sasl.mechanism": mechanism, "sasl.username": user, "sasl.password": password}
    p = Producer(conf)
    for v in values:
        p.produce(topic, value=v)
    assert p.flush(30) == 0, "not delivered"
    c = Consumer({**conf, "group.id": "old-" + topic, "auto.offset.reset": "earliest"})
    c.subscribe([topic])
    got, deadline = [], time.monotonic() + 30
    while len(got) < len(values) and time.monotonic() < deadline:
        m = c.poll(0.5)
        if m is not None and m.error() is None:
            got.append(m.value())
    c.close()
else:
    import kafka
    conf = dict(bootstrap_servers=address, security_protocol=listener, sasl_mechanism=mechanism,
                sasl_plain_username=user, sasl_plain_password=password)
    p = kafka.KafkaProducer(**conf)
    for v in values:
        p.send(topic, v).get(timeout=30)
    p.close()
    c = kafka.KafkaConsumer(topic, **conf, group_id="old-" + topic, auto_offset_reset="earliest",
                            consumer_timeout_ms=15_000)
    got = []
    for m in c:
        got.append(m.value)
        if len(got) == len(values):
            break
    c.close()
assert got == values, got
print("OK")
