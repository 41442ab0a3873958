"""The outbox relay publishing to a broker that insists on a login: `sluice outbox
--client-config FILE` (librdkafka's security properties, as Kafka's tools take
`--command-config`) and `[outbox.client]` for the relay inside `sluice serve`.

The broker runs with `--authorizer acl`; the relay logs in over SASL_SSL (SCRAM-SHA-512, the
broker's certificate checked against the test CA) as the user `relay`, which holds only the ACLs
docs/outbox.md lists. A wrong password or an authority the relay does not trust stops the
standalone relay with the reason and never shows the password; properties the relay sets itself
or that Sluice cannot serve are named before anything connects."""

import subprocess
import time
import uuid
from types import SimpleNamespace

import pytest
import trustme
from confluent_kafka.admin import AdminClient

from conftest import SLUICE, wait_until
from outbox.workload import read_topics
from security.conftest import SecureBroker, create_user, tls_flags
from security.test_acl_cli import admin

pytestmark = pytest.mark.timeout(300)

PASSWORD = "correct horse battery staple"
RELAY_PASSWORD = "relay-Pa55-word"
MECHANISM = "SCRAM-SHA-512"
SLOT = "secure"


@pytest.fixture(scope="module")
def pki(tmp_path_factory):
    d = tmp_path_factory.mktemp("pki")
    ca, stranger = trustme.CA(), trustme.CA()
    server = ca.issue_cert("127.0.0.1", "localhost")
    files = {k: d / f"{k}.pem" for k in ("ca", "stranger", "cert", "key")}
    ca.cert_pem.write_to_path(str(files["ca"]))
    stranger.cert_pem.write_to_path(str(files["stranger"]))
    server.private_key_pem.write_to_path(str(files["key"]))
    with open(files["cert"], "wb") as f:
        for blob in server.cert_chain_pems:
            f.write(blob.bytes())
    return files


def relay_acls(b, slot=SLOT, prefix="shop."):
    """The ACLs docs/outbox.md lists for a relay's user, added by the super user."""
    user = ["--allow-principal", "User:relay"]
    ops = lambda *names: [a for n in names for a in ("--operation", n)]  # noqa: E731
    admin(b, "acl", "add", *user, *ops("Write", "Create", "Describe", "DescribeConfigs"),
          "--topic", prefix, "--resource-pattern-type", "prefixed")
    admin(b, "acl", "add", *user, *ops("Read", "Write", "Create", "Describe"),
          "--topic", f"sluice.outbox.{slot}")
    admin(b, "acl", "add", *user, *ops("Write", "Create", "Describe"),
          "--topic", "sluice-outbox-status")
    admin(b, "acl", "add", *user, *ops("Write", "Describe"),
          "--transactional-id", f"sluice-outbox-{slot}")
    admin(b, "acl", "add", *user, *ops("Read"), "--group", f"sluice-outbox-reader-{slot}")


@pytest.fixture
def secure_broker(tmp_path, pki):
    """PLAINTEXT (nobody's: the authorizer refuses ANONYMOUS), SASL_PLAINTEXT (the super user's
    `sluice acl`) and SASL_SSL; users `admin` and `relay`; the relay's ACLs."""
    b = SecureBroker(tmp_path / "data", ("PLAINTEXT", "SASL_PLAINTEXT", "SASL_SSL"),
                     tls_flags({"cert": pki["cert"], "key": pki["key"]}))
    b.start()
    create_user(b, "admin", PASSWORD, MECHANISM)
    create_user(b, "relay", RELAY_PASSWORD, MECHANISM)
    b.stop()
    b.extra += ["--authorizer", "acl", "--super-users", "User:admin"]
    b.start()
    relay_acls(b)
    yield b
    b.kill()


def login(pki, user, password):
    return {"security.protocol": "SASL_SSL", "sasl.mechanism": MECHANISM,
            "sasl.username": user, "sasl.password": password,
            "ssl.ca.location": str(pki["ca"])}


def properties_file(path, props):
    path.write_text("# the relay's login to Sluice\n"
                    + "".join(f"{k}={v}\n" for k, v in props.items()))
    return path


def insert(postgres, n, aggregatetype="order"):
    ids = [uuid.uuid4() for _ in range(n)]
    with postgres.connect("shop") as c:
        for i, row in enumerate(ids):
            c.execute("INSERT INTO outbox VALUES (%s, %s, %s, 'created', %s)",
                      (row, aggregatetype, f"k{i % 3}", f"payload {i}".encode()))
        c.commit()
    return sorted(str(i) for i in ids)


def test_the_relay_publishes_as_a_scram_user_over_tls_with_only_its_acls(
        postgres, secure_broker, pki, relays, tmp_path):
    b = secure_broker
    props = properties_file(tmp_path / "relay.properties", login(pki, "relay", RELAY_PASSWORD))
    relay = relays(postgres, SimpleNamespace(bootstrap=b.address("SASL_SSL")), "--slot", SLOT,
                   "--topic-prefix", "shop.", "--client-config", str(props))
    relay.wait_state("active", 60)
    ids = insert(postgres, 20)
    got = read_topics(b.address("SASL_SSL"), ["shop.order"], 20, 60,
                      login(pki, "admin", PASSWORD))
    assert sorted(g[4] for g in got) == ids, relay.log()[-3000:]
    wait_until(lambda: relay.status()["rows"] >= 20, 10, f"rows counted: {relay.status()}")
    # The relay's status reports reached their topic (its ACLs cover it too).
    reports = read_topics(b.address("SASL_SSL"), ["sluice-outbox-status"], 1, 30,
                          login(pki, "admin", PASSWORD))
    assert any(SLOT in (r[3] or b"").decode() for r in reports), reports
    # Nothing was refused on the way, and the password was never written anywhere.
    log = relay.log()
    for refusal in ("authorization failed", "was not created", "refused the"):
        assert refusal not in log.lower(), log[-3000:]
    assert RELAY_PASSWORD not in log


def test_a_refused_login_stops_the_relay_with_its_reason(postgres, secure_broker, pki, tmp_path):
    b = secure_broker
    wrong = "not-the-Pa55-word"
    cases = [
        (login(pki, "relay", wrong), ["Authentication failed", "sasl.username=relay"]),
        ({**login(pki, "relay", RELAY_PASSWORD), "ssl.ca.location": str(pki["stranger"])},
         ["SSL handshake failed"]),
    ]
    for props, said in cases:
        path = properties_file(tmp_path / "relay.properties", props)
        start = time.monotonic()
        args = [str(SLUICE), "outbox", "--source", postgres.url("shop"), "--table", "outbox",
                "--brokers", b.address("SASL_SSL"), "--slot", SLOT, "--report-secs", "0",
                "--client-config", str(path)]
        p = subprocess.run(args, capture_output=True, text=True, timeout=90)
        took = time.monotonic() - start
        out = p.stdout + p.stderr
        assert p.returncode != 0, out[-3000:]
        assert "Sluice refused the relay's connection" in out, out[-3000:]
        for text in said:
            assert text in out, f"{text!r} not in: {out[-3000:]}"
        assert wrong not in out and RELAY_PASSWORD not in out
        # Named within seconds, not after the transactional id's 30 s wait.
        assert took < 25, f"took {took:.1f} s: {out[-2000:]}"


@pytest.mark.parametrize("args, named", [
    (["--client-property", "enable.idempotence=false"], "enable.idempotence"),
    (["--client-property", "transactional.id=mine"], "transactional.id"),
    (["--client-property", "security.protocol=SASL_SSL"], "sasl.mechanism"),
    (["--client-property", "security.protocol=SASL_SSL", "--client-property",
      "sasl.mechanism=GSSAPI"], "Sluice offers PLAIN, SCRAM-SHA-256, SCRAM-SHA-512"),
    (["--client-property", "ssl.truststore.location=/etc/truststore.jks"], "ssl.ca.location"),
    (["--client-property", "security.protocol=SSL", "--client-property",
      "ssl.ca.location=/nonexistent/ca.pem"], "ssl.ca.location"),
    (["--client-property", "sasl.username=relay"], "security.protocol is PLAINTEXT"),
    (["--client-property", "nonsense"], "KEY=VALUE"),
    (["--client-config", "/nonexistent/relay.properties"], "/nonexistent/relay.properties"),
])
def test_bad_client_properties_are_named_before_anything_connects(args, named):
    # No database or broker listens at these addresses: the check comes first.
    p = subprocess.run([str(SLUICE), "outbox", "--source", "postgres://u@127.0.0.1:9/db",
                        "--table", "outbox", "--brokers", "127.0.0.1:9", *args],
                       capture_output=True, text=True, timeout=30)
    assert p.returncode != 0 and named in p.stderr, p.stderr


def restart_with_relay(b, postgres, pki, tmp_path, password):
    """Restarts `b` with an `[outbox]` table whose relay logs in as `relay` with `password`.
    Nested tables give dotted names: `[outbox.client.sasl]` `username` is `sasl.username`."""
    config = tmp_path / "sluice.toml"
    config.write_text(f"""
[outbox]
source = "{postgres.url('shop')}"
table = "outbox"
slot = "{SLOT}"
topic_prefix = "shop."
report_secs = 0

[outbox.client]
security.protocol = "SASL_SSL"
"ssl.ca.location" = "{pki['ca']}"

[outbox.client.sasl]
mechanism = "{MECHANISM}"
username = "relay"
password = "{password}"
""")
    b.stop()
    b.extra += ["--config", str(config)]
    b.start()


def test_serve_runs_its_relay_through_its_own_sasl_ssl_listener(postgres, secure_broker, pki,
                                                                 tmp_path):
    b = secure_broker
    restart_with_relay(b, postgres, pki, tmp_path, RELAY_PASSWORD)
    # Rows committed before the relay's slot exists are not relayed (docs/outbox.md).
    wait_until(lambda: "no committed position" in b.log(), 60,
               f"the in-process relay to log in and start: {b.log()[-2000:]}")
    ids = insert(postgres, 10, "invoice")
    got = read_topics(b.address("SASL_SSL"), ["shop.invoice"], 10, 60,
                      login(pki, "admin", PASSWORD))
    assert sorted(g[4] for g in got) == ids, b.log()[-3000:]
    assert RELAY_PASSWORD not in b.log()


def test_serve_refuses_an_outbox_login_no_listener_takes(tmp_path):
    config = tmp_path / "sluice.toml"
    config.write_text('[outbox]\nsource = "postgres://a@127.0.0.1:9/d"\ntable = "outbox"\n'
                      '[outbox.client]\n"security.protocol" = "SSL"\n')
    p = subprocess.run([str(SLUICE), "serve", "--config", str(config), "--data-dir",
                        str(tmp_path / "data"), "--listen", "127.0.0.1:0",
                        "--admin-listen", "127.0.0.1:0"],
                       capture_output=True, text=True, timeout=30)
    assert p.returncode != 0, p.stderr
    assert "security.protocol=SSL" in p.stderr and "no such listener" in p.stderr, p.stderr


def test_serve_needs_the_relays_login_for_a_sasl_only_broker(tmp_path, pki):
    """A broker whose only listener is SASL_SSL: the relay would log in there, so serve asks
    for the login at start instead of running a relay that can never connect."""
    config = tmp_path / "sluice.toml"
    config.write_text('[outbox]\nsource = "postgres://a@127.0.0.1:9/d"\ntable = "outbox"\n')
    p = subprocess.run([str(SLUICE), "serve", "--config", str(config), "--data-dir",
                        str(tmp_path / "data"), "--listeners", "SASL_SSL://127.0.0.1:0",
                        "--admin-listen", "127.0.0.1:0", *tls_flags(pki)],
                       capture_output=True, text=True, timeout=30)
    assert p.returncode != 0, p.stderr
    assert "[outbox]" in p.stderr and "sasl.mechanism" in p.stderr, p.stderr


def test_serve_keeps_serving_and_backs_off_when_its_relays_login_is_refused(
        postgres, secure_broker, pki, tmp_path):
    """Inside `serve` a refused login does not stop the relay (its user may be made later), but
    it is tried again after 2 s, then 4 s, ..., not every second, and the broker serves on."""
    b = secure_broker
    wrong = "not-the-relay-pa55word"
    restart_with_relay(b, postgres, pki, tmp_path, wrong)
    wait_until(lambda: "starting again in 4 s" in b.log(), 40,
               f"the relay's second refused login: {b.log()[-3000:]}")
    log = b.log()
    assert "Sluice refused the relay's connection" in log and "sasl.username=relay" in log
    assert "starting again in 2 s" in log and "starting again in 1 s" not in log, log[-3000:]
    assert wrong not in log
    # The broker itself serves on: the super user lists the topics over SASL_SSL.
    topics = AdminClient({"bootstrap.servers": b.address("SASL_SSL"),
                          **login(pki, "admin", PASSWORD)}).list_topics(timeout=20).topics
    assert "sluice.outbox." + SLOT not in topics   # the relay never got as far as making it
