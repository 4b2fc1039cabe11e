"""Every service's live /metrics passes `promtool check metrics` (Debian's `prometheus`
package): the read API, a worker, the simulator, the context aggregator, the drift monitor and
the auditor, each as its own process on the real broker, scraped after traffic so labelled series exist."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time

import httpx2
import pytest

from opsctl.stack.process import free_port
from tests.integration.api_helpers import spawn_api, wait_for
from tests.integration.worker_support import ROOT, spawn_worker

PROMTOOL = shutil.which("promtool")


def _env(kafka_settings, topics, port: int, **extra: str) -> dict[str, str]:
    return {
        **os.environ,
        "PRECAST_KAFKA__BOOTSTRAP_SERVERS": kafka_settings.bootstrap_servers,
        "PRECAST_TOPICS__PREFIX": topics.heartbeats.name.removesuffix("heartbeats"),
        "PRECAST_TOPICS__PARTITIONS": str(topics.heartbeats.partitions),
        "PRECAST_METRICS__PORT": str(port),
        "PRECAST_LOG_LEVEL": "WARNING",
        **extra,
    }


def _lint(name: str, text: str) -> None:
    run = subprocess.run(
        [PROMTOOL, "check", "metrics"], input=text, capture_output=True, text=True, timeout=30
    )
    assert run.returncode == 0, f"{name}: {run.stdout}{run.stderr}"


@pytest.mark.skipif(PROMTOOL is None, reason="promtool missing: ./dev setup installs prometheus")
def test_every_service_metrics_pass_promtool(kafka_settings, topics, unique, tmp_path):
    ports = {k: free_port() for k in ("api", "worker", "simulator", "context", "drift", "auditor")}
    procs: list[subprocess.Popen] = []
    try:
        with (tmp_path / "sim.log").open("wb") as log:
            procs.append(
                subprocess.Popen(
                    [sys.executable, "-m", "producers.cli", "--devices", "50", "--rate", "200"],
                    env=_env(kafka_settings, topics, ports["simulator"]),
                    cwd=ROOT,
                    stdin=subprocess.DEVNULL,
                    stdout=log,
                    stderr=subprocess.STDOUT,
                )
            )
        with (tmp_path / "ctx.log").open("wb") as log:
            procs.append(
                subprocess.Popen(
                    [sys.executable, "-m", "workers.context.aggregator"],
                    env=_env(
                        kafka_settings,
                        topics,
                        ports["context"],
                        PRECAST_CONTEXT__APP_ID=unique("ctx"),
                        PRECAST_CONTEXT__DATA_DIR=str(tmp_path / "faust"),
                    ),
                    cwd=ROOT,
                    stdin=subprocess.DEVNULL,
                    stdout=log,
                    stderr=subprocess.STDOUT,
                )
            )
        with (tmp_path / "drift.log").open("wb") as log:
            procs.append(
                subprocess.Popen(
                    [sys.executable, "-m", "workers.drift.cli"],
                    env=_env(
                        kafka_settings, topics, ports["drift"], PRECAST_DRIFT__GROUP_ID=unique("d")
                    ),
                    cwd=ROOT,
                    stdin=subprocess.DEVNULL,
                    stdout=log,
                    stderr=subprocess.STDOUT,
                )
            )
        with (tmp_path / "auditor.log").open("wb") as log:
            audit = tmp_path / "audit"
            procs.append(
                subprocess.Popen(
                    [sys.executable, "-m", "auditor"],
                    env=_env(
                        kafka_settings,
                        topics,
                        0,
                        PRECAST_AUDIT__DB_PATH=str(audit / "log.db"),
                        PRECAST_AUDIT__KEY_PATH=str(audit / "signing.key"),
                        PRECAST_AUDIT__PUBLIC_KEY=str(audit / "signing.key.pub"),
                        PRECAST_AUDIT__ORIGIN=unique("test.local/audit"),
                        PRECAST_AUDIT__PORT=str(ports["auditor"]),
                        PRECAST_AUDIT__GROUP_ID=unique("auditor"),
                    ),
                    cwd=ROOT,
                    stdin=subprocess.DEVNULL,
                    stdout=log,
                    stderr=subprocess.STDOUT,
                )
            )
        procs.append(
            spawn_worker(
                kafka_settings,
                topics,
                unique("w"),
                tmp_path / "worker.log",
                PRECAST_METRICS__PORT=str(ports["worker"]),
            )
        )
        procs.append(spawn_api(kafka_settings, topics, ports["api"]))
        api = f"http://127.0.0.1:{ports['api']}"

        # predictions made it from the simulator through the worker into the API's view
        wait_for(lambda: _devices(api) > 0, 90, 0.5, what="predictions served")
        httpx2.post(
            api + "/v1/beacon",
            json={"timings": [{"input_to_shown_ms": 120, "network_ms": 30, "age": {"cache": 800}}]},
        ).raise_for_status()
        httpx2.get(api + "/v1/devices/nobody/prediction").raise_for_status()
        time.sleep(1.0)
        for name, port in ports.items():
            wait_for(lambda p=port: _up(p), 60, 0.2, what=f"{name} /metrics")
            text = httpx2.get(f"http://127.0.0.1:{port}/metrics", timeout=5).text
            assert "precast_" in text, name
            _lint(name, text)
        api_text = httpx2.get(api + "/metrics").text
        # the two measures' families, their per-client aggregates published (a client reported)
        for family in (
            "precast_wait_origin_seconds_total",
            "precast_age_origin_seconds_total",
            "precast_wait_origin_share{",
            "precast_age_origin_share{",
            "precast_wait_origin_per_view_seconds{",
            "\nprecast_wait_p95_seconds ",
            "\nprecast_age_p95_seconds ",
        ):
            assert family in api_text, family
        assert "_ms_total" not in api_text
    finally:
        for p in procs:
            p.terminate()
        for p in procs:
            try:
                p.wait(30)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()


def _up(port: int) -> bool:
    try:
        return httpx2.get(f"http://127.0.0.1:{port}/metrics", timeout=2).status_code == 200
    except httpx2.TransportError:
        return False


def _devices(api: str) -> float:
    for line in httpx2.get(api + "/metrics", timeout=2).text.splitlines():
        if line.startswith("precast_api_devices "):
            return float(line.split()[1])
    return 0.0
