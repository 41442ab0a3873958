"""The Grafana dashboard in docs/grafana queries only metrics the broker exports: every
series name in its PromQL is present in a live /metrics scrape (after produce, fetch and a
consumer group), parsed with the official Prometheus parser."""

import json
import re
import time
import urllib.request
from pathlib import Path

from confluent_kafka import Consumer, Producer
from prometheus_client.openmetrics.parser import text_string_to_metric_families

DASHBOARD = Path(__file__).resolve().parents[2] / "docs" / "grafana" / "sluice-dashboard.json"


def test_dashboard_uses_only_exported_metrics(broker):
    dash = json.loads(DASHBOARD.read_text())
    exprs = [t["expr"] for p in dash["panels"] for t in p["targets"]]
    wanted = set()
    for e in exprs:
        wanted |= set(re.findall(r"\b((?:sluice|process)_[a-z_]+)\b", e))
    assert len(wanted) >= 10, wanted

    p = Producer({"bootstrap.servers": broker.bootstrap})
    for i in range(100):
        p.produce("graphed", value=b"v")
    p.flush(10)
    c = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "graph-group", "auto.offset.reset": "earliest"})
    c.subscribe(["graphed"])
    got = 0
    deadline = time.time() + 20
    while got < 100 and time.time() < deadline:
        got += len(c.consume(100, 0.5))
    c.commit(asynchronous=False)
    c.close()

    with urllib.request.urlopen(broker.admin_url + "/metrics", timeout=5) as r:
        text = r.read().decode()
    samples = {s.name for f in text_string_to_metric_families(text) for s in f.samples}
    missing = sorted(w for w in wanted if w not in samples)
    assert not missing, f"the dashboard queries metrics the broker does not export: {missing}"
