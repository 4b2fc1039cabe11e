"""A real Varnish (deploy/edge/precast.vcl, through the stack's own VarnishNode) in front of a
real `precast-api` process, for the edge-cache tests and the edge benchmark's checks."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx2

from opsctl.settings import StackSettings
from opsctl.stack.process import free_port
from opsctl.stack.varnish_node import VarnishNode
from precast.settings import KafkaSettings
from schemas.topics import Topics
from tests.integration.api_helpers import wait_for


@contextmanager
def api_process(kafka: KafkaSettings, topics: Topics, log: Path, **extra: str) -> Iterator[str]:
    """`precast-api` on a free port (in-process view, no Redis); yields its URL once ready."""
    port = free_port()
    env = {
        **os.environ,
        "PRECAST_KAFKA__BOOTSTRAP_SERVERS": kafka.bootstrap_servers,
        "PRECAST_TOPICS__PREFIX": topics.predictions.name.removesuffix("predictions"),
        "PRECAST_TOPICS__PARTITIONS": str(topics.predictions.partitions),
        "PRECAST_REDIS__URL": "",
        "PRECAST_API__PORT": str(port),
        "PRECAST_API__BOARD": "false",
        "PRECAST_API__TRUSTED_PROXIES": '["127.0.0.1/32"]',
        "PRECAST_LOG_LEVEL": "INFO",
        **extra,
    }
    if "PRECAST_EDGE__PURGE_URLS" not in extra:
        env.pop("PRECAST_EDGE__PURGE_URLS", None)  # only the tests that want purges get them
    with log.open("w") as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", "consumer_api.cli"], env=env, stdout=out, stderr=out
        )
    url = f"http://127.0.0.1:{port}"

    def ready() -> bool:
        try:
            return httpx2.get(url + "/readyz", timeout=1).status_code == 200
        except httpx2.TransportError:
            assert proc.poll() is None, log.read_text()
            return False

    try:
        wait_for(ready, 60, 0.1, what="api ready")
        yield url
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def edge_settings(home: Path, backends: list[str]) -> StackSettings:
    return StackSettings(
        home=home,
        edge_port=free_port(),
        edge_admin_port=free_port(),
        edge_exporter_port=free_port(),
        edge_backends=backends,
    )


@contextmanager
def edge_node(settings: StackSettings) -> Iterator[VarnishNode]:
    node = VarnishNode(settings)
    node.start()
    try:
        node.wait_ready(30)
        yield node
    finally:
        node.stop()


def backend_of(url: str) -> str:
    return url.removeprefix("http://")


@contextmanager
def api_purging_its_edge(
    kafka: KafkaSettings, topics: Topics, home: Path, **extra: str
) -> Iterator[tuple[str, str]]:
    """A replica that purges an edge and that edge in front of it: (API URL, edge URL). The
    edge's ports are taken first: the replica is told where to purge before it starts."""
    settings = edge_settings(home, ["127.0.0.1:1"])
    edge_url = f"http://127.0.0.1:{settings.edge_port}"
    purge = json.dumps([edge_url])
    with (
        api_process(
            kafka, topics, home / "api.log", PRECAST_EDGE__PURGE_URLS=purge, **extra
        ) as api,
        edge_node(settings.model_copy(update={"edge_backends": [backend_of(api)]})),
    ):
        yield api, edge_url
