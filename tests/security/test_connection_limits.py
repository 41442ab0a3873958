"""Connection limits per client address and the connection creation rate (Kafka's
max.connections.per.ip, max.connections.per.ip.overrides, max.connection.creation.rate), seen
from real sockets and a real client (confluent-kafka)."""

import socket
import struct
import time

import pytest
from confluent_kafka.admin import AdminClient

from conftest import Broker
from security.conftest import metric


def api_versions(sock, correlation_id=1):
    """Sends ApiVersions v0 and returns the response's correlation id (raises if the broker
    closed the connection)."""
    client_id = b"limits-test"
    body = struct.pack(">hhih", 18, 0, correlation_id, len(client_id)) + client_id
    sock.sendall(struct.pack(">i", len(body)) + body)
    size = sock.recv(4, socket.MSG_WAITALL)
    if len(size) < 4:
        raise ConnectionError("closed by the broker")
    (n,) = struct.unpack(">i", size)
    data = b""
    while len(data) < n:
        chunk = sock.recv(n - len(data))
        if not chunk:
            raise ConnectionError("closed mid-response")
        data += chunk
    return struct.unpack(">i", data[:4])[0]


def connect(broker, source="127.0.0.1"):
    sock = socket.create_connection((broker.host, broker.port), timeout=5,
                                    source_address=(source, 0))
    return sock


def closed_by_broker(sock, timeout=5):
    """Whether the broker closes the connection without answering a request."""
    sock.settimeout(timeout)
    try:
        api_versions(sock)
        return False
    except (ConnectionError, OSError):
        return True


@pytest.fixture
def limited(tmp_path):
    b = Broker(tmp_path / "data", extra=[
        "--max-connections-per-ip", "3",
        "--max-connections-per-ip-overrides", "127.0.0.3:0,127.0.0.4:5",
    ])
    b.start()
    yield b
    b.stop()


def test_an_address_over_its_limit_is_refused_and_others_are_not(limited):
    held = [connect(limited) for _ in range(3)]
    for i, s in enumerate(held):
        assert api_versions(s, i + 1) == i + 1
    fourth = connect(limited)
    assert closed_by_broker(fourth), "the 4th connection from 127.0.0.1 must be closed"
    # Another address has its own count; an override raises or removes the allowance.
    other = connect(limited, "127.0.0.2")
    assert api_versions(other) == 1
    assert closed_by_broker(connect(limited, "127.0.0.3")), "override 0 refuses the address"
    raised = [connect(limited, "127.0.0.4") for _ in range(5)]
    assert all(api_versions(s) == 1 for s in raised)
    assert closed_by_broker(connect(limited, "127.0.0.4"))
    # Closing one frees its place.
    held.pop().close()
    deadline = time.time() + 10
    while True:
        s = connect(limited)
        if not closed_by_broker(s):
            break
        assert time.time() < deadline, "a closed connection's place was not freed"
        time.sleep(0.1)
    assert metric(limited, "sluice_connections_refused_total",
                  '{reason="max_connections_per_ip"}') >= 3
    for s in held + raised + [other]:
        s.close()
    assert "too many connections from this address" in limited.log()


def test_a_real_client_works_within_the_limit(limited):
    admin = AdminClient({"bootstrap.servers": limited.bootstrap})
    md = admin.list_topics(timeout=10)
    assert md.brokers, "the client reached the broker"


def test_creation_rate_spreads_connections_out(tmp_path):
    b = Broker(tmp_path / "data", extra=["--max-connection-creation-rate", "5"])
    b.start()
    try:
        start = time.monotonic()
        socks = []
        for i in range(15):
            s = connect(b)
            assert api_versions(s, i + 1) == i + 1, "paced connections are served, not refused"
            socks.append(s)
        elapsed = time.monotonic() - start
        # 5 at once (a second's worth), then one per 200 ms: at least ~2 s for 15.
        assert elapsed >= 1.8, f"15 connections at 5/s took only {elapsed:.2f} s"
        for s in socks:
            s.close()
    finally:
        b.stop()


@pytest.mark.parametrize("flags, message", [
    (["--max-connections-per-ip", "0"], "max_connections_per_ip must be at least 1"),
    (["--max-connections-per-ip-overrides", "nope"], "is not IP:COUNT"),
    (["--max-connection-creation-rate", "0"], "max_connection_creation_rate must be"),
])
def test_bad_settings_stop_serve_with_a_message(tmp_path, flags, message):
    b = Broker(tmp_path / "data", extra=flags)
    b.start(wait=False)
    assert b.proc.wait(timeout=30) != 0
    assert message in b.log()
