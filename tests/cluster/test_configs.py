"""Config changes in a cluster: a topic's overrides go through the controller (every node
applies them from the metadata log, and they survive a restart of every node); a node's
replication throttle rates are its own dynamic broker configs, kept in the metadata log so they
survive restarts; every other broker setting is static and refused with a message."""

from confluent_kafka import KafkaError, KafkaException, Producer
from confluent_kafka.admin import AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource

from conftest import wait_until

from .harness import CLIENT_DEFAULTS, cluster  # noqa: F401  (fixture)


def admin_of(c, node):
    return AdminClient({"bootstrap.servers": c.nodes[node].bootstrap, **CLIENT_DEFAULTS})


def topic_config(c, node, topic, key):
    res = ConfigResource(ConfigResource.Type.TOPIC, topic)
    admin = admin_of(c, node)  # kept alive until the answer comes
    return admin.describe_configs([res])[res].result(20)[key].value


def error_code(future):
    try:
        future.result(20)
    except KafkaException as e:
        return e.args[0].code()
    return None


def incremental(admin, kind, name, *entries):
    res = ConfigResource(kind, name, incremental_configs=[
        ConfigEntry(k, v, incremental_operation=op) for k, v, op in entries])
    return admin.incremental_alter_configs([res])[res]


def test_topic_configs_reach_every_node_and_survive_a_full_restart(cluster):
    c = cluster(3)
    c.create_topic("cfg", 3, replication_factor=3)
    admin = admin_of(c, 1)
    incremental(admin, ConfigResource.Type.TOPIC, "cfg",
                ("max.message.bytes", "2000", AlterConfigOpType.SET),
                ("retention.ms", "3600000", AlterConfigOpType.SET)).result(20)
    for node in c.ids:
        assert topic_config(c, node, "cfg", "max.message.bytes") == "2000", f"node {node}"
        assert topic_config(c, node, "cfg", "retention.ms") == "3600000", f"node {node}"
    # Every partition's leader enforces it, wherever it is.
    producer = Producer({"bootstrap.servers": c.bootstrap, **CLIENT_DEFAULTS})
    errors = []
    for p in range(3):
        producer.produce("cfg", value=b"x" * 5000, partition=p,
                         on_delivery=lambda err, _m: errors.append(err))
    producer.flush(20)
    assert len(errors) == 3 and all(e is not None and e.code() == KafkaError.MSG_SIZE_TOO_LARGE
                                    for e in errors), errors
    # The non-incremental form replaces the whole set.
    res = ConfigResource(ConfigResource.Type.TOPIC, "cfg", set_config={"retention.ms": "7200000"})
    admin.alter_configs([res])[res].result(20)
    assert topic_config(c, 2, "cfg", "retention.ms") == "7200000"
    assert topic_config(c, 2, "cfg", "max.message.bytes") != "2000", "back to the default"
    # Refused with Kafka's codes: a bad value, an unknown name, an unknown topic.
    assert error_code(incremental(admin, ConfigResource.Type.TOPIC, "cfg",
                                  ("retention.ms", "soon", AlterConfigOpType.SET))) == 40
    assert error_code(incremental(admin, ConfigResource.Type.TOPIC, "cfg",
                                  ("no.such.config", "1", AlterConfigOpType.SET))) == 40
    assert error_code(incremental(admin, ConfigResource.Type.TOPIC, "nope",
                                  ("retention.ms", "1", AlterConfigOpType.SET))) == 3
    c.restart_all()
    wait_until(lambda: all(topic_config(c, n, "cfg", "retention.ms") == "7200000" for n in c.ids), 30,
               "the config on every node after a restart of all")


def test_throttle_rates_are_per_node_dynamic_configs_and_the_rest_is_static(cluster):
    c = cluster(3)
    admin = admin_of(c, 2)
    rate = "follower.replication.throttled.rate"
    incremental(admin, ConfigResource.Type.BROKER, "2", (rate, "5000000", AlterConfigOpType.SET)).result(20)
    res = ConfigResource(ConfigResource.Type.BROKER, "2")
    described = admin.describe_configs([res])[res].result(20)
    assert described[rate].value == "5000000" and not described[rate].is_read_only
    # Kept in the metadata log: node 2 has it again after a restart, and after every node's.
    def rate_on_2():
        admin = admin_of(c, 2)  # kept alive until the answer comes
        entry = admin.describe_configs([res])[res].result(20).get(rate)
        return entry.value if entry is not None else None
    for restart in (lambda: c.restart(2), c.restart_all):
        restart()
        assert wait_until(rate_on_2, 30, "the throttle rate back on node 2") == "5000000"
    admin = admin_of(c, 2)
    other = ConfigResource(ConfigResource.Type.BROKER, "3")
    admin3 = admin_of(c, 3)
    assert rate not in admin3.describe_configs([other])[other].result(20), "node 3 untouched"
    assert error_code(incremental(admin, ConfigResource.Type.BROKER, "2",
                                  (rate, "fast", AlterConfigOpType.SET))) == 40
    assert error_code(incremental(admin, ConfigResource.Type.BROKER, "2",
                                  ("num.io.threads", "8", AlterConfigOpType.SET))) == 42
    incremental(admin, ConfigResource.Type.BROKER, "2", (rate, None, AlterConfigOpType.DELETE)).result(20)
    assert rate not in admin.describe_configs([res])[res].result(20)
