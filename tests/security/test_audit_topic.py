"""The audit log's topic (`audit_log_topic`): every security event — logins, failed logins,
user, ACL and quota changes with who made them — also as one JSON record on a topic, read
here with confluent-kafka as any consumer would; and a bad topic name refused at start."""

import json
import subprocess

from confluent_kafka import Consumer

from cluster.kafka_cluster import kafka_libs
from conftest import SLUICE, free_port, wait_until
from security.conftest import create_user
from security.test_kafka_tools import configs
from security.test_sasl import (PASSWORD, authenticate_v1, confluent_conf, confluent_roundtrip,
                                connect, handshake)

TOPIC = "sluice.audit"


def audit_records(b):
    c = Consumer({"bootstrap.servers": b.bootstrap, "group.id": "audit-reader",
                  "auto.offset.reset": "earliest", "enable.auto.commit": False})
    c.subscribe([TOPIC])
    records = []
    try:
        for _ in range(20):
            m = c.poll(0.5)
            if m is None:
                if records:
                    break
                continue
            if m.error() is None:
                records.append((m.key(), json.loads(m.value())))
    finally:
        c.close()
    return records


def test_security_events_go_to_the_audit_topic_and_the_file(start_secure, tmp_path):
    audit_file = tmp_path / "audit.log"
    b = start_secure(extra=["--audit-log-topic", TOPIC, "--audit-log-file", str(audit_file)])
    create_user(b, "alice", PASSWORD, "SCRAM-SHA-512")
    confluent_roundtrip(confluent_conf(b, "SASL_PLAINTEXT", "SCRAM-SHA-512", "alice", PASSWORD),
                        "audited-topic", n=2)
    s = connect(b, "SASL_PLAINTEXT")
    assert handshake(s, "PLAIN")[0] == 0
    assert authenticate_v1(s, b"\0alice\0not-the-password")[0] == 58
    r = configs(kafka_libs(), b.bootstrap, "--alter", "--add-config", "producer_byte_rate=2000000",
                "--entity-type", "clients", "--entity-name", "noisy")
    assert r.returncode == 0, r.stdout + r.stderr

    def complete():
        events = [e for _, e in audit_records(b)]
        kinds = {(e["event"], e.get("outcome")) for e in events}
        wanted = {("user_change", "success"), ("authentication", "success"),
                  ("authentication", "failure"), ("quota_change", "success")}
        return wanted <= kinds and events

    events = wait_until(complete, 30, "the audit events on the topic")
    quota = next(e for e in events if e["event"] == "quota_change")
    assert (quota["entity"], quota["set"], quota["by"]) == \
        ("client-id=noisy", {"producer_byte_rate": 2000000.0}, "User:ANONYMOUS"), quota
    change = next(e for e in events if e["event"] == "user_change")
    assert (change["user"], change["by"]) == ("alice", "User:ANONYMOUS"), change
    # Keyed by the node that saw the event.
    assert {k for k, _ in audit_records(b)} == {b"1"}
    # Never a password, on the topic or in the file; the file has the same events.
    raw = json.dumps(events)
    assert "not-the-password" not in raw and PASSWORD not in raw
    in_file = [json.loads(line)["event"] for line in audit_file.read_text().splitlines()]
    assert "quota_change" in in_file and "authentication" in in_file


def test_a_bad_audit_topic_name_stops_serve(tmp_path):
    r = subprocess.run([str(SLUICE), "serve", "--listen", f"127.0.0.1:{free_port()}",
                        "--admin-listen", f"127.0.0.1:{free_port()}",
                        "--data-dir", str(tmp_path / "d"), "--audit-log-topic", "no spaces/allowed"],
                       capture_output=True, text=True, timeout=30)
    assert r.returncode != 0 and "audit_log_topic" in r.stderr, r.stderr
