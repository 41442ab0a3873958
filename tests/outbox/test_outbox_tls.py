"""`sluice outbox` to databases that insist on TLS, asked for as each database's own clients ask
(libpq's `sslmode`, `sslrootcert`, `sslcert`, `sslkey`; the mysql client's `ssl-mode`, `ssl-ca`,
`ssl-cert`, `ssl-key`, in the `--source` URL): PostgreSQL with `hostnossl ... reject`, MariaDB
with users that `REQUIRE SSL` / `REQUIRE X509`. The server's certificate is verified against
the CA given (with and without its name), a client certificate logs in where the server asks
for one, and the sessions are seen encrypted from the server's side. The bad cases are named:
TLS turned off, an unknown authority, a name the certificate does not carry, a missing file."""

import os
import pwd
import shutil
import uuid

import pytest
import trustme

from conftest import wait_until
from outbox.conftest import run_relay
from outbox.mariadb import MariaDB
from outbox.pg import Postgres
from outbox.workload import read_topics

pytestmark = pytest.mark.timeout(240)


@pytest.fixture(scope="module")
def pki(tmp_path_factory):
    """A CA, a server certificate for `localhost` only (not 127.0.0.1, so that the name check
    can fail), a client certificate for the user `relay`, and a CA nobody uses."""
    d = tmp_path_factory.mktemp("pki")
    ca, stranger = trustme.CA(), trustme.CA()
    server = ca.issue_cert("localhost")
    client = ca.issue_cert("relay", common_name="relay")
    files = {k: d / f"{k}.pem" for k in ("ca", "stranger", "server", "server_key", "client",
                                         "client_key")}
    ca.cert_pem.write_to_path(str(files["ca"]))
    stranger.cert_pem.write_to_path(str(files["stranger"]))
    server.cert_chain_pems[0].write_to_path(str(files["server"]))
    server.private_key_pem.write_to_path(str(files["server_key"]))
    client.cert_chain_pems[0].write_to_path(str(files["client"]))
    client.private_key_pem.write_to_path(str(files["client_key"]))
    return files


def owned_by(user, files, dest):
    """Copies `files` into `dest` for the database's own user (keys readable by it only)."""
    entry = pwd.getpwnam(user)
    out = []
    for f in files:
        target = dest / f.name
        shutil.copy(f, target)
        os.chown(target, entry.pw_uid, entry.pw_gid)
        os.chmod(target, 0o600)
        out.append(target)
    return out


OUTBOX_DDL = """
CREATE TABLE outbox (id uuid PRIMARY KEY, aggregatetype text NOT NULL, aggregateid text NOT NULL,
                     type text NOT NULL, payload bytea);
CREATE ROLE relay LOGIN SUPERUSER REPLICATION;
"""


@pytest.fixture
def tls_postgres(pki):
    """PostgreSQL that takes only TLS connections over TCP; the user `relay` logs in with its
    client certificate only (`cert`), everyone else is trusted once encrypted."""
    pg = Postgres()
    cert, key, ca = owned_by("postgres", [pki["server"], pki["server_key"], pki["ca"]], pg.data)
    with open(pg.data / "postgresql.conf", "a") as f:
        f.write(f"\nssl = on\nssl_cert_file = '{cert}'\nssl_key_file = '{key}'\n"
                f"ssl_ca_file = '{ca}'\n")
    (pg.data / "pg_hba.conf").write_text(
        "local all all trust\n"
        "hostssl all relay 127.0.0.1/32 cert\n"
        "hostssl all all 127.0.0.1/32 trust\n"
        "hostnossl all all 127.0.0.1/32 reject\n")
    pg.start()                      # psycopg's default sslmode (prefer) encrypts its checks
    pg.create_database("shop")
    with pg.connect("shop", autocommit=True) as c:
        c.execute(OUTBOX_DDL)
    yield pg
    pg.close()


def pg_source(pg, host="localhost", user="postgres", **params):
    query = "&".join(f"{k}={v}" for k, v in params.items())
    return f"postgres://{user}@{host}:{pg.port}/shop" + (f"?{query}" if query else "")


def insert_rows(pg, n, kind="order"):
    ids = [str(uuid.uuid4()) for _ in range(n)]
    with pg.connect("shop") as c:
        for i, row_id in enumerate(ids):
            c.execute("INSERT INTO outbox VALUES (%s, %s, %s, 'created', %s)",
                      (row_id, kind, f"agg-{i}", f"payload-{i}".encode()))
        c.commit()
    return ids


def unknown_issuer(out):
    return "UnknownIssuer" in out or "unknown issuer" in out.lower()


def wrong_name(out):
    return "NotValidForName" in out or "not valid for name" in out


def encrypted_sessions(pg):
    """(ssl, backend type) of the relay's sessions, as the server sees them."""
    with pg.connect("shop") as c:
        return c.execute(
            "SELECT s.ssl, a.backend_type FROM pg_stat_ssl s JOIN pg_stat_activity a USING (pid) "
            "WHERE a.application_name = 'sluice-outbox'").fetchall()


def test_postgres_over_verified_tls_with_and_without_a_client_certificate(
        tls_postgres, pki, broker, relays):
    # verify-full: the chain and the name (localhost) are checked.
    r = relays(pg_source(tls_postgres, sslmode="verify-full", sslrootcert=pki["ca"]),
               broker, "--topic-prefix", "tls.", "--slot", "full", name="full")
    r.wait_state("active", 60)
    ids = insert_rows(tls_postgres, 5)
    got = read_topics(broker.bootstrap, ["tls.order"], 5, 30)
    assert sorted(p[4] for p in got) == sorted(ids), got
    sessions = encrypted_sessions(tls_postgres)
    assert {kind for _, kind in sessions} >= {"client backend", "walsender"}, sessions
    assert all(ssl for ssl, _ in sessions), f"a session of the relay is not encrypted: {sessions}"
    r.stop()

    # The user `relay` must show its certificate (pg_hba: cert); verify-ca to 127.0.0.1 checks
    # the chain but not the name (the certificate names localhost only).
    source = pg_source(tls_postgres, host="127.0.0.1", user="relay", sslmode="verify-ca",
                       sslrootcert=pki["ca"], sslcert=pki["client"], sslkey=pki["client_key"])
    r = relays(source, broker, "--topic-prefix", "tls.", "--slot", "client", name="client")
    r.wait_state("active", 60)
    more = insert_rows(tls_postgres, 3)
    got = read_topics(broker.bootstrap, ["tls.order"], 8, 30)
    assert set(more) <= {p[4] for p in got}, got
    assert all(ssl for ssl, _ in encrypted_sessions(tls_postgres))


def test_postgres_tls_refusals_are_named(tls_postgres, pki, broker):
    # The server refuses a plain session (hostnossl ... reject).
    code, out, _ = run_relay(pg_source(tls_postgres, sslmode="disable"), broker)
    assert code == 1 and "no encryption" in out, out
    # An authority that did not sign the server's certificate.
    code, out, _ = run_relay(
        pg_source(tls_postgres, sslmode="verify-ca", sslrootcert=pki["stranger"]), broker)
    assert code == 1 and unknown_issuer(out), out
    # verify-full to an address the certificate does not name.
    code, out, _ = run_relay(
        pg_source(tls_postgres, host="127.0.0.1", sslmode="verify-full", sslrootcert=pki["ca"]),
        broker)
    assert code == 1 and wrong_name(out), out
    # `relay` without its certificate.
    code, out, _ = run_relay(pg_source(tls_postgres, user="relay", sslmode="require"), broker)
    assert code == 1 and "requires a valid client certificate" in out, out
    # Settings that are wrong before anything is connected to: named, password not shown.
    code, out, _ = run_relay(
        f"postgres://postgres:hunter2@localhost:{tls_postgres.port}/shop?sslmode=verify-full",
        broker)
    assert code == 1 and "sslrootcert=FILE" in out and "hunter2" not in out, out
    code, out, _ = run_relay(pg_source(tls_postgres, sslmode="verify-ful"), broker)
    assert code == 1 and "sslmode=verify-ful is not a mode" in out, out
    code, out, _ = run_relay(
        pg_source(tls_postgres, sslmode="verify-ca", sslrootcert="/nonexistent/ca.pem"), broker)
    assert code == 1 and "sslrootcert=/nonexistent/ca.pem: no such file" in out, out
    # Nothing half-done: the refused relays made no slot.
    with tls_postgres.connect("shop") as c:
        assert c.execute("SELECT count(*) FROM pg_replication_slots").fetchone()[0] == 0


@pytest.mark.parametrize("server", ["tls-1.1-only", "hostnossl-only"])
def test_postgres_prefer_falls_back_to_plain(pki, broker, relays, server):
    """libpq's prefer: a server that offers TLS but cannot complete a handshake (it allows only
    TLS 1.1, which rustls does not speak), or that refuses encrypted sessions in pg_hba.conf
    (`hostnossl` lines only), is used without TLS; `require` is refused by both."""
    pg = Postgres()
    try:
        cert, key = owned_by("postgres", [pki["server"], pki["server_key"]], pg.data)
        with open(pg.data / "postgresql.conf", "a") as f:
            f.write(f"\nssl = on\nssl_cert_file = '{cert}'\nssl_key_file = '{key}'\n")
            if server == "tls-1.1-only":
                f.write("ssl_min_protocol_version = 'TLSv1'\n"
                        "ssl_max_protocol_version = 'TLSv1.1'\n")
        if server == "hostnossl-only":
            (pg.data / "pg_hba.conf").write_text(
                "local all all trust\nhostnossl all all 127.0.0.1/32 trust\n")
        pg.start()
        pg.create_database("shop")
        with pg.connect("shop", autocommit=True) as c:
            c.execute(OUTBOX_DDL)
        code, out, _ = run_relay(pg_source(pg, sslmode="require"), broker)
        refused = "TLS handshake" if server == "tls-1.1-only" else "SSL encryption"
        assert code == 1 and refused in out, out
        r = relays(pg_source(pg), broker, "--topic-prefix", "old.", name="prefer")
        r.wait_state("active", 60)
        ids = insert_rows(pg, 3)
        got = read_topics(broker.bootstrap, ["old.order"], 3, 30)
        assert sorted(p[4] for p in got) == sorted(ids), got
        assert "connecting without it" in r.log()
        sessions = encrypted_sessions(pg)
        assert sessions and not any(ssl for ssl, _ in sessions), sessions
        r.stop()
    finally:
        pg.close()


MARIADB_SCHEMA = [
    "CREATE DATABASE shop",
    "CREATE TABLE shop.outbox (id CHAR(36) PRIMARY KEY, aggregatetype VARCHAR(255) NOT NULL, "
    "aggregateid VARCHAR(255) NOT NULL, type VARCHAR(255) NOT NULL, payload BLOB) ENGINE=InnoDB",
    # One user that must encrypt, one that must also show a certificate signed by the CA.
    "CREATE USER 'tls'@'%' REQUIRE SSL",
    "CREATE USER 'x509'@'%' REQUIRE X509",
    "GRANT ALL ON *.* TO 'tls'@'%'",
    "GRANT ALL ON *.* TO 'x509'@'%'",
]


@pytest.fixture
def tls_mariadb(pki):
    db = MariaDB()
    # Beside its data, in the directory the server's user owns (the test's own is root's).
    cert, key, ca = owned_by("mysql", [pki["server"], pki["server_key"], pki["ca"]], db.dir)
    db.extra += [f"--ssl-cert={cert}", f"--ssl-key={key}", f"--ssl-ca={ca}"]
    db.start()
    conn = db.connect(None)
    with conn.cursor() as cur:
        for sql in MARIADB_SCHEMA:
            cur.execute(sql)
    conn.close()
    yield db
    db.close()


def my_source(db, user, host="localhost", **params):
    """(`prefer_socket=false`: the driver would move a session to `localhost` onto the server's
    Unix socket, where there is no TLS to test.)"""
    query = "&".join(f"{k}={v}" for k, v in {"prefer_socket": "false", **params}.items())
    return f"mysql://{user}@{host}:{db.port}/shop?{query}"


def test_mariadb_over_verified_tls_with_a_client_certificate(tls_mariadb, pki, broker, relays):
    source = my_source(tls_mariadb, "x509", **{"ssl-mode": "VERIFY_IDENTITY",
                                                "ssl-ca": pki["ca"], "ssl-cert": pki["client"],
                                                "ssl-key": pki["client_key"]})
    r = relays(source, broker, "--topic-prefix", "tls.", "--slot", "mysqltls", name="x509")
    r.wait_state("active", 60)
    conn = tls_mariadb.connect("shop")
    ids = [str(uuid.uuid4()) for _ in range(4)]
    with conn.cursor() as cur:
        for i, row_id in enumerate(ids):
            cur.execute("INSERT INTO outbox VALUES (%s, 'order', %s, 'created', %s)",
                        (row_id, f"agg-{i}", f"payload-{i}".encode()))
    conn.commit()
    got = read_topics(broker.bootstrap, ["tls.order"], 4, 30)
    assert sorted(p[4] for p in got) == sorted(ids), got
    # The server's view: every session of the user x509 is encrypted (the binlog dump too).
    with conn.cursor() as cur:
        cur.execute("SELECT COUNT(*) FROM information_schema.PROCESSLIST WHERE USER = 'x509'")
        sessions = cur.fetchone()[0]
        cur.execute("SHOW GLOBAL STATUS LIKE 'Ssl_accepts'")
        accepts = int(cur.fetchone()[1])
    conn.close()
    assert sessions >= 2, "the control session and the binary log's"
    assert accepts >= sessions, f"{accepts} TLS sessions accepted, {sessions} of the relay"


def test_mariadb_tls_refusals_are_named(tls_mariadb, pki, broker):
    # TLS off for a user that requires it: the server's refusal.
    code, out, _ = run_relay(my_source(tls_mariadb, "tls"), broker)
    assert code == 1 and "Access denied" in out, out
    # An unknown authority; a name the certificate does not carry (127.0.0.1).
    code, out, _ = run_relay(
        my_source(tls_mariadb, "tls", **{"ssl-mode": "VERIFY_CA", "ssl-ca": pki["stranger"]}),
        broker)
    assert code == 1 and unknown_issuer(out), out
    code, out, _ = run_relay(
        my_source(tls_mariadb, "tls", host="127.0.0.1",
                  **{"ssl-mode": "VERIFY_IDENTITY", "ssl-ca": pki["ca"]}), broker)
    assert code == 1 and wrong_name(out), out
    # X509 without its certificate: encrypted, but refused.
    code, out, _ = run_relay(my_source(tls_mariadb, "x509", **{"ssl-mode": "REQUIRED"}), broker)
    assert code == 1 and "Access denied" in out, out
    code, out, _ = run_relay(my_source(tls_mariadb, "tls", **{"ssl-mode": "PREFERRED"}), broker)
    assert code == 1 and "PREFERRED" in out and "not supported" in out, out
