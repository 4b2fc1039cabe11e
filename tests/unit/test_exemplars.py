"""From a metric to a trace (issue 39): /metrics answers OpenMetrics, which carries exemplars,
when the scraper asks for it; the freshness panel shows them, and the datasource opens their
trace ID in Jaeger."""

from __future__ import annotations

import json
from pathlib import Path

import yaml
from prometheus_client import CollectorRegistry, Histogram

from precast.telemetry.endpoints import exposition

ROOT = Path(__file__).resolve().parents[2]
TRACE = "4bf92f3577b34da6a3ce929d0e0e4736"


def test_openmetrics_carries_the_exemplar_and_the_classic_format_does_not():
    reg = CollectorRegistry()
    h = Histogram("t_seconds", "t", registry=reg, buckets=(0.1, 1.0))
    h.observe(0.5, exemplar={"trace_id": TRACE})
    om, om_type = exposition(reg, "application/openmetrics-text; version=1.0.0")
    text, text_type = exposition(reg, "text/plain")
    assert om_type.startswith("application/openmetrics-text")
    assert f'# {{trace_id="{TRACE}"}} 0.5' in om.decode()
    assert text_type.startswith("text/plain") and TRACE not in text.decode()


def test_the_freshness_panel_shows_exemplars_and_they_open_in_jaeger():
    doc = json.loads((ROOT / "deploy/grafana/dashboards/precast-worker.json").read_text())
    panel = next(p for p in doc["panels"] if p.get("title") == "Event to prediction, p50 / p99")
    assert all(t.get("exemplar") for t in panel["targets"])
    ds = yaml.safe_load(
        (ROOT / "deploy/grafana/provisioning/datasources/prometheus.yml").read_text()
    )
    by_uid = {d["uid"]: d for d in ds["datasources"]}
    dest = by_uid["precast-prometheus"]["jsonData"]["exemplarTraceIdDestinations"]
    assert dest == [{"name": "trace_id", "datasourceUid": "precast-jaeger"}]
    assert by_uid["precast-jaeger"]["type"] == "jaeger"


def test_the_read_api_answers_openmetrics_when_asked():
    from starlette.testclient import TestClient

    from tests.api_fixtures import make_app, make_service

    client = TestClient(make_app(make_service()))
    om = client.get("/metrics", headers={"Accept": "application/openmetrics-text; version=1.0.0"})
    assert om.status_code == 200
    assert om.headers["content-type"].startswith("application/openmetrics-text")
    assert om.text.rstrip().endswith("# EOF")
    plain = client.get("/metrics")
    assert plain.headers["content-type"].startswith("text/plain") and "# EOF" not in plain.text
