"""A group consumer in its own process (so that a test can SIGKILL it).

    python consumer_proc.py BOOTSTRAP GROUP TOPIC OUT_PREFIX [--client confluent|kafka-python]
        [--strategy range|cooperative-sticky] [--instance ID] [--session-ms N] [--max-poll-ms N]
        [--protocol classic|consumer]   (consumer: KIP-848, confluent only; the broker assigns)

Appends every record it gets to OUT_PREFIX.records as "partition offset value" lines (flushed
before committing), commits after each batch, and rewrites OUT_PREFIX.assignment with its
current partitions and OUT_PREFIX.events with assign/revoke callbacks.
"""

import argparse
import json
import os
import signal
import sys
import time


def write_json(path, data):
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        json.dump(data, f)
    os.replace(tmp, path)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("bootstrap")
    ap.add_argument("group")
    ap.add_argument("topic")
    ap.add_argument("out")
    ap.add_argument("--client", default="confluent")
    ap.add_argument("--strategy", default="range")
    ap.add_argument("--instance")
    ap.add_argument("--session-ms", type=int, default=6000)
    # The rebalance timeout (max.poll.interval.ms); librdkafka wants it >= the session timeout.
    ap.add_argument("--max-poll-ms", type=int)
    ap.add_argument("--protocol", default="classic")
    args = ap.parse_args()
    stop = {"now": False}
    signal.signal(signal.SIGTERM, lambda *_: stop.update(now=True))
    records = open(args.out + ".records", "a", buffering=1)
    events = []
    assignment = set()

    def note(kind, partitions):
        events.append([kind, sorted(partitions), time.time()])
        write_json(args.out + ".events", events)
        write_json(args.out + ".assignment", sorted(assignment))

    if args.client == "confluent":
        from confluent_kafka import Consumer
        conf = {"bootstrap.servers": args.bootstrap, "group.id": args.group, "enable.auto.commit": False,
                "auto.offset.reset": "earliest"}
        if args.protocol == "consumer":
            # KIP-848: timeouts and the assignor are the broker's.
            conf["group.protocol"] = "consumer"
        else:
            conf.update({"session.timeout.ms": args.session_ms, "heartbeat.interval.ms": 500,
                         "partition.assignment.strategy": args.strategy})
            if args.max_poll_ms:
                conf["max.poll.interval.ms"] = args.max_poll_ms
        if args.instance:
            conf["group.instance.id"] = args.instance
        c = Consumer(conf)

        def on_assign(consumer, partitions):
            assignment.update(p.partition for p in partitions)
            note("assign", [p.partition for p in partitions])

        def on_revoke(consumer, partitions):
            assignment.difference_update(p.partition for p in partitions)
            note("revoke", [p.partition for p in partitions])

        c.subscribe([args.topic], on_assign=on_assign, on_revoke=on_revoke)
        note("start", [])
        while not stop["now"]:
            msgs = c.consume(num_messages=500, timeout=0.2)
            got = [m for m in msgs if not m.error()]
            for m in got:
                records.write(f"{m.partition()} {m.offset()} {m.value().decode()}\n")
            if got:
                records.flush()
                os.fsync(records.fileno())
                c.commit(asynchronous=False)
        c.close()
    else:
        from kafka import KafkaConsumer
        from kafka.consumer.subscription_state import ConsumerRebalanceListener

        class Listener(ConsumerRebalanceListener):
            def on_partitions_assigned(self, partitions):
                assignment.update(p.partition for p in partitions)
                note("assign", [p.partition for p in partitions])

            def on_partitions_revoked(self, partitions):
                assignment.difference_update(p.partition for p in partitions)
                note("revoke", [p.partition for p in partitions])

        opts = {}
        if args.instance:
            opts["group_instance_id"] = args.instance
        if args.max_poll_ms:
            opts["max_poll_interval_ms"] = args.max_poll_ms
        c = KafkaConsumer(bootstrap_servers=args.bootstrap, group_id=args.group, enable_auto_commit=False,
                          auto_offset_reset="earliest", session_timeout_ms=args.session_ms, heartbeat_interval_ms=500,
                          **opts)
        c.subscribe([args.topic], listener=Listener())
        note("start", [])
        while not stop["now"]:
            batches = c.poll(timeout_ms=200, max_records=500)
            got = [m for batch in batches.values() for m in batch]
            for m in got:
                records.write(f"{m.partition} {m.offset} {m.value.decode()}\n")
            if got:
                records.flush()
                os.fsync(records.fileno())
                c.commit()
        c.close()
    records.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
