"""`sluice serve` settings: built-in defaults < TOML file < SLUICE_* environment < flags."""

import socket

from confluent_kafka.admin import AdminClient, ConfigResource

from conftest import Broker, free_port, wait_until
from .clients import create_topic


def topic_config(bootstrap, topic, name):
    admin = AdminClient({"bootstrap.servers": bootstrap})
    res = ConfigResource(ConfigResource.Type.TOPIC, topic)
    return admin.describe_configs([res])[res].result(15)[name].value


def test_precedence_file_env_flag(start_broker, tmp_path):
    config = tmp_path / "sluice.toml"
    config.write_text('log_retention_ms = 1111\nlog_flush_interval_ms = 2222\nnum_partitions = 3\n'
                      'log_segment_bytes = 3333333\n')
    broker = start_broker(
        ["--config", str(config), "--log-flush-interval-ms", "4444"],
        env={"SLUICE_LOG_RETENTION_MS": "5555", "SLUICE_LOG_FLUSH_INTERVAL_MS": "6666"})
    # The metadata request auto-creates the topic with num_partitions from the file.
    meta = AdminClient({"bootstrap.servers": broker.bootstrap}).list_topics("auto", timeout=10)
    assert len(meta.topics["auto"].partitions) == 3
    assert topic_config(broker.bootstrap, "auto", "retention.ms") == "5555"       # env beats file
    assert topic_config(broker.bootstrap, "auto", "flush.interval.ms") == "4444"  # flag beats env
    assert topic_config(broker.bootstrap, "auto", "segment.bytes") == "3333333"   # file beats default
    assert topic_config(broker.bootstrap, "auto", "max.message.bytes") == "1048588"  # default
    assert "sluice is serving" in broker.log() and str(broker.data_dir) in broker.log()


def test_bad_settings_fail_at_start_with_a_message(tmp_path):
    import subprocess
    from conftest import SLUICE
    config = tmp_path / "bad.toml"
    config.write_text('listne = "127.0.0.1:1"\n')
    r = subprocess.run([str(SLUICE), "serve", "--config", str(config)], capture_output=True, text=True, timeout=30)
    assert r.returncode == 1 and "listne" in r.stderr
    r = subprocess.run([str(SLUICE), "serve", "--data-dir", str(tmp_path / "d"), "--log-flush-mode", "never"],
                       capture_output=True, text=True, timeout=30)
    assert r.returncode == 1 and "flush.mode" in r.stderr
    port = free_port()
    with socket.socket() as s:  # the port is taken
        s.bind(("127.0.0.1", port))
        s.listen()
        r = subprocess.run([str(SLUICE), "serve", "--data-dir", str(tmp_path / "d2"), "--listen", f"127.0.0.1:{port}",
                            "--admin-listen", f"127.0.0.1:{free_port()}"], capture_output=True, text=True, timeout=30)
    assert r.returncode == 1 and "binding the Kafka listener" in r.stderr


def test_auto_create_can_be_turned_off(start_broker):
    broker = start_broker(["--auto-create-topics", "false"])
    meta = AdminClient({"bootstrap.servers": broker.bootstrap}).list_topics("nope", timeout=10)
    assert meta.topics["nope"].error is not None and meta.topics["nope"].error.code() == 3
    create_topic(broker.bootstrap, "explicit", 1)
