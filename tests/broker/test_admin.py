"""Topic administration through both clients' admin APIs and through the `sluice` CLI."""

import subprocess

import pytest
from confluent_kafka import KafkaException
from confluent_kafka.admin import (AdminClient, AlterConfigOpType, ConfigResource, ConfigEntry,
                                   NewPartitions, NewTopic)
from kafka import KafkaAdminClient
from kafka.admin import ConfigResource as KConfigResource, ConfigResourceType, NewTopic as KNewTopic
import kafka.errors

from conftest import SLUICE, sluice_cli
from .clients import consume_confluent, create_topic, produce_confluent, total_records


def error_code(future):
    with pytest.raises(KafkaException) as e:
        future.result(15)
    return e.value.args[0].code()


def test_confluent_admin_lifecycle(broker):
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    admin.create_topics([NewTopic("adm", 2, 1, config={"retention.ms": "60000"})])["adm"].result(15)
    assert "adm" in admin.list_topics(timeout=10).topics
    assert len(admin.list_topics(timeout=10).topics["adm"].partitions) == 2

    # Errors a client expects.
    assert error_code(admin.create_topics([NewTopic("adm", 1, 1)])["adm"]) == 36  # TOPIC_ALREADY_EXISTS
    assert error_code(admin.create_topics([NewTopic("bad name", 1, 1)])["bad name"]) == 17  # INVALID_TOPIC
    assert error_code(admin.create_topics([NewTopic("rf3", 1, 3)])["rf3"]) == 38  # INVALID_REPLICATION_FACTOR
    assert error_code(admin.create_topics([NewTopic("zero", 0, 1)])["zero"]) == 37  # INVALID_PARTITIONS
    assert error_code(admin.create_topics([NewTopic("badcfg", 1, 1, config={"no.such": "1"})])["badcfg"]) == 40
    assert error_code(admin.create_topics([NewTopic("badval", 1, 1, config={"retention.ms": "soon"})])["badval"]) == 40

    # Configs: describe, incremental alter, errors.
    res = ConfigResource(ConfigResource.Type.TOPIC, "adm")
    configs = admin.describe_configs([res])[res].result(15)
    assert configs["retention.ms"].value == "60000"
    assert configs["flush.mode"].value == "interval"
    assert configs["segment.bytes"].value == "1073741824"
    alter = ConfigResource(ConfigResource.Type.TOPIC, "adm", incremental_configs=[
        ConfigEntry("flush.mode", "sync", incremental_operation=AlterConfigOpType.SET),
        ConfigEntry("retention.ms", None, incremental_operation=AlterConfigOpType.DELETE)])
    admin.incremental_alter_configs([alter])[alter].result(15)
    configs = admin.describe_configs([res])[res].result(15)
    assert configs["flush.mode"].value == "sync"
    assert configs["retention.ms"].value == "604800000"
    bad = ConfigResource(ConfigResource.Type.TOPIC, "adm", incremental_configs=[
        ConfigEntry("flush.mode", "never", incremental_operation=AlterConfigOpType.SET)])
    assert error_code(admin.incremental_alter_configs([bad])[bad]) == 40
    missing = ConfigResource(ConfigResource.Type.TOPIC, "nope")
    assert error_code(admin.describe_configs([missing])[missing]) == 3

    # The sync topic still takes writes (acknowledged after fsync).
    produce_confluent(broker.bootstrap, "adm", 500)

    # Partitions grow, never shrink.
    admin.create_partitions([NewPartitions("adm", 4)])["adm"].result(15)
    assert len(admin.list_topics(timeout=10).topics["adm"].partitions) == 4
    assert error_code(admin.create_partitions([NewPartitions("adm", 3)])["adm"]) == 37

    # Broker configs are readable.
    b = ConfigResource(ConfigResource.Type.BROKER, "1")
    broker_configs = admin.describe_configs([b])[b].result(15)
    assert broker_configs["num.partitions"].value == "1"

    admin.delete_topics(["adm"])["adm"].result(15)
    assert "adm" not in admin.list_topics(timeout=10).topics
    assert error_code(admin.delete_topics(["adm"])["adm"]) == 3
    assert not (broker.data_dir / "topics" / "adm-0").exists()


def test_kafka_python_admin(broker):
    admin = KafkaAdminClient(bootstrap_servers=broker.bootstrap)
    try:
        admin.create_topics([KNewTopic("kpa", 3, 1, topic_configs={"segment.bytes": "1048576"})])
        assert "kpa" in admin.list_topics()
        described = admin.describe_topics(["kpa"])
        assert len(described[0]["partitions"]) == 3
        with pytest.raises(kafka.errors.TopicAlreadyExistsError):
            admin.create_topics([KNewTopic("kpa", 3, 1)])
        admin.alter_configs([KConfigResource(ConfigResourceType.TOPIC, "kpa", configs={"retention.ms": "1234"})])
        result = admin.describe_configs([KConfigResource(ConfigResourceType.TOPIC, "kpa")])
        text = repr(result)
        assert "1234" in text and "retention.ms" in text
        admin.delete_topics(["kpa"])
        assert "kpa" not in admin.list_topics()
        cluster = admin.describe_cluster()
        assert cluster["controller_id"] == 1 and len(cluster["brokers"]) == 1
    finally:
        admin.close()


def test_describe_log_dirs_reports_partition_sizes_and_disk_space(broker):
    """DescribeLogDirs (kafka-log-dirs.sh, management tools): the one log dir, every
    partition's size as the broker counts it, a topic filter, and the disk's bytes."""
    create_topic(broker.bootstrap, "sized", 2)
    create_topic(broker.bootstrap, "other", 1)
    produce_confluent(broker.bootstrap, "sized", 500)
    admin = KafkaAdminClient(bootstrap_servers=broker.bootstrap)
    try:
        (result,) = admin.describe_log_dirs()
        (log_dir,) = result["log_dirs"]
        assert log_dir["error_code"] == 0 and log_dir["log_dir"].endswith("/topics")
        sizes = {(t["name"], p["partition_index"]): p["partition_size"]
                 for t in log_dir["topics"] for p in t["partitions"]}
        status = broker.status()
        want = {(t["name"], p["partition"]): p["size_bytes"] for t in status["topics"] for p in t["partitions"]}
        assert sizes == want, "every partition, internal ones too, at the size the broker reports"
        assert sizes[("sized", 0)] + sizes[("sized", 1)] > 500 * 20 and sizes[("other", 0)] == 0
        if "total_bytes" in log_dir:  # v4
            assert log_dir["total_bytes"] > log_dir["usable_bytes"] > 0
        (filtered,) = admin.describe_log_dirs({"sized": [1], "missing": [0]})
        topics = filtered["log_dirs"][0]["topics"]
        assert [(t["name"], [p["partition_index"] for p in t["partitions"]]) for t in topics] == [("sized", [1])]
    finally:
        admin.close()


def test_topic_recreated_after_delete_is_empty(broker):
    create_topic(broker.bootstrap, "again", 1)
    produce_confluent(broker.bootstrap, "again", 100)
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    admin.delete_topics(["again"])["again"].result(15)
    create_topic(broker.bootstrap, "again", 1)
    produce_confluent(broker.bootstrap, "again", 3)
    records = consume_confluent(broker.bootstrap, "again", 1, 3, timeout=10)
    assert [r[1] for r in records] == [0, 1, 2]


def test_topics_survive_a_clean_restart(start_broker, tmp_path):
    broker = start_broker()
    create_topic(broker.bootstrap, "durable", 3, {"retention.ms": "-1"})
    produce_confluent(broker.bootstrap, "durable", 3000)
    assert broker.stop() == 0
    assert "stopped cleanly" in broker.log()
    broker.start()
    assert len(consume_confluent(broker.bootstrap, "durable", 3, 3000)) == 3000
    status = broker.status()
    topic = [t for t in status["topics"] if t["name"] == "durable"][0]
    assert topic["configs"] == {"retention.ms": "-1"}


def desc_lines(described):
    """The partition rows of `sluice topic describe`."""
    lines = described.splitlines()
    start = next(i for i, line in enumerate(lines) if line.strip().startswith("PARTITION")) + 1
    return [line for line in lines[start:] if line.strip() and line.split()[0].isdigit()]


def test_cli_topic_commands(broker):
    b = ["-b", broker.bootstrap]
    out = sluice_cli("topic", "create", "cli-t", "--partitions", "3", "--config", "retention.ms=5000", *b).stdout
    assert "created topic cli-t" in out
    assert "cli-t" in sluice_cli("topic", "list", *b).stdout.split()
    r = sluice_cli("topic", "create", "cli-t", *b, check=False)
    assert r.returncode != 0 and "TopicAlreadyExists" in r.stderr
    sluice_cli("topic", "alter-config", "cli-t", "--set", "flush.mode=sync", "--delete", "retention.ms", *b)
    desc = sluice_cli("topic", "describe", "cli-t", *b).stdout
    assert "Partitions: 3" in desc
    assert "flush.mode = sync  (topic)" in desc
    assert "retention.ms = 604800000  (default)" in desc
    r = sluice_cli("topic", "alter-config", "cli-t", "--set", "bogus=1", *b, check=False)
    assert r.returncode == 1 and "unknown topic config 'bogus'" in r.stderr
    r = sluice_cli("topic", "alter-config", "cli-t", *b, check=False)
    assert r.returncode == 1 and "nothing to change" in r.stderr
    r = sluice_cli("topic", "describe", "missing", *b, check=False)
    assert r.returncode == 1 and "UnknownTopicOrPartition" in r.stderr
    # delete-records: one partition below an offset, then everything; bad input named.
    produce_confluent(broker.bootstrap, "cli-t", 60)
    ends = {p: end for p, end in enumerate(
        int(line.split()[-1]) for line in desc_lines(sluice_cli("topic", "describe", "cli-t", *b).stdout))}
    out = sluice_cli("topic", "delete-records", "cli-t", "--partition", "0", "--before", "3", *b).stdout
    assert out.strip() == "cli-t-0: log start offset 3"
    out = sluice_cli("topic", "delete-records", "cli-t", "--before", "end", *b).stdout
    assert sorted(out.strip().splitlines()) == [f"cli-t-{p}: log start offset {ends[p]}" for p in range(3)]
    for args, message in [(["--partition", "0", "--before", "99999"], "OffsetOutOfRange"),
                          (["--before", "7"], "needs --partition"),
                          (["--partition", "0", "--before=-5"], "neither an offset"),
                          (["--partition", "0", "--before", "soon"], "neither an offset"),
                          (["--partition", "9", "--before", "0"], "UnknownTopicOrPartition")]:
        r = sluice_cli("topic", "delete-records", "cli-t", *args, *b, check=False)
        assert r.returncode != 0 and message in r.stderr, (args, r.stderr)
    sluice_cli("topic", "delete", "cli-t", *b)
    assert "cli-t" not in sluice_cli("topic", "list", *b).stdout.split()
    r = sluice_cli("topic", "list", "-b", "127.0.0.1:1", check=False)
    assert r.returncode == 1 and "cannot connect" in r.stderr


def test_cli_consume_ends_at_a_transaction_marker_and_producers_are_described(broker):
    """A partition whose last batch is a transaction's commit marker: `sluice consume -e` must
    move past the marker (no record there) and end. DescribeProducers lists the transactional
    producer with its last sequence and no open transaction, and an idempotent one beside it."""
    from confluent_kafka import Producer
    import kafka
    sluice_cli("topic", "create", "txn-lines", "--partitions", "1", "-b", broker.bootstrap)
    p = Producer({"bootstrap.servers": broker.bootstrap, "transactional.id": "cli-txn"})
    p.init_transactions(20)
    p.begin_transaction()
    for i in range(3):
        p.produce("txn-lines", value=f"in txn {i}".encode())
    p.commit_transaction(20)
    out = sluice_cli("consume", "-t", "txn-lines", "-e", "-b", broker.bootstrap, timeout=30).stdout
    assert out.splitlines() == [f"in txn {i}" for i in range(3)]
    idempotent = Producer({"bootstrap.servers": broker.bootstrap, "enable.idempotence": True})
    idempotent.produce("txn-lines", value=b"idempotent")
    assert idempotent.flush(20) == 0
    admin = KafkaAdminClient(bootstrap_servers=broker.bootstrap)
    try:
        tp = kafka.TopicPartition("txn-lines", 0)
        producers = admin.describe_producers([tp])[tp].active_producers
    finally:
        admin.close()
    assert sorted((x.last_sequence, x.current_transaction_start_offset) for x in producers) == [(0, -1), (2, -1)], producers


def test_cli_produce_and_consume(broker):
    b = ["-b", broker.bootstrap]
    sluice_cli("topic", "create", "lines", "--partitions", "2", *b)
    lines = "".join(f"k{i % 5}:value {i}\n" for i in range(500))
    r = sluice_cli("produce", "-t", "lines", "-K", ":", "-H", "src=cli", "-z", "zstd", *b, stdin=lines)
    assert "produced 500 record(s)" in r.stderr
    out = sluice_cli("consume", "-t", "lines", "-e", "--print-key", "--print-headers", *b).stdout.splitlines()
    assert len(out) == 500
    assert sorted(out) == sorted(f"k{i % 5}\tvalue {i}\tsrc=cli" for i in range(500))
    # Same key → same partition, in order (the Java client's partitioner).
    for key in range(5):
        values = [int(l.split("\t")[1].split()[1]) for l in out if l.startswith(f"k{key}\t")]
        assert values == sorted(values)
    assert len(sluice_cli("consume", "-t", "lines", "-c", "7", *b).stdout.splitlines()) == 7
    tail = sluice_cli("consume", "-t", "lines", "-p", "0", "-o", "end", "-e", *b).stdout
    assert tail == ""
    r = sluice_cli("consume", "-t", "lines", "-p", "9", "-e", *b, check=False)
    assert r.returncode == 1 and "no partition 9" in r.stderr
    r = sluice_cli("produce", "-t", "lines", "--acks", "2", *b, stdin="x\n", check=False)
    assert r.returncode == 1 and "--acks" in r.stderr
    # Records produced by the CLI are ordinary records to a real client.
    assert len(consume_confluent(broker.bootstrap, "lines", 2, 500, timeout=10)) == 500
    # A reader that goes away (`| head -n 3`) ends the command quietly, with status 0: standard
    # output's broken pipe is marked as the reader's (a broker socket's, which stays an error,
    # is covered by the unit test in crates/sluice/src/stdout.rs). More than a pipe's buffer of
    # records, so that the reader is gone before the last write.
    sluice_cli("produce", "-t", "many", *b, stdin="".join(f"{i:0100d}\n" for i in range(20_000)))
    r = subprocess.run(f"set -o pipefail; '{SLUICE}' consume -t many -e -b {broker.bootstrap} | head -n 3",
                       shell=True, executable="/bin/bash", capture_output=True, text=True, timeout=60)
    assert r.returncode == 0 and len(r.stdout.splitlines()) == 3 and "error" not in r.stderr, r
    # Standard error's reader gone too (`2>&1 | true`; `true` is gone before the broker has
    # answered): the message to stderr is dropped and the status is the command's own (0 after
    # "produced N record(s)", 1 after an error), not eprintln!'s panic (101).
    for command, status in [(f"produce -t many -b {broker.bootstrap}", 0),
                            (f"consume -t lines -p 9 -e -b {broker.bootstrap}", 1)]:
        r = subprocess.run(f"set -o pipefail; echo x | '{SLUICE}' {command} 2>&1 | true",
                           shell=True, executable="/bin/bash", capture_output=True, text=True, timeout=60)
        assert r.returncode == status, (command, r)


def test_an_internal_topics_durability_configs_cannot_be_altered(broker):
    """The transaction and group coordinators answer "durable" because their topics fsync
    every write, and rebuild their state by reading the whole compacted partition: an
    AlterConfigs that would turn off fsync, compaction or the infinite retention of an internal
    topic is refused (INVALID_CONFIG, naming the config); its other configs may change."""
    from confluent_kafka import Producer
    p = Producer({"bootstrap.servers": broker.bootstrap, "transactional.id": "pins"})
    p.init_transactions(15)  # creates __transaction_state
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    res = ConfigResource(ConfigResource.Type.TOPIC, "__transaction_state")
    for key, value, op in [("flush.mode", "interval", AlterConfigOpType.SET),
                           ("cleanup.policy", "delete", AlterConfigOpType.SET),
                           ("retention.ms", None, AlterConfigOpType.DELETE)]:
        change = ConfigResource(ConfigResource.Type.TOPIC, "__transaction_state", incremental_configs=[
            ConfigEntry(key, value, incremental_operation=op)])
        with pytest.raises(KafkaException) as e:
            admin.incremental_alter_configs([change])[change].result(15)
        assert e.value.args[0].code() == 40 and key in e.value.args[0].str(), e.value.args[0].str()
    ok = ConfigResource(ConfigResource.Type.TOPIC, "__transaction_state", incremental_configs=[
        ConfigEntry("segment.bytes", "20971520", incremental_operation=AlterConfigOpType.SET)])
    admin.incremental_alter_configs([ok])[ok].result(15)
    configs = admin.describe_configs([res])[res].result(15)
    assert configs["segment.bytes"].value == "20971520"
    assert (configs["flush.mode"].value, configs["cleanup.policy"].value) == ("sync", "compact")

    # A whole-set AlterConfigs (v0, as kafka-python 2 sent it) that leaves the pinned configs
    # out is refused too; kafka-python 3 fills in the topic's other dynamic configs first, so
    # its whole-set change keeps them and is taken.
    kp = KafkaAdminClient(bootstrap_servers=broker.bootstrap)
    try:
        whole = KConfigResource(ConfigResourceType.TOPIC, "__transaction_state", configs={"segment.bytes": "10485760"})
        bare = kp._manager.run(kp._send_alter_configs_requests, [whole], False, False)
        message = bare["topic"]["__transaction_state"]
        assert "InvalidConfigurationError" in message and "flush.mode=sync" in message, message
        filled = kp.alter_configs([whole], incremental=False)
        assert filled["topic"]["__transaction_state"] == "OK", filled
    finally:
        kp.close()
    configs = admin.describe_configs([res])[res].result(15)
    assert configs["segment.bytes"].value == "10485760"
    assert (configs["flush.mode"].value, configs["cleanup.policy"].value) == ("sync", "compact")

    # Transactions still work, fsynced as before.
    p.begin_transaction()
    p.produce("pins-out", b"v")
    p.commit_transaction(15)


def test_manual_assignments_on_one_node(broker):
    """kafka-topics.sh --replica-assignment on a single node: only this node may be named; a
    CreatePartitions assignment names one replica list per new partition, as Kafka requires."""
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    (node,) = admin.list_topics(timeout=10).brokers
    admin.create_topics([NewTopic("placed1", 2, replica_assignment=[[node], [node]])])["placed1"].result(15)
    assert len(admin.list_topics(timeout=10).topics["placed1"].partitions) == 2
    assert error_code(admin.create_topics([NewTopic("elsewhere", 1, replica_assignment=[[node + 1]])])["elsewhere"]) \
        == 39  # INVALID_REPLICA_ASSIGNMENT
    assert error_code(admin.create_partitions(
        [NewPartitions("placed1", 4, replica_assignment=[[node]])])["placed1"]) == 39
    admin.create_partitions([NewPartitions("placed1", 3, replica_assignment=[[node]])])["placed1"].result(15)
    assert len(admin.list_topics(timeout=10).topics["placed1"].partitions) == 3
    assert "elsewhere" not in admin.list_topics(timeout=10).topics


def test_min_insync_replicas_above_one_refuses_acks_all_on_one_node(start_broker):
    """One node is one in-sync replica: a topic asking for `min.insync.replicas=2` gets
    NOT_ENOUGH_REPLICAS (19) for every acks=all write, as Kafka answers, instead of an
    acknowledgement its setting does not allow. acks=1 is taken. Lowering the setting lets
    acks=all through at once; the setting survives a restart."""
    from confluent_kafka import Producer
    from kafka import KafkaProducer
    broker = start_broker()
    create_topic(broker.bootstrap, "isr2", 1, {"min.insync.replicas": "2"})

    def produce(acks):
        p = Producer({"bootstrap.servers": broker.bootstrap, "acks": acks, "retries": 0,
                      "enable.idempotence": False, "message.timeout.ms": 10000})
        errors = []
        p.produce("isr2", b"v", on_delivery=lambda err, msg: errors.append(err))
        assert p.flush(15) == 0
        return errors[0]

    err = produce("all")
    assert err is not None and err.code() == 19, err
    assert produce("1") is None

    kp = KafkaProducer(bootstrap_servers=broker.bootstrap, acks="all", retries=0)
    try:
        with pytest.raises(kafka.errors.NotEnoughReplicasError):
            kp.send("isr2", b"v").get(timeout=15)
    finally:
        kp.close()

    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    lower = ConfigResource(ConfigResource.Type.TOPIC, "isr2", incremental_configs=[
        ConfigEntry("min.insync.replicas", "1", incremental_operation=AlterConfigOpType.SET)])
    admin.incremental_alter_configs([lower])[lower].result(15)
    assert produce("all") is None
    raise_ = ConfigResource(ConfigResource.Type.TOPIC, "isr2", incremental_configs=[
        ConfigEntry("min.insync.replicas", "3", incremental_operation=AlterConfigOpType.SET)])
    admin.incremental_alter_configs([raise_])[raise_].result(15)

    # The broker's own writes to an internal topic need acks=all: above 1 there, on one node,
    # every offset commit would fail, so the setting is refused.
    from confluent_kafka import Consumer, TopicPartition
    c = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "isr2-group"})
    try:
        c.commit(offsets=[TopicPartition("isr2", 0, 1)], asynchronous=False)
    finally:
        c.close()
    internal = ConfigResource(ConfigResource.Type.TOPIC, "__consumer_offsets", incremental_configs=[
        ConfigEntry("min.insync.replicas", "2", incremental_operation=AlterConfigOpType.SET)])
    with pytest.raises(KafkaException) as e:
        admin.incremental_alter_configs([internal])[internal].result(15)
    assert e.value.args[0].code() == 40 and "single node" in e.value.args[0].str(), e.value.args[0].str()

    broker.kill()
    broker.start()
    err = produce("all")
    assert err is not None and err.code() == 19, err
    # Only the refused writes are missing: the acks=1 and the acks=all taken at setting 1.
    assert total_records(broker.bootstrap, "isr2", 1) == 2
