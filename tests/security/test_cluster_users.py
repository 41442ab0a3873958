"""SASL users in a 3-node cluster: kept in the metadata log, so a user made through one node
logs in on every node, also after the node it was made on is killed; and each listener tells
its clients the other nodes' addresses on that same listener (Kafka's rule), so a SASL client
never gets sent to a PLAINTEXT port."""

from confluent_kafka.admin import AdminClient

from cluster.harness import cluster, cluster_port  # noqa: F401  (the fixture)
from security.conftest import create_user
from security.test_sasl import PASSWORD, confluent_conf, confluent_roundtrip


def with_sasl_listener(node):
    node.sasl_port = cluster_port()
    base = node.command

    def command():
        cmd = base()
        i = cmd.index("--listen")
        listeners = f"PLAINTEXT://{cmd[i + 1]},SASL_PLAINTEXT://{node.host}:{node.sasl_port}"
        return cmd[:i] + ["--listeners", listeners] + cmd[i + 2:]

    node.command = command
    node.ports = {"PLAINTEXT": node.port, "SASL_PLAINTEXT": node.sasl_port}
    node.address = lambda listener: f"{node.host}:{node.ports[listener]}"


def test_a_user_made_on_one_node_logs_in_on_every_node(cluster):
    c = cluster(3, start=False)
    for node in c.nodes.values():
        with_sasl_listener(node)
    c.start()
    create_user(c.nodes[1], "alice", PASSWORD)
    conf = confluent_conf(c.nodes[3], "SASL_PLAINTEXT", "SCRAM-SHA-256", "alice", PASSWORD)
    admin = AdminClient(conf)
    brokers = admin.list_topics(timeout=20).brokers
    assert {b.id: b.port for b in brokers.values()} == \
        {i: n.sasl_port for i, n in c.nodes.items()}, brokers
    c.create_topic("cluster-sasl", 3, replication_factor=3)
    confluent_roundtrip(conf, "cluster-sasl", n=30)
    c.nodes[1].kill()
    conf = confluent_conf(c.nodes[2], "SASL_PLAINTEXT", "SCRAM-SHA-512", "alice", PASSWORD)
    confluent_roundtrip(conf, "after-kill", n=5)
