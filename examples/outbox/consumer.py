#!/usr/bin/env python3
"""A consumer of the example service's account events that checks what the outbox promises.

It reads the event topic(s) with isolation.level=read_committed and, for each event, reads the
account back from the database with a fresh query. Because the service wrote the account and
its event in one database transaction, and `sluice outbox` publishes an event only after that
transaction committed, the account must be there and at least as new as the event:

  missing       the account is not in the database
  older         the account's version is lower than the event's
  out_of_order  an account's events do not come in strictly increasing versions
  gaps          a version was skipped (an event lost), or the first event of an account is not
                its `created` (version 1): the relay must run before the service writes
  duplicates    an event id came twice
  malformed     the record key, header `id`, header `type` or payload do not agree

It stops after --expect events (then reads for --drain more seconds, to see any extra or
duplicate record) or after --timeout seconds, and prints a JSON summary on stdout. The exit
status is 1 on any violation, or if the number of events is not --expect.

    python consumer.py --brokers 127.0.0.1:9092 \\
        --dsn postgres://postgres@127.0.0.1:5432/example --topics example.account --expect 900
"""

import argparse
import json
import sys
import time
import uuid

import psycopg
from confluent_kafka import Consumer, KafkaException

VIOLATIONS = ("missing", "older", "out_of_order", "gaps", "duplicates", "malformed")


def log(message):
    print(f"[consumer] {message}", file=sys.stderr, flush=True)


class Checker:
    def __init__(self, conn, details=20):
        self.conn = conn
        self.counts = {"events": 0, **{v: 0 for v in VIOLATIONS}, "newer": 0, "current": 0}
        self.last_version = {}   # account -> the last event version seen
        self.seen = set()        # event ids
        self.details = details   # violations written out in full at most

    def violation(self, kind, message):
        self.counts[kind] += 1
        if sum(self.counts[v] for v in VIOLATIONS) <= self.details:
            log(f"{kind}: {message}")

    def on_record(self, msg):
        self.counts["events"] += 1
        where = f"{msg.topic()}[{msg.partition()}]@{msg.offset()}"
        headers = {k: (v or b"").decode() for k, v in (msg.headers() or [])}
        try:
            event = json.loads(msg.value())
            account, version = event["account"], int(event["version"])
            key = msg.key().decode() if msg.key() is not None else None
        except (TypeError, ValueError, KeyError) as e:
            self.violation("malformed", f"{where}: cannot read the event ({e!r}): {msg.value()!r}")
            return
        expected_type = "created" if version == 1 else "changed"
        if (key != account or headers.get("id") != event.get("event_id")
                or headers.get("type") != expected_type):
            self.violation("malformed", f"{where}: key {key!r}, headers {headers}, payload {event}")

        event_id = headers.get("id") or event.get("event_id")
        if event_id in self.seen:
            self.violation("duplicates", f"{where}: event {event_id} ({account} v{version}) again")
            return
        self.seen.add(event_id)

        # The account as the database has it now: a statement of its own (autocommit), so a
        # snapshot taken after the event arrived.
        row = self.conn.execute("SELECT version FROM accounts WHERE id = %s",
                                (account,)).fetchone()
        if row is None:
            self.violation("missing", f"{where}: event {account} v{version}: no such account")
        elif row[0] < version:
            self.violation("older", f"{where}: event {account} v{version}: the database has "
                                    f"v{row[0]}")
        elif row[0] > version:
            self.counts["newer"] += 1      # changed again since: allowed
        else:
            self.counts["current"] += 1

        last = self.last_version.get(account, 0)
        if version <= last:
            self.violation("out_of_order", f"{where}: event {account} v{version} after v{last}")
        else:
            if version != last + 1:
                self.violation("gaps", f"{where}: event {account} v{version} after "
                                       f"{'v%d' % last if last else 'none'}")
            self.last_version[account] = version


def wait_for_topics(consumer, topics, deadline):
    """The topics appear when the relay publishes their first event."""
    while True:
        try:
            present = consumer.list_topics(timeout=2).topics
            missing = [t for t in topics if t not in present or present[t].error is not None]
        except KafkaException as e:
            missing = [f"(no metadata: {e})"]
        if not missing:
            return
        if time.monotonic() >= deadline:
            raise SystemExit(f"[consumer] topics {missing} did not appear: is `sluice outbox` "
                             f"running with the right --topic-prefix?")
        time.sleep(0.2)


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--brokers", required=True, help="Sluice's bootstrap address, HOST:PORT")
    p.add_argument("--dsn", required=True, help="the service's database, postgres://USER@HOST:PORT/DB")
    p.add_argument("--topics", required=True, help="event topics, comma-separated")
    p.add_argument("--expect", type=int, required=True, help="stop after this many events")
    p.add_argument("--timeout", type=float, default=60,
                   help="seconds to wait for the topics and --expect events (default 60)")
    p.add_argument("--drain", type=float, default=2,
                   help="seconds to go on reading after --expect events (default 2)")
    p.add_argument("--group", default=None, help="consumer group (default: a new one, so the "
                                                 "topics are read from their start)")
    args = p.parse_args(argv)
    topics = [t.strip() for t in args.topics.split(",") if t.strip()]

    start = time.monotonic()
    deadline = start + args.timeout
    consumer = Consumer({
        "bootstrap.servers": args.brokers,
        "group.id": args.group or f"example-consumer-{uuid.uuid4()}",
        "isolation.level": "read_committed",   # only events of committed Sluice transactions
        "auto.offset.reset": "earliest",
        "enable.auto.commit": True,
        "enable.partition.eof": False,
    })
    try:
        with psycopg.connect(args.dsn, connect_timeout=5, autocommit=True) as conn:
            checker = Checker(conn)
            wait_for_topics(consumer, topics, deadline)
            consumer.subscribe(topics, on_assign=lambda _, parts: log(
                f"assigned {len(parts)} partitions: "
                f"{', '.join(f'{tp.topic}[{tp.partition}]' for tp in parts)}"))
            drain_until = None
            while True:
                now = time.monotonic()
                if drain_until is None and checker.counts["events"] >= args.expect:
                    drain_until = min(now + args.drain, deadline + args.drain)
                if now >= (drain_until if drain_until is not None else deadline):
                    break
                for msg in consumer.consume(500, 0.2):
                    if msg.error():
                        if msg.error().fatal():
                            raise KafkaException(msg.error())
                        log(f"consumer error: {msg.error()}")
                        continue
                    checker.on_record(msg)
    finally:
        consumer.close()

    summary = {**checker.counts, "expected": args.expect, "accounts": len(checker.last_version),
               "seconds": round(time.monotonic() - start, 3)}
    print(json.dumps(summary), flush=True)
    bad = [v for v in VIOLATIONS if summary[v]]
    if bad or summary["events"] != args.expect:
        log(f"FAILED: {', '.join(f'{v}={summary[v]}' for v in bad) or 'no violation'}; "
            f"{summary['events']} events, {args.expect} expected")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
