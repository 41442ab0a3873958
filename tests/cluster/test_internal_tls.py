"""Mutual TLS on the internal listener (`--internal-tls-cert-file`, `--internal-tls-key-file`,
`--internal-tls-ca-file`). The internal listener takes metadata proposals, Raft votes and the
nodes' calls to each other: without TLS anyone who reaches its port can change the cluster (an
ACL, a user, a topic), whatever the Kafka listeners require.

A 3-node cluster whose nodes hold certificates of one authority elects, replicates acks=all
writes and fails over as a plain one does; a caller without a certificate, or with one of
another authority, is closed on without an answer and logged; a renewed certificate is loaded
without a restart, an unusable one is refused and the previous one kept; bad settings stop
`serve` with a message naming them."""

import datetime
import json
import os
import socket
import ssl
import struct
import subprocess
import time

import pytest
import trustme
from confluent_kafka import Consumer, Producer

from conftest import SLUICE, free_port, wait_until, write_cert

from .checker import OK, History
from .workload import drain_and_check, produce_records

pytestmark = pytest.mark.timeout(180)

TOPIC = "internal-tls"


def internal_tls_flags(files, ca_file):
    return ["--internal-tls-cert-file", str(files["cert"]), "--internal-tls-key-file", str(files["key"]),
            "--internal-tls-ca-file", str(ca_file)]


def frame(request):
    body = json.dumps(request).encode()
    return struct.pack(">I", len(body)) + body


def answer_to(sock, request):
    """What the listener answers to one frame: the bytes it sends back (an answer is a frame
    naming the request's kind), b'' when it closes or refuses the TLS session."""
    sock.settimeout(15)
    try:
        sock.sendall(frame(request))
        return sock.recv(4096)
    except (ssl.SSLError, ConnectionResetError, BrokenPipeError):
        return b""


def stranger_answers(address, context=None):
    """Asks the internal listener at `address` for the metadata leader's read index, in the
    clear (`context` None) or over TLS with `context`."""
    host, port = address.rsplit(":", 1)
    with socket.create_connection((host, int(port)), timeout=10) as raw:
        if context is None:
            return answer_to(raw, "ReadIndex")
        try:
            with context.wrap_socket(raw, server_hostname=host) as tls:
                return answer_to(tls, "ReadIndex")
        except (ssl.SSLError, ConnectionResetError):
            return b""      # refused during the handshake (TLS 1.2)


def transactions_across_nodes(c):
    """A transaction over every partition of TOPIC (led by different nodes; the coordinator on
    one of them) commits, one is aborted, and a read_committed consumer in a group sees exactly
    the committed one and commits its offsets. Markers, the partitions' checks with the
    coordinator and the group's offsets travel as calls between the nodes."""
    p = Producer({"bootstrap.servers": c.bootstrap, "transactional.id": "internal-tls-txn",
                  "transaction.timeout.ms": 20000})
    p.init_transactions(30)
    for outcome in ("commit", "abort"):
        p.begin_transaction()
        for partition in range(3):
            p.produce(TOPIC + "-txn", value=f"{outcome}-{partition}".encode(), partition=partition)
        if outcome == "commit":
            p.commit_transaction(30)
        else:
            p.abort_transaction(30)
    consumer = Consumer({"bootstrap.servers": c.bootstrap, "group.id": "internal-tls-readers",
                         "isolation.level": "read_committed", "auto.offset.reset": "earliest",
                         "enable.auto.commit": False})
    got = []
    try:
        consumer.subscribe([TOPIC + "-txn"])

        def read_all():
            m = consumer.poll(0.5)
            if m is not None and m.error() is None:
                got.append(m.value().decode())
            return len(got) >= 3
        wait_until(read_all, 30, "the committed transaction's records")
        consumer.commit(asynchronous=False)
    finally:
        consumer.close()
    assert sorted(got) == ["commit-0", "commit-1", "commit-2"], got


def acked(c, count, history):
    sends = produce_records(c.bootstrap, TOPIC, history, count)
    assert all(s.status == OK for s in sends), [(s.value, s.status, s.error) for s in sends if s.status != OK][:5]


def test_a_cluster_over_mutual_tls_replicates_fails_over_and_refuses_strangers(cluster, tmp_path):
    ca = trustme.CA()
    ca_file = tmp_path / "cluster-ca.pem"
    ca.cert_pem.write_to_path(str(ca_file))
    files = write_cert(ca, tmp_path, "node")
    c = cluster(3, extra=internal_tls_flags(files, ca_file) + ["--tls-reload-interval-ms", "200"])
    for i in c.ids:
        assert "internal_tls=true" in c.node(i).log(), c.node(i).log()[-2000:]

    # Replication, the controller and failover all run over the internal listener.
    c.create_topic(TOPIC, 3, replication_factor=3, config={"min.insync.replicas": "2"})
    history = History()
    acked(c, 50, history)
    leader = c.wait_for_leader(TOPIC, 0)
    c.kill(leader)
    c.wait_for_leader(TOPIC, 0, not_node=leader, timeout=20)
    acked(c, 50, history)
    c.restart(leader)
    c.wait_in_sync(TOPIC, timeout=30)

    # Transactions and groups: the nodes call each other over the internal listener.
    c.create_topic(TOPIC + "-txn", 3, replication_factor=3)
    transactions_across_nodes(c)
    for i in c.ids:
        assert "internal listener: connection refused" not in c.node(i).log(), \
            f"node {i} refused a connection from the cluster itself: {c.node(i).log()[-3000:]}"

    # Strangers: no certificate, or one of another authority, get no answer.
    target = c.node(c.metadata_leader()).internal_address
    # (A plain caller gets a TLS alert, 0x15, and the connection closes.)
    answer = stranger_answers(target)
    assert b"ReadIndex" not in answer, f"a plain caller was answered: {answer}"
    no_cert = ssl.create_default_context(cafile=str(ca_file))
    answer = stranger_answers(target, no_cert)
    assert b"ReadIndex" not in answer, f"a caller without a certificate was answered: {answer}"
    other = trustme.CA()
    mallory = write_cert(other, tmp_path, "mallory")
    foreign = ssl.create_default_context(cafile=str(ca_file))
    foreign.load_cert_chain(str(mallory["cert"]), str(mallory["key"]))
    answer = stranger_answers(target, foreign)
    assert b"ReadIndex" not in answer, f"a certificate of another authority was answered: {answer}"
    # ... while a holder of the cluster's authority is (the same bytes, the right certificate).
    member = ssl.create_default_context(cafile=str(ca_file))
    member.load_cert_chain(str(files["cert"]), str(files["key"]))
    answer = stranger_answers(target, member)
    assert b"ReadIndex" in answer, answer
    node = c.node(c.metadata_leader())
    wait_until(lambda: "internal listener: connection refused" in node.log(), 10,
               "the refusals to be logged")

    # A renewed certificate (same authority) is loaded without a restart; new connections use it.
    # (Counted: the reload may run between the two replacements and refuse the pair once.)
    reloaded, refused = "internal listener's TLS certificate reloaded", "cannot be used; the previous certificate stays"
    before = {i: c.node(i).log().count(reloaded) for i in c.ids}
    renewed = write_cert(ca, tmp_path, "renewed")
    for kind in ("cert", "key"):
        os.replace(renewed[kind], files[kind])
    for i in c.ids:
        wait_until(lambda: c.node(i).log().count(reloaded) > before[i], 15,
                   f"node {i} to reload its internal certificate")
    follower = next(i for i in c.ids if i != c.leader_of(TOPIC, 0))
    c.restart(follower)
    c.wait_in_sync(TOPIC, timeout=30)
    acked(c, 50, history)

    # An unusable file is refused and the previous certificate stays.
    before = {i: c.node(i).log().count(refused) for i in c.ids}
    files["key"].write_text("not a key\n")
    for i in c.ids:
        wait_until(lambda: c.node(i).log().count(refused) > before[i], 15,
                   f"node {i} to refuse the broken key")
    acked(c, 20, history)

    result = drain_and_check(c, TOPIC, history, "internal-tls")
    assert result.valid, str(result)


def serve_refusal(tmp_path, flags, cluster=True):
    """Runs `serve` with `flags`; it must exit at once with an error: its stderr."""
    port = free_port()
    cmd = [str(SLUICE), "serve", "--data-dir", str(tmp_path / "data"), "--listen", f"127.0.0.1:{free_port()}",
           "--admin-listen", f"127.0.0.1:{free_port()}"]
    if cluster:
        cmd += ["--node-id", "1", "--cluster", f"1@127.0.0.1:{port}"]
    run = subprocess.run(cmd + flags, capture_output=True, text=True, timeout=60)
    assert run.returncode != 0, f"serve started with {flags}: {run.stdout[-500:]}"
    return run.stderr


def test_bad_internal_tls_settings_stop_serve_with_a_message(tmp_path):
    ca = trustme.CA()
    ca_file = tmp_path / "ca.pem"
    ca.cert_pem.write_to_path(str(ca_file))
    good = write_cert(ca, tmp_path, "node")
    flags = internal_tls_flags(good, ca_file)

    assert "internal_tls_ca_file" in serve_refusal(tmp_path, flags[:4])
    assert "need cluster" in serve_refusal(tmp_path, flags, cluster=False)
    missing = tmp_path / "missing.pem"
    err = serve_refusal(tmp_path, ["--internal-tls-cert-file", str(missing)] + flags[2:])
    assert "internal_tls_cert_file" in err and "missing.pem" in err, err
    past = datetime.datetime.now(datetime.timezone.utc) - datetime.timedelta(days=2)
    expired = write_cert(ca, tmp_path, "expired", not_before=past - datetime.timedelta(days=30),
                         not_after=past)
    err = serve_refusal(tmp_path, internal_tls_flags(expired, ca_file))
    assert "internal_tls_cert_file" in err and "expired" in err, err
    other = write_cert(trustme.CA(), tmp_path, "other")
    err = serve_refusal(tmp_path, ["--internal-tls-cert-file", str(good["cert"]),
                                   "--internal-tls-key-file", str(other["key"]),
                                   "--internal-tls-ca-file", str(ca_file)])
    assert "internal_tls_key_file" in err, err
