"""The registry layout shared by the worker and `precast promote`: ACTIVE replaced atomically,
the promotions log, which version serves and since when (the worker's metric, the board's
panel)."""

from __future__ import annotations

import json

from consumer_api.board.fleet_index import FleetIndex
from precast.models import layout as R
from tests.api_fixtures import now_ms, prediction
from workers.model import serving_metrics
from workers.model.registry import ModelRegistry


def _version(reg, v):
    (reg / v).mkdir(parents=True)
    (reg / v / "manifest.json").write_text("{}")


def test_active_the_log_and_serving_since(tmp_path):
    for v in ("1.0.0", "1.10.0", "1.9.0-rc.1", "latest"):
        _version(tmp_path, v)
    assert R.versions(tmp_path) == ["1.0.0", "1.9.0-rc.1", "1.10.0"]
    assert R.wanted_version(tmp_path) == "1.10.0" and R.active_version(tmp_path) is None
    R.write_active(tmp_path, "1.0.0")
    assert (tmp_path / "ACTIVE").read_text() == "1.0.0\n" and R.wanted_version(tmp_path) == "1.0.0"
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".")] == []  # no temp left
    a = R.record(tmp_path, {"action": "promote", "version": "1.0.0", "previous": None})
    R.record(tmp_path, {"action": "refused", "version": "1.10.0", "previous": "1.0.0"})
    with open(tmp_path / R.PROMOTIONS_FILE, "a") as f:
        f.write("{half a line\n")  # a torn write is skipped, not fatal
    b = R.record(tmp_path, {"action": "rollback", "version": "1.0.0", "previous": "1.10.0"})
    assert [d["action"] for d in R.history(tmp_path)] == ["promote", "refused", "rollback"]
    assert R.serving_since(tmp_path, "1.0.0") == b and b["at_ms"] >= a["at_ms"]
    assert R.serving_since(tmp_path, "1.10.0") is None
    assert all(
        json.loads(line) for line in (tmp_path / R.PROMOTIONS_FILE).read_text().splitlines()[:2]
    )


class _Model:
    def __init__(self, version):
        self.version, self.labels = version, ("a", "b")


def test_the_worker_says_which_version_serves_and_since_when(tmp_path):
    for v in ("1.0.0", "1.1.0"):
        _version(tmp_path, v)
    R.write_active(tmp_path, "1.0.0")
    t = [0.0]
    reg = ModelRegistry(lambda p: _Model(p.name), registry=tmp_path, clock=lambda: t[0])
    since = serving_metrics.MODEL_SINCE.labels("1.0.0")._value.get()
    assert since > 0 and serving_metrics.MODEL_VERSION.labels("1.0.0")._value.get() == 1
    R.write_active(tmp_path, "1.1.0")
    reg.request_check()
    reg.poll()
    while reg.poll() is None:
        pass
    assert reg.current.version == "1.1.0"
    assert serving_metrics.MODEL_SINCE.labels("1.1.0")._value.get() >= since
    names = {
        s.labels["model_version"] for m in serving_metrics.MODEL_SINCE.collect() for s in m.samples
    }
    assert "1.0.0" not in names  # only the version in use has a since
    reg.close()


def test_the_panel_names_the_versions_its_answers_come_from():
    ix, now = (
        FleetIndex(default_strategy="monitor_only", serve_stale=True, grace_ms=1_000),
        now_ms(),
    )
    ix.stored([(f"d{i}", prediction(f"d{i}", now - 100 + i, version="1.0.0")) for i in range(3)])
    ix.stored([("d9", prediction("d9", now - 5, version="1.1.0", produced=now - 4))])
    models = ix.freshness(now)["models"]
    assert models[0] == {"version": "1.0.0", "devices": 3, "since_ms": now - 100 + 20}
    assert models[1] == {"version": "1.1.0", "devices": 1, "since_ms": now - 4}
