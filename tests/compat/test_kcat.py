"""Client compatibility matrix: Debian's kcat (Debian 12: kcat 1.7.1 on librdkafka 2.0.2),
installed by `tests/compat/kcat/setup` with apt, against one broker.

kcat has no admin commands beyond `-L` metadata: topics are made with the `sluice` CLI (not a
check), and creating, deleting and describing groups or topics are not kcat's checks. The
idempotent producer is librdkafka's `-X enable.idempotence=true`; transactions are as kcat
expresses them (`-X transactional.id=`: one transaction per run, committed at the end of the
input, aborted on SIGINT). Extras: produce_compressed (each codec really compressed, and read
back) and list_offsets_by_time (`-Q`, ListOffsets with timestamps).
"""

import os
import sys

import pytest

from conftest import SLUICE, Broker
from compat import harness

KCAT = harness.COMPAT / "kcat"
DEADLINE = 120
CHECKS = (
    "admin_describe_topic",
    "produce",
    "produce_idempotent",
    "produce_compressed",
    "consume_from_beginning",
    "consume_from_end",
    "list_offsets_by_time",
    "group_commit_and_resume",
    "transactions",
)


@pytest.fixture(scope="module")
def kcat_run(tmp_path_factory):
    harness.setup("kcat")
    b = Broker(tmp_path_factory.mktemp("compat-kcat"), name="compat-kcat",
               env=harness.BROKER_ENV)
    b.start()
    try:
        env = {**os.environ, "COMPAT_DEADLINE": str(DEADLINE), "PYTHONDONTWRITEBYTECODE": "1"}
        yield harness.run_client([sys.executable, "kcat_checks.py", b.bootstrap, str(SLUICE)],
                                 timeout=DEADLINE + 30, env=env, cwd=KCAT)
    finally:
        b.kill()


@pytest.mark.parametrize("check", CHECKS)
def test_kcat(kcat_run, check):
    harness.assert_check(kcat_run, check)
