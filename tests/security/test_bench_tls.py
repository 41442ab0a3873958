"""`sluice bench` over secured listeners: its blocking load connections speak TLS and log in
with SASL (--security-protocol, --tls-ca-file, --sasl-*), so latency and throughput can be
measured over SASL_SSL and SSL, and under the authorizer."""

import json
import os
import re
import subprocess

from conftest import SLUICE
from security.conftest import create_user, metric, tls_flags
from security.test_sasl import PASSWORD


def bench(b, tls_files, listener, *args, password=PASSWORD, timeout=120):
    flags = ["--brokers", b.address(listener), "--security-protocol", listener]
    if "SSL" in listener:
        flags += ["--tls-ca-file", str(tls_files["ca"])]
    if listener.startswith("SASL"):
        flags += ["--sasl-username", "alice"]
    env = {**os.environ, "SLUICE_SASL_PASSWORD": password}
    return subprocess.run([str(SLUICE), "bench", *args, *flags], capture_output=True, text=True,
                          timeout=timeout, env=env)


def records(stdout):
    m = re.search(r": (\d+) records in", stdout)
    assert m, stdout
    return int(m.group(1))


def test_bench_e2e_produce_and_consume_over_sasl_ssl_and_ssl(start_secure, tls_files, tmp_path):
    b = start_secure(("PLAINTEXT", "SASL_SSL", "SSL"), extra=tls_flags(tls_files))
    create_user(b, "alice", PASSWORD)
    logins = metric(b, "sluice_sasl_authentications_total", '{outcome="success"}')

    # End to end over SASL_SSL: every record sent arrives once.
    report = tmp_path / "e2e.json"
    r = bench(b, tls_files, "SASL_SSL", "e2e", "--topic", "tls-e2e", "--rate", "2000",
              "--duration", "3", "--warmup", "0.5", "--acks", "all", "--no-floor", "--quiet",
              "--json", str(report))
    assert r.returncode == 0, r.stdout + r.stderr
    run = json.loads(report.read_text())["series"][0]["runs"][0]
    assert run["sent"] >= 5000 and run["acked"] == run["sent"], run
    assert run["received"] == run["sent"] and run["lost"] == 0 and run["duplicated"] == 0, run
    # The load connections logged in (producer, consumer, metadata): not some other path.
    assert metric(b, "sluice_sasl_authentications_total", '{outcome="success"}') >= logins + 2

    # Closed-loop produce of 1 KiB records in 1 MB batches (requests far larger than one TLS
    # record), then read back to the end over SSL (fetch answers as large).
    r = bench(b, tls_files, "SASL_SSL", "produce", "--topic", "tls-max", "--size", "1024",
              "--duration", "2", "--acks", "all")
    assert r.returncode == 0 and "errors" not in r.stdout, r.stdout + r.stderr
    produced = records(r.stdout)
    assert produced > 1000, r.stdout
    r = bench(b, tls_files, "SSL", "consume", "--topic", "tls-max")
    assert r.returncode == 0, r.stdout + r.stderr
    # The produce figure counts acknowledgements up to the clock's stop; what was in flight
    # then (and sent before the producer saw the stop) was acknowledged after it: a few
    # batches of ~900 records.
    assert produced <= records(r.stdout) <= produced + 20_000, r.stdout


def test_bench_refuses_a_wrong_password_and_a_missing_authority(start_secure, tls_files):
    b = start_secure(("PLAINTEXT", "SASL_SSL"), extra=tls_flags(tls_files))
    create_user(b, "alice", PASSWORD)
    r = bench(b, tls_files, "SASL_SSL", "produce", "--topic", "tls-bad", "--duration", "1",
              password="not-the-password", timeout=60)
    assert r.returncode != 0 and "SASL" in r.stderr, r.stdout + r.stderr
    r = subprocess.run([str(SLUICE), "bench", "produce", "--brokers", b.address("SASL_SSL"),
                        "--security-protocol", "SASL_SSL", "--sasl-username", "alice",
                        "--duration", "1"], capture_output=True, text=True, timeout=60,
                       env={**os.environ, "SLUICE_SASL_PASSWORD": PASSWORD})
    assert r.returncode != 0 and "--tls-ca-file" in r.stderr, r.stderr
    # compare starts its own brokers in the clear and says so.
    r = subprocess.run([str(SLUICE), "bench", "compare", "--dry-run", "--security-protocol",
                        "SSL", "--tls-ca-file", str(tls_files["ca"])],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode != 0 and "tls_compare.py" in r.stderr, r.stderr
    # The broker is still serving.
    r = bench(b, tls_files, "SASL_SSL", "produce", "--topic", "tls-ok", "--duration", "1")
    assert r.returncode == 0, r.stdout + r.stderr
