"""Kafka ACLs in a 3-node cluster (`--authorizer acl --super-users User:admin`): ACLs live in the
replicated metadata log, so an ACL made through one node is listed and enforced by every node,
and all of them survive a full restart of the cluster.

Followers copy partitions by sending Fetch requests (replica_id >= 0) to the leader's FIRST
listener, here PLAINTEXT, unauthenticated: the principal is User:ANONYMOUS. As in Kafka, such
a fetch needs ClusterAction on the cluster, so the operator grants it to User:ANONYMOUS from the
nodes' addresses only; without it a replication factor 3 topic takes no acks=all write.

Every node has a PLAINTEXT listener first and a SASL_PLAINTEXT one for clients
(test_cluster_users.with_sasl_listener). The users are made with `sluice user create` while the
authorizer is still off (User:ANONYMOUS is no super user: with the authorizer on it could not
make the first user); the cluster is then stopped and started again on the same data
directories with the authorizer on."""

import signal
import struct
import time

import pytest
from confluent_kafka import OFFSET_BEGINNING, Consumer, Producer, TopicPartition
from confluent_kafka.admin import (AclBinding, AclBindingFilter, AclOperation, AclPermissionType,
                                   AdminClient, NewTopic, ResourcePatternType, ResourceType)

from cluster.harness import CLIENT_DEFAULTS, cluster  # noqa: F401  (the fixture acl_cluster uses)
from conftest import wait_until
from security.conftest import create_user, metric
from security.test_cluster_users import with_sasl_listener
from security.test_sasl import (authenticate_v1, confluent_conf, connect, handshake, read_frame,
                                request)

pytestmark = pytest.mark.timeout(150)

PASSWORDS = {"admin": "admin-secret-1", "alice": "alice-secret-1"}
AUTHORIZER = ["--authorizer", "acl", "--super-users", "User:admin"]

# confluent-kafka calls ACL resource type 4 (Kafka's CLUSTER) BROKER.
CLUSTER, TOPIC, GROUP = ResourceType.BROKER, ResourceType.TOPIC, ResourceType.GROUP
CLUSTER_NAME = "kafka-cluster"
LITERAL, PREFIXED = ResourcePatternType.LITERAL, ResourcePatternType.PREFIXED
Op = AclOperation
ALLOW, DENY = AclPermissionType.ALLOW, AclPermissionType.DENY
EVERYTHING = AclBindingFilter(ResourceType.ANY, None, ResourcePatternType.ANY, None, None, Op.ANY,
                              AclPermissionType.ANY)
ALICE, ANONYMOUS = "User:alice", "User:ANONYMOUS"
TAF = "TOPIC_AUTHORIZATION_FAILED"


# --- the cluster ----------------------------------------------------------------------------


def stop_all(c):
    """SIGTERM to every node at once, then each must exit cleanly."""
    running = [n for n in c.nodes.values() if n.alive()]
    for n in running:
        n.proc.send_signal(signal.SIGTERM)
    for n in running:
        code = n.proc.wait(timeout=30)
        assert code == 0, f"node {n.node_id} exited with {code}: {n.log()[-3000:]}"


@pytest.fixture
def acl_cluster(cluster):
    """3 nodes (PLAINTEXT first, SASL_PLAINTEXT for clients), users admin and alice, then the
    authorizer on with admin the only super user."""
    c = start_acl_cluster(cluster)
    yield c
    for node in c.nodes.values():       # closed while the nodes still run (no reconnect noise)
        node.__dict__.pop("admin_clients", None)


def start_acl_cluster(cluster, extra=()):
    """acl_cluster's cluster; `extra`: more flags for every node once the authorizer is on."""
    c = cluster(3, start=False)
    for node in c.nodes.values():
        with_sasl_listener(node)
    c.start()
    for user, password in PASSWORDS.items():
        create_user(c.nodes[1], user, password)
    stop_all(c)
    for node in c.nodes.values():
        node.extra += AUTHORIZER + list(extra)
        node.admin_login = ("admin", PASSWORDS["admin"])   # the admin port needs a login now
    c.start()
    for node in c.nodes.values():       # the users are known everywhere
        wait_until(lambda: admin(node).list_topics(timeout=5).brokers, 20,
                   f"admin to log in on node {node.node_id}")
    # ... and every node is unfenced again (the restart fenced them until their heartbeats).
    wait_until(lambda: c.unfenced(admin(c.nodes[1])) == set(c.nodes), 20,
               f"all nodes unfenced ({c.describe()})")
    return c


def node_ips(c):
    """The addresses the nodes' replica fetches come from. On loopback every node's outgoing
    connection has the source address 127.0.0.1 (the kernel picks it for any 127/8
    destination), so this is {127.0.0.1}: one ACL per address."""
    return sorted({n.host for n in c.nodes.values()})


# --- clients --------------------------------------------------------------------------------


def sasl(node, user, **extra):
    return confluent_conf(node, "SASL_PLAINTEXT", "SCRAM-SHA-256", user, PASSWORDS[user],
                          **{**CLIENT_DEFAULTS, **extra})


def admin(node, user="admin"):
    """A confluent-kafka AdminClient bootstrapped on `node` alone. librdkafka sends the ACL
    requests to the controller Metadata names, and each Sluice node names itself: so they go to
    `node` (checked with the node's request counters where it matters). One per node and user,
    kept: librdkafka abandons the pending requests of a client that is garbage collected."""
    cache = node.__dict__.setdefault("admin_clients", {})
    if user not in cache:
        cache[user] = AdminClient(sasl(node, user))
    return cache[user]


def requests(node, api):
    return metric(node, "sluice_request_duration_seconds_count", f'{{api="{api}"}}')


def denials(node, api):
    return metric(node, "sluice_authorization_denials_total", f'{{api="{api}"}}')


def allow(principal, rtype, name, op, pattern=LITERAL, host="*"):
    return AclBinding(rtype, name, pattern, principal, host, op, ALLOW)


def cluster_action(host):
    return allow(ANONYMOUS, CLUSTER, CLUSTER_NAME, Op.CLUSTER_ACTION, host=host)


def key(b):
    """An ACL as Kafka's wire numbers (confluent-kafka's enums use the same values)."""
    return (b.restype.value, b.name, b.resource_pattern_type.value, b.principal, b.host,
            b.operation.value, b.permission_type.value)


def described(node):
    """Every ACL, as DescribeAcls (v1) answered by `node` itself: one SASL/PLAIN connection as
    admin to that node, as librdkafka sends DescribeAcls to any broker it is connected to."""
    with connect(node, "SASL_PLAINTEXT") as sock:
        assert handshake(sock, "PLAIN")[0] == 0
        assert authenticate_v1(sock, b"\0admin\0" + PASSWORDS["admin"].encode())[0] == 0
        # resource type ANY, name null, pattern type ANY, principal null, host null, op ANY,
        # permission ANY
        sock.sendall(request(29, 1, struct.pack(">bhbhhbb", 1, -1, 1, -1, -1, 1, 1)))
        body = read_frame(sock)
    at = 0

    def take(fmt):
        nonlocal at
        values = struct.unpack_from(fmt, body, at)
        at += struct.calcsize(fmt)
        return values if len(values) > 1 else values[0]

    def text():
        nonlocal at
        n = take(">h")
        value = body[at:at + max(n, 0)].decode() if n >= 0 else None
        at += max(n, 0)
        return value

    _throttle, error = take(">ih")
    message = text()
    assert error == 0, f"DescribeAcls on node {node.node_id}: error {error} {message}"
    acls = set()
    for _ in range(take(">i")):
        rtype, name, pattern = take(">b"), text(), take(">b")
        for _ in range(take(">i")):
            principal, host = text(), text()
            op, permission = take(">bb")
            acls.add((rtype, name, pattern, principal, host, op, permission))
    return acls


def create_acls(node, *bindings):
    for binding, f in admin(node).create_acls(list(bindings), request_timeout=15).items():
        assert f.result(timeout=20) is None, binding


def wait_listed_everywhere(c, expected, timeout=20):
    """Every live node's DescribeAcls answers exactly `expected` (a set of keys)."""
    for node in c.nodes.values():
        if node.alive():
            wait_until(lambda: described(node) == expected, timeout,
                       f"node {node.node_id} to list exactly {expected} (lists {described(node)})")


def create_topic(node, name, partitions, rf, config=None):
    f = admin(node).create_topics([NewTopic(name, partitions, rf, config=config or {})],
                                  request_timeout=20)[name]
    assert f.result(timeout=30) is None


def partitions(node, topic):
    """{partition: PartitionMetadata} as `node` answers admin (None while it does not know it)."""
    t = admin(node).list_topics(topic, timeout=5).topics.get(topic)
    return None if t is None or t.error is not None else t.partitions


def wait_led(c, topic, count, rf, timeout=30):
    """Every live node knows `count` partitions of `topic`, each led by a live node with `rf`
    replicas; returns {partition: leader} as the last node sees it."""
    live = [i for i, n in c.nodes.items() if n.alive()]
    leaders = None
    for i in live:
        def led():
            ps = partitions(c.nodes[i], topic)
            if ps is None or len(ps) != count:
                return None
            if all(p.leader in live and len(p.replicas) == rf for p in ps.values()):
                return {p.id: p.leader for p in ps.values()}
            return None
        leaders = wait_until(led, timeout, f"node {i} to see {topic} led ({c.describe()})")
    return leaders


def wait_isr(c, topic, partition, want, timeout=30):
    """The partition's leader (as a live node sees it) reports the ISR `want`."""
    live = [i for i, n in c.nodes.items() if n.alive()]

    def isr():
        p = partitions(c.nodes[live[0]], topic)[partition]
        if p.leader not in live:
            return None
        p = partitions(c.nodes[p.leader], topic)[partition]
        return sorted(p.isrs) == sorted(want) and p.leader
    return wait_until(isr, timeout, f"{topic}/{partition} to have ISR {want} ({c.describe()})")


def produce(node, user, topic, values, partition=-1, timeout=25, **extra):
    """Sends `values` (acks=all) through a producer bootstrapped on `node` alone; the delivery
    reports' error names (None: delivered), all within `timeout` seconds."""
    reports = []
    p = Producer(sasl(node, user, **{"acks": "all", "message.timeout.ms": 10_000, **extra}))
    for v in values:
        p.produce(topic, value=v, partition=partition,
                  on_delivery=lambda err, msg: reports.append(err))
    p.flush(timeout)
    assert len(reports) == len(values), \
        f"{len(values) - len(reports)} of {len(values)} records neither delivered nor failed in {timeout} s"
    return [e.name() if e else None for e in reports]


def read(node, user, topic, until, timeout=30):
    """Partition 0 of `topic` from its start, through a consumer bootstrapped on `node`, until
    `until(values)` holds or `timeout` passes."""
    c = Consumer(sasl(node, user, **{"group.id": "alice-reader", "enable.auto.commit": False}))
    values = []
    try:
        c.assign([TopicPartition(topic, 0, OFFSET_BEGINNING)])
        deadline = time.monotonic() + timeout
        while not until(values) and time.monotonic() < deadline:
            m = c.poll(0.2)
            if m is not None and m.error() is None:
                values.append(m.value())
    finally:
        c.close()
    return values


# --- 1. one node's ACL is every node's ACL -----------------------------------------------


def test_an_acl_made_through_node_1_is_listed_and_enforced_on_every_node(acl_cluster):
    c = acl_cluster
    n1, n2, n3 = c.nodes[1], c.nodes[2], c.nodes[3]
    create_topic(n1, "pay", 3, 1)
    create_topic(n1, "payroll", 3, 1)
    # Each node leads one partition of each topic: a produce to every partition is checked by
    # every node's own Produce handler.
    assert sorted(wait_led(c, "pay", 3, 1).values()) == [1, 2, 3]
    assert sorted(wait_led(c, "payroll", 3, 1).values()) == [1, 2, 3]
    # No ACL: alice may not even see the topic.
    assert produce(n3, "alice", "pay", [b"early"]) == [TAF]

    pay = allow(ALICE, TOPIC, "pay", Op.WRITE)
    see_payroll = allow(ALICE, TOPIC, "payroll", Op.DESCRIBE)
    before = {i: requests(n, "CreateAcls") for i, n in c.nodes.items()}
    create_acls(n1, pay, see_payroll)
    after = {i: requests(n, "CreateAcls") for i, n in c.nodes.items()}
    # librdkafka sends an admin request to any broker it knows (not always the bootstrap
    # one): one node took the CreateAcls; the others must enforce and list what it wrote.
    took = [i for i in c.nodes if after[i] == before[i] + 1]
    assert len(took) == 1 and sum(after.values()) == sum(before.values()) + 1, \
        f"one CreateAcls, on one node: counts {before} -> {after}"

    # DescribeAcls answered by node 2 lists them (and by node 3), and so does a client's.
    wanted = {key(pay), key(see_payroll)}
    before2 = requests(n2, "DescribeAcls")
    wait_until(lambda: described(n2) == wanted, 20, "node 2 to list the new ACLs")
    assert requests(n2, "DescribeAcls") > before2, "DescribeAcls was to be answered by node 2"
    wait_listed_everywhere(c, wanted)
    listed = admin(n2).describe_acls(EVERYTHING, request_timeout=10).result(timeout=15)
    assert {key(b) for b in listed} == wanted

    # Alice writes to pay, through a client that knows only node 3, on every node.
    for p in range(3):
        assert produce(n3, "alice", "pay", [b"pay-%d" % p], partition=p) == [None], p
    # Describe but no Write on payroll: each node's Produce handler refuses.
    denied = {i: denials(n, "Produce") for i, n in c.nodes.items()}
    for p in range(3):
        assert produce(n3, "alice", "payroll", [b"payroll-%d" % p], partition=p) == [TAF], p
    for i, n in c.nodes.items():
        assert denials(n, "Produce") > denied[i], f"node {i} counted no Produce denial"


# --- 2. replication under the authorizer --------------------------------------------------


def test_replication_needs_cluster_action_for_the_nodes_then_survives_a_leader_kill(acl_cluster):
    c = acl_cluster
    n1 = c.nodes[1]
    # Alice's own rights, and ClusterAction for User:ANONYMOUS from an address no node has:
    # a host-restricted ACL for another host lets no replica fetch through.
    create_acls(n1, allow(ALICE, TOPIC, "ledger", Op.WRITE), allow(ALICE, TOPIC, "ledger", Op.READ),
                allow(ALICE, GROUP, "alice-", Op.READ, PREFIXED), cluster_action("127.0.0.9"))
    # min.insync.replicas=2: the write needs a follower even once the leader dropped the
    # followers from the ISR (replica.lag.time.max.ms is 10 s).
    create_topic(n1, "ledger", 1, 3, {"min.insync.replicas": "2"})
    leader = wait_led(c, "ledger", 1, 3)[0]
    others = [i for i in c.nodes if i != leader]
    fetch_denials = denials(c.nodes[leader], "Fetch")

    # Phase 1: no ClusterAction for the nodes: the acks=all write does not complete.
    start = time.monotonic()
    stalled = produce(c.nodes[others[0]], "alice", "ledger", [b"stalled"],
                      **{"message.timeout.ms": 8000}, timeout=15)
    took = time.monotonic() - start
    assert stalled[0] in ("_MSG_TIMED_OUT", "REQUEST_TIMED_OUT", "NOT_ENOUGH_REPLICAS",
                          "NOT_ENOUGH_REPLICAS_AFTER_APPEND"), \
        f"an acks=all write to a replication factor 3 topic got {stalled} in {took:.1f} s " \
        f"although no node may fetch as a follower"
    assert took >= 7, f"the write failed after {took:.1f} s, not by waiting: {stalled}"
    assert denials(c.nodes[leader], "Fetch") > fetch_denials, \
        f"node {leader} (the leader) counted no denied Fetch from its followers"

    # Phase 2: ClusterAction on the cluster for User:ANONYMOUS from each node's address.
    create_acls(n1, *[cluster_action(ip) for ip in node_ips(c)])
    wait_isr(c, "ledger", 0, [1, 2, 3])
    sent = [b"v%d" % i for i in range(20)]
    assert produce(c.nodes[others[0]], "alice", "ledger", sent) == [None] * len(sent)

    # The acknowledged records are on another node: kill the leader, read them from the rest.
    c.kill(leader)
    survivor = c.nodes[others[0]]
    new_leader = wait_until(lambda: (p := partitions(survivor, "ledger")) and p[0].leader in others
                            and p[0].leader, 30, f"a new leader of ledger/0 ({c.describe()})")
    got = read(c.nodes[others[1]], "alice", "ledger",
               until=lambda vs: [v for v in vs if v != b"stalled"] == sent)
    # The write that timed out may be there too (the leader appended it and waited).
    assert [v for v in got if v != b"stalled"] == sent, \
        f"read {got} from node {others[1]} after killing node {leader} (new leader {new_leader})"


# --- 3. a full restart ----------------------------------------------------------------------


def test_acls_survive_a_full_cluster_restart(acl_cluster):
    c = acl_cluster
    n1, n2, n3 = c.nodes[1], c.nodes[2], c.nodes[3]
    bindings = [allow(ALICE, TOPIC, "pay", Op.WRITE), allow(ALICE, TOPIC, "payroll", Op.DESCRIBE),
                allow(ALICE, TOPIC, "ledger", Op.WRITE),
                AclBinding(TOPIC, "pay", LITERAL, ALICE, "127.0.0.9", Op.READ, DENY),
                *[cluster_action(ip) for ip in node_ips(c)]]
    gone = allow(ALICE, TOPIC, "old", Op.WRITE)
    create_acls(n1, *bindings, gone)
    # A deletion is in the log too (made through node 2).
    deleted = admin(n2).delete_acls([AclBindingFilter(TOPIC, "old", LITERAL, ALICE, "*", Op.WRITE,
                                                      ALLOW)], request_timeout=15)
    assert [key(b) for f in deleted.values() for b in f.result(timeout=20)] == [key(gone)]
    expected = {key(b) for b in bindings}
    wait_listed_everywhere(c, expected)
    create_topic(n1, "pay", 3, 1)
    create_topic(n1, "payroll", 3, 1)
    create_topic(n1, "ledger", 1, 3, {"min.insync.replicas": "2"})
    wait_led(c, "ledger", 1, 3)
    assert produce(n2, "alice", "ledger", [b"before"]) == [None]

    stop_all(c)
    c.start()

    wait_listed_everywhere(c, expected)
    assert sorted(wait_led(c, "pay", 3, 1).values()) == [1, 2, 3]
    wait_led(c, "payroll", 3, 1)
    for p in range(3):
        assert produce(n3, "alice", "pay", [b"pay-%d" % p], partition=p) == [None], p
        assert produce(n3, "alice", "payroll", [b"payroll-%d" % p], partition=p) == [TAF], p
    assert produce(n3, "alice", "old", [b"old"]) == [TAF]
    # The nodes' ClusterAction came back too: followers fetch, acks=all writes complete.
    wait_led(c, "ledger", 1, 3)
    wait_isr(c, "ledger", 0, [1, 2, 3])
    assert produce(n2, "alice", "ledger", [b"after-%d" % i for i in range(5)]) == [None] * 5


# --- 4. a refused follower --------------------------------------------------------------------


def test_a_follower_the_leader_refuses_backs_off(acl_cluster):
    """Without ClusterAction the leader refuses every replica fetch (CLUSTER_AUTHORIZATION_FAILED
    in the response's top-level error code). The follower must then wait before asking again,
    as Kafka's does (replica.fetch.backoff.ms, 1 s by default), not ask again at once: a loop of
    refused fetches costs both nodes CPU and the leader one "authorization denied" log line
    each."""
    c = acl_cluster
    create_topic(c.nodes[1], "ledger", 1, 3)
    leader = c.nodes[wait_led(c, "ledger", 1, 3)[0]]
    wait_until(lambda: denials(leader, "Fetch") > 0, 10, "the leader to refuse a replica fetch")
    before, start = denials(leader, "Fetch"), time.monotonic()
    time.sleep(3)   # the window the refusals are counted in
    refused, took = denials(leader, "Fetch") - before, time.monotonic() - start
    # 2 followers; even Sluice's own 100 ms retry pause would make about 60.
    assert refused < 300, \
        f"the 2 followers sent {refused:.0f} refused fetches in {took:.1f} s " \
        f"({refused / took / 2:.0f} per follower and second): no back-off after a refusal"
