"""The `sluice` CLI's own connections over SASL_SSL: --security-protocol, --tls-ca-file,
--sasl-mechanism, --sasl-username and SLUICE_SASL_PASSWORD (never a flag)."""

import os
import subprocess

from conftest import SLUICE
from security.conftest import create_user, tls_flags
from security.test_sasl import PASSWORD


def cli(b, tls_files, *args, password=PASSWORD, mechanism="SCRAM-SHA-512", stdin=None):
    env = {**os.environ, "SLUICE_SASL_PASSWORD": password}
    return subprocess.run([str(SLUICE), *args, "-b", b.address("SASL_SSL"),
                           "--security-protocol", "SASL_SSL", "--tls-ca-file", str(tls_files["ca"]),
                           "--sasl-mechanism", mechanism, "--sasl-username", "alice"],
                          input=stdin, capture_output=True, text=True, timeout=60, env=env)


def test_the_cli_works_over_sasl_ssl(start_secure, tls_files):
    b = start_secure(("PLAINTEXT", "SASL_SSL"), extra=tls_flags(tls_files))
    create_user(b, "alice", PASSWORD)
    for mechanism in ("SCRAM-SHA-512", "SCRAM-SHA-256", "PLAIN"):
        r = cli(b, tls_files, "topic", "create", "cli-" + mechanism.lower(), "-p", "2",
                mechanism=mechanism)
        assert r.returncode == 0, r.stderr
    r = cli(b, tls_files, "produce", "-t", "cli-scram-sha-512", stdin="one\ntwo\n")
    assert r.returncode == 0, r.stderr
    r = cli(b, tls_files, "consume", "-t", "cli-scram-sha-512", "-e")
    assert r.returncode == 0 and sorted(r.stdout.split()) == ["one", "two"], r.stdout + r.stderr
    r = cli(b, tls_files, "user", "list")
    assert r.returncode == 0 and "alice" in r.stdout, r.stderr
    # A wrong password: an error naming the failed login, not a hang.
    r = cli(b, tls_files, "topic", "list", password="wrong")
    assert r.returncode != 0 and "SASL" in r.stderr and "AUTHENTICATION" in r.stderr.upper(), r.stderr
    # TLS without the authority: refused with a message.
    r = subprocess.run([str(SLUICE), "topic", "list", "-b", b.address("SASL_SSL"),
                        "--security-protocol", "SASL_SSL", "--sasl-username", "alice"],
                       capture_output=True, text=True, timeout=60,
                       env={**os.environ, "SLUICE_SASL_PASSWORD": PASSWORD})
    assert r.returncode != 0 and "--tls-ca-file" in r.stderr, r.stderr
