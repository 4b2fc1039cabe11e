"""`precast promote` on the real broker: the shadow gate on the recent range's resolved work
orders decides whether ACTIVE changes; a failed gate refuses (exit 1) unless forced with a
reason; every decision is in the promotions log; roll back returns to what served before."""

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
from workers.training import export


def _copy(src: Path, reg: Path, version: str) -> None:
    shutil.copytree(src, reg / version)
    m = json.loads((reg / version / "manifest.json").read_text())
    m["version"] = version
    (reg / version / "manifest.json").write_text(json.dumps(m))


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


def test_the_gate_decides_force_records_why_and_rollback_returns(kafka_settings, topics, tmp_path):
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
    _copy(DEFAULT_MODEL_DIR, reg, "1.0.0")
    _copy(DEFAULT_MODEL_DIR, reg, "1.0.1")  # the same weights: exactly as accurate
    _constant(reg, "1.1.0", "monitor_only")  # sends nobody anywhere: far less accurate
    (reg / "ACTIVE").write_text("1.0.0\n")
    env = cli_env(
        kafka_settings,
        tmp_path / "state",
        PRECAST_TOPICS__PREFIX=topics.heartbeats.name.removesuffix("heartbeats"),
        PRECAST_TOPICS__PARTITIONS="3",
        PRECAST_MODEL__PROVIDER="cpu",
        PRECAST_MODEL__REGISTRY=str(reg),
        # the range was written at once: small batches interleave its topics as live traffic
        # does, so each prediction's data time falls near its trigger's (and in its window)
        PRECAST_WORKER__CONSUME_MAX="100",
    )
    gate = ["--all-triggers", "--min-predictions", "500", "--min-scored", "100", "--no-progress"]

    bad = precast(env, "promote", "1.1.0", *gate, "--report-dir", str(tmp_path / "r1"), timeout=240)
    assert bad.returncode == 1, bad.stderr
    assert "FAIL  candidate accuracy minus live accuracy" in bad.stdout
    assert "not promoted" in bad.stdout and (reg / "ACTIVE").read_text().strip() == "1.0.0"
    assert "resolved work orders" in bad.stdout  # scored against the range's outcomes
    report = json.loads((tmp_path / "r1" / "report.json").read_text())
    cal = report["comparison"]["calibration"]
    assert cal["live"]["accuracy"] > cal["candidate"]["accuracy"]
    assert cal["candidate"]["predictions"] >= 100

    good = precast(env, "promote", "1.0.1", *gate, timeout=240)
    assert good.returncode == 0, good.stderr + good.stdout
    assert "promoted: 1.0.1 (was 1.0.0)" in good.stdout
    assert (reg / "ACTIVE").read_text().strip() == "1.0.1"

    no_reason = precast(env, "promote", "1.1.0", "--force")
    assert no_reason.returncode == 2 and "--force needs --reason" in no_reason.stderr
    forced = precast(env, "promote", "1.1.0", *gate, "--force", "--reason", "drill", timeout=240)
    assert forced.returncode == 0, forced.stderr
    assert (reg / "ACTIVE").read_text().strip() == "1.1.0"

    back = precast(env, "promote", "--rollback", "--reason", "the drill is over")
    assert back.returncode == 0 and (reg / "ACTIVE").read_text().strip() == "1.0.1", back.stderr
    log = history(reg)
    assert [(d["action"], d["version"]) for d in log] == [
        ("refused", "1.1.0"),
        ("promote", "1.0.1"),
        ("promote", "1.1.0"),
        ("rollback", "1.0.1"),
    ]
    assert log[1]["gate"] == "passed" and not log[1]["forced"] and log[1]["previous"] == "1.0.0"
    assert log[2]["forced"] and log[2]["gate"] == "failed" and log[2]["reason"] == "drill"
    assert any(c["name"] == "candidate accuracy minus live accuracy" for c in log[0]["checks"])
    shown = precast(env, "promote", "--history")
    assert shown.returncode == 0 and "serving: 1.0.1 since" in shown.stdout

    for args, expected in (
        (["9.9.9"], "no version 9.9.9 in model registry"),
        (["1.0.0", "--rollback"], "one of them"),
        (["1.0.1"], "already serves"),
    ):
        r = precast(env, "promote", *args)
        assert expected in (r.stderr + r.stdout), (args, r.stderr)
        assert r.returncode == (0 if expected == "already serves" else 2)
    unset = {k: v for k, v in env.items() if k != "PRECAST_MODEL__REGISTRY"}
    for e in (unset, {**env, "PRECAST_MODEL__REGISTRY": ""}):
        r = precast(e, "promote", "1.0.0")
        assert r.returncode == 2 and "no model registry" in r.stderr, r.stderr
