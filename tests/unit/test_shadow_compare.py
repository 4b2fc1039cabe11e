"""The shadow comparison (workers.shadow.compare), its report and gate (opsctl.toolkit.shadow_report),
and the fleet ground truth it scores against (the spec's simulator)."""

from __future__ import annotations

import json

import numpy as np
import orjson
from hypothesis import given
from hypothesis import strategies as st

from opsctl.toolkit.shadow_report import Check, Thresholds, gate, render_html, render_text
from precast.fleet.simulate.truth import conditions_of, true_labels
from producers.simulator import Fleet
from schemas.spec import load_spec
from schemas.validation import validate_event
from workers.shadow.compare import Comparison, Timing

STRATEGIES = load_spec().labels

LABELS = ("a", "b", "c", "d")


def _probs(rng: np.random.Generator, n: int) -> np.ndarray:
    x = rng.random((n, len(LABELS)))
    return (x / x.sum(axis=1, keepdims=True)).astype(np.float32)


def _groups(n: int) -> dict[str, list[str]]:
    return {
        "device_type": ["gateway" if i % 2 else "meter" for i in range(n)],
        "site": [f"s{i % 3}" for i in range(n)],
        "trigger": ["heartbeat"] * n,
    }


@given(st.integers(1, 60), st.integers(0, 10_000))
def test_counts_match_a_direct_computation(n, seed):
    rng = np.random.default_rng(seed)
    live, cand = _probs(rng, n), _probs(rng, n)
    devices = [f"d{i}" for i in range(n)]
    c = Comparison(LABELS, keep_changed=5)
    half = n // 2  # two batches: accumulation must not depend on batch boundaries
    g = _groups(n)
    c.add(devices[:half], {k: v[:half] for k, v in g.items()}, live[:half], cand[:half])
    c.add(devices[half:], {k: v[half:] for k, v in g.items()}, live[half:], cand[half:])
    d = c.to_dict()
    lt, ct = live.argmax(1), cand.argmax(1)
    assert d["overall"]["agree"] == int((lt == ct).sum())
    top3 = lambda p: [set(np.argsort(-r, kind="stable")[:3].tolist()) for r in p]  # noqa: E731
    overlap = sum(len(a & b) / 3 for a, b in zip(top3(live), top3(cand), strict=True))
    assert abs(d["overall"]["overlap_sum"] - overlap) < 1e-9
    meter = np.array(g["device_type"]) == "meter"
    assert d["by"]["device_type"].get("meter", {"agree": 0})["agree"] == int(
        ((lt == ct) & meter).sum()
    )
    assert np.array(d["transitions"]).sum() == n
    assert d["changed_devices"] == int((lt != ct).sum())
    assert len(d["top_changes"]) == min(5, int((lt != ct).sum()))
    gaps = [x["gap"] for x in d["top_changes"]]
    assert gaps == sorted(gaps, reverse=True) and all(x >= 0 for x in gaps)
    # A checkpoint round trip changes nothing.
    again = Comparison.from_dict(json.loads(json.dumps(d))).to_dict()
    assert again == d


def test_changed_devices_stay_bounded_and_keep_the_largest_gaps():
    rng = np.random.default_rng(1)
    c = Comparison(LABELS, keep_changed=3)
    for b in range(50):
        n = 40
        live, cand = _probs(rng, n), _probs(rng, n)
        c.add([f"d{b}-{i}" for i in range(n)], _groups(n), live, cand)
        assert len(c.changed) <= 4 * 3
    d = c.to_dict()
    assert len(d["top_changes"]) == 3
    assert d["changed_devices"] > 500


def test_calibration_against_truth():
    live = np.array([[0.9, 0.1, 0, 0], [0.6, 0.4, 0, 0], [0.2, 0.8, 0, 0]], dtype=np.float32)
    c = Comparison(LABELS)
    c.add(["x", "y", "z"], _groups(3), live, live, truth=[0, 1, -1])
    cal = c.to_dict()["calibration"]["live"]
    assert cal["predictions"] == 2 and cal["accuracy"] == 0.5
    assert abs(cal["ece"] - (abs(1 - 0.9) + abs(0 - 0.6)) / 2) < 1e-6


def test_timing_quantiles():
    t = Timing()
    for s in [0.001] * 98 + [0.05, 0.2]:
        t.add(100, s)
    d = t.as_dict()
    assert d["rows"] == 10_000 and d["batches"] == 100
    assert d["ms_per_batch_p50"] == 1.0 and d["ms_per_batch_max"] == 200.0
    assert 50 <= d["ms_per_batch_p99"] <= 200


def _summary(agree: int, n: int) -> dict:
    c = Comparison(STRATEGIES)
    live = np.eye(len(STRATEGIES), dtype=np.float32)[[0] * n]
    cand = live.copy()
    cand[agree:] = np.eye(len(STRATEGIES), dtype=np.float32)[1]
    c.add([f"d{i}" for i in range(n)], _groups(n), live, cand, truth=[0] * n)
    c.time("live", n, 0.001)
    c.time("candidate", n, 0.002)
    return {
        "live": {"version": "1.0.0"},
        "candidate": {"version": "1.1.0"},
        "records": n,
        "policy": "live policy on record time",
        "records_per_s": 1000.0,
        "shadow_topic": "precast.shadow-predictions",
        "comparison": c.to_dict(),
    }


def test_gate_passes_and_fails_on_each_threshold():
    s = _summary(96, 100)
    assert all(ch.ok for ch in gate(s, Thresholds(agreement=0.95, min_predictions=100)))
    failed = [ch for ch in gate(s, Thresholds(agreement=0.97)) if not ch.ok]
    assert [ch.name for ch in failed] == ["top-1 agreement"]
    assert not gate(s, Thresholds(accuracy=0.99))[0].ok  # 96 of 100 right
    assert gate(s, Thresholds(max_ece=0.05))[0].ok
    assert not gate(s, Thresholds(min_predictions=101))[0].ok
    assert not Check("x", None, 0.5).ok  # nothing measured never passes


def test_reports_render_every_section():
    s = _summary(90, 100)
    checks = gate(s, Thresholds(agreement=0.95))
    text = render_text(s, checks)
    assert "top-1 agreement 90.00%" in text and "FAIL" in text
    assert "remote_restart" in text and "calibration" in text
    page = render_html(s, checks)
    assert page.startswith("<!doctype html>") and page.count("<table>") >= 7
    assert "<script" not in page  # self-contained, nothing fetched


def test_true_labels_follow_the_simulators_own_draws():
    fleet = Fleet(300, seed=9, drift_share=0.1)
    truth = true_labels(load_spec(), 300, 9, drift_share=0.1)
    conds = conditions_of(load_spec())
    for i, d in enumerate(fleet.ids):
        want = None if fleet.drifting[i] else conds[fleet.conditions[i]].label
        assert truth[d] == want
    assert sum(v is None for v in truth.values()) == int(fleet.drifting.sum()) > 0


def test_site_is_read_from_every_tolerated_metadata_layout():
    """What a shadow run groups by comes from the heartbeat through the validator, whatever
    path the device's firmware puts it at."""
    fleet = Fleet(400, seed=4)
    events = fleet.heartbeats(400, 1_760_000_000_000)
    styles = {fleet.style[i] for i in range(400)}
    assert {"path:2", "path:3", "numbers_as_text", "undeclared", "canonical"} <= styles
    sites = fleet.sim.draw.static["site"]
    for i, e in enumerate(events):
        got = validate_event("heartbeats", e.device_id.encode(), orjson.dumps(e))
        assert got.ok and got.event["site"] == sites[i], (fleet.style[i], e)
