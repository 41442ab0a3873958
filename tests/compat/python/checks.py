"""What the Python client programs of the compatibility matrix share (standard library only:
each program runs in its own venv with one Kafka client in it).

A program calls `check(name, fn)` per check; it prints `CHECK <name> ok` or
`CHECK <name> FAIL <reason>` (tests/compat/harness.py reads those lines). A check that needs an
earlier one's result and finds it missing fails with a reason saying so, instead of not
printing at all.
"""

import os
import sys
import threading
import time
import traceback
import uuid

RUN = uuid.uuid4().hex[:8]
_failed = set()
_current = [None]


def watchdog(seconds):
    """After `seconds`, reports the check still running as failed and ends the program (a
    client call that hangs, e.g. on a request the broker never answers, cannot be interrupted
    from within); the checks not yet run are then absent."""
    def fire():
        time.sleep(seconds)
        print(f"CHECK {_current[0] or 'startup'} FAIL still running when the program's "
              f"{seconds}s deadline passed (hung)", flush=True)
        os._exit(3)
    threading.Thread(target=fire, daemon=True).start()


def name(kind, client):
    """A topic or group name unique to this run: compat-<client>-<kind>-<run id>."""
    return f"compat-{client}-{kind}-{RUN}"


def check(label, fn, needs=()):
    """Runs one check; prints its line; returns fn's value (None when it failed)."""
    missing = [n for n in needs if n in _failed]
    if missing:
        _failed.add(label)
        print(f"CHECK {label} FAIL needs {', '.join(missing)}, which failed", flush=True)
        return None
    started = time.monotonic()
    _current[0] = label
    try:
        value = fn()
    except Exception as e:  # the client's own words are the reason
        _failed.add(label)
        reason = f"{type(e).__name__}: {e}".replace("\n", " | ")
        traceback.print_exc(file=sys.stderr)
        print(f"CHECK {label} FAIL {reason}", flush=True)
        return None
    print(f"CHECK {label} ok", flush=True)
    print(f"# {label} took {time.monotonic() - started:.1f}s", file=sys.stderr, flush=True)
    return value


def expect(condition, message):
    if not condition:
        raise AssertionError(message)


class Deadline:
    """`while d.left(): ...` loops until `seconds` pass; `d.fail(what)` raises with context."""

    def __init__(self, seconds):
        self.seconds = seconds
        self.end = time.monotonic() + seconds

    def left(self):
        return max(0.0, self.end - time.monotonic())

    def fail(self, what):
        raise TimeoutError(f"no {what} within {self.seconds}s")


def values(records):
    """The decoded values of (offset, value-bytes) pairs, in order."""
    return [v.decode() if isinstance(v, bytes) else v for _, v in records]
