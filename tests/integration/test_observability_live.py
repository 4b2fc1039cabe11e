"""Prometheus scraping the running pipeline: a private Prometheus (and Redis exporter) scrapes
a simulator, worker, context aggregator, drift monitor and read API on unique topics, loads
every shipped rule file, and every panel of every generated dashboard must evaluate without
error and return data."""

from __future__ import annotations

import contextlib
import json
import os
import re
import subprocess
import sys
import time
import urllib.parse
import urllib.request
from pathlib import Path

import pytest

from opsctl.observe.dashboards import dashboards, panel_queries
from opsctl.settings import StackSettings
from opsctl.stack.process import free_port
from opsctl.stack.prometheus_node import PrometheusNode, RedisExporterNode

ROOT = Path(__file__).resolve().parents[2]


def _get(url: str) -> dict:
    with urllib.request.urlopen(url, timeout=5) as r:
        return json.loads(r.read())


def _query(prom: str, expr: str) -> tuple[str, list]:
    """('', result) or (error text, [])."""
    try:
        body = _get(f"{prom}/api/v1/query?" + urllib.parse.urlencode({"query": expr}))
    except urllib.error.HTTPError as exc:
        return exc.read().decode()[:300], []
    if body.get("status") != "success":
        return str(body.get("error")), []
    return "", body["data"]["result"]


@pytest.fixture
def pipeline(kafka_settings, redis_settings, topics, unique, admin, tmp_path):
    """The services on unique topics, each with a metrics port: {job: (process, address)}."""
    prefix = topics.heartbeats.name.removesuffix("heartbeats")
    app_id = unique("ctx")
    env = {
        **os.environ,
        "PRECAST_KAFKA__BOOTSTRAP_SERVERS": kafka_settings.bootstrap_servers,
        "PRECAST_TOPICS__PREFIX": prefix,
        "PRECAST_TOPICS__PARTITIONS": str(topics.heartbeats.partitions),
        "PRECAST_REDIS__URL": redis_settings.url,
        "PRECAST_REDIS__KEY_PREFIX": unique("obs") + ":",
        "PRECAST_LOG_LEVEL": "WARNING",
    }
    api_port = free_port()
    specs = {
        "precast-simulator": (
            "producers.cli",
            ["--devices", "300", "--rate", "300", "--bad-rate", "0.02", "--duration", "300"],
            {},
        ),
        "precast-worker": (
            "workers.precompute.cli",
            [],
            {"PRECAST_WORKER__GROUP_ID": unique("w"), "PRECAST_MODEL__PROVIDER": "cpu"},
        ),
        "precast-context": (
            "workers.context.aggregator",
            [],
            {
                "PRECAST_CONTEXT__APP_ID": app_id,
                "PRECAST_CONTEXT__DATA_DIR": str(tmp_path / "faust"),
            },
        ),
        "precast-drift": (
            "workers.drift.cli",
            [],
            {
                "PRECAST_DRIFT__GROUP_ID": unique("d"),
                "PRECAST_DRIFT__WINDOW_S": "10",
                "PRECAST_DRIFT__STEP_S": "2",
                "PRECAST_DRIFT__MIN_ROWS": "100",
            },
        ),
        "precast-api": ("consumer_api.cli", ["--port", str(api_port)], {}),
    }
    procs: dict[str, tuple[subprocess.Popen, str]] = {}
    try:
        for job, (module, args, extra) in specs.items():
            port = api_port if job == "precast-api" else free_port()
            e = {**env, **extra}
            if job != "precast-api":
                e["PRECAST_METRICS__PORT"] = str(port)
            with (tmp_path / f"{job}.log").open("wb") as log:
                p = subprocess.Popen(
                    [sys.executable, "-m", module, *args],
                    env=e,
                    cwd=ROOT,
                    stdout=log,
                    stderr=subprocess.STDOUT,
                )
            procs[job] = (p, f"127.0.0.1:{port}")
        yield procs
    finally:
        for p, _ in procs.values():
            if p.poll() is None:
                p.terminate()
        for p, _ in procs.values():
            try:
                p.wait(30)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()
        admin.delete_topics([n for n in admin.topic_partitions() if app_id in n])


@pytest.fixture
def prometheus(redis_settings, tmp_path):
    settings = StackSettings(
        home=tmp_path / "stack",
        prometheus_port=free_port(),
        redis_exporter_port=free_port(),
        redis_port=urllib.parse.urlparse(redis_settings.url).port or 6379,
        scrape_interval_s=1,
    )
    prom, exporter = PrometheusNode(settings), RedisExporterNode(settings)
    try:
        exporter.start()
        prom.start()
        exporter.wait_ready(30)
        prom.wait_ready(60)
        prom.write_targets("stack", {"redis": [exporter.address]})
        yield prom
    finally:
        prom.stop()
        exporter.stop()


def _read(api: str, devices: list[str]) -> list[int]:
    codes = []
    for d in devices:
        try:
            with urllib.request.urlopen(f"http://{api}/v1/devices/{d}/prediction", timeout=2) as r:
                codes.append(r.status)
        except (urllib.error.URLError, OSError):
            codes.append(0)
    return codes


def _beacon(api: str) -> None:
    timing = {
        "input_to_shown_ms": 45,
        "network_ms": 4,
        "wait": {"read": 0.02, "db_lock": 0.01},
        "age": {"queue": 3, "model": 1, "kafka": 2, "cache": 900},
    }
    req = urllib.request.Request(
        f"http://{api}/v1/beacon",
        data=json.dumps({"timings": [timing]}).encode(),
        headers={"Content-Type": "application/json"},
    )
    with contextlib.suppress(urllib.error.URLError, OSError):  # not up yet: the next round
        urllib.request.urlopen(req, timeout=2).close()


def test_every_dashboard_panel_returns_data_from_the_live_pipeline(pipeline, prometheus, tmp_path):
    prometheus.write_targets("test", {job: [addr] for job, (_, addr) in pipeline.items()})
    api = pipeline["precast-api"][1]
    queries = [
        (uid, title, expr)
        for uid, model in dashboards().items()
        for title, expr in panel_queries(model)
    ]
    assert len(queries) >= 50
    deadline = time.monotonic() + 150
    failures: list[str] = ["not evaluated yet"]
    while failures and time.monotonic() < deadline:
        for job, (p, _) in pipeline.items():
            if p.poll() is not None and job != "precast-simulator":
                log = (tmp_path / f"{job}.log").read_text()[-1500:]
                pytest.fail(f"{job} exited with {p.returncode}: {log}")
        _read(api, [f"dev-{i:06d}" for i in range(0, 300, 7)])  # reads: hits and misses
        _beacon(api)  # a UI reporting: the wait and age panels have data only while one does
        time.sleep(3)
        failures = []
        for uid, title, expr in queries:
            error, result = _query(prometheus.url, expr)
            if error or not result:
                failures.append(f"{uid} / {title}: {error or 'no data'}: {expr}")
    assert not failures, "\n".join(failures)
    # A panel that falls back to `or vector(0)` must still name metrics the services expose.
    for uid, title, expr in queries:
        if "or vector(0)" not in expr:
            continue
        for metric in set(re.findall(r"\bprecast_[a-z0-9_]+", expr)):
            # Scraped as OpenMetrics (exemplars, issue 39), a counter's metadata is kept under
            # its family name, without `_total`.
            names = {metric, metric.removesuffix("_total")}
            meta = [
                m
                for name in names
                for m in _get(f"{prometheus.url}/api/v1/targets/metadata?metric={name}")["data"]
            ]
            assert meta, f"{uid} / {title}: no target exposes {metric}"

    rules = _get(f"{prometheus.url}/api/v1/rules")["data"]["groups"]
    loaded = {r["name"] for g in rules for r in g["rules"]}
    bad = [r["name"] for g in rules for r in g["rules"] if r.get("health") == "err"]
    assert {
        "PrecastFreshnessBudgetBurnFast",
        "PrecastFeatureDrift",
        "PrecastApiRedisDown",
    } <= loaded
    assert not bad
    targets = _get(f"{prometheus.url}/api/v1/targets")["data"]["activeTargets"]
    assert {t["labels"]["job"] for t in targets if t["health"] == "up"} >= {*pipeline, "redis"}
