"""A distilled or quantized candidate goes through `precast promote` like any other: the shadow
gate on the recent range of real traffic compares it with the live model (top-1 agreement) and
scores both against the range's resolved work orders. The live model quantized passes and
serves; a faithful student of another model (one that answers the same label whatever it sees)
is refused, and ACTIVE stays."""

from __future__ import annotations

import hashlib
import json
import shutil
import time
from pathlib import Path

import numpy as np

from precast.fleet import load_fleet
from precast.kafka import Producer
from precast.models.layout import history
from tests.integration.ops_support import cli_env, precast
from tests.outcome_support import simulate
from workers.model.manifest import binding
from workers.settings import DEFAULT_MODEL_DIR
from workers.training import candidate, distill, export, quantize


def _constant(reg: Path, version: str, label: str) -> None:
    """A model bound to the built-in spec that answers `label` whatever it sees."""
    fleet = load_fleet()
    labels = fleet.spec.labels
    f = fleet.features.width
    bias = np.full(len(labels), -5.0)
    bias[labels.index(label)] = 5.0
    model = export.mlp_to_onnx(
        "constant", np.zeros(f), np.ones(f), [np.zeros((f, len(labels)))], [bias]
    )
    raw = export.stamp(model, fleet, labels)
    out = reg / version
    out.mkdir(parents=True)
    (out / "model.onnx").write_bytes(raw)
    manifest = {
        "name": "fleet-strategy",
        "version": version,
        "input": export.INPUT_NAME,
        "output": export.OUTPUT_NAME,
        "output_kind": "probabilities",
        "features": list(fleet.features.names),
        "labels": list(labels),
        "spec": binding(fleet),
        "sha256": hashlib.sha256(raw).hexdigest(),
    }
    (out / "manifest.json").write_text(json.dumps(manifest))


def test_promote_gates_quantized_and_distilled_candidates(kafka_settings, topics, tmp_path):
    fleet = load_fleet()
    now = int(time.time() * 1000)
    s = simulate(
        fleet, devices=150, rounds=40, seed=12, delay_s=30_000, topics=topics, t0=now - 1_200_000
    )
    p = Producer(kafka_settings)
    for r in s.records:
        p.copy(r.topic(), r.partition(), r.key(), r.value(), None, r.timestamp()[1])
    p.flush()
    reg = tmp_path / "registry"
    reg.mkdir()
    shutil.copytree(DEFAULT_MODEL_DIR, reg / "1.0.0")
    _constant(reg, "0.9.0", "monitor_only")
    (reg / "ACTIVE").write_text("1.0.0\n")
    few = {1: 10, 256: 2}
    # the live model quantized: the same function in INT8
    probe = candidate.rows_from(fleet, probe_of=reg / "1.0.0")
    quantize.quantize(
        fleet, reg / "1.0.0", "1.0.1", reg / "1.0.1", "dynamic", probe, calls=few, rss=False
    )
    # a student of the constant model: it agrees with its own teacher, not with the live model
    rows = candidate.rows_from(fleet, simulate=4_000, seed=5)
    _, own = distill.distill(
        fleet, reg / "0.9.0", rows, "1.2.0", reg / "1.2.0", calls=few, rss=False
    )
    assert own["top1_agreement"] > 0.99  # a faithful student, of the wrong teacher
    for v, method in (("1.0.1", "quantize-dynamic"), ("1.2.0", "distill")):
        assert json.loads((reg / v / "manifest.json").read_text())["method"] == method
    env = cli_env(
        kafka_settings,
        tmp_path / "state",
        PRECAST_TOPICS__PREFIX=topics.heartbeats.name.removesuffix("heartbeats"),
        PRECAST_TOPICS__PARTITIONS="3",
        PRECAST_MODEL__PROVIDER="cpu",
        PRECAST_MODEL__REGISTRY=str(reg),
        PRECAST_WORKER__CONSUME_MAX="100",
    )
    gate = [
        "--all-triggers",
        "--min-predictions",
        "500",
        "--min-scored",
        "100",
        "--require-agreement",
        "0.95",
        "--no-progress",
    ]

    bad = precast(env, "promote", "1.2.0", *gate, "--report-dir", str(tmp_path / "r1"), timeout=300)
    assert bad.returncode == 1, bad.stderr + bad.stdout
    assert "FAIL  top-1 agreement" in bad.stdout, bad.stdout
    assert "not promoted" in bad.stdout and (reg / "ACTIVE").read_text().strip() == "1.0.0"

    good = precast(
        env, "promote", "1.0.1", *gate, "--report-dir", str(tmp_path / "r2"), timeout=300
    )
    assert good.returncode == 0, good.stderr + good.stdout
    assert "promoted: 1.0.1 (was 1.0.0)" in good.stdout
    assert (reg / "ACTIVE").read_text().strip() == "1.0.1"
    log = history(reg)
    assert [(d["action"], d["version"]) for d in log] == [
        ("refused", "1.2.0"),
        ("promote", "1.0.1"),
    ]
    names = {c["name"] for c in log[0]["checks"]}
    assert any("agreement" in n for n in names) and any("accuracy" in n for n in names), names
