"""The client compatibility matrix's common shape.

Each client of the matrix is a small program in its own folder (`tests/compat/<client>/`),
installed by that folder's `setup` script from its package registry (cached, idempotent), and
run once against a fresh broker. The program prints one line per check:

    CHECK <name> ok
    CHECK <name> FAIL <reason>

and exits. `run_client` runs it and returns {name: None | reason}; each test module turns
the checks into one pytest test each (`check_names` + `assert_check`), so a red entry of the
matrix names the check and the client's own words for what went wrong.
"""

import re
import subprocess
import time

from conftest import ROOT, setup_lock

COMPAT = ROOT / "tests" / "compat"
CHECK_LINE = re.compile(r"^CHECK (\S+) (ok|FAIL)(?: (.*))?$")

# The checks every client runs where it can express them (docs/compatibility.md).
STANDARD_CHECKS = (
    "admin_create_topic",
    "admin_describe_topic",
    "produce",
    "produce_idempotent",
    "consume_from_beginning",
    "consume_from_end",
    "group_commit_and_resume",
    "admin_describe_group",
    "transactions",
    "admin_delete_topic",
)


# The matrix's brokers start every group's first rebalance at once (Kafka's own integration
# tests do the same): each group a client program makes otherwise waits the default 3 s
# (`group.initial.rebalance.delay.ms`) for more members, which took most of the matrix's time
# (the Node.js programs: 72 s with the delay, 15 s without). The group tests (tests/groups)
# keep a delay of 500 ms.
BROKER_ENV = {"SLUICE_GROUP_INITIAL_REBALANCE_DELAY_MS": "0"}


def setup(client, timeout=900):
    """Runs `tests/compat/<client>/setup` (installs the client; a no-op once installed)."""
    script = COMPAT / client / "setup"
    started = time.monotonic()
    with setup_lock():
        r = subprocess.run([str(script)], capture_output=True, text=True, timeout=timeout)
    if r.returncode != 0:
        raise AssertionError(f"{script} failed ({r.returncode}):\n{r.stdout}\n{r.stderr}")
    return time.monotonic() - started


def run_client(argv, timeout=240, env=None, cwd=None):
    """Runs a client program; returns (checks, output). Checks not printed are absent."""
    try:
        r = subprocess.run(argv, capture_output=True, text=True, timeout=timeout, env=env, cwd=cwd)
        output, code = r.stdout + r.stderr, r.returncode
    except subprocess.TimeoutExpired as e:
        output = (e.stdout or b"").decode(errors="replace") if isinstance(e.stdout, bytes) else (e.stdout or "")
        output += f"\n(timed out after {timeout}s)"
        code = None
    checks = {}
    for line in output.splitlines():
        m = CHECK_LINE.match(line.strip())
        if m:
            checks[m.group(1)] = None if m.group(2) == "ok" else (m.group(3) or "failed")
    return checks, output, code


def assert_check(result, name):
    """Fails with the client's reason (or its output when the check never ran)."""
    checks, output, code = result
    if name not in checks:
        raise AssertionError(f"check {name} did not run (exit {code}); output tail:\n{output[-4000:]}")
    reason = checks[name]
    assert reason is None, f"{name}: {reason}"
