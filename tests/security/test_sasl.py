"""SASL on the Kafka listeners (PLAIN, SCRAM-SHA-256, SCRAM-SHA-512), through clients we did
not write: confluent-kafka (librdkafka) and kafka-python, plus hand-built frames for what no
well-behaved client sends. Users are made with `sluice user create` over a PLAINTEXT listener
on loopback, kept in the data directory, and survive a SIGKILL."""

import re
import socket
import struct
import time
import uuid

import kafka
import pytest
from confluent_kafka import Consumer, KafkaError, Producer

from conftest import sluice_cli, wait_until
from security.conftest import create_user, metric

MECHANISMS = ["SCRAM-SHA-256", "SCRAM-SHA-512", "PLAIN"]
PASSWORD = "correct horse battery staple"


def confluent_conf(b, listener, mechanism, user, password, **extra):
    return {"bootstrap.servers": b.address(listener), "security.protocol": listener,
            "sasl.mechanism": mechanism, "sasl.username": user, "sasl.password": password, **extra}


def wait_auth_error(p, errors, what):
    """Polls producer `p` (librdkafka calls error_cb from poll) until it reports an
    authentication error."""
    def seen():
        p.poll(0.1)
        return any(e.code() == KafkaError._AUTHENTICATION for e in errors)
    wait_until(seen, 20, what)


def confluent_roundtrip(conf, topic, n=20):
    """Produces n records with an idempotent producer and reads them back in a group."""
    failures = []
    p = Producer({**conf, "enable.idempotence": True,
                  "error_cb": lambda e: failures.append(e)})
    sent = [f"v{i}".encode() for i in range(n)]
    delivered = []
    for v in sent:
        p.produce(topic, value=v, on_delivery=lambda err, msg: delivered.append(err))
    assert p.flush(30) == 0, f"not delivered; client errors: {failures}"
    assert delivered == [None] * n, delivered
    c = Consumer({**conf, "group.id": "g-" + topic, "auto.offset.reset": "earliest",
                  "enable.auto.commit": False})
    c.subscribe([topic])
    got = []
    deadline = time.monotonic() + 30
    while len(got) < n and time.monotonic() < deadline:
        m = c.poll(0.5)
        if m is not None and m.error() is None:
            got.append(m.value())
    c.commit(asynchronous=False)
    c.close()
    # Several partitions interleave; each value once.
    assert sorted(got) == sorted(sent)


def kafka_python_roundtrip(b, listener, mechanism, user, password, topic, n=10, **tls):
    conf = dict(bootstrap_servers=b.address(listener), security_protocol=listener,
                sasl_mechanism=mechanism, sasl_plain_username=user, sasl_plain_password=password,
                **tls)
    p = kafka.KafkaProducer(**conf, acks="all")
    sent = [f"p{i}".encode() for i in range(n)]
    for v in sent:
        p.send(topic, v).get(timeout=30)
    p.close()
    c = kafka.KafkaConsumer(topic, **conf, group_id="kp-" + topic, auto_offset_reset="earliest",
                            consumer_timeout_ms=15_000)
    got = []
    for m in c:
        got.append(m.value)
        if len(got) == n:
            break
    c.close()
    assert got == sent


@pytest.fixture
def sasl_broker(start_secure):
    b = start_secure()
    create_user(b, "alice", PASSWORD)
    return b


@pytest.mark.parametrize("mechanism", MECHANISMS)
def test_confluent_kafka_logs_in_with_each_mechanism(sasl_broker, mechanism):
    conf = confluent_conf(sasl_broker, "SASL_PLAINTEXT", mechanism, "alice", PASSWORD)
    confluent_roundtrip(conf, "t-" + mechanism.lower())


@pytest.mark.parametrize("mechanism", MECHANISMS)
def test_kafka_python_logs_in_with_each_mechanism(sasl_broker, mechanism):
    kafka_python_roundtrip(sasl_broker, "SASL_PLAINTEXT", mechanism, "alice", PASSWORD,
                           "kp-" + mechanism.lower())


@pytest.mark.parametrize("mechanism", MECHANISMS)
def test_a_wrong_password_is_refused_logged_and_counted(sasl_broker, mechanism):
    before = metric(sasl_broker, "sluice_sasl_authentications_total", '{outcome="failure"}')
    errors = []
    p = Producer(confluent_conf(sasl_broker, "SASL_PLAINTEXT", mechanism, "alice", "guess-1234",
                                error_cb=lambda e: errors.append(e)))
    p.produce("refused", value=b"x")
    wait_auth_error(p, errors, "librdkafka to report an authentication error")
    assert p.flush(1) == 1, "nothing may be delivered"
    wait_until(lambda: metric(sasl_broker, "sluice_sasl_authentications_total",
                              '{outcome="failure"}') > before, 10, "the failure to be counted")
    log = sasl_broker.log()
    failed = [l for l in log.splitlines() if "SASL authentication failed" in l]
    assert failed, log[-3000:]
    assert mechanism in failed[0] and 'user="alice"' in failed[0], failed[0]
    assert "guess-1234" not in log, "a password must never be logged"
    # The user's real password still works (a failure locks nobody out).
    confluent_roundtrip(confluent_conf(sasl_broker, "SASL_PLAINTEXT", mechanism, "alice", PASSWORD),
                        "after-failure-" + mechanism.lower(), n=3)


def test_kafka_python_gets_an_error_for_an_unknown_user(sasl_broker):
    # kafka-python 3 logs each refused login and retries the bootstrap until
    # bootstrap_timeout_ms (30 s by default), then raises KafkaTimeoutError.
    with pytest.raises(kafka.errors.KafkaError):
        p = kafka.KafkaProducer(bootstrap_servers=sasl_broker.address("SASL_PLAINTEXT"),
                                security_protocol="SASL_PLAINTEXT", sasl_mechanism="SCRAM-SHA-256",
                                sasl_plain_username="mallory", sasl_plain_password="x" * 12,
                                max_block_ms=5_000, bootstrap_timeout_ms=4_000)
        p.send("t", b"x").get(timeout=10)
    assert "SASL authentication failed" in sasl_broker.log()


# --- hand-built frames -------------------------------------------------------------------


def string(s):
    b = s.encode()
    return struct.pack(">h", len(b)) + b


def request(api_key, version, body, correlation_id=1):
    header = struct.pack(">hhi", api_key, version, correlation_id) + string("raw-sasl")
    payload = header + body
    return struct.pack(">i", len(payload)) + payload


def read_frame(sock):
    """The next response frame's body after the correlation id, or None at EOF."""
    head = b""
    while len(head) < 4:
        chunk = sock.recv(4 - len(head))
        if not chunk:
            return None
        head += chunk
    (size,) = struct.unpack(">i", head)
    body = b""
    while len(body) < size:
        chunk = sock.recv(size - len(body))
        if not chunk:
            return None
        body += chunk
    return body[4:]


def connect(b, listener):
    s = socket.create_connection(("127.0.0.1", b.ports[listener]), timeout=10)
    return s


def closed(sock):
    """Whether the broker closed the connection (a silent broker fails by timeout)."""
    try:
        return read_frame(sock) is None
    except ConnectionResetError:
        return True


def handshake(sock, mechanism):
    sock.sendall(request(17, 1, string(mechanism)))
    body = read_frame(sock)
    (error,) = struct.unpack(">h", body[:2])
    (count,) = struct.unpack(">i", body[2:6])
    names, rest = [], body[6:]
    for _ in range(count):
        (n,) = struct.unpack(">h", rest[:2])
        names.append(rest[2:2 + n].decode())
        rest = rest[2 + n:]
    return error, names


def authenticate_v1(sock, token):
    sock.sendall(request(36, 1, struct.pack(">i", len(token)) + token))
    body = read_frame(sock)
    (error,) = struct.unpack(">h", body[:2])
    (n,) = struct.unpack(">h", body[2:4])
    rest = body[4 + max(n, 0):]
    (blen,) = struct.unpack(">i", rest[:4])
    (lifetime,) = struct.unpack(">q", rest[4 + blen:12 + blen])
    return error, lifetime


METADATA_V1_ALL = request(3, 1, struct.pack(">i", -1))


def test_a_request_before_the_login_closes_the_connection(sasl_broker):
    s = connect(sasl_broker, "SASL_PLAINTEXT")
    # ApiVersions is allowed before a login (clients ask it first).
    s.sendall(request(18, 0, b""))
    assert read_frame(s) is not None
    s.sendall(METADATA_V1_ALL)
    assert closed(s), "Metadata before SASL must close the connection"
    wait_until(lambda: "before SASL authentication" in sasl_broker.log(), 10, "the reason to be logged")


def test_an_unknown_mechanism_is_refused_with_the_enabled_list(sasl_broker):
    s = connect(sasl_broker, "SASL_PLAINTEXT")
    error, names = handshake(s, "GSSAPI")
    assert error == 33  # UNSUPPORTED_SASL_MECHANISM
    assert set(names) == set(MECHANISMS)


def test_authenticate_without_a_handshake_is_an_illegal_state(sasl_broker):
    s = connect(sasl_broker, "SASL_PLAINTEXT")
    error, _ = authenticate_v1(s, b"\0alice\0" + PASSWORD.encode())
    assert error == 34  # ILLEGAL_SASL_STATE


def test_a_handshake_on_a_plaintext_listener_is_an_illegal_state(sasl_broker):
    s = connect(sasl_broker, "PLAINTEXT")
    error, _ = handshake(s, "PLAIN")
    assert error == 34


def test_a_failed_login_closes_the_connection_and_repeated_failures_slow_down(sasl_broker):
    took = []
    for i in range(4):
        s = connect(sasl_broker, "SASL_PLAINTEXT")
        assert handshake(s, "PLAIN")[0] == 0
        start = time.monotonic()
        error, _ = authenticate_v1(s, b"\0alice\0wrong-password")
        took.append(time.monotonic() - start)
        assert error == 58  # SASL_AUTHENTICATION_FAILED
        s.sendall(METADATA_V1_ALL)
        assert closed(s), "nothing is served after a failed login"
    # The pause doubles per failure from one address (100, 200, 400, 800 ms): the last
    # answer waits at least the 800 ms the broker adds, whatever the machine's speed.
    assert took[-1] >= 0.75, took


def test_a_v0_handshake_takes_bare_tokens(sasl_broker):
    """KIP-43's first form (kafka-python 2.0.2 uses it): after SaslHandshake v0 the SASL
    tokens travel bare, size-prefixed; a PLAIN success is an empty token, a failure closes
    the connection."""
    s = connect(sasl_broker, "SASL_PLAINTEXT")
    s.sendall(request(17, 0, string("PLAIN")))
    assert struct.unpack(">h", read_frame(s)[:2])[0] == 0
    token = b"alice\0alice\0" + PASSWORD.encode()
    s.sendall(struct.pack(">i", len(token)) + token)
    assert s.recv(4) == b"\0\0\0\0"
    s.sendall(METADATA_V1_ALL)
    assert read_frame(s) is not None, "requests are served after the login"
    s = connect(sasl_broker, "SASL_PLAINTEXT")
    s.sendall(request(17, 0, string("PLAIN")))
    read_frame(s)
    token = b"\0alice\0wrong-password"
    s.sendall(struct.pack(">i", len(token)) + token)
    assert closed(s)


def test_the_session_lifetime_is_announced_and_enforced(start_secure):
    b = start_secure(extra=["--connections-max-reauth-ms", "1500"])
    create_user(b, "alice", PASSWORD)
    s = connect(b, "SASL_PLAINTEXT")
    assert handshake(s, "PLAIN")[0] == 0
    error, lifetime = authenticate_v1(s, b"\0alice\0" + PASSWORD.encode())
    assert (error, lifetime) == (0, 1500)
    s.sendall(METADATA_V1_ALL)
    assert read_frame(s) is not None
    # This client never re-authenticates: once the lifetime has passed, its next request
    # closes the connection.
    deadline = time.monotonic() + 1.6
    while time.monotonic() < deadline:
        time.sleep(0.05)
    s.sendall(METADATA_V1_ALL)
    assert closed(s)
    wait_until(lambda: "session expired" in b.log(), 10, "the reason to be logged")


def test_librdkafka_reauthenticates_on_the_same_connection(start_secure):
    """KIP-368: librdkafka re-authenticates before its session lifetime ends and keeps
    producing on the same connection."""
    b = start_secure(extra=["--connections-max-reauth-ms", "2000"])
    create_user(b, "alice", PASSWORD)
    before = metric(b, "sluice_sasl_authentications_total", '{outcome="success"}')
    conf = confluent_conf(b, "SASL_PLAINTEXT", "SCRAM-SHA-512", "alice", PASSWORD)
    p = Producer({**conf, "enable.idempotence": True})
    errors = []
    deadline = time.monotonic() + 7
    sent = 0
    while time.monotonic() < deadline:
        p.produce("reauth", value=b"%d" % sent, on_delivery=lambda e, m: errors.append(e) if e else None)
        sent += 1
        p.poll(0.05)
    assert p.flush(30) == 0 and not errors, errors
    logins = metric(b, "sluice_sasl_authentications_total", '{outcome="success"}') - before
    # One login per connection at the start, then one re-authentication per ~2 s on each.
    assert logins >= 4, f"{logins} logins in 7 s with a 2 s session lifetime"
    assert "session expired" not in b.log()


# --- users ---------------------------------------------------------------------------------


def test_users_survive_a_sigkill_and_can_be_deleted(sasl_broker):
    create_user(sasl_broker, "bob", "bob-password-1", "SCRAM-SHA-256")
    listed = sluice_cli("user", "list", "-b", sasl_broker.bootstrap).stdout
    assert re.search(r"^alice\tSCRAM-SHA-256 \(8192 iterations\), SCRAM-SHA-512", listed, re.M), listed
    assert re.search(r"^bob\tSCRAM-SHA-256 \(8192 iterations\)$", listed, re.M), listed
    sasl_broker.kill()
    sasl_broker.start()
    conf = confluent_conf(sasl_broker, "SASL_PLAINTEXT", "SCRAM-SHA-256", "bob", "bob-password-1")
    confluent_roundtrip(conf, "after-restart", n=3)
    sluice_cli("user", "delete", "bob", "-b", sasl_broker.bootstrap)
    assert "bob" not in sluice_cli("user", "list", "-b", sasl_broker.bootstrap).stdout
    errors = []
    p = Producer({**conf, "error_cb": lambda e: errors.append(e)})
    p.produce("after-delete", value=b"x")
    wait_auth_error(p, errors, "a deleted user to be refused")


def test_setting_a_new_password_replaces_the_old_one(sasl_broker):
    create_user(sasl_broker, "alice", "a-new-password", "SCRAM-SHA-512")
    confluent_roundtrip(confluent_conf(sasl_broker, "SASL_PLAINTEXT", "SCRAM-SHA-512", "alice",
                                       "a-new-password"), "new-password", n=3)
    errors = []
    p = Producer(confluent_conf(sasl_broker, "SASL_PLAINTEXT", "SCRAM-SHA-512", "alice", PASSWORD,
                                error_cb=lambda e: errors.append(e)))
    p.produce("old-password", value=b"x")
    wait_auth_error(p, errors, "the old password to be refused")
    # SCRAM-SHA-256 still has the old one: credentials are per mechanism, as in Kafka.
    confluent_roundtrip(confluent_conf(sasl_broker, "SASL_PLAINTEXT", "SCRAM-SHA-256", "alice",
                                       PASSWORD), "old-256", n=2)


def test_bad_credential_changes_get_kafkas_errors(sasl_broker):
    from confluent_kafka.admin import (AdminClient, ScramCredentialInfo, ScramMechanism,
                                       UserScramCredentialDeletion, UserScramCredentialUpsertion)
    admin = AdminClient({"bootstrap.servers": sasl_broker.bootstrap})

    def alter(*changes):
        futures = admin.alter_user_scram_credentials(list(changes))
        out = {}
        for user, f in futures.items():
            try:
                f.result(timeout=20)
                out[user] = None
            except Exception as e:
                out[user] = e.args[0].name() if e.args and hasattr(e.args[0], "name") else str(e)
        return out

    weak = ScramCredentialInfo(ScramMechanism.SCRAM_SHA_256, 1000)
    assert alter(UserScramCredentialUpsertion("carol", weak, b"pw-carol-1", b"salt-salt-salt")) == \
        {"carol": "UNACCEPTABLE_CREDENTIAL"}
    assert alter(UserScramCredentialDeletion("nobody", ScramMechanism.SCRAM_SHA_512)) == \
        {"nobody": "RESOURCE_NOT_FOUND"}
    good = ScramCredentialInfo(ScramMechanism.SCRAM_SHA_512, 4096)
    assert alter(UserScramCredentialUpsertion("carol", good, b"pw-carol-1", b"salt-salt-salt")) == \
        {"carol": None}
    described = admin.describe_user_scram_credentials(["carol"])
    info = described["carol"].result(timeout=20)
    assert [(c.mechanism, c.iterations) for c in info.scram_credential_infos] == \
        [(ScramMechanism.SCRAM_SHA_512, 4096)]
    with pytest.raises(Exception) as missing:
        admin.describe_user_scram_credentials(["nobody"])["nobody"].result(timeout=20)
    assert "RESOURCE_NOT_FOUND" in str(missing.value) or "does not exist" in str(missing.value)
    # A credential made by the admin client logs in.
    confluent_roundtrip(confluent_conf(sasl_broker, "SASL_PLAINTEXT", "SCRAM-SHA-512", "carol",
                                       "pw-carol-1"), "carol", n=2)
    # The CLI refuses bad input with a message naming it.
    r = sluice_cli("user", "create", "dave", "-b", sasl_broker.bootstrap, "--iterations", "10",
                   stdin="pw\n", check=False)
    assert r.returncode != 0 and "--iterations" in r.stderr
    r = sluice_cli("user", "create", "dave", "-b", sasl_broker.bootstrap, "--mechanism", "MD5",
                   stdin="pw\n", check=False)
    assert r.returncode != 0 and "MD5" in r.stderr


def test_the_audit_log_records_logins_and_user_changes(start_secure, tmp_path):
    import json
    audit = tmp_path / "audit.log"
    b = start_secure(extra=["--audit-log-file", str(audit)])
    create_user(b, "alice", PASSWORD, "SCRAM-SHA-512")
    confluent_roundtrip(confluent_conf(b, "SASL_PLAINTEXT", "SCRAM-SHA-512", "alice", PASSWORD),
                        "audited", n=2)
    s = connect(b, "SASL_PLAINTEXT")
    assert handshake(s, "PLAIN")[0] == 0
    assert authenticate_v1(s, b"\0alice\0not-the-password")[0] == 58

    def events():
        return [json.loads(line) for line in audit.read_text().splitlines()] if audit.exists() else []

    def seen():
        e = events()
        return (any(x["event"] == "user_change" for x in e)
                and any(x["event"] == "authentication" and x["outcome"] == "success" for x in e)
                and any(x["event"] == "authentication" and x["outcome"] == "failure" for x in e)) and e
    e = wait_until(seen, 10, "the audit events to be written")
    change = next(x for x in e if x["event"] == "user_change")
    assert (change["user"], change["set"], change["outcome"], change["by"]) == \
        ("alice", ["SCRAM-SHA-512"], "success", "User:ANONYMOUS")
    ok = next(x for x in e if x["event"] == "authentication" and x["outcome"] == "success")
    assert (ok["principal"], ok["mechanism"], ok["listener"]) == \
        ("User:alice", "SCRAM-SHA-512", "SASL_PLAINTEXT")
    bad = next(x for x in e if x["event"] == "authentication" and x["outcome"] == "failure")
    assert (bad["principal"], bad["mechanism"]) == ("User:alice", "PLAIN")
    assert "not-the-password" not in audit.read_text()


def test_frames_before_the_login_are_capped_at_512_kib(sasl_broker):
    """Kafka's sasl.server.max.receive.size: an unauthenticated client cannot make the broker
    hold a 100 MB frame."""
    s = connect(sasl_broker, "SASL_PLAINTEXT")
    s.sendall(struct.pack(">i", 600 * 1024) + b"\0" * 1024)
    assert closed(s)
    # After a login, requests are served as usual.
    s = connect(sasl_broker, "SASL_PLAINTEXT")
    assert handshake(s, "PLAIN")[0] == 0
    assert authenticate_v1(s, b"\0alice\0" + PASSWORD.encode())[0] == 0
    s.sendall(METADATA_V1_ALL)
    assert read_frame(s) is not None
