"""`sluice bench e2e` against a cluster whose leader dies mid-run: the benchmark's producers and
consumers look the leaders up again and go on with the new ones, as a Kafka client does. Before,
the first failed send ended a producer and the first failed fetch a consumer, and a run that
met a leadership move (the leader balancer's, a failover) reported nothing useful after it."""

import json
import subprocess
import time

import pytest
from confluent_kafka import Consumer, KafkaException, TopicPartition

from conftest import SLUICE

from .harness import cluster  # noqa: F401  (fixture)

TOPIC = "bench-moves"


def test_bench_e2e_follows_a_leader_killed_mid_run(cluster, tmp_path):
    c = cluster(3)
    c.create_topic(TOPIC, 3, replication_factor=3, config={"min.insync.replicas": "2"})
    c.wait_in_sync(TOPIC)
    out = tmp_path / "e2e.json"
    bench = subprocess.Popen(
        [str(SLUICE), "bench", "e2e", "--brokers", c.bootstrap, "--topic", TOPIC,
         "--partitions", "3", "--rate", "2000", "--size", "128", "--duration", "12", "--warmup", "0.5",
         "--acks", "all", "--quiet", "--no-floor", "--json", str(out)],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        # Mid-run: once a few seconds of records are in (a fixed sleep met a run still setting
        # up on a loaded machine, and killed a leader before the producers had started).
        watcher = Consumer({"bootstrap.servers": c.bootstrap, "group.id": "bench-watch"})
        written = 0
        try:
            deadline = time.monotonic() + 60
            while written < 6_000 and time.monotonic() < deadline and bench.poll() is None:
                try:
                    written = sum(watcher.get_watermark_offsets(TopicPartition(TOPIC, p), timeout=5,
                                                                cached=False)[1] for p in range(3))
                except KafkaException:  # a slow answer: ask again
                    pass
                time.sleep(0.2)
        finally:
            watcher.close()
        if bench.poll() is not None:
            pytest.fail(f"the benchmark ended before the kill: {bench.communicate()}")
        if written < 6_000:
            pytest.fail(f"only {written} records written in 60 s, before any kill")
        victim = c.leader_of(TOPIC, 0)
        assert victim is not None
        c.kill(victim)
        stdout, stderr = bench.communicate(timeout=120)
    finally:
        if bench.poll() is None:
            bench.kill()
    assert out.exists(), (bench.returncode, stdout, stderr)
    run = json.loads(out.read_text())["series"][0]["runs"][0]
    sent = run["sent"]
    assert sent == 24_000, run
    # Nothing acknowledged is missing at the consumers, who followed the partition to its new
    # leader; nothing arrived twice.
    assert run["lost"] == 0 and run["duplicated"] == 0, run
    # Only what was in flight to the dead leader, or sent to it before the producers saw the
    # move, failed: the records of the 8 s after the kill went to the new leader (a producer
    # that stopped at the kill would have left a third of them, or all, unsent or failed).
    assert run["failed"] < sent // 6, run
    assert run["acked"] >= sent - run["failed"], run
    assert run["received"] >= run["acked"], run
