"""`precast stack up --edge`: Varnish and its exporter beside the stack, the apps told where to
purge, Prometheus told where to scrape, and `stack down edge` / `stack down` leaving nothing."""

from __future__ import annotations

import json

import httpx2
import pytest

from opsctl.stack.process import free_port
from tests.integration.test_dev_stack_lifecycle import Scratch, scratch  # noqa: F401  (fixture)


# slow: a whole stack of ~15 s; the default suite keeps near 10 minutes (`./dev test -m slow`)
@pytest.mark.slow
@pytest.mark.timeout(300)
def test_stack_up_edge_runs_varnish_and_its_exporter_and_stops_them(
    scratch: Scratch,  # noqa: F811
) -> None:
    edge_port, exporter_port = free_port(), free_port()
    scratch.env.update(
        {
            "PRECAST_STACK__EDGE_PORT": str(edge_port),
            "PRECAST_STACK__EDGE_ADMIN_PORT": str(free_port()),
            "PRECAST_STACK__EDGE_EXPORTER_PORT": str(exporter_port),
            "PRECAST_STACK__EDGE_BACKENDS": json.dumps([f"127.0.0.1:{free_port()}"]),
        }
    )
    up = scratch.precast("stack", "up", "--edge")
    assert up.returncode == 0, up.stdout + up.stderr
    assert f"edge http://127.0.0.1:{edge_port}" in up.stdout
    assert f"PRECAST_EDGE__PURGE_URLS='[\"http://127.0.0.1:{edge_port}\"]'" in up.stdout
    status = scratch.precast("stack", "status").stdout
    assert "Varnish (edge)   healthy" in status and "Varnish exporter healthy" in status
    assert "edge" in scratch.precast("stack", "running").stdout.split()
    # the edge answers for itself, and says so in JSON when no replica is ready
    assert httpx2.get(f"http://127.0.0.1:{edge_port}/edge/healthz", timeout=5).status_code == 200
    r = httpx2.get(f"http://127.0.0.1:{edge_port}/v1/devices/d/prediction", timeout=10)
    assert r.status_code == 503 and r.json()["error"] == "origin_unavailable"
    metrics = httpx2.get(f"http://127.0.0.1:{exporter_port}/metrics", timeout=5).text
    assert "varnish_main_client_req" in metrics
    targets = json.loads((scratch.home / "prometheus" / "targets" / "stack.json").read_text())
    assert {"targets": [f"127.0.0.1:{exporter_port}"], "labels": {"job": "edge"}} in targets
    down = scratch.precast("stack", "down", "edge")
    assert down.returncode == 0 and "Varnish (edge)" in down.stdout, down.stdout + down.stderr
    assert "edge" not in scratch.precast("stack", "running").stdout.split()
    assert not [p for p in scratch.processes() if "varnish" in p]
    assert scratch.precast("stack", "down").returncode == 0
    assert scratch.processes() == []
