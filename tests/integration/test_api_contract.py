"""The generated OpenAPI document against a live `precast-api` process: schemathesis
(`st run --checks all`) finds no failure, with and without a bearer token. `/v1/stream` is left
out: an event stream never ends, so a fuzzer cannot read a whole response."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import httpx2
import pytest

from opsctl.stack.process import free_port
from tests.integration.api_helpers import prediction_value, publish, wait_for

ST = Path(sys.executable).with_name("st")


def _start(kafka_settings, topics, token: str | None) -> tuple[subprocess.Popen, str]:
    port = free_port()
    env = {
        **os.environ,
        "PRECAST_KAFKA__BOOTSTRAP_SERVERS": kafka_settings.bootstrap_servers,
        "PRECAST_TOPICS__PREFIX": topics.predictions.name.removesuffix("predictions"),
        "PRECAST_TOPICS__PARTITIONS": str(topics.predictions.partitions),
        "PRECAST_REDIS__URL": "",
        "PRECAST_API__SERVER": "uvicorn",
        "PRECAST_API__PORT": str(port),
        "PRECAST_LOG_LEVEL": "WARNING",
    }
    if token:
        env["PRECAST_API__AUTH_TOKEN"] = token
    proc = subprocess.Popen(
        [sys.executable, "-m", "consumer_api.cli"],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    url = f"http://127.0.0.1:{port}"

    def ready() -> bool:
        try:
            return httpx2.get(url + "/readyz", timeout=1).status_code == 200
        except httpx2.TransportError:
            assert proc.poll() is None, proc.stderr.read() if proc.stderr else ""
            return False

    wait_for(ready, 60, 0.1, what="API ready")
    return proc, url


@pytest.mark.parametrize("token", [None, "s3cret-token"], ids=["open", "bearer"])
def test_schemathesis_finds_no_failure(kafka_settings, topics, token):
    now = int(time.time() * 1000)
    publish(  # a fresh answer and an expired one, so positive cases meet every source
        kafka_settings,
        topics.predictions.name,
        [
            ("dev-1", prediction_value("dev-1", now - 100, now - 50)),
            ("dev-2", prediction_value("dev-2", now - 700_000, now - 690_000)),
        ],
    )
    proc, url = _start(kafka_settings, topics, token)
    try:
        doc = httpx2.get(url + "/openapi.json").json()
        assert ("security" in doc) == (token is not None)
        assert ("securitySchemes" in doc["components"]) == (token is not None)
        cmd = [
            str(ST),
            "run",
            url + "/openapi.json",
            "--checks",
            "all",
            "--max-examples",
            "40",
            "--exclude-path",
            "/v1/stream",
            "--seed",
            "11",
            "--request-timeout",
            "10",
        ]
        if token:
            cmd += ["-H", f"Authorization: Bearer {token}"]
        run = subprocess.run(cmd, capture_output=True, text=True, timeout=240, cwd="/tmp")
        out = run.stdout + run.stderr
        assert run.returncode == 0, out[-6000:]
        assert "No issues found" in out and " passed" in out, out[-3000:]
    finally:
        proc.terminate()
        proc.wait(30)
        if proc.stderr is not None:
            proc.stderr.close()
