"""Kafka ACLs (`--authorizer acl`, `--super-users`) through clients we did not write:
confluent-kafka (librdkafka) and kafka-python (admin, producer, consumer), and Apache Kafka's
own kafka-acls tool (org.apache.kafka.tools.AclCommand 4.3.1, its jars installed by `sluice
bench compare --install-only`).

The rules are Kafka's (https://kafka.apache.org/documentation/#operations_resources_and_protocols):
what no ACL allows is denied (allow.everyone.if.no.acl.found=false), super users may do
everything, a DENY beats an ALLOW, Read/Write/Delete/Alter imply Describe and AlterConfigs
implies DescribeConfigs; each refusal carries the error Kafka answers with (TOPIC_ 29, GROUP_ 30,
CLUSTER_ 31, TRANSACTIONAL_ID_AUTHORIZATION_FAILED 53), and granting exactly the ACL the table
names makes the same call work.

One broker serves the module (users are made with `sluice user create` before the authorizer is
turned on, as the PLAINTEXT listener's User:ANONYMOUS is no super user); every test starts with
no ACLs and uses its own topics, groups and transactional ids.

What the clients report was checked against Apache Kafka 4.3.1 with its StandardAuthorizer:
acl_kafka_reference.py runs this file against Kafka instead of Sluice."""

import re
import subprocess
import time
import warnings

import kafka
import kafka.errors as kerr
import pytest
from confluent_kafka import (ConsumerGroupTopicPartitions, Consumer, ElectionType, KafkaException,
                             Producer, TopicPartition)
from confluent_kafka.admin import (AclBinding, AclBindingFilter, AclOperation, AclPermissionType,
                                   AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource,
                                   NewPartitions, NewTopic, OffsetSpec, ResourcePatternType,
                                   ResourceType, ScramCredentialInfo, ScramMechanism,
                                   UserScramCredentialUpsertion)
from kafka.admin import KafkaAdminClient
from kafka.structs import OffsetAndMetadata

from conftest import wait_until
from security.conftest import SecureBroker, create_user
from security.test_sasl import confluent_conf

pytestmark = pytest.mark.timeout(150)

PASSWORDS = {"admin": "admin-secret-1", "ops": "ops-secret-1", "alice": "alice-secret-1",
             "bob": "bob-secret-1", "carol": "carol-secret-1"}
SUPER_USERS = "User:admin;User:ops"
FAST_GROUPS = ["--group-initial-rebalance-delay-ms", "0"]

# confluent-kafka calls ACL resource type 4 (Kafka's CLUSTER) BROKER.
CLUSTER, TOPIC, GROUP, TXN = ResourceType.BROKER, ResourceType.TOPIC, ResourceType.GROUP, \
    ResourceType.TRANSACTIONAL_ID
CLUSTER_NAME = "kafka-cluster"
LITERAL, PREFIXED = ResourcePatternType.LITERAL, ResourcePatternType.PREFIXED
MATCH, ANY = ResourcePatternType.MATCH, ResourcePatternType.ANY
Op = AclOperation
ALLOW, DENY = AclPermissionType.ALLOW, AclPermissionType.DENY
EVERYTHING = AclBindingFilter(ResourceType.ANY, None, ANY, None, None, Op.ANY, AclPermissionType.ANY)
KP_EVERYTHING = kafka.admin.ACLFilter(
    principal=None, host=None, operation=kafka.admin.ACLOperation.ANY,
    permission_type=kafka.admin.ACLPermissionType.ANY,
    resource_pattern=kafka.admin.ResourcePatternFilter(kafka.admin.ResourceType.ANY, None,
                                                       kafka.admin.ACLResourcePatternType.ANY))

TAF, GAF, CAF, TIAF = ("TOPIC_AUTHORIZATION_FAILED", "GROUP_AUTHORIZATION_FAILED",
                       "CLUSTER_AUTHORIZATION_FAILED", "TRANSACTIONAL_ID_AUTHORIZATION_FAILED")
ALICE = "User:alice"


# --- the broker ---------------------------------------------------------------------------


@pytest.fixture(scope="module")
def acl_broker(tmp_path_factory):
    b = SecureBroker(tmp_path_factory.mktemp("acl") / "data", extra=FAST_GROUPS, name="acl")
    try:
        b.start()
        for user, password in PASSWORDS.items():
            create_user(b, user, password)
        assert b.stop() == 0, b.log()[-3000:]
        b.extra += ["--authorizer", "acl", "--super-users", SUPER_USERS]
        b.start()
        yield b
    finally:
        b.kill()


@pytest.fixture
def acl(acl_broker):
    """The module's broker, with no ACLs."""
    if not acl_broker.alive():
        log = acl_broker.log()[-3000:]
        acl_broker.start()
        pytest.fail(f"the broker died during an earlier test (restarted): {log}")
    revoke_all(acl_broker)
    return acl_broker


# --- clients ------------------------------------------------------------------------------


def cconf(b, user, **extra):
    return confluent_conf(b, "SASL_PLAINTEXT", "SCRAM-SHA-256", user, PASSWORDS[user], **extra)


def kconf(b, user):
    return dict(bootstrap_servers=b.address("SASL_PLAINTEXT"), security_protocol="SASL_PLAINTEXT",
                sasl_mechanism="SCRAM-SHA-512", sasl_plain_username=user,
                sasl_plain_password=PASSWORDS[user], request_timeout_ms=15_000)


def admin(b, user="admin"):
    """A confluent-kafka AdminClient logged in as `user` (one per broker and user)."""
    cache = b.__dict__.setdefault("admin_clients", {})
    if user not in cache:
        cache[user] = AdminClient(cconf(b, user))
    return cache[user]


def kadmin(b, user):
    return KafkaAdminClient(**kconf(b, user))


def kadmin_list(b, user):
    k = kadmin(b, user)
    try:
        return list(k.list_transactions().values())
    finally:
        k.close()


def outcome(call):
    """Runs `call`: None when it succeeds, else the name of the Kafka error it raised
    (confluent-kafka's KafkaException or kafka-python's broker errors)."""
    try:
        call()
        return None
    except KafkaException as e:
        return e.args[0].name()
    except kerr.BrokerResponseError as e:
        return e.message


def result(future):
    return lambda: future.result(timeout=30)


def only(futures):
    """The one future of a confluent-kafka admin call's dict, as a call for outcome()."""
    assert len(futures) == 1, futures
    return result(next(iter(futures.values())))


# --- ACLs ---------------------------------------------------------------------------------


def allow(principal, rtype, name, op, pattern=LITERAL, host="*"):
    return AclBinding(rtype, name, pattern, principal, host, op, ALLOW)


def deny(principal, rtype, name, op, pattern=LITERAL, host="*"):
    return AclBinding(rtype, name, pattern, principal, host, op, DENY)


def acl_filter(rtype=ResourceType.ANY, name=None, pattern=ANY, principal=None, host=None,
               op=Op.ANY, permission=AclPermissionType.ANY):
    return AclBindingFilter(rtype, name, pattern, principal, host, op, permission)


def key(binding):
    return (binding.restype, binding.name, binding.resource_pattern_type, binding.principal,
            binding.host, binding.operation, binding.permission_type)


def described(b, flt=EVERYTHING, user="admin"):
    return {key(x) for x in admin(b, user).describe_acls(flt, request_timeout=20).result(timeout=30)}


def grant(b, *bindings):
    """Creates the ACLs as the super user `admin` and waits until DescribeAcls lists them."""
    for binding, f in admin(b).create_acls(list(bindings), request_timeout=20).items():
        assert outcome(result(f)) is None, binding
    wanted = {key(x) for x in bindings}
    wait_until(lambda: wanted <= described(b), 10, "the new ACLs to be listed")


def revoke(b, *bindings):
    filters = [acl_filter(x.restype, x.name, x.resource_pattern_type, x.principal, x.host,
                          x.operation, x.permission_type) for x in bindings]
    for f in admin(b).delete_acls(filters, request_timeout=20).values():
        f.result(timeout=30)
    gone = {key(x) for x in bindings}
    wait_until(lambda: not gone & described(b), 10, "the ACLs to be gone")


def revoke_all(b):
    for f in admin(b).delete_acls([EVERYTHING], request_timeout=20).values():
        f.result(timeout=30)
    wait_until(lambda: described(b) == set(), 10, "no ACLs to be left")


# --- records, topics and groups -------------------------------------------------------------


def create_topics(b, *names, partitions=1, user="admin"):
    futures = admin(b, user).create_topics([NewTopic(n, partitions, 1) for n in names],
                                           request_timeout=20)
    for name, f in futures.items():
        assert outcome(result(f)) is None, name


def produce(b, user, topic, n=3, client_errors=None, **extra):
    """confluent-kafka: sends n records; the delivery reports' error names (None: delivered).
    `client_errors` collects the fatal errors flush raises (an idempotent producer's)."""
    reports = []
    errors = client_errors if client_errors is not None else []
    p = Producer(cconf(b, user, **{"message.timeout.ms": 10_000, **extra}))
    for i in range(n):
        p.produce(topic, value=b"%s-%d" % (user.encode(), i),
                  on_delivery=lambda err, msg: reports.append(err))
    deadline = time.monotonic() + 20
    while len(reports) < n and time.monotonic() < deadline:
        try:
            p.flush(max(0.1, deadline - time.monotonic()))
        except (KafkaException, SystemError) as e:  # a fatal error, raised from flush
            while not isinstance(e, KafkaException) and e.__cause__ is not None:
                e = e.__cause__
            errors.append(e.args[0])
    assert len(reports) == n, f"{n - len(reports)} records neither delivered nor failed in 20 s; " \
        f"client errors: {errors}"
    return [e.name() if e else None for e in reports]


def kp_produce(b, user, topic, n=1, **extra):
    """kafka-python: sends n records and waits for each (raises the broker's error)."""
    p = kafka.KafkaProducer(**kconf(b, user), max_block_ms=10_000,
                            **{"enable_idempotence": False, **extra})
    try:
        for i in range(n):
            p.send(topic, b"kp-%d" % i).get(timeout=15)
    finally:
        p.close(timeout=5)


def consume(b, user, topic, group, n=None, assign=False, timeout=15, **extra):
    """confluent-kafka: subscribes to `topic` in `group` (or assigns partition 0 from offset 0)
    and polls until n records arrived or an authorization error is reported, at most `timeout`
    seconds. Returns (values, the error's name or None); commits what it read when n is met."""
    conf = {"group.id": group, "auto.offset.reset": "earliest", "enable.auto.commit": False}
    if extra.get("group.protocol") != "consumer":
        conf["session.timeout.ms"] = 6000
    c = Consumer(cconf(b, user, **conf, **extra))
    values, error = [], None
    try:
        if assign:
            c.assign([TopicPartition(topic, 0, 0)])
        else:
            c.subscribe([topic])
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline and (n is None or len(values) < n):
            m = c.poll(0.2)
            if m is None:
                continue
            if m.error() is None:
                values.append(m.value())
            elif "AUTHORIZATION" in m.error().name():
                error = m.error().name()
                break
            elif m.error().fatal() or m.error().name() == "_FATAL":
                error = fatal_cause(m.error())
                break
        if n is not None and len(values) >= n and not assign:
            c.commit(asynchronous=False)
    finally:
        c.close()
    return values, error


def fatal_cause(error):
    """librdkafka reports some refusals as a fatal error (_FATAL) naming the broker's error in
    its text: that error's name."""
    for text, name in (("Group authorization failed", GAF), ("Topic authorization failed", TAF),
                       ("Cluster authorization failed", CAF),
                       ("Transactional Id authorization failed", TIAF)):
        if text in error.str():
            return name
    return f"{error.name()}: {error.str()}"


def kp_fetch(b, user, topic, n, timeout=15):
    """kafka-python: reads partition 0 from the start without a group (Fetch only)."""
    c = kafka.KafkaConsumer(**kconf(b, user), group_id=None, auto_offset_reset="earliest",
                            enable_auto_commit=False)
    got = []
    try:
        tp = kafka.TopicPartition(topic, 0)
        c.assign([tp])
        c.seek_to_beginning(tp)
        deadline = time.monotonic() + timeout
        while len(got) < n and time.monotonic() < deadline:
            for records in c.poll(timeout_ms=300).values():
                got += [r.value for r in records]
    finally:
        c.close()
    assert len(got) >= n, f"read {len(got)} of {n} records in {timeout} s"
    return got


def commit(b, user, group, topic, offset):
    """OffsetCommit of partition 0 outside any generation (as tools do), through confluent-kafka;
    None or the error's name (the request's or the partition's)."""
    c = Consumer(cconf(b, user, **{"group.id": group, "enable.auto.commit": False}))
    try:
        try:
            committed = c.commit(offsets=[TopicPartition(topic, 0, offset)], asynchronous=False)
        except KafkaException as e:
            return e.args[0].name()
        errors = [tp.error.name() for tp in committed or [] if tp.error]
        return errors[0] if errors else None
    finally:
        c.close()


def topics_seen(b, user):
    return set(admin(b, user).list_topics(timeout=15).topics)


def topic_error(b, user, topic):
    """The error Metadata answers `user` for `topic`, named explicitly (confluent-kafka)."""
    md = admin(b, user).list_topics(topic=topic, timeout=15)
    error = md.topics[topic].error
    return error.name() if error else None


def groups_listed(b, user):
    listed = admin(b, user).list_consumer_groups(request_timeout=15).result(timeout=30)
    assert not listed.errors, listed.errors
    return {g.group_id for g in listed.valid}


def count(b, topic):
    """The end offset of partition 0 (as the super user sees it)."""
    tp = TopicPartition(topic, 0)
    return admin(b).list_offsets({tp: OffsetSpec.latest()}, request_timeout=20)[tp].result(timeout=30).offset


# --- 1. CreateAcls / DescribeAcls / DeleteAcls through the admin API --------------------------


def test_acls_are_created_described_and_deleted_by_a_super_user(acl):
    b, a = acl, admin(acl)
    bindings = [
        allow(ALICE, TOPIC, "orders-eu", Op.READ),
        allow(ALICE, TOPIC, "orders-", Op.WRITE, PREFIXED),
        allow("User:bob", TOPIC, "*", Op.DESCRIBE),
        allow(ALICE, GROUP, "g1", Op.READ, host="127.0.0.1"),
        deny(ALICE, CLUSTER, CLUSTER_NAME, Op.ALTER),
        allow(ALICE, TXN, "tx-", Op.WRITE, PREFIXED),
    ]
    created = a.create_acls(bindings, request_timeout=20)
    assert {key(x): outcome(result(f)) for x, f in created.items()} == {key(x): None for x in bindings}
    keys = lambda *xs: {key(x) for x in xs}  # noqa: E731
    assert described(b) == keys(*bindings)
    # MATCH: every ACL that applies to the topic orders-eu (literal, prefixed, wildcard).
    assert described(b, acl_filter(TOPIC, "orders-eu", MATCH)) == keys(*bindings[:3])
    # ANY: the exact name in any pattern type.
    assert described(b, acl_filter(TOPIC, "orders-eu", ANY)) == keys(bindings[0])
    assert described(b, acl_filter(TOPIC, "orders-", ANY)) == keys(bindings[1])
    assert described(b, acl_filter(TOPIC, None, PREFIXED)) == keys(bindings[1])
    assert described(b, acl_filter(principal="User:bob")) == keys(bindings[2])
    assert described(b, acl_filter(host="127.0.0.1")) == keys(bindings[3])
    assert described(b, acl_filter(permission=DENY)) == keys(bindings[4])
    assert described(b, acl_filter(CLUSTER)) == keys(bindings[4])
    assert described(b, acl_filter(op=Op.WRITE)) == keys(bindings[1], bindings[5])
    assert described(b, acl_filter(TXN, "tx-1", MATCH)) == keys(bindings[5])
    # The same ACL again is no error and no duplicate.
    assert outcome(only(a.create_acls([bindings[0]], request_timeout=20))) is None
    assert len(a.describe_acls(EVERYTHING, request_timeout=20).result(timeout=30)) == len(bindings)

    def delete(flt):
        return {key(x) for x in a.delete_acls([flt], request_timeout=20)[flt].result(timeout=30)}

    assert delete(acl_filter(TOPIC, "orders-", PREFIXED)) == keys(bindings[1])
    assert delete(acl_filter(TOPIC, "orders-eu", MATCH)) == keys(bindings[0], bindings[2])
    assert delete(acl_filter(TOPIC, "nothing-here", ANY)) == set()
    assert described(b) == keys(*bindings[3:])
    assert delete(EVERYTHING) == keys(*bindings[3:])
    assert described(b) == set()


def test_invalid_bindings_are_refused_and_the_rest_of_the_request_applies(acl):
    a = admin(acl)
    bad = [
        allow("alice", TOPIC, "bad-1", Op.READ),                      # no principal type
        allow("", TOPIC, "bad-2", Op.READ),                           # no principal
        allow(ALICE, TOPIC, "", Op.READ),                             # no resource name
        allow(ALICE, CLUSTER, "not-the-cluster", Op.ALTER),           # the cluster has one name
    ]
    good = allow(ALICE, TOPIC, "good-1", Op.READ)
    created = a.create_acls(bad + [good], request_timeout=20)
    got = {x.name + "/" + x.principal: outcome(result(f)) for x, f in created.items()}
    assert got == {"bad-1/alice": "INVALID_REQUEST", "bad-2/": "INVALID_REQUEST",
                   "/User:alice": "INVALID_REQUEST", "not-the-cluster/User:alice": "INVALID_REQUEST",
                   "good-1/User:alice": None}
    assert described(acl) == {key(good)}
    assert acl.alive()


def test_acl_apis_need_describe_or_alter_on_the_cluster(acl):
    b = acl
    grant(b, allow(ALICE, TOPIC, "mine", Op.READ))
    a = admin(b, "alice")
    new = allow(ALICE, TOPIC, "anything", Op.ALL)
    assert outcome(only(a.create_acls([new], request_timeout=20))) == CAF
    # librdkafka turns a refused DescribeAcls into an empty list (checked against Apache Kafka
    # 4.3.1); kafka-python below shows the error itself.
    f = a.describe_acls(EVERYTHING, request_timeout=20)
    assert outcome(result(f)) == CAF or f.result() == []
    assert outcome(only(a.delete_acls([EVERYTHING], request_timeout=20))) == CAF
    k = kadmin(b, "alice")
    try:
        assert outcome(lambda: k.describe_acls(KP_EVERYTHING)) == CAF
        # Describe on the cluster lists ACLs, but does not change them.
        grant(b, allow(ALICE, CLUSTER, CLUSTER_NAME, Op.DESCRIBE))
        assert len(k.describe_acls(KP_EVERYTHING)[0]) == 2
    finally:
        k.close()
    assert described(b, user="alice") == described(b)
    assert outcome(only(a.create_acls([new], request_timeout=20))) == CAF
    # Alter on the cluster changes them (and implies Describe).
    revoke(b, allow(ALICE, CLUSTER, CLUSTER_NAME, Op.DESCRIBE))
    grant(b, allow(ALICE, CLUSTER, CLUSTER_NAME, Op.ALTER))
    assert outcome(only(a.create_acls([new], request_timeout=20))) is None
    assert key(new) in described(b, user="alice")
    deleted = a.delete_acls([acl_filter(TOPIC, "anything", LITERAL)], request_timeout=20)
    assert outcome(only(deleted)) is None
    assert key(new) not in described(b)


def test_acl_apis_without_an_authorizer_are_security_disabled(start_secure):
    b = start_secure(extra=FAST_GROUPS)
    a = AdminClient({"bootstrap.servers": b.bootstrap})
    assert outcome(only(a.create_acls([allow(ALICE, TOPIC, "t", Op.READ)], request_timeout=20))) \
        == "SECURITY_DISABLED"
    # librdkafka turns a DescribeAcls error into an empty list; kafka-python shows the error.
    f = a.describe_acls(EVERYTHING, request_timeout=20)
    assert outcome(result(f)) == "SECURITY_DISABLED" or f.result() == []
    k = KafkaAdminClient(bootstrap_servers=b.bootstrap, request_timeout_ms=15_000)
    try:
        assert outcome(lambda: k.describe_acls(KP_EVERYTHING)) == "SECURITY_DISABLED"
    finally:
        k.close()
    assert outcome(only(a.delete_acls([EVERYTHING], request_timeout=20))) == "SECURITY_DISABLED"
    # Without an authorizer every authenticated user may do everything (Kafka's default).
    create_user(b, "alice", PASSWORDS["alice"])
    assert produce(b, "alice", "open-topic") == [None] * 3


def test_acls_survive_a_sigkill(acl):
    b = acl
    grant(b, allow(ALICE, TOPIC, "kept", Op.WRITE), deny("User:bob", TOPIC, "kept", Op.ALL))
    create_topics(b, "kept")
    before = described(b)
    b.kill()
    b.start()
    assert described(b) == before
    assert produce(b, "alice", "kept") == [None] * 3
    assert produce(b, "bob", "kept") == [TAF] * 3


# --- 2. kafka-acls (AclCommand) -------------------------------------------------------------


def acl_tool(b, user, tmp_path, *args):
    from cluster.kafka_cluster import kafka_libs
    props = tmp_path / f"{user}.properties"
    props.write_text(
        "security.protocol=SASL_PLAINTEXT\nsasl.mechanism=SCRAM-SHA-512\n"
        "sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required "
        f'username="{user}" password="{PASSWORDS[user]}";\n')
    return subprocess.run(["java", "-cp", f"{kafka_libs()}/*", "org.apache.kafka.tools.AclCommand",
                           "--bootstrap-server", b.address("SASL_PLAINTEXT"),
                           "--command-config", str(props), *args],
                          capture_output=True, text=True, timeout=120)


def tool_ok(r):
    assert r.returncode == 0 and "Error" not in r.stdout + r.stderr.replace("SLF4J", ""), \
        r.stdout[-3000:] + r.stderr[-3000:]
    return r.stdout


def listed(output):
    """kafka-acls --list output as {(TYPE, name, PATTERN): {(principal, host, OP, PERMISSION)}}."""
    acls, current = {}, None
    for line in output.splitlines():
        m = re.search(r"ResourcePattern\(resourceType=(\w+), name=(.*?), patternType=(\w+)\)", line)
        if m:
            current = acls.setdefault(m.groups(), set())
            continue
        m = re.search(r"\(principal=(.*?), host=(.*?), operation=(\w+), permissionType=(\w+)\)", line)
        if m and current is not None:
            current.add(m.groups())
    return acls


def test_kafka_acls_tool_adds_lists_and_removes(acl, tmp_path):
    b = acl
    create_topics(b, "at-orders", "at-x", "at-secret")
    for t in ("at-orders", "at-x"):
        assert produce(b, "admin", t, n=2) == [None, None]
    tool_ok(acl_tool(b, "admin", tmp_path, "--add", "--allow-principal", ALICE,
                     "--operation", "Read", "--operation", "Describe",
                     "--topic", "at-orders", "--group", "at-group"))
    tool_ok(acl_tool(b, "admin", tmp_path, "--add", "--allow-principal", "User:bob",
                     "--allow-host", "127.0.0.1", "--operation", "Write", "--topic", "at-",
                     "--resource-pattern-type", "prefixed"))
    tool_ok(acl_tool(b, "admin", tmp_path, "--add", "--deny-principal", "User:bob",
                     "--operation", "Write", "--topic", "at-secret"))
    tool_ok(acl_tool(b, "admin", tmp_path, "--add", "--allow-principal", "User:carol",
                     "--consumer", "--topic", "at-x", "--group", "at-cg"))

    alice_read = (ALICE, "*", "READ", "ALLOW")
    alice_describe = (ALICE, "*", "DESCRIBE", "ALLOW")
    everything = {
        ("TOPIC", "at-orders", "LITERAL"): {alice_read, alice_describe},
        ("GROUP", "at-group", "LITERAL"): {alice_read, alice_describe},
        ("TOPIC", "at-", "PREFIXED"): {("User:bob", "127.0.0.1", "WRITE", "ALLOW")},
        ("TOPIC", "at-secret", "LITERAL"): {("User:bob", "*", "WRITE", "DENY")},
        ("TOPIC", "at-x", "LITERAL"): {("User:carol", "*", "READ", "ALLOW"),
                                      ("User:carol", "*", "DESCRIBE", "ALLOW")},
        ("GROUP", "at-cg", "LITERAL"): {("User:carol", "*", "READ", "ALLOW")},
    }
    assert listed(tool_ok(acl_tool(b, "admin", tmp_path, "--list"))) == everything
    assert listed(tool_ok(acl_tool(b, "admin", tmp_path, "--list", "--topic", "at-orders"))) == \
        {("TOPIC", "at-orders", "LITERAL"): {alice_read, alice_describe}}
    assert listed(tool_ok(acl_tool(b, "admin", tmp_path, "--list", "--topic", "at-",
                                   "--resource-pattern-type", "prefixed"))) == \
        {("TOPIC", "at-", "PREFIXED"): {("User:bob", "127.0.0.1", "WRITE", "ALLOW")}}
    # The admin API sees the same ACLs.
    assert len(described(b)) == sum(len(v) for v in everything.values())
    # They take effect.
    assert consume(b, "alice", "at-orders", "at-group", n=2) == ([b"admin-0", b"admin-1"], None)
    assert consume(b, "carol", "at-x", "at-cg", n=2) == ([b"admin-0", b"admin-1"], None)
    assert produce(b, "bob", "at-x") == [None] * 3
    assert produce(b, "bob", "at-secret") == [TAF] * 3
    # A user without Describe on the cluster cannot list them.
    r = acl_tool(b, "alice", tmp_path, "--list")
    assert "ClusterAuthorization" in r.stdout + r.stderr, r.stdout[-2000:] + r.stderr[-2000:]

    tool_ok(acl_tool(b, "admin", tmp_path, "--remove", "--force", "--allow-principal", ALICE,
                     "--operation", "Read", "--topic", "at-orders"))
    tool_ok(acl_tool(b, "admin", tmp_path, "--remove", "--force", "--topic", "at-",
                     "--resource-pattern-type", "prefixed"))
    after = dict(everything)
    after[("TOPIC", "at-orders", "LITERAL")] = {alice_describe}
    del after[("TOPIC", "at-", "PREFIXED")]
    assert listed(tool_ok(acl_tool(b, "admin", tmp_path, "--list"))) == after
    assert listed(tool_ok(acl_tool(b, "admin", tmp_path, "--list", "--principal", ALICE))) == {
        ("TOPIC", "at-orders", "LITERAL"): {alice_describe},
        ("GROUP", "at-group", "LITERAL"): {alice_read, alice_describe},
    }
    assert produce(b, "bob", "at-x") == [TAF] * 3
    assert consume(b, "alice", "at-orders", "at-group", assign=True) == ([], TAF)


# --- 3. the authorization matrix: denied without the ACL, allowed with exactly it ---------------


def test_produce_needs_write_on_the_topic(acl):
    b = acl
    create_topics(b, "p-data")
    # No ACL: the topic cannot even be described (Metadata), nothing is written.
    assert produce(b, "alice", "p-data") == [TAF] * 3
    assert outcome(lambda: kp_produce(b, "alice", "p-data")) == TAF
    # Describe only: the Produce request itself is refused.
    grant(b, allow(ALICE, TOPIC, "p-data", Op.DESCRIBE))
    assert produce(b, "alice", "p-data") == [TAF] * 3
    assert outcome(lambda: kp_produce(b, "alice", "p-data")) == TAF
    assert count(b, "p-data") == 0
    grant(b, allow(ALICE, TOPIC, "p-data", Op.WRITE))
    assert produce(b, "alice", "p-data") == [None] * 3
    assert outcome(lambda: kp_produce(b, "alice", "p-data")) is None
    assert count(b, "p-data") == 4


def test_fetch_needs_read_on_the_topic(acl):
    b = acl
    create_topics(b, "f-data")
    assert produce(b, "admin", "f-data") == [None] * 3
    grant(b, allow(ALICE, GROUP, "f-group", Op.READ), allow(ALICE, TOPIC, "f-data", Op.DESCRIBE))
    assert consume(b, "alice", "f-data", "f-group", assign=True) == ([], TAF)
    assert outcome(lambda: kp_fetch(b, "alice", "f-data", 3)) == TAF
    grant(b, allow(ALICE, TOPIC, "f-data", Op.READ))
    assert consume(b, "alice", "f-data", "f-group", n=3, assign=True) == \
        ([b"admin-0", b"admin-1", b"admin-2"], None)
    assert kp_fetch(b, "alice", "f-data", 3) == [b"admin-0", b"admin-1", b"admin-2"]


def test_consumer_groups_need_read_on_the_group(acl):
    b = acl
    create_topics(b, "g-data", "g-other")
    assert produce(b, "admin", "g-data") == [None] * 3
    grant(b, allow(ALICE, TOPIC, "g-data", Op.READ), allow(ALICE, TOPIC, "g-other", Op.DESCRIBE))
    # No ACL on the group: FindCoordinator (Describe Group) is refused.
    assert consume(b, "alice", "g-data", "g-alice") == ([], GAF)
    k = kafka.KafkaConsumer("g-data", **kconf(b, "alice"), group_id="g-alice",
                            auto_offset_reset="earliest", enable_auto_commit=False)
    try:
        def kp_poll():
            deadline = time.monotonic() + 15
            while time.monotonic() < deadline:
                if k.poll(timeout_ms=300):
                    raise AssertionError("kafka-python read records without Read on the group")
        assert outcome(kp_poll) == GAF
        offsets = {kafka.TopicPartition("g-data", 0): OffsetAndMetadata(1, "", -1)}
        assert outcome(lambda: k.commit(offsets)) == GAF
    finally:
        k.close()
    # Describe on the group finds the coordinator, but JoinGroup and OffsetCommit need Read.
    grant(b, allow(ALICE, GROUP, "g-alice", Op.DESCRIBE))
    assert consume(b, "alice", "g-data", "g-alice") == ([], GAF)
    assert commit(b, "alice", "g-alice", "g-data", 1) == GAF
    grant(b, allow(ALICE, GROUP, "g-alice", Op.READ))
    assert consume(b, "alice", "g-data", "g-alice", n=3) == ([b"admin-0", b"admin-1", b"admin-2"], None)
    c = Consumer(cconf(b, "alice", **{"group.id": "g-alice"}))
    try:
        assert [tp.offset for tp in c.committed([TopicPartition("g-data", 0)], timeout=15)] == [3]
    finally:
        c.close()
    assert commit(b, "alice", "g-alice", "g-data", 1) is None
    # OffsetCommit also needs Read on the topic.
    assert commit(b, "alice", "g-alice", "g-other", 1) == TAF


def test_kip_848_consumer_groups_need_read_on_the_group(acl):
    """The new consumer group protocol (ConsumerGroupHeartbeat) is held to the same rule."""
    b = acl
    create_topics(b, "k8-data")
    assert produce(b, "admin", "k8-data") == [None] * 3
    grant(b, allow(ALICE, TOPIC, "k8-data", Op.READ))
    new_protocol = {"group.protocol": "consumer"}
    assert consume(b, "alice", "k8-data", "k8-group", **new_protocol) == ([], GAF)
    grant(b, allow(ALICE, GROUP, "k8-group", Op.DESCRIBE))
    assert consume(b, "alice", "k8-data", "k8-group", **new_protocol) == ([], GAF)
    grant(b, allow(ALICE, GROUP, "k8-group", Op.READ))
    assert consume(b, "alice", "k8-data", "k8-group", n=3, **new_protocol) == \
        ([b"admin-0", b"admin-1", b"admin-2"], None)


def test_metadata_shows_only_describable_topics(acl):
    b = acl
    create_topics(b, "md-hidden", "md-describe", "md-read", "md-write", "md-delete", "md-alter",
                  "md-all", "md-dconfigs")
    ours = lambda names: {n for n in names if n.startswith("md-")}  # noqa: E731
    assert ours(topics_seen(b, "alice")) == set()
    assert topic_error(b, "alice", "md-hidden") == TAF
    # A topic that does not exist looks the same as one she may not see.
    assert topic_error(b, "alice", "md-nonexistent") == TAF
    k = kadmin(b, "alice")
    try:
        assert ours(k.list_topics()) == set()
        assert {t["name"]: t["error_code"] for t in k.describe_topics(["md-hidden", "md-nonexistent"])} \
            == {"md-hidden": 29, "md-nonexistent": 29}
        grant(b, allow(ALICE, TOPIC, "md-describe", Op.DESCRIBE),
              allow(ALICE, TOPIC, "md-read", Op.READ), allow(ALICE, TOPIC, "md-write", Op.WRITE),
              allow(ALICE, TOPIC, "md-delete", Op.DELETE), allow(ALICE, TOPIC, "md-alter", Op.ALTER),
              allow(ALICE, TOPIC, "md-all", Op.ALL),
              allow(ALICE, TOPIC, "md-dconfigs", Op.DESCRIBE_CONFIGS),
              allow(ALICE, TOPIC, "md-nonexistent", Op.DESCRIBE))
        visible = {"md-describe", "md-read", "md-write", "md-delete", "md-alter", "md-all"}
        assert ours(topics_seen(b, "alice")) == visible
        assert ours(k.list_topics()) == visible
        described_topics = {t["name"]: t["error_code"] for t in k.describe_topics(
            ["md-describe", "md-dconfigs", "md-hidden", "md-nonexistent"])}
        # DescribeConfigs does not imply Describe; with Describe an unknown topic is just unknown.
        assert described_topics == {"md-describe": 0, "md-dconfigs": 29, "md-hidden": 29,
                                    "md-nonexistent": 3}
    finally:
        k.close()
    assert topic_error(b, "alice", "md-read") is None
    assert topic_error(b, "alice", "md-hidden") == TAF
    # The super user sees everything.
    assert ours(topics_seen(b, "admin")) == visible | {"md-hidden", "md-dconfigs"}


def test_topic_authorized_operations_in_metadata(acl):
    """KIP-430: Metadata v8+ can carry what the caller may do to each topic (kafka-python's
    describe_topics asks for it)."""
    b = acl
    create_topics(b, "ao-data")
    grant(b, allow(ALICE, TOPIC, "ao-data", Op.READ), allow(ALICE, TOPIC, "ao-data", Op.ALTER_CONFIGS))
    k = kadmin(b, "alice")
    try:
        (topic,) = k.describe_topics(["ao-data"])
    finally:
        k.close()
    assert set(topic["authorized_operations"]) == {"READ", "DESCRIBE", "ALTER_CONFIGS",
                                                   "DESCRIBE_CONFIGS"}, topic


def test_auto_creation_needs_create(acl):
    b = acl
    # Write implies Describe, not Create: Metadata answers TOPIC_AUTHORIZATION_FAILED and
    # creates nothing (kafka-python's producer asks for auto-creation).
    grant(b, allow(ALICE, TOPIC, "ac-", Op.WRITE, PREFIXED))
    assert outcome(lambda: kp_produce(b, "alice", "ac-one")) == TAF
    assert "ac-one" not in topics_seen(b, "admin")
    grant(b, allow(ALICE, TOPIC, "ac-one", Op.CREATE))
    assert outcome(lambda: kp_produce(b, "alice", "ac-one")) is None
    assert "ac-one" in topics_seen(b, "admin")
    assert outcome(lambda: kp_produce(b, "alice", "ac-two")) == TAF
    grant(b, allow(ALICE, CLUSTER, CLUSTER_NAME, Op.CREATE))
    assert outcome(lambda: kp_produce(b, "alice", "ac-two")) is None
    assert "ac-two" in topics_seen(b, "admin")


def test_create_and_delete_topics(acl):
    b = acl
    a = admin(b, "alice")

    def create(name):
        return outcome(only(a.create_topics([NewTopic(name, 1, 1)], request_timeout=20)))

    def delete(name):
        return outcome(only(a.delete_topics([name], request_timeout=20)))

    assert create("ct-one") == TAF
    assert "ct-one" not in topics_seen(b, "admin")
    grant(b, allow(ALICE, TOPIC, "ct-one", Op.CREATE))
    assert create("ct-one") is None
    assert create("ct-two") == TAF
    grant(b, allow(ALICE, CLUSTER, CLUSTER_NAME, Op.CREATE))
    assert create("ct-two") is None
    assert {"ct-one", "ct-two"} <= topics_seen(b, "admin")

    create_topics(b, "dt-one")
    assert delete("dt-one") == TAF
    # Whether the topic exists is not disclosed.
    assert delete("dt-nonexistent") == TAF
    assert "dt-one" in topics_seen(b, "admin")
    grant(b, allow(ALICE, TOPIC, "dt-one", Op.DELETE))
    assert delete("dt-one") is None
    wait_until(lambda: "dt-one" not in topics_seen(b, "admin"), 10, "the topic to be deleted")


def test_describe_and_alter_configs(acl):
    b = acl
    create_topics(b, "cf-data", "cf-alter-only")
    a = admin(b, "alice")
    topic = ConfigResource(ResourceType.TOPIC, "cf-data")
    broker = ConfigResource(ResourceType.BROKER, "1")

    def describe(resource):
        return outcome(only(a.describe_configs([resource], request_timeout=20)))

    def alter(name, value, validate_only=False):
        r = ConfigResource(ResourceType.TOPIC, name, incremental_configs=[
            ConfigEntry("retention.ms", value, incremental_operation=AlterConfigOpType.SET)])
        return outcome(only(a.incremental_alter_configs([r], request_timeout=20,
                                                        validate_only=validate_only)))

    def alter_broker():
        r = ConfigResource(ResourceType.BROKER, "1", incremental_configs=[
            ConfigEntry("log.retention.ms", "604800000", incremental_operation=AlterConfigOpType.SET)])
        return outcome(only(a.incremental_alter_configs([r], request_timeout=20, validate_only=True)))

    def alter_legacy(name, value):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            r = ConfigResource(ResourceType.TOPIC, name, set_config={"retention.ms": value})
            return outcome(only(a.alter_configs([r], request_timeout=20)))

    assert describe(topic) == TAF
    assert describe(broker) == CAF
    assert alter("cf-data", "3600000") == TAF
    assert alter_legacy("cf-data", "3600000") == TAF
    assert alter_broker() == CAF
    grant(b, allow(ALICE, TOPIC, "cf-data", Op.DESCRIBE_CONFIGS))
    assert describe(topic) is None
    assert alter("cf-data", "3600000") == TAF
    grant(b, allow(ALICE, TOPIC, "cf-data", Op.ALTER_CONFIGS))
    assert alter("cf-data", "3600000") is None
    assert alter_legacy("cf-data", "7200000") is None
    configs = admin(b).describe_configs([topic], request_timeout=20)[topic].result(timeout=30)
    assert configs["retention.ms"].value == "7200000"
    # AlterConfigs implies DescribeConfigs.
    grant(b, allow(ALICE, TOPIC, "cf-alter-only", Op.ALTER_CONFIGS))
    assert describe(ConfigResource(ResourceType.TOPIC, "cf-alter-only")) is None
    # Broker configs: DescribeConfigs / AlterConfigs on the cluster.
    grant(b, allow(ALICE, CLUSTER, CLUSTER_NAME, Op.DESCRIBE_CONFIGS))
    assert describe(broker) is None
    assert alter_broker() == CAF
    grant(b, allow(ALICE, CLUSTER, CLUSTER_NAME, Op.ALTER_CONFIGS))
    assert alter_broker() != CAF


def test_create_partitions_needs_alter_on_the_topic(acl):
    b = acl
    create_topics(b, "cp-data")
    a = admin(b, "alice")

    def grow(n):
        return outcome(only(a.create_partitions([NewPartitions("cp-data", n)], request_timeout=20)))

    assert grow(2) == TAF
    grant(b, allow(ALICE, TOPIC, "cp-data", Op.DESCRIBE))
    assert grow(2) == TAF
    grant(b, allow(ALICE, TOPIC, "cp-data", Op.ALTER))
    assert grow(2) is None
    assert len(admin(b).list_topics(topic="cp-data", timeout=15).topics["cp-data"].partitions) == 2


def test_list_describe_and_delete_groups(acl):
    b = acl
    create_topics(b, "ga-data")
    assert commit(b, "admin", "ga-group", "ga-data", 1) is None
    a = admin(b, "alice")

    def describe():
        return outcome(only(a.describe_consumer_groups(["ga-group"], request_timeout=20)))

    def delete():
        return outcome(only(a.delete_consumer_groups(["ga-group"], request_timeout=20)))

    def offsets():
        f = only(a.list_consumer_group_offsets([ConsumerGroupTopicPartitions("ga-group")],
                                               request_timeout=20))
        return {(tp.topic, tp.partition): tp.offset for tp in f().topic_partitions}

    assert "ga-group" in groups_listed(b, "admin")
    assert "ga-group" not in groups_listed(b, "alice")
    assert describe() == GAF
    assert delete() == GAF
    assert outcome(offsets) == GAF
    grant(b, allow(ALICE, GROUP, "ga-group", Op.DESCRIBE))
    assert "ga-group" in groups_listed(b, "alice")
    assert describe() is None
    # OffsetFetch leaves out topics she may not describe.
    assert offsets() == {}
    grant(b, allow(ALICE, TOPIC, "ga-data", Op.DESCRIBE))
    assert offsets() == {("ga-data", 0): 1}
    assert delete() == GAF
    grant(b, allow(ALICE, GROUP, "ga-group", Op.DELETE))
    assert delete() is None
    assert "ga-group" not in groups_listed(b, "admin")
    # OffsetDelete: Delete on the group, then Read on each topic.
    assert commit(b, "admin", "ga-group-3", "ga-data", 1) is None
    k = kadmin(b, "alice")
    try:
        tp = kafka.TopicPartition("ga-data", 0)
        assert outcome(lambda: k.delete_group_offsets("ga-group-3", [tp])) == GAF
        grant(b, allow(ALICE, GROUP, "ga-group-3", Op.DELETE))
        assert k.delete_group_offsets("ga-group-3", [tp]) == {tp: kerr.TopicAuthorizationFailedError}
        grant(b, allow(ALICE, TOPIC, "ga-data", Op.READ))
        assert k.delete_group_offsets("ga-group-3", [tp]) == {tp: kerr.NoError}
    finally:
        k.close()
    # Describe on the cluster lists every group (ListGroups).
    assert commit(b, "admin", "ga-group-2", "ga-data", 1) is None
    assert "ga-group-2" not in groups_listed(b, "bob")
    grant(b, allow("User:bob", CLUSTER, CLUSTER_NAME, Op.DESCRIBE))
    assert "ga-group-2" in groups_listed(b, "bob")


def test_init_transactions_needs_write_on_the_transactional_id(acl):
    b = acl
    create_topics(b, "ti-data")
    grant(b, allow(ALICE, TOPIC, "ti-data", Op.WRITE))

    def init():
        p = Producer(cconf(b, "alice", **{"transactional.id": "ti-1", "transaction.timeout.ms": 10_000}))
        return p, outcome(lambda: p.init_transactions(15))

    assert init()[1] == TIAF
    # Describe finds the coordinator; InitProducerId needs Write.
    grant(b, allow(ALICE, TXN, "ti-1", Op.DESCRIBE))
    assert init()[1] == TIAF
    grant(b, allow(ALICE, TXN, "ti-1", Op.WRITE))
    p, error = init()
    assert error is None
    p.begin_transaction()
    p.produce("ti-data", value=b"in-a-transaction")
    p.commit_transaction(15)


def test_other_apis_follow_kafkas_table(acl):
    """DeleteRecords (Delete Topic), ListOffsets (Describe Topic), DescribeProducers (Read
    Topic), ElectLeaders / AlterPartitionReassignments / AlterUserScramCredentials (Alter
    Cluster), ListPartitionReassignments / DescribeUserScramCredentials / DescribeLogDirs
    (Describe Cluster), WriteTxnMarkers (ClusterAction, or Alter, on the cluster)."""
    b = acl
    create_topics(b, "ot-data")
    assert produce(b, "admin", "ot-data", n=4) == [None] * 4
    a = admin(b, "alice")
    tp = TopicPartition("ot-data", 0)

    def latest():
        c = kafka.KafkaConsumer(**kconf(b, "alice"), group_id=None)
        try:
            return list(c.end_offsets([kafka.TopicPartition("ot-data", 0)]).values())[0]
        finally:
            c.close()

    def delete_records():
        return outcome(only(a.delete_records([TopicPartition("ot-data", 0, 2)], request_timeout=20)))

    assert outcome(latest) == TAF
    # (Without Describe the clients cannot find the partition's leader to send DeleteRecords.)
    grant(b, allow(ALICE, TOPIC, "ot-data", Op.DESCRIBE))
    assert latest() == 4
    assert delete_records() == TAF
    k = kadmin(b, "alice")
    try:
        ktp = kafka.TopicPartition("ot-data", 0)
        assert outcome(lambda: k.describe_producers([ktp])) == TAF
        assert outcome(lambda: k.elect_leaders(0, {"ot-data": [0]})) == CAF
        assert outcome(lambda: k.alter_partition_reassignments({ktp: [1]})) == CAF
        assert outcome(lambda: k.list_partition_reassignments()) == CAF
        spec = kafka.admin.AbortTransactionSpec(topic_partition=ktp, producer_id=1, producer_epoch=0,
                                                coordinator_epoch=-1)
        assert outcome(lambda: k.abort_transaction(spec)) == CAF
        shown = [d for r in k.describe_log_dirs() for d in r["log_dirs"] if d.get("error_code") != 31]
        assert not shown, f"log dirs shown to alice: {shown}"
        scram = UserScramCredentialUpsertion("admin", ScramCredentialInfo(ScramMechanism.SCRAM_SHA_256,
                                                                          8192), b"taken-over", b"s" * 16)
        assert outcome(only(a.alter_user_scram_credentials([scram], request_timeout=20))) == CAF
        # (confluent-kafka 2.16 crashes on a refused DescribeUserScramCredentials: kafka-python.)
        assert outcome(lambda: k.describe_user_scram_credentials(["alice"])) == CAF
        assert outcome(result(a.elect_leaders(ElectionType.PREFERRED, [tp]))) == CAF
        # The admin's password is unchanged.
        assert produce(b, "admin", "ot-data", n=1) == [None]

        grant(b, allow(ALICE, TOPIC, "ot-data", Op.DELETE), allow(ALICE, TOPIC, "ot-data", Op.READ))
        assert delete_records() is None
        assert outcome(lambda: k.describe_producers([ktp])) is None
        grant(b, allow(ALICE, CLUSTER, CLUSTER_NAME, Op.DESCRIBE))
        assert outcome(lambda: k.list_partition_reassignments()) is None
        assert [d for r in k.describe_log_dirs() for d in r["log_dirs"] if d.get("error_code") == 0]
        assert outcome(lambda: k.describe_user_scram_credentials(["alice"])) is None
        grant(b, allow(ALICE, CLUSTER, CLUSTER_NAME, Op.ALTER))
        assert outcome(result(a.elect_leaders(ElectionType.PREFERRED, [tp]))) not in (CAF, TAF)
        dave = UserScramCredentialUpsertion("dave", ScramCredentialInfo(ScramMechanism.SCRAM_SHA_256,
                                                                        8192), b"dave-secret-1", b"s" * 16)
        assert outcome(only(a.alter_user_scram_credentials([dave], request_timeout=20))) is None
        # WriteTxnMarkers: ClusterAction, or Alter on the cluster since KIP-664 (kafka-transactions
        # abort); no such producer here, so only the authorization is checked.
        assert outcome(lambda: k.abort_transaction(spec)) != CAF
    finally:
        k.close()


def test_describe_cluster_authorized_operations(acl):
    """DescribeCluster with includeClusterAuthorizedOperations (KIP-430): the caller's
    operations on the cluster. (Kafka's table lists Describe Cluster for DescribeCluster; Kafka's
    broker answers a caller without it, with no operations; either is accepted here.)"""
    b = acl

    def ops(user):
        d = admin(b, user).describe_cluster(include_authorized_operations=True, request_timeout=20)
        return set(d.result(timeout=30).authorized_operations or [])

    assert outcome(lambda: ops("alice")) in (None, CAF)
    if outcome(lambda: ops("alice")) is None:
        assert ops("alice") == set()
    grant(b, allow(ALICE, CLUSTER, CLUSTER_NAME, Op.ALTER))
    assert ops("alice") == {Op.ALTER, Op.DESCRIBE}
    assert {Op.ALTER, Op.DESCRIBE, Op.CLUSTER_ACTION, Op.CREATE, Op.IDEMPOTENT_WRITE,
            Op.ALTER_CONFIGS, Op.DESCRIBE_CONFIGS} <= ops("admin")


def test_list_and_describe_transactions_are_filtered_by_describe_on_the_transactional_id(acl):
    b = acl
    create_topics(b, "lt-data")
    open_ones = []
    for tid in ("lt-a", "lt-b"):
        p = Producer(cconf(b, "admin", **{"transactional.id": tid, "transaction.timeout.ms": 30_000}))
        p.init_transactions(15)
        p.begin_transaction()
        p.produce("lt-data", value=tid.encode())
        assert p.flush(15) == 0
        open_ones.append(p)
    k = kadmin(b, "alice")
    try:
        def listed_ids():
            return {t.transactional_id for ts in k.list_transactions().values() for t in ts}

        assert {"lt-a", "lt-b"} <= {t.transactional_id for ts in kadmin_list(b, "admin") for t in ts}
        assert listed_ids() & {"lt-a", "lt-b"} == set()
        assert outcome(lambda: k.describe_transactions(["lt-a"])) == TIAF
        grant(b, allow(ALICE, TXN, "lt-a", Op.DESCRIBE))
        assert listed_ids() & {"lt-a", "lt-b"} == {"lt-a"}
        assert outcome(lambda: k.describe_transactions(["lt-a"])) is None
        assert outcome(lambda: k.describe_transactions(["lt-b"])) == TIAF
    finally:
        k.close()
        for p in open_ones:
            p.abort_transaction(15)


def test_deny_beats_allow(acl):
    b = acl
    create_topics(b, "dn-data")
    grant(b, allow(ALICE, TOPIC, "dn-data", Op.WRITE), allow(ALICE, TOPIC, "dn-", Op.ALL, PREFIXED),
          allow(ALICE, GROUP, "dn-group", Op.READ))
    assert produce(b, "alice", "dn-data") == [None] * 3
    # A DENY for another host does not apply to 127.0.0.1.
    grant(b, deny(ALICE, TOPIC, "dn-", Op.WRITE, PREFIXED, host="10.9.8.7"))
    assert produce(b, "alice", "dn-data") == [None] * 3
    grant(b, deny(ALICE, TOPIC, "dn-", Op.WRITE, PREFIXED, host="127.0.0.1"))
    assert produce(b, "alice", "dn-data") == [TAF] * 3
    assert outcome(lambda: kp_produce(b, "alice", "dn-data")) == TAF
    # Denying Write leaves the other operations the ALL grants: she still reads.
    values, error = consume(b, "alice", "dn-data", "dn-group", n=6, assign=True)
    assert (len(values), error) == (6, None)
    # Denying Read does not deny the Describe that an allowed Read or All implies.
    create_topics(b, "dr-data")
    grant(b, allow(ALICE, TOPIC, "dr-data", Op.ALL), deny(ALICE, TOPIC, "dr-data", Op.READ),
          allow(ALICE, GROUP, "dr-group", Op.READ))
    assert "dr-data" in topics_seen(b, "alice")
    assert consume(b, "alice", "dr-data", "dr-group", assign=True) == ([], TAF)
    assert produce(b, "alice", "dr-data") == [None] * 3
    # A DENY for every user (User:*) on every topic (*) applies to her as well.
    revoke(b, deny(ALICE, TOPIC, "dn-", Op.WRITE, PREFIXED, host="127.0.0.1"))
    assert produce(b, "alice", "dn-data") == [None] * 3
    grant(b, deny("User:*", TOPIC, "*", Op.DESCRIBE))
    assert "dn-data" not in topics_seen(b, "alice")
    assert produce(b, "alice", "dn-data") == [TAF] * 3


def test_prefixed_wildcard_and_host_acls(acl):
    b = acl
    create_topics(b, "pf-a", "pf-b", "other-pf", "wc-topic")
    # Principals are case-sensitive.
    grant(b, allow("User:Alice", TOPIC, "pf-", Op.WRITE, PREFIXED))
    assert produce(b, "alice", "pf-a") == [TAF] * 3
    grant(b, allow(ALICE, TOPIC, "pf-", Op.WRITE, PREFIXED))
    assert produce(b, "alice", "pf-a") == [None] * 3
    assert produce(b, "alice", "pf-b") == [None] * 3
    assert produce(b, "alice", "other-pf") == [TAF] * 3
    assert {"pf-a", "pf-b"} <= topics_seen(b, "alice") and "other-pf" not in topics_seen(b, "alice")
    # A literal `*` topic and the `User:*` principal.
    grant(b, allow("User:*", TOPIC, "*", Op.DESCRIBE))
    assert {"pf-a", "pf-b", "other-pf", "wc-topic"} <= topics_seen(b, "bob")
    assert produce(b, "bob", "wc-topic") == [TAF] * 3
    grant(b, allow("User:*", TOPIC, "wc-topic", Op.WRITE))
    assert produce(b, "bob", "wc-topic") == [None] * 3
    # An ALLOW for another host does not apply; one for 127.0.0.1 does.
    grant(b, allow("User:bob", TOPIC, "other-pf", Op.WRITE, host="10.9.8.7"))
    assert produce(b, "bob", "other-pf") == [TAF] * 3
    grant(b, allow("User:bob", TOPIC, "other-pf", Op.WRITE, host="127.0.0.1"))
    assert produce(b, "bob", "other-pf") == [None] * 3


def test_super_users_may_do_everything(acl):
    b = acl
    # Even a DENY for them is ignored (super users bypass the ACLs, as in Kafka).
    grant(b, deny("User:admin", TOPIC, "*", Op.ALL), deny("User:ops", GROUP, "*", Op.ALL))
    for user in ("admin", "ops"):
        a = admin(b, user)
        topic, group, tid = f"su-{user}", f"su-group-{user}", f"su-tx-{user}"
        create_topics(b, topic, user=user)
        assert produce(b, user, topic) == [None] * 3
        assert consume(b, user, topic, group, n=3) == ([f"{user}-{i}".encode() for i in range(3)], None)
        res = ConfigResource(ResourceType.TOPIC, topic)
        assert outcome(only(a.describe_configs([res], request_timeout=20))) is None
        assert outcome(only(a.create_partitions([NewPartitions(topic, 2)], request_timeout=20))) is None
        assert group in groups_listed(b, user)
        p = Producer(cconf(b, user, **{"transactional.id": tid}))
        assert outcome(lambda: p.init_transactions(15)) is None
        assert len(described(b, user=user)) == 2
        assert outcome(only(a.delete_consumer_groups([group], request_timeout=20))) is None
        assert outcome(only(a.delete_topics([topic], request_timeout=20))) is None
        assert outcome(result(a.describe_user_scram_credentials(request_timeout=20))) is None


def test_plaintext_clients_are_user_anonymous(acl):
    b = acl
    create_topics(b, "an-data")
    plain = {"bootstrap.servers": b.bootstrap}
    assert "an-data" not in AdminClient(plain).list_topics(timeout=15).topics

    def produce_plain():
        reports = []
        p = Producer({**plain, "message.timeout.ms": 10_000})
        p.produce("an-data", value=b"anonymous", on_delivery=lambda e, m: reports.append(e))
        assert p.flush(20) == 0
        return [e.name() if e else None for e in reports]

    assert produce_plain() == [TAF]
    grant(b, allow("User:ANONYMOUS", TOPIC, "an-data", Op.WRITE))
    assert produce_plain() == [None]
    assert "an-data" in AdminClient(plain).list_topics(timeout=15).topics
    assert produce(b, "alice", "an-data") == [TAF] * 3


def test_authorizer_and_super_users_from_the_environment(start_secure):
    """SLUICE_AUTHORIZER / SLUICE_SUPER_USERS; User:ANONYMOUS (the PLAINTEXT listener) as a
    super user administers the broker."""
    b = start_secure(extra=FAST_GROUPS, env={"SLUICE_AUTHORIZER": "acl",
                                              "SLUICE_SUPER_USERS": "User:ops;User:ANONYMOUS"})
    create_user(b, "alice", PASSWORDS["alice"])
    plain = AdminClient({"bootstrap.servers": b.bootstrap})
    for f in plain.create_topics([NewTopic("env-data", 1, 1)], request_timeout=20).values():
        f.result(timeout=30)
    assert produce(b, "alice", "env-data") == [TAF] * 3
    for f in plain.create_acls([allow(ALICE, TOPIC, "env-data", Op.WRITE)], request_timeout=20).values():
        f.result(timeout=30)
    wait_until(lambda: plain.describe_acls(EVERYTHING, request_timeout=20).result(timeout=30), 10,
               "the ACL to be listed")
    assert produce(b, "alice", "env-data") == [None] * 3


# --- 4. the idempotent producer ---------------------------------------------------------------


def test_an_idempotent_producer_needs_only_write_on_the_topic(acl):
    b = acl
    create_topics(b, "id-data")
    grant(b, allow(ALICE, TOPIC, "id-data", Op.WRITE))
    errors = []
    assert produce(b, "alice", "id-data", n=5, client_errors=errors,
                   **{"enable.idempotence": True}) == [None] * 5, errors
    assert not errors, errors
    # kafka-python's producer is idempotent by default.
    assert outcome(lambda: kp_produce(b, "alice", "id-data", n=2, enable_idempotence=True)) is None
    assert count(b, "id-data") == 7


def test_an_idempotent_producer_without_write_anywhere_needs_idempotent_write(acl):
    b = acl
    create_topics(b, "iw-data")
    grant(b, allow(ALICE, TOPIC, "iw-data", Op.DESCRIBE))
    errors = []
    reports = produce(b, "alice", "iw-data", n=2, client_errors=errors, **{"enable.idempotence": True})
    assert CAF in [e.name() for e in errors], (errors, reports)
    assert None not in reports
    # IdempotentWrite on the cluster lets it get a producer id; the topic still needs Write.
    grant(b, allow(ALICE, CLUSTER, CLUSTER_NAME, Op.IDEMPOTENT_WRITE))
    errors = []
    assert produce(b, "alice", "iw-data", n=2, client_errors=errors,
                   **{"enable.idempotence": True}) == [TAF] * 2
    assert CAF not in [e.name() for e in errors], errors


# --- 5. transactions ----------------------------------------------------------------------------


def txn_acls(group):
    carol = "User:carol"
    return [allow(carol, TXN, "tx-", Op.WRITE, PREFIXED), allow(carol, TOPIC, "tx-in", Op.READ),
            allow(carol, TOPIC, "tx-out", Op.WRITE), allow(carol, GROUP, group, Op.READ)]


@pytest.fixture
def tx_topics(acl):
    if "tx-in" not in topics_seen(acl, "admin"):
        create_topics(acl, "tx-in", "tx-out")
        assert produce(acl, "admin", "tx-in", n=5) == [None] * 5
    return acl


def test_a_consume_transform_produce_transaction_commits(tx_topics):
    b = tx_topics
    grant(b, *txn_acls("tx-group"))
    c = Consumer(cconf(b, "carol", **{"group.id": "tx-group", "auto.offset.reset": "earliest",
                                      "enable.auto.commit": False, "isolation.level": "read_committed"}))
    p = Producer(cconf(b, "carol", **{"transactional.id": "tx-carol-1", "transaction.timeout.ms": 10_000}))
    try:
        p.init_transactions(15)
        c.subscribe(["tx-in"])
        msgs, deadline = [], time.monotonic() + 20
        while len(msgs) < 5 and time.monotonic() < deadline:
            m = c.poll(0.2)
            if m is not None:
                assert m.error() is None, m.error()
                msgs.append(m)
        assert len(msgs) == 5
        p.begin_transaction()
        for m in msgs:
            p.produce("tx-out", value=b"out-" + m.value())
        p.send_offsets_to_transaction(c.position(c.assignment()), c.consumer_group_metadata(), 15)
        p.commit_transaction(15)
        committed = c.committed([TopicPartition("tx-in", 0)], timeout=15)
        assert [tp.offset for tp in committed] == [5]
    finally:
        c.close()
    values, error = consume(b, "admin", "tx-out", "tx-reader", n=5, **{"isolation.level": "read_committed"})
    assert error is None and sorted(values) == sorted(b"out-admin-%d" % i for i in range(5))
    # A transactional id outside the prefix is refused.
    q = Producer(cconf(b, "carol", **{"transactional.id": "other-carol"}))
    assert outcome(lambda: q.init_transactions(15)) == TIAF


def test_send_offsets_without_read_on_the_group_is_refused(tx_topics):
    b = tx_topics
    # Everything but Read on this consumer's group.
    grant(b, *txn_acls("tx-group-other"))
    c = Consumer(cconf(b, "carol", **{"group.id": "tx-group-2", "enable.auto.commit": False}))
    p = Producer(cconf(b, "carol", **{"transactional.id": "tx-carol-2", "transaction.timeout.ms": 10_000}))
    try:
        p.init_transactions(15)
        p.begin_transaction()
        p.produce("tx-out", value=b"never-committed")
        error = outcome(lambda: p.send_offsets_to_transaction(
            [TopicPartition("tx-in", 0, 5)], c.consumer_group_metadata(), 15))
        assert error == GAF
        p.abort_transaction(15)
    finally:
        c.close()
    values, error = consume(b, "admin", "tx-out", f"tx-reader-{time.monotonic_ns()}", n=10**9,
                            timeout=4, **{"isolation.level": "read_committed"})
    assert b"never-committed" not in values


def test_transactions_check_each_topic_too(tx_topics):
    """AddPartitionsToTxn needs Write on the topic, TxnOffsetCommit Read on it (an abortable
    error in librdkafka, as with Apache Kafka)."""
    b = tx_topics
    grant(b, *txn_acls("tx-group-3"))
    p = Producer(cconf(b, "carol", **{"transactional.id": "tx-carol-3", "transaction.timeout.ms": 10_000}))
    p.init_transactions(15)
    p.begin_transaction()
    p.produce("tx-in", value=b"carol may only read tx-in")
    with pytest.raises(KafkaException) as refused:
        p.commit_transaction(15)
    assert refused.value.args[0].name() == TAF and refused.value.args[0].txn_requires_abort()
    # (Nothing was added to the transaction: a new producer goes on.)
    p = Producer(cconf(b, "carol", **{"transactional.id": "tx-carol-4", "transaction.timeout.ms": 10_000}))
    c = Consumer(cconf(b, "carol", **{"group.id": "tx-group-3", "enable.auto.commit": False}))
    try:
        p.init_transactions(15)
        p.begin_transaction()
        p.produce("tx-out", value=b"never-committed")
        with pytest.raises(KafkaException) as refused:
            p.send_offsets_to_transaction([TopicPartition("tx-out", 0, 1)], c.consumer_group_metadata(), 15)
            p.commit_transaction(15)
        assert refused.value.args[0].name() == TAF and refused.value.args[0].txn_requires_abort()
        p.abort_transaction(15)
    finally:
        c.close()
