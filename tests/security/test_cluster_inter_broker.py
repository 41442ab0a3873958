"""Followers fetching over a secured listener (`--inter-broker-listener-name`, Kafka's
`inter.broker.listener.name`): partition data between the nodes goes over TLS, and under the
authorizer the followers are a principal of their own instead of User:ANONYMOUS on a
PLAINTEXT listener.

1. An SSL listener named REPLICATION that requires client certificates of the cluster's
   authority: followers present the node's internal certificate (`--internal-tls-*`, which
   also puts the internal listener under mutual TLS). acks=all writes to a replication factor 3
   topic complete, the followers' fetchers dial the REPLICATION ports, a leader kill loses
   nothing.
2. A SASL_SSL listener with the authorizer on: followers log in as the SCRAM user
   `replicator` (`--inter-broker-sasl-username`, password from the environment), a super
   user; User:ANONYMOUS has no ACL at all. acks=all writes complete and survive a leader kill;
   no Fetch is denied.
3. Settings that cannot work stop `serve` with a message naming them.

Each node also keeps a PLAINTEXT listener on loopback for the test harness (not first, so
that nothing falls back to it by default)."""

import re
import signal
import subprocess

import pytest
import trustme
from confluent_kafka import OFFSET_BEGINNING, Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from cluster.checker import OK, History
from cluster.harness import cluster, cluster_port  # noqa: F401  (the fixture)
from cluster.workload import drain_and_check, produce_records
from conftest import SLUICE, cluster_certificates, free_port, wait_until
from security.conftest import create_user, metric

pytestmark = pytest.mark.timeout(180)

PASSWORDS = {"admin": "admin-secret-1", "replicator": "replicator-secret-1"}


def with_listener(node, name, protocol):
    """The node listens on PLAINTEXT (node.port, for the harness) and on `name`, a listener
    speaking `protocol`, first."""
    node.secure_port = cluster_port()
    base = node.command

    def command():
        cmd = base()
        i = cmd.index("--listen")
        listeners = f"{name}://{node.host}:{node.secure_port},PLAINTEXT://{cmd[i + 1]}"
        return cmd[:i] + ["--listeners", listeners, "--listener-security-protocol-map",
                          f"{name}:{protocol},PLAINTEXT:PLAINTEXT"] + cmd[i + 2:]

    node.command = command


def fetcher_addresses(node):
    """The addresses this node's replica fetchers dialled, from its log."""
    return set(re.findall(r"replica fetcher started.*?addr=(\S+)", node.log()))


def assert_fetched_over(c, port_of):
    """The live nodes' fetchers dialled the secured listeners, and nothing else (a node that
    leads every partition it holds dials nothing)."""
    secured = {f"127.0.0.1:{port_of(n)}" for n in c.nodes.values()}
    dialled = {i: fetcher_addresses(c.nodes[i]) for i in c.live()}
    assert set().union(*dialled.values()), f"no fetcher started: {dialled}"
    for i, addresses in dialled.items():
        assert addresses <= secured, \
            f"node {i}'s fetchers dialled {addresses}, the secured listeners are {secured}"


def ssl_replication_flags(files, client_ca=None):
    """Followers fetch over REPLICATION (give the node that listener with `with_listener`), an
    SSL listener requiring client certificates of `client_ca` (the cluster's authority by
    default), presenting the node's internal certificate; the internal listener under mutual
    TLS."""
    return ["--tls-cert-file", str(files["cert"]), "--tls-key-file", str(files["key"]),
            "--tls-client-auth", "required", "--tls-client-ca-file", str(client_ca or files["ca"]),
            "--internal-tls-cert-file", str(files["cert"]), "--internal-tls-key-file", str(files["key"]),
            "--internal-tls-ca-file", str(files["ca"]), "--inter-broker-listener-name", "REPLICATION"]


def ssl_replication_cluster(cluster, files, client_ca=None):
    """3 nodes with ssl_replication_flags, started."""
    c = cluster(3, extra=ssl_replication_flags(files, client_ca), start=False)
    for node in c.nodes.values():
        with_listener(node, "REPLICATION", "SSL")
    return c.start()


def test_followers_fetch_over_an_ssl_listener_with_the_node_certificate(cluster, tmp_path):
    c = ssl_replication_cluster(cluster, cluster_certificates(tmp_path))
    topic = "over-ssl"
    c.create_topic(topic, 3, replication_factor=3, config={"min.insync.replicas": "2"})
    history = History()
    sends = produce_records(c.bootstrap, topic, history, 100)
    assert all(s.status == OK for s in sends), [(s.status, s.error) for s in sends if s.status != OK][:5]
    c.wait_in_sync(topic, timeout=30)
    assert_fetched_over(c, lambda n: n.secure_port)

    leader = c.wait_for_leader(topic, 0)
    c.kill(leader)
    c.wait_for_leader(topic, 0, not_node=leader, timeout=20)
    sends = produce_records(c.bootstrap, topic, history, 50)
    assert all(s.status == OK for s in sends), [(s.status, s.error) for s in sends if s.status != OK][:5]
    result = drain_and_check(c, topic, history, "inter-broker-ssl")
    assert result.valid, str(result)


def test_a_follower_whose_certificate_the_leader_refuses_copies_nothing_and_says_why(cluster, tmp_path):
    """The REPLICATION listeners take client certificates of another authority only: every
    follower's TLS session is refused (under TLS 1.3 by an alert after the handshake), each
    follower names the refusal once per leader, and an acks=all write that needs a follower is
    never acknowledged."""
    other_ca = tmp_path / "other-ca.pem"
    trustme.CA().cert_pem.write_to_path(str(other_ca))
    c = ssl_replication_cluster(cluster, cluster_certificates(tmp_path), client_ca=other_ca)
    topic = "refused-followers"
    c.create_topic(topic, 1, replication_factor=3, config={"min.insync.replicas": "2"})
    history = History()
    sends = produce_records(c.bootstrap, topic, history, 5, timeout_s=12,
                            conf={"message.timeout.ms": 8000, "request.timeout.ms": 8000})
    assert not [s for s in sends if s.status == OK], "acknowledged although no follower can copy"
    leader = c.wait_for_leader(topic, 0)
    refusal = "the leader refused this follower's connection"
    for i in c.ids:
        if i == leader:
            continue
        lines = [line for line in c.nodes[i].log().splitlines() if refusal in line]
        assert len(lines) == 1, f"node {i} logged the refusal {len(lines)} times: {lines[:3]}"
        assert "TLS" in lines[0], lines[0]


def sasl_ssl(node, files, user, **extra):
    return {"bootstrap.servers": f"127.0.0.1:{node.secure_port}", "security.protocol": "SASL_SSL",
            "ssl.ca.location": str(files["ca"]), "sasl.mechanism": "SCRAM-SHA-512",
            "sasl.username": user, "sasl.password": PASSWORDS[user], **extra}


def stop_all(c):
    running = [n for n in c.nodes.values() if n.alive()]
    for n in running:
        n.proc.send_signal(signal.SIGTERM)
    for n in running:
        assert n.proc.wait(timeout=30) == 0, n.log()[-3000:]


def test_followers_log_in_over_sasl_ssl_under_the_authorizer(cluster, tmp_path):
    files = cluster_certificates(tmp_path)
    flags = ["--tls-cert-file", str(files["cert"]), "--tls-key-file", str(files["key"]),
             "--inter-broker-listener-name", "SASL_SSL", "--inter-broker-tls-ca-file", str(files["ca"]),
             "--inter-broker-sasl-username", "replicator"]
    env = {"SLUICE_INTER_BROKER_SASL_PASSWORD": PASSWORDS["replicator"]}
    c = cluster(3, extra=flags, env=env, start=False)
    for node in c.nodes.values():
        with_listener(node, "SASL_SSL", "SASL_SSL")
    c.start()
    for user, password in PASSWORDS.items():
        create_user(c.nodes[1], user, password, "SCRAM-SHA-512")
    # The authorizer on: only the two super users may do anything; no ACL for anyone.
    stop_all(c)
    for node in c.nodes.values():
        node.extra += ["--authorizer", "acl", "--super-users", "User:admin;User:replicator"]
        node.admin_login = ("admin", PASSWORDS["admin"])
    c.start()

    admin = AdminClient(sasl_ssl(c.nodes[1], files, "admin"))
    topic = "over-sasl-ssl"
    f = admin.create_topics([NewTopic(topic, 1, 3, config={"min.insync.replicas": "2"})],
                            request_timeout=20)[topic]
    assert f.result(timeout=30) is None
    sent = [b"v%d" % i for i in range(50)]
    reports = []
    p = Producer(sasl_ssl(c.nodes[2], files, "admin", acks="all", **{"message.timeout.ms": 20_000}))
    for v in sent:
        p.produce(topic, value=v, partition=0, on_delivery=lambda e, m: reports.append(e))
    assert p.flush(30) == 0
    assert reports == [None] * len(sent), reports[:5]
    assert_fetched_over(c, lambda n: n.secure_port)
    for i in c.live():
        assert metric(c.nodes[i], "sluice_authorization_denials_total", '{api="Fetch"}') == 0, \
            f"node {i} denied a Fetch"

    # The acknowledged records are on the followers: kill the leader, read them from the rest.
    leader = admin.list_topics(topic, timeout=10).topics[topic].partitions[0].leader
    c.kill(leader)
    reader = next(i for i in c.ids if i != leader)
    consumer = Consumer(sasl_ssl(c.nodes[reader], files, "admin", **{"group.id": "reader",
                                                                      "enable.auto.commit": False}))
    got = []
    try:
        consumer.assign([TopicPartition(topic, 0, OFFSET_BEGINNING)])

        def all_read():
            m = consumer.poll(0.5)
            if m is not None and m.error() is None:
                got.append(m.value())
            return len(got) >= len(sent)
        wait_until(all_read, 40, f"the records from the nodes left after killing node {leader}")
    finally:
        consumer.close()
    assert got == sent


def serve_refusal(tmp_path, flags, listeners):
    cmd = [str(SLUICE), "serve", "--data-dir", str(tmp_path / "data"), "--listeners", listeners,
           "--admin-listen", f"127.0.0.1:{free_port()}", "--node-id", "1",
           "--cluster", f"1@127.0.0.1:{free_port()}"]
    run = subprocess.run(cmd + flags, capture_output=True, text=True, timeout=60)
    assert run.returncode != 0, f"serve started with {flags}: {run.stdout[-500:]}"
    return run.stderr


def test_inter_broker_settings_that_cannot_work_stop_serve(tmp_path):
    files = cluster_certificates(tmp_path)
    tls = ["--tls-cert-file", str(files["cert"]), "--tls-key-file", str(files["key"])]
    plain = f"PLAINTEXT://127.0.0.1:{free_port()}"
    sasl_ssl_listener = f"SASL_SSL://127.0.0.1:{free_port()},{plain}"
    err = serve_refusal(tmp_path, ["--inter-broker-listener-name", "NOPE"], plain)
    assert "inter_broker_listener_name NOPE" in err and "PLAINTEXT" in err, err
    err = serve_refusal(tmp_path, tls + ["--inter-broker-listener-name", "SASL_SSL"], sasl_ssl_listener)
    assert "inter_broker_tls_ca_file" in err, err
    err = serve_refusal(tmp_path, tls + ["--inter-broker-listener-name", "SASL_SSL",
                                         "--inter-broker-tls-ca-file", str(files["ca"])], sasl_ssl_listener)
    assert "inter_broker_sasl_username" in err, err
    err = serve_refusal(tmp_path, ["--inter-broker-sasl-username", "x"], plain)
    assert "does not speak SASL" in err, err
    err = serve_refusal(tmp_path, tls + ["--inter-broker-listener-name", "SASL_SSL",
                                         "--inter-broker-tls-ca-file", str(files["ca"]),
                                         "--inter-broker-sasl-username", "x",
                                         "--inter-broker-sasl-password", "y",
                                         "--inter-broker-sasl-mechanism", "MD5"], sasl_ssl_listener)
    assert "inter_broker_sasl_mechanism 'MD5'" in err, err
