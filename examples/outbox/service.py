#!/usr/bin/env python3
"""One instance of the example account service (schema.sql).

Each transaction creates or changes one account and, in the SAME database transaction, writes
the account's event into the outbox table: `created` (version 1) or `changed` (version n), with
the account as of the event in the payload. Either both the account and its event are
committed or neither is; `sluice outbox` publishes the committed events and nothing else.

Several instances may run at once on the same accounts: the upsert takes the account's row
lock, so concurrent changes of one account serialize and its versions are its commit order.

Some transactions are rolled back on purpose (--rollback): their events must never appear.

The loop is bounded: it stops after --count committed transactions or --duration seconds,
whichever comes first, and prints a JSON summary on stdout. The exit status is 1 if a
transaction failed for good (an error that is not a lost connection, a deadlock or a
serialization failure) or the database stayed unreachable.

    python service.py --dsn postgres://postgres@127.0.0.1:5432/example --instance a \\
        --entities 20 --count 300 --rate 50
"""

import argparse
import json
import random
import sys
import time
import uuid

import psycopg
from psycopg import errors
from psycopg.types.json import Jsonb

# Creates the account at version 1, or bumps the version of an existing one. ON CONFLICT DO
# UPDATE locks the row: a concurrent transaction changing the same account waits for this one
# to end and then sees its version (READ COMMITTED re-reads the locked row), so two
# transactions never produce the same version.
UPSERT_ACCOUNT = """
INSERT INTO accounts AS a (id, version, balance, updated_at)
VALUES (%(id)s, 1, %(delta)s, now())
ON CONFLICT (id) DO UPDATE
    SET version = a.version + 1, balance = a.balance + EXCLUDED.balance, updated_at = now()
RETURNING version, balance
"""

INSERT_EVENT = """
INSERT INTO outbox (id, aggregatetype, aggregateid, type, payload)
VALUES (%(event_id)s, 'account', %(id)s, %(type)s, %(payload)s)
"""

# Worth running again: nothing of the transaction was committed.
RETRYABLE = (errors.SerializationFailure, errors.DeadlockDetected, errors.LockNotAvailable)


def log(instance, message):
    print(f"[service {instance}] {message}", file=sys.stderr, flush=True)


class Service:
    def __init__(self, args):
        self.args = args
        self.rng = random.Random(args.seed)
        self.conn = None
        self.stats = {"instance": args.instance, "committed": 0, "created": 0, "changed": 0,
                      "rolled_back": 0, "retries": 0, "reconnects": 0,
                      "commits_in_doubt": 0, "failed": 0}

    def connect(self, deadline):
        """A connection, retried while the deadline allows; None if the database stays away."""
        while True:
            try:
                self.conn = psycopg.connect(self.args.dsn, connect_timeout=5)
                return self.conn
            except psycopg.OperationalError as e:
                if time.monotonic() + 0.5 > deadline:
                    log(self.args.instance, f"cannot connect to the database: {e}")
                    return None
                time.sleep(0.5)

    def write(self, account, delta, roll_back):
        """One transaction: the account and its event. Returns the event's version, or None if
        it was rolled back on purpose. Raises psycopg errors."""
        event_id = uuid.uuid4()
        with self.conn.cursor() as cur:
            version, balance = cur.execute(UPSERT_ACCOUNT,
                                           {"id": account, "delta": delta}).fetchone()
            event_type = "created" if version == 1 else "changed"
            payload = {"event_id": str(event_id), "account": account, "version": version,
                       "balance": balance, "delta": delta, "instance": self.args.instance}
            cur.execute(INSERT_EVENT, {"event_id": event_id, "id": account, "type": event_type,
                                       "payload": Jsonb(payload)})
        if roll_back:
            self.conn.rollback()
            return None, None, None
        try:
            self.conn.commit()
        except psycopg.OperationalError:
            if not self.conn.broken:
                raise
            # The connection went away during COMMIT: the transaction may or may not have
            # committed. The event id says which: it is in the table if and only if it did.
            raise CommitInDoubt(event_id, event_type)
        return version, event_type, event_id

    def reconnect(self, deadline):
        try:
            self.conn.close()
        except psycopg.Error:
            pass
        self.stats["reconnects"] += 1
        return self.connect(deadline)

    def committed(self, event_id):
        """Whether the event (so its transaction) is in the table; None if that is unknown."""
        try:
            found = self.conn.execute("SELECT 1 FROM outbox WHERE id = %s",
                                      (event_id,)).fetchone() is not None
            self.conn.rollback()
            return found
        except psycopg.Error as e:
            log(self.args.instance, f"cannot look up event {event_id}: {e}")
            return None

    def run(self):
        args = self.args
        start = time.monotonic()
        deadline = start + args.duration
        interval = 1.0 / args.rate if args.rate > 0 else 0.0
        next_at = start
        attempts = 0
        max_attempts = args.count * 10 + 100  # rollbacks and retries included
        stopped = "count"
        pending = None
        if self.connect(deadline) is None:
            self.stats["failed"] += 1
            return self.finish(start, "no database")
        while self.stats["committed"] < args.count:
            if time.monotonic() >= deadline:
                stopped = "duration"
                break
            if attempts >= max_attempts:
                stopped = "attempts"
                break
            attempts += 1
            if interval:
                next_at += interval
                pause = next_at - time.monotonic()
                if pause > 0:
                    time.sleep(min(pause, max(0.0, deadline - time.monotonic())))
            if pending is None:  # a new change; else the one that did not get through
                pending = (f"acct-{self.rng.randrange(args.entities)}",
                           self.rng.randint(-100, 100), self.rng.random() < args.rollback)
            account, delta, roll_back = pending
            try:
                version, event_type, _ = self.write(account, delta, roll_back)
            except RETRYABLE as e:
                # A deadlock or serialization failure: nothing was committed; run it again.
                self.stats["retries"] += 1
                log(args.instance, f"{account}: {type(e).__name__}, running it again")
                self.conn.rollback()
                continue
            except CommitInDoubt as e:
                self.stats["commits_in_doubt"] += 1
                log(args.instance, f"{account}: connection lost during COMMIT of event "
                                   f"{e.event_id}; looking it up")
                if self.reconnect(deadline) is None:
                    self.stats["failed"] += 1
                    return self.finish(start, "no database")
                found = self.committed(e.event_id)
                if found is None:
                    self.stats["failed"] += 1  # in doubt for good: counted as a failure
                    pending = None
                elif found:
                    self.count_commit(e.event_type)
                    pending = None
                continue
            except psycopg.Error as e:
                if self.conn.broken:
                    # Lost before COMMIT: nothing was committed; run it again.
                    log(args.instance, f"{account}: connection lost ({e}); reconnecting")
                    if self.reconnect(deadline) is None:
                        self.stats["failed"] += 1
                        return self.finish(start, "no database")
                    continue
                self.stats["failed"] += 1
                log(args.instance, f"{account}: transaction failed: {type(e).__name__}: {e}")
                self.conn.rollback()
                pending = None
                continue
            pending = None
            if version is None:
                self.stats["rolled_back"] += 1
            else:
                self.count_commit(event_type)
        return self.finish(start, stopped)

    def count_commit(self, event_type):
        self.stats["committed"] += 1
        self.stats[event_type] += 1

    def finish(self, start, stopped):
        if self.conn is not None:
            self.conn.close()
        self.stats["stopped"] = stopped
        self.stats["seconds"] = round(time.monotonic() - start, 3)
        return self.stats


class CommitInDoubt(Exception):
    def __init__(self, event_id, event_type):
        super().__init__(f"COMMIT of event {event_id} in doubt")
        self.event_id, self.event_type = event_id, event_type


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--dsn", required=True, help="postgres://USER@HOST:PORT/DB (schema.sql applied)")
    p.add_argument("--instance", default="1", help="this instance's name (in each event)")
    p.add_argument("--entities", type=int, default=20,
                   help="accounts acct-0 .. acct-N-1 shared by all instances (default 20)")
    p.add_argument("--count", type=int, default=300,
                   help="stop after this many committed transactions (default 300)")
    p.add_argument("--duration", type=float, default=60,
                   help="stop after this many seconds at the latest (default 60)")
    p.add_argument("--rate", type=float, default=0,
                   help="transactions a second at most, 0 for as fast as it goes (default 0)")
    p.add_argument("--rollback", type=float, default=0.0,
                   help="the fraction of transactions rolled back on purpose (default 0)")
    p.add_argument("--seed", type=int, default=None, help="seed of the account and amount choice")
    args = p.parse_args(argv)
    if args.entities < 1 or args.count < 0 or args.duration <= 0 or not 0 <= args.rollback < 1:
        p.error("--entities must be >= 1, --count >= 0, --duration > 0, 0 <= --rollback < 1")
    stats = Service(args).run()
    print(json.dumps(stats), flush=True)
    return 1 if stats["failed"] else 0


if __name__ == "__main__":
    sys.exit(main())
