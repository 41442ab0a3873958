"""Fixtures for the security tests: a test certificate authority (trustme, from PyPI), a
broker with several listeners (a PLAINTEXT one on loopback for administration, SASL_PLAINTEXT,
SSL and SASL_SSL), and users made with `sluice user create`."""

import os
from pathlib import Path

import pytest
import trustme

from conftest import Broker, free_port, sluice_cli


class SecureBroker(Broker):
    """A broker started with `--listeners` instead of `--listen`. `self.port` stays the
    PLAINTEXT listener (administration, `bootstrap`); `ports` maps listener names to ports."""

    def __init__(self, data_dir, listeners=("PLAINTEXT", "SASL_PLAINTEXT"), extra=(), env=None,
                 name="secure"):
        super().__init__(data_dir, extra, env, name)
        self.ports = {name: (self.port if name == "PLAINTEXT" else free_port()) for name in listeners}

    def address(self, listener):
        return f"{self.host}:{self.ports[listener]}"

    def command(self):
        cmd = super().command()
        i = cmd.index("--listen")
        listeners = ",".join(f"{name}://{self.host}:{port}" for name, port in self.ports.items())
        return cmd[:i] + ["--listeners", listeners] + cmd[i + 2:]


@pytest.fixture(scope="session")
def ca():
    return trustme.CA()


@pytest.fixture
def tls_files(ca, tmp_path):
    """The broker's certificate (for 127.0.0.1 and localhost) and key, the CA's certificate,
    and a client certificate with a distinguished subject, as PEM files."""
    server = ca.issue_cert("127.0.0.1", "localhost")
    files = {
        "cert": tmp_path / "server.pem",
        "key": tmp_path / "server.key",
        "ca": tmp_path / "ca.pem",
        "client_cert": tmp_path / "client.pem",
        "client_key": tmp_path / "client.key",
    }
    server.private_key_pem.write_to_path(str(files["key"]))
    with open(files["cert"], "wb") as f:
        for blob in server.cert_chain_pems:
            f.write(blob.bytes())
    ca.cert_pem.write_to_path(str(files["ca"]))
    client = ca.issue_cert("alice@example.com", common_name="alice",
                           organization_name="Bank", organization_unit_name="payments")
    client.private_key_pem.write_to_path(str(files["client_key"]))
    with open(files["client_cert"], "wb") as f:
        for blob in client.cert_chain_pems:
            f.write(blob.bytes())
    return files


def tls_flags(files, client_auth=None, reload_ms=None):
    flags = ["--tls-cert-file", str(files["cert"]), "--tls-key-file", str(files["key"])]
    if client_auth:
        flags += ["--tls-client-auth", client_auth, "--tls-client-ca-file", str(files["ca"])]
    if reload_ms:
        flags += ["--tls-reload-interval-ms", str(reload_ms)]
    return flags


@pytest.fixture
def start_secure(tmp_path):
    """Factory: start_secure(listeners, extra, env) -> SecureBroker; all killed at teardown."""
    started = []

    def start(listeners=("PLAINTEXT", "SASL_PLAINTEXT"), extra=(), env=None, wait=True):
        b = SecureBroker(tmp_path / f"data{len(started)}", listeners, extra, env)
        started.append(b)
        return b.start(wait=wait)

    yield start
    for b in started:
        b.kill()


def create_user(broker, name, password, *mechanism):
    args = ["user", "create", name, "-b", broker.bootstrap]
    if mechanism:
        args += ["--mechanism", mechanism[0]]
    return sluice_cli(*args, stdin=password + "\n")


def metric(broker, name, labels=""):
    """The value of the sample `name` + `labels` (e.g. '{outcome="failure"}') in /metrics;
    0 when absent."""
    import urllib.request
    with urllib.request.urlopen(broker.admin_request("/metrics"), timeout=5) as r:
        text = r.read().decode()
    for line in text.splitlines():
        key, _, value = line.rpartition(" ")
        if key == name + labels:
            return float(value)
    return 0.0
