"""The drift monitor end to end without a broker: simulator heartbeats (as published bytes)
through the worker's decoder and feature function into windows, and the shipped references."""

from __future__ import annotations

import numpy as np
import orjson
import pytest
from prometheus_client import REGISTRY

from precast.errors import ConfigError
from precast.fleet import load_fleet
from precast.kafka import Record
from producers.simulator import Fleet
from workers.drift.monitor import DriftMonitor
from workers.drift.reference import load_reference, monitored
from workers.drift.window import SlidingWindow
from workers.settings import DEFAULT_MODEL_DIR

T0 = 1_800_000_000_000
FEATURES = load_fleet().features


def _feed(mon: DriftMonitor, fleet: Fleet, seconds: int, per_s: int = 500) -> list:
    results = []
    for _ in range(seconds):
        events = fleet.heartbeats(per_s, T0 + int(fleet.sim_s * 1000))
        msgs = [
            Record("hb", 0, i, e.device_id.encode(), orjson.dumps(e)) for i, e in enumerate(events)
        ]
        mon.add_records(msgs, fleet.sim_s)
        if mon.due(fleet.sim_s):
            results.append((fleet.sim_s, mon.evaluate(fleet.sim_s)))
    return results


def _monitor() -> DriftMonitor:
    return DriftMonitor(
        load_reference(DEFAULT_MODEL_DIR, FEATURES),
        window_s=20,
        step_s=5,
        min_rows=1_000,
        max_rows=50_000,
        alpha=0.01,
        min_effect=0.05,
    )


def test_every_shipped_model_has_a_reference_of_its_own_version():
    for model_dir in sorted(DEFAULT_MODEL_DIR.parent.iterdir()):
        ref = load_reference(model_dir, FEATURES)
        assert ref.model_version == model_dir.name
        assert ref.features == monitored(FEATURES) and ref.rows >= 10_000
        # the heartbeat's features, none of the context values
        assert "device_type=camera" in ref.features and "open_work_orders" not in ref.features
        assert (np.diff(ref.sorted_values, axis=1) >= 0).all()


def test_missing_reference_is_a_config_error(tmp_path):
    with pytest.raises(ConfigError, match="drift reference"):
        load_reference(tmp_path, FEATURES)


def test_a_reference_of_other_features_is_refused(tmp_path):
    from workers.drift.reference import Reference, save_reference

    save_reference(Reference("1.0.0", ("x", "y"), np.zeros((2, 5))), tmp_path)
    with pytest.raises(ConfigError, match="this fleet spec monitors"):
        load_reference(tmp_path, FEATURES)


def test_unshifted_fleet_stays_clean_and_a_drift_event_is_flagged():
    mon = _monitor()
    clean = _feed(mon, Fleet(1_000, 3, hb_interval_s=2.0, drift_share=0.0), 60)
    tested = [r for _, r in clean if r is not None]
    assert len(tested) >= 8 and not any(r.drifted for r in tested)
    assert REGISTRY.get_sample_value("precast_drift_flagged_features") == 0

    mon = _monitor()
    fleet = Fleet(1_000, 4, hb_interval_s=2.0, drift_share=0.5, drift_s=10, drift_at_s=25)
    shifted = _feed(mon, fleet, 70)
    flagged_at = [t for t, r in shifted if r is not None and r.drifted]
    assert flagged_at and flagged_at[0] - 25 <= 30
    assert REGISTRY.get_sample_value("precast_drift_flagged_features") >= 1
    assert REGISTRY.get_sample_value("precast_drift_window_rows", {"feature": "error_rate"}) > 0


def test_too_small_a_window_is_not_tested():
    mon = _monitor()
    before = REGISTRY.get_sample_value("precast_drift_windows_total", {"result": "too_small"})
    assert _feed(mon, Fleet(50, 1, hb_interval_s=1.0), 6, per_s=50)[0][1] is None
    after = REGISTRY.get_sample_value("precast_drift_windows_total", {"result": "too_small"})
    assert after == before + 1


def test_sliding_window_drops_old_rows_and_caps_rows():
    w = SlidingWindow(width_s=10, max_rows=25)
    for t in range(30):
        w.add(np.full(2, float(t)), np.full((2, 1), float(t)))
    rows = w.rows()
    assert rows[:, 0].min() > 29 - 10 and len(rows) == 20
    w2 = SlidingWindow(width_s=100, max_rows=25)
    for t in range(30):
        w2.add(np.full(2, float(t)), np.full((2, 1), float(t)))
    assert len(w2.rows()) == 25 and w2.rows()[-1, 0] == 29


def test_training_writes_a_reference_next_to_the_model(tmp_path):
    pytest.importorskip("sklearn")  # the `train` extra
    from workers.training.data import from_simulator
    from workers.training.train import train

    fleet = load_fleet()
    train(fleet, from_simulator(fleet, 4_000, 3), "9.9.9", tmp_path, name="t", seed=3)
    ref = load_reference(tmp_path, fleet.features)
    assert ref.model_version == "9.9.9" and ref.rows == 3_200  # the training part (80 %)
