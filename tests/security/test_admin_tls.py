"""The admin port over HTTPS (admin_tls, the listeners' certificate) with SCRAM users logging
in by HTTP basic and held to the ACLs as the Kafka API would hold them (topics and groups per
resource: Describe to see, Read to browse, Write to produce, Delete to delete, ...; the rest on
the cluster: Describe to read, Alter to change), beside the admin token (a super user's key)."""

import base64
import json
import socket
import ssl
import time
import urllib.error
import urllib.request

import pytest

from conftest import free_port, sluice_cli, wait_until
from security.conftest import create_user, tls_flags

TOKEN = "admin-token-0123456789"


def call(b, path, ca, method="GET", body=None, user=None, token=None, scheme="https"):
    """(status, parsed JSON or text) of one admin request."""
    url = f"{scheme}://{b.host}:{b.admin_port}{path}"
    data = json.dumps(body).encode() if body is not None else None
    req = urllib.request.Request(url, data=data, method=method)
    if data is not None:
        req.add_header("Content-Type", "application/json")
    if user:
        req.add_header("Authorization", "Basic " + base64.b64encode(f"{user[0]}:{user[1]}".encode()).decode())
    if token:
        req.add_header("Authorization", "Bearer " + token)
    context = ssl.create_default_context(cafile=str(ca)) if scheme == "https" else None
    try:
        with urllib.request.urlopen(req, timeout=10, context=context) as r:
            text = r.read().decode()
            return r.status, (json.loads(text) if text.startswith(("{", "[")) else text)
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode()


def admin_denials(b, ca):
    """sluice_authorization_denials_total{api="admin-http"} on the HTTPS admin port."""
    status, text = call(b, "/metrics", ca, token=TOKEN)
    assert status == 200, text
    for line in text.splitlines():
        key, _, value = line.rpartition(" ")
        if key == 'sluice_authorization_denials_total{api="admin-http"}':
            return float(value)
    return 0.0


@pytest.fixture
def https_broker(start_secure, tls_files):
    b = start_secure(extra=[*tls_flags(tls_files), "--admin-tls", "true", "--admin-token", TOKEN,
                            "--authorizer", "acl", "--super-users", "User:admin;User:ANONYMOUS"],
                     wait=False)
    wait_until(lambda: call(b, "/health", tls_files["ca"])[0] == 200, 30, "the HTTPS admin port")
    create_user(b, "admin", "admin-secret")
    create_user(b, "alice", "alice-secret")
    return b


def test_https_admin_port_with_token_and_scram_users(https_broker, tls_files):
    b, ca = https_broker, tls_files["ca"]
    # The token (a super user's key) and a super user's password both work.
    assert call(b, "/api/topics", ca, token=TOKEN)[0] == 200
    assert call(b, "/api/topics", ca, user=("admin", "admin-secret"))[0] == 200
    # No login, a wrong token, a wrong password: 401.
    assert call(b, "/api/topics", ca)[0] == 401
    assert call(b, "/api/topics", ca, token="wrong-token-0123456789")[0] == 401
    status, text = call(b, "/api/topics", ca, user=("alice", "nope"))
    assert status == 401 and "wrong user name or password" in text
    # alice has no ACL: 403 naming what she needs; the topic list is empty, as Metadata's.
    denied_before = admin_denials(b, ca)
    status, text = call(b, "/api/overview", ca, user=("alice", "alice-secret"))
    assert status == 403 and "Describe on the cluster" in text, text
    # ... counted with the Kafka APIs' denials, under api="admin-http".
    assert admin_denials(b, ca) == denied_before + 1
    assert call(b, "/api/topics", ca, user=("alice", "alice-secret")) == (200, [])
    sluice_cli("acl", "add", "--allow-principal", "User:alice", "--operation", "Describe",
               "--cluster", "-b", b.bootstrap)
    assert call(b, "/api/overview", ca, user=("alice", "alice-secret"))[0] == 200
    # Reading is not changing: creating a topic needs Create (as CreateTopics).
    status, text = call(b, "/api/topics", ca, "POST", {"name": "from-console"}, user=("alice", "alice-secret"))
    assert status == 403 and "Create on the cluster or on topic 'from-console'" in text, text
    sluice_cli("acl", "add", "--allow-principal", "User:alice", "--operation", "Create",
               "--cluster", "-b", b.bootstrap)
    status, _ = call(b, "/api/topics", ca, "POST", {"name": "from-console"}, user=("alice", "alice-secret"))
    assert status in (200, 201), status
    # Plain HTTP on the HTTPS port gets nowhere.
    with pytest.raises(Exception):
        call(b, "/health", ca, scheme="http")
    assert "admin login failed" in b.log()


def test_console_actions_are_held_to_the_topic_and_group_acls(https_broker, tls_files):
    """A user with ACLs on one topic and one group only: the console lists and shows just
    those, and each action needs the operation its Kafka API needs."""
    b, ca = https_broker, tls_files["ca"]
    alice = ("alice", "alice-secret")
    for name in ("visible", "hidden"):
        assert call(b, "/api/topics", ca, "POST", {"name": name}, token=TOKEN)[0] == 201
        assert call(b, f"/api/topics/{name}/messages", ca, "POST", {"value": "v"}, token=TOKEN)[0] == 201
        status, _ = call(b, "/api/groups/g-" + name + "/reset-offsets", ca, "POST",
                         {"topic": name, "to": "earliest"}, token=TOKEN)
        assert status == 200, status

    # g-visible also has an offset on the hidden topic.
    status, _ = call(b, "/api/groups/g-visible/reset-offsets", ca, "POST",
                     {"topic": "hidden", "to": "earliest"}, token=TOKEN)
    assert status == 200, status

    def acl(operation, *resource):
        r = sluice_cli("acl", "add", "--allow-principal", "User:alice", "--operation", operation,
                       *resource, "-b", b.bootstrap)
        assert r.returncode == 0, r.stderr

    acl("Read", "--topic", "visible")  # Read implies Describe
    acl("Describe", "--group", "g-visible")
    status, topics = call(b, "/api/topics", ca, user=alice)
    assert status == 200 and [t["name"] for t in topics] == ["visible"], topics
    status, page = call(b, "/api/topics/visible", ca, user=alice)
    # Describe (implied by Read) shows the topic, not its configs (DescribeConfigs does).
    assert status == 200 and page["configs"] == [], page
    assert call(b, "/api/topics/visible", ca, token=TOKEN)[1]["configs"] != []
    status, text = call(b, "/api/topics/hidden", ca, user=alice)
    assert status == 403 and "Describe on topic 'hidden'" in text, text
    # A topic that does not exist is refused the same way (nothing disclosed).
    status, text = call(b, "/api/topics/no-such-topic", ca, user=alice)
    assert status == 403 and "Describe on topic 'no-such-topic'" in text, text
    assert call(b, "/api/topics/visible/partitions/0/messages?from=oldest", ca, user=alice)[0] == 200
    status, text = call(b, "/api/topics/hidden/partitions/0/messages?from=oldest", ca, user=alice)
    assert status == 403 and "Read on topic 'hidden'" in text, text
    # Reading is not writing, deleting or configuring.
    status, text = call(b, "/api/topics/visible/messages", ca, "POST", {"value": "x"}, user=alice)
    assert status == 403 and "Write on topic 'visible'" in text, text
    status, text = call(b, "/api/topics/visible?confirm=visible", ca, "DELETE", user=alice)
    assert status == 403 and "Delete on topic 'visible'" in text, text
    status, text = call(b, "/api/topics/visible/configs", ca, "PUT", {"configs": {}}, user=alice)
    assert status == 403 and "AlterConfigs on topic 'visible'" in text, text
    status, text = call(b, "/api/topics/visible/delete-records", ca, "POST", {"before_offset": -1},
                        user=alice)
    assert status == 403 and "Delete on topic 'visible'" in text, text
    acl("Write", "--topic", "visible")
    assert call(b, "/api/topics/visible/messages", ca, "POST", {"value": "x"}, user=alice)[0] == 201
    # Groups: listed and shown only with Describe; resetting offsets needs Read on both.
    status, groups = call(b, "/api/groups", ca, user=alice)
    assert status == 200 and [g["group"] for g in groups] == ["g-visible"], groups
    status, page = call(b, "/api/groups/g-visible", ca, user=alice)
    assert status == 200 and {o["topic"] for o in page["offsets"]} == {"visible"}, page
    assert {o["topic"] for o in call(b, "/api/groups/g-visible", ca, token=TOKEN)[1]["offsets"]} \
        == {"visible", "hidden"}
    status, text = call(b, "/api/groups/g-hidden", ca, user=alice)
    assert status == 403 and "Describe on group 'g-hidden'" in text, text
    reset = {"topic": "visible", "to": "earliest", "dry_run": True}
    status, text = call(b, "/api/groups/g-visible/reset-offsets", ca, "POST", reset, user=alice)
    assert status == 403 and "Read on group 'g-visible'" in text, text
    acl("Read", "--group", "g-visible")
    assert call(b, "/api/groups/g-visible/reset-offsets", ca, "POST", reset, user=alice)[0] == 200
    status, text = call(b, "/api/groups/g-visible/reset-offsets", ca, "POST",
                        {**reset, "topic": "hidden"}, user=alice)
    assert status == 403 and "Read on topic 'hidden'" in text, text
    # The cluster's pages still need the cluster's ACLs.
    status, text = call(b, "/api/acls", ca, user=alice)
    assert status == 403 and "Describe on the cluster" in text, text
    # The proxy acts with another cluster's admin token: super users only, even with
    # Describe and Alter on this cluster.
    acl("Describe", "--cluster")
    acl("Alter", "--cluster")
    status, _ = call(b, "/api/clusters", ca, "POST",
                     {"name": "other", "admin_url": f"http://127.0.0.1:{free_port()}",
                      "token": TOKEN}, token=TOKEN)
    assert status in (200, 201), status
    status, text = call(b, "/api/clusters/other/proxy/api/topics", ca, user=alice)
    assert status == 403 and "super user" in text, text


def test_basic_auth_and_the_token_work_over_plain_http_from_loopback(start_secure, tls_files):
    """Over plain HTTP a password is taken from loopback (the refusal from other addresses is
    not exercised here: every address this test can use is loopback)."""
    b = start_secure(extra=["--admin-token", TOKEN, "--authorizer", "acl",
                            "--super-users", "User:admin;User:ANONYMOUS"], wait=False)
    wait_until(lambda: call(b, "/health", None, scheme="http")[0] == 200, 30, "the admin port")
    create_user(b, "admin", "admin-secret")
    assert call(b, "/api/topics", None, user=("admin", "admin-secret"), scheme="http")[0] == 200
    assert call(b, "/api/topics", None, token=TOKEN, scheme="http")[0] == 200


def admin_serial(b, ca):
    ctx = ssl.create_default_context(cafile=str(ca))
    with socket.create_connection(("127.0.0.1", b.admin_port), timeout=10) as raw:
        with ctx.wrap_socket(raw, server_hostname="127.0.0.1") as s:
            return s.getpeercert()["serialNumber"]


def test_the_admin_ports_certificate_is_reloaded_without_a_restart(start_secure, tls_files, ca):
    b = start_secure(extra=[*tls_flags(tls_files, reload_ms=200), "--admin-tls", "true",
                            "--admin-token", TOKEN], wait=False)
    wait_until(lambda: call(b, "/health", tls_files["ca"])[0] == 200, 30, "the HTTPS admin port")
    first = admin_serial(b, tls_files["ca"])
    renewed = ca.issue_cert("127.0.0.1", "localhost")
    renewed.private_key_pem.write_to_path(str(tls_files["key"]))
    with open(tls_files["cert"], "wb") as f:
        for blob in renewed.cert_chain_pems:
            f.write(blob.bytes())
    wait_until(lambda: admin_serial(b, tls_files["ca"]) != first, 10,
               "the renewed certificate on the admin port")
    assert call(b, "/api/topics", tls_files["ca"], token=TOKEN)[0] == 200
    assert b.alive()


def test_admin_tls_without_a_certificate_stops_serve(start_secure):
    b = start_secure(extra=["--admin-tls", "true"], wait=False)
    assert b.proc.wait(timeout=30) != 0
    assert "tls_cert_file" in b.log()
