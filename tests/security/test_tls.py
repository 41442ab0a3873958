"""TLS on the Kafka listeners (SSL, SASL_SSL), client certificates (mTLS) and their
principals, certificate reload without a restart, and the start refused for bad TLS files —
through confluent-kafka (librdkafka, OpenSSL) and kafka-python (Python's ssl module)."""

import datetime
import socket
import ssl
import subprocess
import time

import pytest
import trustme
from confluent_kafka import KafkaError, Producer

from conftest import SLUICE, free_port, wait_until
from security.conftest import create_user, metric, tls_flags
from security.test_sasl import PASSWORD, confluent_roundtrip, kafka_python_roundtrip


API_VERSIONS_V0 = b"\0\0\0\x0e\0\x12\0\0\0\0\0\x01\0\x04test"


def ssl_conf(b, listener, files, **extra):
    return {"bootstrap.servers": b.address(listener), "security.protocol": listener,
            "ssl.ca.location": str(files["ca"]), **extra}


def test_ssl_listener_with_both_clients(start_secure, tls_files):
    b = start_secure(("PLAINTEXT", "SSL"), extra=tls_flags(tls_files))
    confluent_roundtrip(ssl_conf(b, "SSL", tls_files), "tls-confluent")
    conf = dict(bootstrap_servers=b.address("SSL"), security_protocol="SSL",
                ssl_cafile=str(tls_files["ca"]))
    import kafka
    p = kafka.KafkaProducer(**conf)
    p.send("tls-kp", b"hello").get(timeout=30)
    p.close()


@pytest.mark.parametrize("mechanism", ["SCRAM-SHA-256", "PLAIN"])
def test_sasl_ssl_with_both_clients(start_secure, tls_files, mechanism):
    b = start_secure(("PLAINTEXT", "SASL_SSL"), extra=tls_flags(tls_files))
    create_user(b, "alice", PASSWORD)
    confluent_roundtrip(ssl_conf(b, "SASL_SSL", tls_files, **{
        "sasl.mechanism": mechanism, "sasl.username": "alice", "sasl.password": PASSWORD}),
        "sasl-ssl-" + mechanism.lower())
    kafka_python_roundtrip(b, "SASL_SSL", mechanism, "alice", PASSWORD,
                           "sasl-ssl-kp-" + mechanism.lower(), ssl_cafile=str(tls_files["ca"]))


def test_only_tls_12_and_13_are_offered(start_secure, tls_files):
    b = start_secure(("PLAINTEXT", "SSL"), extra=tls_flags(tls_files))
    for version in (ssl.TLSVersion.TLSv1_2, ssl.TLSVersion.TLSv1_3):
        ctx = ssl.create_default_context(cafile=str(tls_files["ca"]))
        ctx.minimum_version = ctx.maximum_version = version
        with socket.create_connection(("127.0.0.1", b.ports["SSL"]), timeout=10) as raw:
            with ctx.wrap_socket(raw, server_hostname="127.0.0.1") as s:
                assert s.version() in ("TLSv1.2", "TLSv1.3")
    # A client that offers only TLS 1.1 (OpenSSL allows it at security level 0): the broker
    # refuses it in the handshake.
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    ctx.load_verify_locations(str(tls_files["ca"]))
    ctx.set_ciphers("DEFAULT:@SECLEVEL=0")
    ctx.minimum_version = ctx.maximum_version = ssl.TLSVersion.TLSv1_1
    before = metric(b, "sluice_tls_handshake_failures_total")
    with socket.create_connection(("127.0.0.1", b.ports["SSL"]), timeout=10) as raw:
        with pytest.raises(ssl.SSLError):
            ctx.wrap_socket(raw, server_hostname="127.0.0.1")
    wait_until(lambda: metric(b, "sluice_tls_handshake_failures_total") > before, 10,
               "the broker to count the refused TLS 1.1 handshake")


def test_required_client_certificates(start_secure, tls_files):
    b = start_secure(("PLAINTEXT", "SSL"), extra=tls_flags(tls_files, client_auth="required") + [
        "--tls-principal-mapping-rules", "RULE:^CN=([^,]*),OU=payments,.*$/$1/U"],
        env={"RUST_LOG": "info,sluice_broker::security=debug"})
    # With a certificate from the trusted authority: served.
    confluent_roundtrip(ssl_conf(b, "SSL", tls_files, **{
        "ssl.certificate.location": str(tls_files["client_cert"]),
        "ssl.key.location": str(tls_files["client_key"])}), "mtls")
    # The subject CN=alice,OU=payments,O=Bank mapped by the rule, upper-cased.
    wait_until(lambda: "principal=User:ALICE" in b.log(), 10, "the mapped principal to be logged")
    # Without one: the handshake fails.
    errors = []
    p = Producer(ssl_conf(b, "SSL", tls_files, error_cb=lambda e: errors.append(e)))
    p.produce("mtls", value=b"x")

    def failed():
        p.poll(0.1)  # librdkafka calls error_cb from poll
        return errors
    wait_until(failed, 20, "a client without a certificate to fail")
    assert p.flush(1) == 1
    # With one from another authority: the broker refuses the handshake and answers nothing.
    other = trustme.CA().issue_cert("mallory@example.com", common_name="mallory")
    cert, key = tls_files["ca"].parent / "mallory.pem", tls_files["ca"].parent / "mallory.key"
    other.private_key_pem.write_to_path(str(key))
    other.cert_chain_pems[0].write_to_path(str(cert))
    ctx = ssl.create_default_context(cafile=str(tls_files["ca"]))
    ctx.load_cert_chain(str(cert), str(key))
    before = metric(b, "sluice_tls_handshake_failures_total")
    received = b""
    with socket.create_connection(("127.0.0.1", b.ports["SSL"]), timeout=10) as raw:
        try:
            with ctx.wrap_socket(raw, server_hostname="127.0.0.1") as s:
                s.sendall(API_VERSIONS_V0)
                while chunk := s.recv(1024):
                    received += chunk
        except (ssl.SSLError, ConnectionResetError):
            pass
    assert received == b"", "a client with an untrusted certificate must get no answer"
    wait_until(lambda: metric(b, "sluice_tls_handshake_failures_total") > before, 10,
               "the refused handshake to be counted")


def peer_subject(b, files):
    ctx = ssl.create_default_context(cafile=str(files["ca"]))
    with socket.create_connection(("127.0.0.1", b.ports["SSL"]), timeout=10) as raw:
        with ctx.wrap_socket(raw, server_hostname="127.0.0.1") as s:
            return s.getpeercert()["serialNumber"]


def test_a_changed_certificate_is_loaded_without_a_restart(start_secure, tls_files, ca):
    b = start_secure(("PLAINTEXT", "SSL"), extra=tls_flags(tls_files, reload_ms=200))
    first = peer_subject(b, tls_files)
    # A bad file does not replace a good certificate: the broker logs it and keeps serving.
    original_key = tls_files["key"].read_bytes()
    tls_files["key"].write_bytes(b"-----BEGIN PRIVATE KEY-----\nbm9wZQ==\n-----END PRIVATE KEY-----\n")
    wait_until(lambda: "cannot be used; the previous certificate stays" in b.log(), 10,
               "the broken key to be noticed")
    assert peer_subject(b, tls_files) == first
    renewed = ca.issue_cert("127.0.0.1", "localhost")
    renewed.private_key_pem.write_to_path(str(tls_files["key"]))
    with open(tls_files["cert"], "wb") as f:
        for blob in renewed.cert_chain_pems:
            f.write(blob.bytes())
    assert tls_files["key"].read_bytes() != original_key
    wait_until(lambda: peer_subject(b, tls_files) != first, 10, "the renewed certificate to be served")
    assert "TLS certificate reloaded" in b.log()
    confluent_roundtrip(ssl_conf(b, "SSL", tls_files), "after-reload", n=3)


def refused_start(tmp_path, *flags, listeners="SSL://127.0.0.1:%d"):
    r = subprocess.run([str(SLUICE), "serve", "--listeners", listeners % free_port(),
                        "--admin-listen", f"127.0.0.1:{free_port()}",
                        "--data-dir", str(tmp_path / "refused"), *flags],
                       capture_output=True, text=True, timeout=30)
    assert r.returncode != 0, "serve must refuse to start"
    return r.stderr


def test_bad_tls_files_stop_the_start_with_a_message(tmp_path, tls_files, ca):
    missing = tmp_path / "missing.key"
    err = refused_start(tmp_path, "--tls-cert-file", str(tls_files["cert"]), "--tls-key-file", str(missing))
    assert "missing.key" in err, err
    other = ca.issue_cert("127.0.0.1")
    wrong_key = tmp_path / "wrong.key"
    other.private_key_pem.write_to_path(str(wrong_key))
    err = refused_start(tmp_path, "--tls-cert-file", str(tls_files["cert"]), "--tls-key-file", str(wrong_key))
    assert "wrong.key" in err, err
    now = datetime.datetime.now(datetime.timezone.utc)
    old = ca.issue_cert("127.0.0.1", not_before=now - datetime.timedelta(days=30),
                        not_after=now - datetime.timedelta(days=1))
    old_cert, old_key = tmp_path / "old.pem", tmp_path / "old.key"
    old.cert_chain_pems[0].write_to_path(str(old_cert))
    old.private_key_pem.write_to_path(str(old_key))
    err = refused_start(tmp_path, "--tls-cert-file", str(old_cert), "--tls-key-file", str(old_key))
    assert "expired" in err and "old.pem" in err, err
    err = refused_start(tmp_path)
    assert "tls_cert_file and tls_key_file" in err, err
    err = refused_start(tmp_path, "--tls-cert-file", str(tls_files["cert"]), listeners="PLAINTEXT://127.0.0.1:%d")
    assert "no listener is SSL" in err, err
    err = refused_start(tmp_path, listeners="HTTPS://127.0.0.1:%d")
    assert "HTTPS" in err and "listener_security_protocol_map" in err, err
    err = refused_start(tmp_path, "--tls-cert-file", str(tls_files["cert"]), "--tls-key-file",
                        str(tls_files["key"]), "--tls-client-auth", "always")
    assert "tls_client_auth" in err, err


def test_the_wrong_protocol_on_a_port_is_refused_and_the_broker_carries_on(start_secure, tls_files):
    """A plaintext Kafka request to a TLS port fails its handshake; a TLS client on a
    PLAINTEXT port sends what is not a Kafka frame and is disconnected. Both are logged; the
    broker serves the next client."""
    b = start_secure(("PLAINTEXT", "SSL"), extra=tls_flags(tls_files))
    with socket.create_connection(("127.0.0.1", b.ports["SSL"]), timeout=10) as s:
        s.sendall(b"\0\0\0\x0e\0\x12\0\0\0\0\0\x01\0\x04test")  # ApiVersions v0, in the clear
        # No Kafka answer: at most a TLS alert, then the connection closes (a timeout fails).
        received = b""
        while chunk := s.recv(1024):
            received += chunk
        assert not received.startswith(b"\0\0\0"), received
    wait_until(lambda: "TLS handshake failed" in b.log(), 10, "the failed handshake to be logged")
    closes = b.log().count("closed connection")
    ctx = ssl.create_default_context(cafile=str(tls_files["ca"]))
    with socket.create_connection(("127.0.0.1", b.ports["PLAINTEXT"]), timeout=10) as raw:
        with pytest.raises((ssl.SSLError, ConnectionResetError)):
            ctx.wrap_socket(raw, server_hostname="127.0.0.1")
    wait_until(lambda: b.log().count("closed connection") > closes, 10,
               "the PLAINTEXT listener to close the TLS client's connection")
    confluent_roundtrip(ssl_conf(b, "SSL", tls_files), "still-serving", n=3)


def test_large_fetches_over_tls_arrive_whole(start_secure, tls_files):
    """16 MiB read back over SSL in large fetch responses: the tail of a response that did
    not fit the socket must not wait inside the TLS session for the next write."""
    from confluent_kafka import Consumer
    b = start_secure(("PLAINTEXT", "SSL"), extra=tls_flags(tls_files))
    conf = ssl_conf(b, "SSL", tls_files)
    p = Producer({**conf, "linger.ms": 20})
    value = b"v" * 8192
    for _ in range(2048):
        while True:
            try:
                p.produce("big-tls", value=value)
                break
            except BufferError:
                p.poll(0.01)
    assert p.flush(60) == 0
    c = Consumer({**conf, "group.id": "big-tls", "auto.offset.reset": "earliest",
                  "fetch.max.bytes": 8 * 1024 * 1024, "max.partition.fetch.bytes": 8 * 1024 * 1024,
                  "socket.timeout.ms": 10000})
    c.subscribe(["big-tls"])
    got, deadline = 0, time.monotonic() + 60
    while got < 2048 and time.monotonic() < deadline:
        m = c.poll(0.5)
        if m is not None and m.error() is None:
            assert len(m.value()) == 8192
            got += 1
    c.close()
    assert got == 2048
