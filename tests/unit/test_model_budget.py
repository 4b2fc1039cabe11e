"""A model's tails and budget (issue 38): the model's own time per batch as a histogram per
version, and a worker that refuses a model whose session is over its memory budget, naming both
figures."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from prometheus_client import REGISTRY

from precast.errors import ConfigError
from precast.fleet import load_fleet
from workers.model import inference
from workers.model.inference import ModelSession

MODEL = Path(__file__).resolve().parents[2] / "workers/models/fleet-strategy/1.1.0"
FLEET = load_fleet()


def _count(version: str) -> float:
    v = REGISTRY.get_sample_value(
        "precast_worker_model_inference_seconds_count", {"model_version": version}
    )
    return v or 0.0


def test_each_batch_the_model_runs_is_timed_under_its_version_but_not_the_warm_up():
    before = _count("1.1.0")
    s = ModelSession(MODEL, fleet=FLEET, provider="cpu", warmup_rows=64)
    assert _count("1.1.0") == before
    for n in (1, 256):
        s.predict(np.zeros((n, FLEET.features.width), dtype=np.float32))
    assert _count("1.1.0") == before + 2


def test_a_session_over_the_budget_is_refused_with_both_figures(monkeypatch):
    rss = iter([100 * 2**20, 700 * 2**20])
    monkeypatch.setattr(inference, "resident_bytes", lambda: next(rss))
    with pytest.raises(ConfigError) as err:
        ModelSession(MODEL, fleet=FLEET, provider="cpu", memory_budget_mb=512)
    assert "600 MB at load" in str(err.value) and "MODEL_MEMORY_MB=512" in str(err.value)


def test_a_session_within_the_budget_loads_and_reports_its_size(monkeypatch):
    rss = iter([100 * 2**20, 164 * 2**20])
    monkeypatch.setattr(inference, "resident_bytes", lambda: next(rss))
    s = ModelSession(MODEL, fleet=FLEET, provider="cpu", memory_budget_mb=512)
    assert s.memory_bytes == 64 * 2**20
    gauge = REGISTRY.get_sample_value(
        "precast_worker_model_memory_bytes", {"model_version": s.version}
    )
    assert gauge == 64 * 2**20


def test_the_measurement_is_real_on_linux():
    s = ModelSession(MODEL, fleet=FLEET, provider="cpu")
    assert inference.resident_bytes() > 0 and s.memory_bytes >= 0
