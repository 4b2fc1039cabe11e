"""`precast-api` as its own process, on each HTTP server it supports: ready after the rebuild,
the hot GET with every header, 304 and HEAD, a one-line error for a taken port, and a graceful
stop on SIGTERM (exit 0, the port released)."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time

import httpx2
import pytest

from opsctl.stack.process import free_port
from tests.integration.api_helpers import prediction_value, publish, wait_for


def _env(kafka_settings, topics, server: str, port: int) -> dict[str, str]:
    return {
        **os.environ,
        "PRECAST_KAFKA__BOOTSTRAP_SERVERS": kafka_settings.bootstrap_servers,
        "PRECAST_TOPICS__PREFIX": topics.predictions.name.removesuffix("predictions"),
        "PRECAST_TOPICS__PARTITIONS": str(topics.predictions.partitions),
        "PRECAST_REDIS__URL": "",
        "PRECAST_API__SERVER": server,
        "PRECAST_API__PORT": str(port),
        "PRECAST_LOG_LEVEL": "WARNING",
    }


@pytest.mark.parametrize("server", ["granian", "uvicorn"])
def test_api_process_serves_and_stops_gracefully(kafka_settings, topics, server):
    now = int(time.time() * 1000)
    publish(
        kafka_settings,
        topics.predictions.name,
        [("dev-1", prediction_value("dev-1", now - 100, now - 50))],
    )
    port = free_port()
    proc = subprocess.Popen(
        [sys.executable, "-m", "consumer_api.cli"],
        env=_env(kafka_settings, topics, server, port),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    url = f"http://127.0.0.1:{port}"
    try:

        def ready() -> bool:
            try:
                return httpx2.get(url + "/readyz", timeout=1).status_code == 200
            except httpx2.TransportError:
                assert proc.poll() is None, proc.stderr.read()
                return False

        wait_for(ready, 60, 0.1, what=f"{server} ready")
        with httpx2.Client(base_url=url) as client:
            r = client.get("/v1/devices/dev-1/prediction")
            assert r.status_code == 200 and r.json()["source"] == "precomputed"
            assert (
                r.headers["content-type"] == "application/json"
                and r.headers["x-model-version"] == "1.0.0"
            )
            assert r.headers["cache-control"].startswith("max-age=") and r.headers[
                "server-timing"
            ].startswith("age.queue;dur=")
            assert int(r.headers["content-length"]) == len(r.content)
            assert (
                client.get(
                    "/v1/devices/dev-1/prediction", headers={"If-None-Match": r.headers["etag"]}
                ).status_code
                == 304
            )
            head = client.head("/v1/devices/dev-1/prediction")
            assert head.status_code == 200 and head.content == b""
            miss = client.get("/v1/devices/dev-2/prediction")
            assert miss.json()["source"] == "fallback"
            assert (
                client.get("/v1/devices/bad%20id/prediction").json()["error"] == "invalid_device_id"
            )
            assert 'precast_api_reads_total{source="precomputed"}' in client.get("/metrics").text
        taken = subprocess.run(
            [sys.executable, "-m", "consumer_api.cli"],
            env=_env(kafka_settings, topics, server, port),
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert (
            taken.returncode == 2
            and taken.stderr.strip()
            == f"precast-api: cannot listen on 127.0.0.1:{port}: already in use"
        )
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(20) == 0, proc.stderr.read()
        with pytest.raises(OSError):
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.communicate()  # closes the pipes
