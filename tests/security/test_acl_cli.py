"""`sluice acl add|list|remove` against a broker with `--authorizer acl --super-users
User:admin`: a super user manages ACLs over SASL, anyone else is refused with Kafka's error,
`remove` never removes everything by accident, bad input is refused before the broker is
contacted, a broker without an authorizer answers SECURITY_DISABLED, and an ACL made with the
CLI is what lets a confluent-kafka producer write.

Users are made with `sluice user create` before the authorizer is on (afterwards only a
principal with Alter on the cluster may make them), then the broker restarts with it."""

import json
import os
import subprocess

import pytest
from confluent_kafka import KafkaError, Producer

from conftest import SLUICE, sluice_cli
from security.conftest import create_user
from security.test_sasl import PASSWORD, confluent_conf

LISTENER = "SASL_PLAINTEXT"
MECHANISM = "SCRAM-SHA-512"


def acl_cli(b, user, *args, password=PASSWORD):
    """`sluice *args` as `user` over the broker's SASL listener."""
    return subprocess.run(
        [str(SLUICE), *args, "-b", b.address(LISTENER), "--security-protocol", LISTENER,
         "--sasl-mechanism", MECHANISM, "--sasl-username", user],
        capture_output=True, text=True, timeout=60,
        env={**os.environ, "SLUICE_SASL_PASSWORD": password})


def admin(b, *args):
    r = acl_cli(b, "admin", *args)
    assert r.returncode == 0, f"sluice {' '.join(args)} as admin: {r.stderr}"
    return r


def listed(b, *selectors):
    """The ACLs `sluice acl list --json` prints, as tuples in the table's column order."""
    out = admin(b, "acl", "list", "--json", *selectors).stdout
    rows = [json.loads(line) for line in out.splitlines()]
    return [(r["resource_type"], r["resource_name"], r["pattern_type"], r["principal"],
             r["host"], r["operation"], r["permission"]) for r in rows]


@pytest.fixture
def acl_broker(start_secure):
    b = start_secure(("PLAINTEXT", LISTENER))
    for user in ("admin", "alice", "bob"):
        create_user(b, user, PASSWORD, MECHANISM)
    b.stop()
    b.extra += ["--authorizer", "acl", "--super-users", "User:admin"]
    b.start()
    return b


def test_a_super_user_adds_lists_and_removes_acls(acl_broker):
    b = acl_broker
    assert listed(b) == []
    r = admin(b, "acl", "add", "--allow-principal", "User:alice", "--operation", "Read",
              "--operation", "describe", "--topic", "orders")
    assert r.stdout.startswith("added 2 ACL(s):"), r.stdout
    admin(b, "acl", "add", "--allow-principal", "User:bob", "--operation", "Write",
          "--topic", "pay-", "--resource-pattern-type", "prefixed")
    admin(b, "acl", "add", "--allow-principal", "User:alice", "--operation", "Read",
          "--group", "billing")
    admin(b, "acl", "add", "--deny-principal", "User:bob", "--deny-host", "10.0.0.7",
          "--operation", "Alter", "--cluster")
    admin(b, "acl", "add", "--allow-principal", "User:*", "--operation", "Describe",
          "--transactional-id", "*")
    # Adding one that exists leaves it once.
    admin(b, "acl", "add", "--allow-principal", "User:alice", "--operation", "Read",
          "--topic", "orders")
    everything = [
        ("topic", "orders", "literal", "User:alice", "*", "Describe", "Allow"),
        ("topic", "orders", "literal", "User:alice", "*", "Read", "Allow"),
        ("topic", "pay-", "prefixed", "User:bob", "*", "Write", "Allow"),
        ("group", "billing", "literal", "User:alice", "*", "Read", "Allow"),
        ("cluster", "kafka-cluster", "literal", "User:bob", "10.0.0.7", "Alter", "Deny"),
        ("transactional-id", "*", "literal", "User:*", "*", "Describe", "Allow"),
    ]
    assert sorted(listed(b)) == sorted(everything)

    # The table: a header, then one aligned line per ACL, in a stable order.
    table = admin(b, "acl", "list").stdout.splitlines()
    assert table[0].split() == ["RESOURCE", "NAME", "PATTERN", "PRINCIPAL", "HOST", "OPERATION",
                                "PERMISSION"], table
    assert len(table) == 1 + len(everything), table
    assert sorted(tuple(line.split()) for line in table[1:]) == sorted(everything)
    assert len({line.index("User:") for line in table[1:]}) == 1, table
    assert admin(b, "acl", "list").stdout.splitlines() == table

    # Selectors.
    assert listed(b, "--topic", "pay-eu", "--resource-pattern-type", "match") == [
        ("topic", "pay-", "prefixed", "User:bob", "*", "Write", "Allow")]
    assert listed(b, "--topic", "pay-eu") == []
    assert sorted(listed(b, "--principal", "User:alice")) == sorted(
        e for e in everything if e[3] == "User:alice")
    assert listed(b, "--cluster") == [everything[4]]
    assert listed(b, "--resource-pattern-type", "prefixed") == [everything[2]]

    # remove with no selector refuses, and nothing goes.
    r = acl_cli(b, "admin", "acl", "remove")
    assert r.returncode != 0 and "--all" in r.stderr, r.stdout + r.stderr
    assert len(listed(b)) == len(everything)

    r = admin(b, "acl", "remove", "--topic", "orders", "--principal", "User:alice",
              "--operation", "Describe")
    assert r.stdout.startswith("removed 1 ACL(s):"), r.stdout
    assert "Describe" in r.stdout and "Read" not in r.stdout, r.stdout
    r = admin(b, "acl", "remove", "--deny-principal", "User:bob", "--cluster", "--json")
    assert [json.loads(line)["operation"] for line in r.stdout.splitlines()] == ["Alter"]
    r = admin(b, "acl", "remove", "--topic", "nothing-here")
    assert "nothing removed" in r.stdout, r.stdout
    assert sorted(listed(b)) == sorted(e for i, e in enumerate(everything) if i not in (0, 4))

    r = admin(b, "acl", "remove", "--all")
    assert r.stdout.startswith("removed 4 ACL(s):"), r.stdout
    assert listed(b) == []
    r = admin(b, "acl", "list")
    assert r.stdout == "" and "no ACLs match" in r.stderr


def test_a_user_who_is_not_super_is_refused(acl_broker):
    b = acl_broker
    add = ("acl", "add", "--allow-principal", "User:alice", "--operation", "Read", "--topic", "t")
    for user in ("alice", "bob"):
        r = acl_cli(b, user, *add)
        assert r.returncode != 0, r.stdout
        assert "CLUSTER_AUTHORIZATION_FAILED" in r.stderr and "creating ACL" in r.stderr, r.stderr
        r = acl_cli(b, user, "acl", "list")
        assert r.returncode != 0 and "CLUSTER_AUTHORIZATION_FAILED" in r.stderr, r.stderr
        r = acl_cli(b, user, "acl", "remove", "--topic", "t")
        assert r.returncode != 0 and "CLUSTER_AUTHORIZATION_FAILED" in r.stderr, r.stderr
    # The PLAINTEXT listener's User:ANONYMOUS is no super user either.
    r = sluice_cli(*add, "-b", b.bootstrap, check=False)
    assert r.returncode != 0 and "CLUSTER_AUTHORIZATION_FAILED" in r.stderr, r.stderr
    assert listed(b) == []

    # Alter on the cluster lets alice manage ACLs (and implies the Describe that listing needs).
    admin(b, "acl", "add", "--allow-principal", "User:alice", "--operation", "Alter", "--cluster")
    r = acl_cli(b, "alice", *add)
    assert r.returncode == 0, r.stderr
    r = acl_cli(b, "alice", "acl", "list", "--topic", "t", "--json")
    assert r.returncode == 0 and json.loads(r.stdout)["principal"] == "User:alice", r.stderr
    r = acl_cli(b, "bob", *add)
    assert r.returncode != 0 and "CLUSTER_AUTHORIZATION_FAILED" in r.stderr, r.stderr


def test_bad_input_is_refused_before_the_broker_is_asked():
    # Nothing listens on port 1: each message must be about the input, not the connection.
    ok = ["--allow-principal", "User:alice", "--operation", "Read"]
    cases = [
        (["acl", "add", "--topic", "t", "--allow-principal", "User:alice", "--operation", "Reed"],
         "unknown operation 'Reed'"),
        (["acl", "add", "--topic", "t", "--allow-principal", "alice", "--operation", "Read"],
         "principal 'alice' must be User:NAME"),
        (["acl", "add", *ok], "give the resource"),
        (["acl", "add", "--cluster", "prod", *ok], "--cluster takes no name"),
        (["acl", "add", "--topic", "a", "--group", "b", *ok], "--topic and --group"),
        (["acl", "add", "--group", "g", "--allow-principal", "User:a", "--operation", "Write"],
         "Write does not apply to a group"),
        (["acl", "add", "--topic", "t", "--allow-host", "example.com", *ok],
         "host 'example.com' must be an IP address"),
        (["acl", "add", "--topic", "*", "--resource-pattern-type", "prefixed", *ok],
         "prefixed pattern cannot be '*'"),
        (["acl", "add", "--topic", "t", "--allow-principal", "User:alice"], "give --operation"),
        (["acl", "list", "--resource-pattern-type", "exact"], "any, match, literal or prefixed"),
        (["acl", "list", "--principal", "bob"], "must be User:NAME"),
        (["acl", "remove"], "remove needs a selector"),
        (["acl", "remove", "--all", "--topic", "t"], "without selectors"),
    ]
    for args, message in cases:
        r = sluice_cli(*args, "-b", "127.0.0.1:1", check=False)
        assert r.returncode != 0, args
        assert message in r.stderr, (args, r.stderr)
        assert "connect" not in r.stderr, (args, r.stderr)


def test_without_an_authorizer_the_broker_answers_security_disabled(broker):
    for args in (
        ["acl", "add", "--allow-principal", "User:alice", "--operation", "Read", "--topic", "t"],
        ["acl", "list"],
        ["acl", "remove", "--all"],
    ):
        r = sluice_cli(*args, "-b", broker.bootstrap, check=False)
        assert r.returncode != 0, (args, r.stdout)
        assert "SECURITY_DISABLED" in r.stderr, (args, r.stderr)


def produce_as_bob(b, topic):
    """One record from a fresh producer logged in as bob: None, or the delivery error."""
    conf = confluent_conf(b, LISTENER, MECHANISM, "bob", PASSWORD,
                          **{"enable.idempotence": False, "message.timeout.ms": 20_000})
    p = Producer(conf)
    outcome = []
    p.produce(topic, value=b"v", on_delivery=lambda err, msg: outcome.append(err))
    p.flush(30)
    assert len(outcome) == 1, "no delivery report within 30 s"
    return outcome[0]


def test_an_acl_added_with_the_cli_grants_and_its_removal_denies(acl_broker):
    b = acl_broker
    admin(b, "topic", "create", "t")
    err = produce_as_bob(b, "t")
    assert err is not None and err.code() == KafkaError.TOPIC_AUTHORIZATION_FAILED, err

    admin(b, "acl", "add", "--allow-principal", "User:bob", "--operation", "Write", "--topic", "t")
    assert produce_as_bob(b, "t") is None

    admin(b, "acl", "remove", "--topic", "t", "--principal", "User:bob")
    err = produce_as_bob(b, "t")
    assert err is not None and err.code() == KafkaError.TOPIC_AUTHORIZATION_FAILED, err
