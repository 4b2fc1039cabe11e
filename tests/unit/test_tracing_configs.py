"""The Jaeger configs precast ships: the local stack's and the tail-sampling one compose mounts.
Checked by Jaeger itself (`jaeger validate`) where the stack has built it, and for the policy
that keeps every trace that missed its freshness objective."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
JAEGER = ROOT / ".precast" / "bin" / "jaeger"
CONFIGS = sorted((ROOT / "deploy" / "tracing").glob("jaeger-*.yaml"))
PORTS = {
    "PRECAST_JAEGER_OTLP_PORT": "14318",
    "PRECAST_JAEGER_QUERY_PORT": "26686",
    "PRECAST_JAEGER_QUERY_GRPC_PORT": "26687",
    "PRECAST_JAEGER_HEALTH_PORT": "23133",
}


def test_the_tail_policy_keeps_every_trace_past_the_freshness_objective():
    cfg = yaml.safe_load((ROOT / "deploy/tracing/jaeger-tail-sampling.yaml").read_text())
    policies = {p["name"]: p for p in cfg["processors"]["tail_sampling"]["policies"]}
    fresh = policies["freshness-missed"]["numeric_attribute"]
    assert fresh["key"] == "precast.freshness_ms" and fresh["min_value"] == 1000
    assert "tail_sampling" in cfg["service"]["pipelines"]["traces"]["processors"]


@pytest.mark.skipif(
    not JAEGER.exists(), reason="jaeger not built here (precast stack up --tracing)"
)
@pytest.mark.parametrize("config", CONFIGS, ids=lambda p: p.name)
def test_jaeger_accepts_the_config(config: Path, tmp_path: Path):
    import os

    run = subprocess.run(
        [str(JAEGER), "validate", f"--config={config}"],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env={**os.environ, **PORTS},
        timeout=60,
    )
    assert run.returncode == 0, run.stderr[-500:]
