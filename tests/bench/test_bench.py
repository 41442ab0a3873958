"""`sluice bench` against a broker started by the test: the report has every percentile, no
loss, and the achieved rate is within 5% of the offered one."""

import json
import subprocess

from conftest import SLUICE, sluice_cli


def test_three_second_e2e_report(broker, tmp_path):
    out = tmp_path / "e2e.json"
    r = sluice_cli("bench", "e2e", "--brokers", broker.bootstrap, "--rate", "5000", "--size", "128",
                   "--duration", "3", "--warmup", "0.5", "--partitions", "2", "--quiet",
                   "--floor-dir", str(tmp_path / "floor"), "--json", str(out), timeout=120)
    assert "sustained" in r.stdout and "NOT sustained" not in r.stdout, r.stdout
    for word in ["AVG", "P50", "P90", "P95", "P99", "P99.9", "MAX", "lost 0", "duplicated 0"]:
        assert word in r.stdout, (word, r.stdout)
    report = json.loads(out.read_text())
    assert report["client"].startswith("sluice-bench")
    assert report["machine"]["cores"] >= 1 and report["machine"]["memory_bytes"] > 0
    assert report["floor"]["loopback_rtt"]["count"] > 0 and report["floor"]["append_fdatasync"]["count"] > 0
    run = report["series"][0]["runs"][0]
    assert run["sent"] == 15_000 and run["received"] == 15_000
    assert run["lost"] == 0 and run["duplicated"] == 0 and run["failed"] == 0
    assert abs(run["send_rate_per_s"] - 5000) <= 250 and abs(run["receive_rate_per_s"] - 5000) <= 250
    latency = run["latency"]
    for key in ["avg_us", "p50_us", "p90_us", "p95_us", "p99_us", "p999_us", "max_us"]:
        assert latency[key] > 0, key
    assert latency["p50_us"] <= latency["p90_us"] <= latency["p95_us"] <= latency["p99_us"] <= latency["p999_us"] <= latency["max_us"]
    assert latency["count"] >= 12_000, "samples after the warm-up"


def test_loss_is_detected_when_records_are_deleted_under_the_consumer(start_broker, tmp_path):
    # retention.bytes tiny + frequent checks: records are deleted before the consumer reads
    # them, and the benchmark must say they were lost instead of reporting clean numbers.
    broker = start_broker(["--log-retention-check-interval-ms", "10"])
    out = tmp_path / "lossy.json"
    sluice_cli("topic", "create", "lossy", "--config", "segment.bytes=1024", "--config", "retention.bytes=0",
               "-b", broker.bootstrap)
    sluice_cli("bench", "e2e", "--brokers", broker.bootstrap, "--topic", "lossy", "--rate", "20000", "--size", "512",
               "--duration", "2", "--warmup", "0.5", "--quiet", "--json", str(out), timeout=120)
    run = json.loads(out.read_text())["series"][0]["runs"][0]
    assert run["lost"] > 0 or run["fetch_errors"], run


def test_sweep_writes_json_and_html(broker, tmp_path):
    sluice_cli("bench", "sweep", "--brokers", broker.bootstrap, "--rates", "2000,4000", "--sizes", "64,256",
               "--duration", "1.5", "--warmup", "0.2", "--quiet", "--json", str(tmp_path / "s.json"),
               "--html", str(tmp_path / "s.html"), "--label", "sluice", timeout=180)
    report = json.loads((tmp_path / "s.json").read_text())
    runs = report["series"][0]["runs"]
    assert sorted((r["config"]["record_bytes"], r["offered_rate_per_s"]) for r in runs) == \
        [(64, 2000), (64, 4000), (256, 2000), (256, 4000)]
    html = (tmp_path / "s.html").read_text()
    assert "<svg" in html and "64 B records" in html and "256 B records" in html
    assert "http" not in html.replace("http://www.w3.org", "") and "<script" not in html


def test_bad_bench_arguments_are_refused(broker):
    for args, words in [(["--size", "8"], "at least 24"), (["--rate", "0"], "--rate"),
                        (["--acks", "2"], "--acks"), (["--compression", "brotli"], "compression"),
                        (["--duration", "1", "--warmup", "2"], "--duration")]:
        r = sluice_cli("bench", "e2e", "--brokers", broker.bootstrap, *args, check=False)
        assert r.returncode == 1 and words in r.stderr, (args, r.stderr)
    r = sluice_cli("bench", "e2e", "--brokers", "127.0.0.1:1", "--duration", "2", check=False)
    assert r.returncode == 1 and "cannot connect" in r.stderr


def test_a_run_in_which_nothing_is_acknowledged_fails(broker, tmp_path):
    # 512 B records on a topic that takes batches of at most 100 B: every send is refused
    # (MESSAGE_TOO_LARGE). The report is still printed and written, and the command fails.
    sluice_cli("topic", "create", "unwritable", "--config", "max.message.bytes=100", "-b", broker.bootstrap)
    out = tmp_path / "none.json"
    r = sluice_cli("bench", "e2e", "--brokers", broker.bootstrap, "--topic", "unwritable", "--size", "512",
                   "--rate", "1000", "--duration", "1", "--warmup", "0.2", "--no-floor", "--quiet",
                   "--json", str(out), check=False, timeout=120)
    assert r.returncode == 1, (r.returncode, r.stdout, r.stderr)
    assert "no record was acknowledged" in r.stderr, r.stderr
    run = json.loads(out.read_text())["series"][0]["runs"][0]
    assert run["acked"] == 0 and run["failed"] > 0, run
    assert "sent" in r.stdout, "the report is printed before the command fails"


def test_throughput_commands(broker):
    r = sluice_cli("bench", "produce", "--brokers", broker.bootstrap, "--topic", "max", "--size", "128", "--duration", "0.5")
    produced = int(r.stdout.split(" records")[0].split()[-1])
    assert produced > 1000 and "errors" not in r.stdout, r.stdout
    r = sluice_cli("bench", "consume", "--brokers", broker.bootstrap, "--topic", "max")
    consumed = int(r.stdout.split(" records")[0].split()[-1])
    assert consumed >= produced
    # A reader of its output that is gone before the result is printed (`| true`) ends the
    # command quietly, with status 0, rather than with println!'s panic.
    r = subprocess.run(f"set -o pipefail; '{SLUICE}' bench produce --brokers {broker.bootstrap} --topic max "
                       "--size 128 --duration 0.5 | true",
                       shell=True, executable="/bin/bash", capture_output=True, text=True, timeout=60)
    assert r.returncode == 0 and "panicked" not in r.stderr and "error" not in r.stderr, r


def test_compare_dry_run_shows_the_plan_without_downloading(tmp_path):
    kafka_dir = tmp_path / "kafka"
    r = subprocess.run([str(SLUICE), "bench", "compare", "--dry-run", "--kafka-dir", str(kafka_dir),
                        "--work-dir", str(tmp_path / "work"), "--rates", "5000", "--sizes", "128"],
                       capture_output=True, text=True, timeout=30)
    assert r.returncode == 0, r.stderr
    assert "install Apache Kafka 4.3.1" in r.stdout and "Maven Central" in r.stdout
    assert "start Kafka" in r.stdout and "stop Kafka" in r.stdout and "start Sluice" in r.stdout
    assert not kafka_dir.exists(), "a dry run downloads nothing"
    assert not (tmp_path / "work").exists(), "and starts nothing"
