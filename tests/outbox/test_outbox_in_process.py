"""The relay inside `sluice serve` (the TOML file's `[outbox]` table, `brokers` left out: the
broker itself), its metrics in the broker's /metrics; the standalone relay's /metrics, both
parsed as OpenMetrics; and the console's list of every relay instance (/api/outbox)."""

import json
import socket
import subprocess
import time
import urllib.error
import urllib.request
import uuid

import pytest
from prometheus_client.openmetrics.parser import text_string_to_metric_families

from conftest import SLUICE, wait_until
from outbox.workload import read_topics

pytestmark = pytest.mark.timeout(120)


def families(text):
    return {f.name: f for f in text_string_to_metric_families(text)}


def sample(fams, name, **labels):
    for f in fams.values():
        for s in f.samples:
            if s.name == name and all(s.labels.get(k) == v for k, v in labels.items()):
                return s.value
    return None


def test_serve_runs_the_outbox_table_of_its_config_file(postgres, start_broker, tmp_path):
    config = tmp_path / "sluice.toml"
    config.write_text(f"""
[outbox]
source = "{postgres.url('shop')}"
table = "public.outbox"
slot = "in_process"
topic_prefix = "inproc."
report_secs = 0
""")
    broker = start_broker(["--config", str(config)])

    def metrics():
        with urllib.request.urlopen(broker.admin_url + "/metrics", timeout=5) as r:
            return families(r.read().decode())

    wait_until(lambda: sample(metrics(), "sluice_outbox_state", slot="in_process",
                              state="active") == 1, 60,
               f"the in-process relay to be active: {broker.log()[-2000:]}")
    ids = [uuid.uuid4() for _ in range(5)]
    with postgres.connect("shop") as c:
        for i in ids:
            c.execute("INSERT INTO outbox VALUES (%s, 'order', 'k', 'created', 'x')", (i,))
        c.commit()
    got = read_topics(broker.bootstrap, ["inproc.order"], 5, 30)
    assert sorted(g[4] for g in got) == sorted(str(i) for i in ids)
    wait_until(lambda: sample(metrics(), "sluice_outbox_rows_published_total",
                              slot="in_process") == 5, 10, "the metric to count 5 rows")
    # The console's view (/api/outbox, in the admin API's OpenAPI document).
    with urllib.request.urlopen(broker.admin_url + "/api/outbox", timeout=5) as r:
        relays = json.loads(r.read())
    assert len(relays) == 1, relays
    relay = relays[0]
    assert relay["slot"] == "in_process" and relay["state"] == "active" and relay["rows"] == 5
    assert relay["local"] is True and relay["silent"] is False
    assert relay["instance"] == f"{socket.gethostname()}:{broker.proc.pid}"
    assert relay["started_at_ms"] > 1_600_000_000_000
    # It reports on the status topic too (for the other brokers' consoles), and is not listed
    # twice here for it.
    wait_until(lambda: status_topic_has(broker, relay["instance"]), 15,
               "the in-process relay's report on sluice-outbox-status")
    assert len(outbox_api(broker)) == 1, outbox_api(broker)
    assert relay["source"] == f"postgres://127.0.0.1:{postgres.port}/shop"
    assert relay["position"].count("/") == 1 and relay["last_error"] is None
    with urllib.request.urlopen(broker.admin_url + "/api/openapi.json", timeout=5) as r:
        schema = json.loads(r.read())["components"]["schemas"]["OutboxRelay"]
    assert set(relay) <= set(schema["properties"]), set(relay) - set(schema["properties"])


def outbox_api(broker):
    with urllib.request.urlopen(broker.admin_url + "/api/outbox", timeout=5) as r:
        return json.loads(r.read())


def status_topic_has(broker, instance):
    url = (broker.admin_url
           + "/api/topics/sluice-outbox-status/partitions/0/messages?from=oldest&order=oldest_first&limit=500")
    try:
        with urllib.request.urlopen(url, timeout=5) as r:
            records = json.loads(r.read())["records"]
    except urllib.error.HTTPError:
        return False
    return any(f"|{instance}|" in (rec["key"] or {}).get("text", "") for rec in records)


def test_the_console_lists_standalone_relays_active_standby_silent_and_gone(
        postgres, broker, relays):
    """Two `sluice outbox` processes for one slot: the broker's /api/outbox lists both from
    their reports (one active, one standing by), marks the SIGKILLed one silent while the
    other takes over, and drops an instance that stops cleanly."""
    a = relays(postgres, broker, name="a")
    a.wait_state("active", 60)
    b = relays(postgres, broker, name="b")
    b.wait_state("standby", 30)
    host = socket.gethostname()
    name = {a: f"{host}:{a.proc.pid}", b: f"{host}:{b.proc.pid}"}
    source = f"postgres://127.0.0.1:{postgres.port}/shop"

    def listed():
        return {r["instance"]: r for r in outbox_api(broker)}

    def shown(relay, state, silent=False):
        r = listed().get(name[relay])
        return r is not None and r["state"] == state and r["silent"] is silent

    wait_until(lambda: shown(a, "active") and shown(b, "standby"), 20,
               f"both instances listed: {outbox_api(broker)}")
    row = listed()[name[a]]
    assert row["slot"] == "sluice_outbox" and row["source"] == source, row
    assert row["local"] is False and 0 <= row["report_age_ms"] < 10_000, row
    assert row["position"].count("/") == 1 and row["activations"] == 1, row
    with urllib.request.urlopen(broker.admin_url + "/api/openapi.json", timeout=5) as r:
        schema = json.loads(r.read())["components"]["schemas"]["OutboxRelay"]
    assert set(row) <= set(schema["properties"]), set(row) - set(schema["properties"])
    assert set(schema["required"]) <= set(row), set(schema["required"]) - set(row)

    killed = time.monotonic()
    a.kill()
    b.wait_state("active", 30)
    wait_until(lambda: shown(b, "active") and shown(a, "active", silent=True), 30,
               f"a listed as silent, b as active: {outbox_api(broker)}")
    # Not before its last report is 10 s old (it reported shortly before the kill).
    assert time.monotonic() - killed > 5, outbox_api(broker)
    assert listed()[name[a]]["report_age_ms"] > 10_000, outbox_api(broker)

    b.stop()
    assert b.proc.returncode == 0, b.log()[-2000:]
    # (a read of the status topic that failed would list neither: a stays listed.)
    wait_until(lambda: (now := listed()) and name[a] in now and name[b] not in now, 15,
               f"b to leave the list: {outbox_api(broker)}")
    assert listed()[name[a]]["silent"] is True


def test_a_bad_outbox_table_stops_serve_at_start(tmp_path):
    config = tmp_path / "sluice.toml"
    config.write_text('[outbox]\nsource = "oracle://a@h:1/d"\ntable = "outbox"\n')
    p = subprocess.run([str(SLUICE), "serve", "--config", str(config), "--data-dir",
                        str(tmp_path / "data"), "--listen", "127.0.0.1:0",
                        "--admin-listen", "127.0.0.1:0"],
                       capture_output=True, text=True, timeout=30)
    assert p.returncode != 0 and "[outbox]" in p.stderr and "postgres://" in p.stderr, p.stderr


def test_the_standalone_relay_serves_openmetrics(postgres, broker, relays):
    r = relays(postgres, broker)
    r.wait_state("active", 60)
    fams = families(r.metrics())
    assert sample(fams, "sluice_outbox_state", slot="sluice_outbox", state="active") == 1
    assert sample(fams, "sluice_outbox_rows_published_total", slot="sluice_outbox") == 0
    assert sample(fams, "sluice_outbox_lag_bytes", slot="sluice_outbox") is not None
