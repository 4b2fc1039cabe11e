"""Device context reducer and the shared feature function: idempotent, bounded, same columns."""

import numpy as np
import pytest

from tests.worker_events import T0, alarm, work_order
from workers.context.reducer import HOUR_MS, MAX_OPEN_WORK_ORDERS, DeviceContext, context_columns
from workers.features import CONTEXT_COLUMNS, EMPTY_CONTEXT, FEATURE_NAMES, build_features


def test_work_orders_open_update_close_and_priority_counts():
    c = DeviceContext("d")
    assert c.apply_work_order(work_order("d", T0, "w1", "opened", "high"))
    assert c.apply_work_order(work_order("d", T0 + 1, "w2", "opened", "low"))
    assert c.columns(T0 + HOUR_MS)[:2] == (2.0, 1.0)
    assert c.apply_work_order(work_order("d", T0 + 2, "w2", "updated", "critical"))
    assert c.columns(T0 + 2)[:2] == (2.0, 2.0)
    assert c.apply_work_order(work_order("d", T0 + 3, "w1", "closed"))
    assert c.columns(T0 + 3)[:2] == (1.0, 1.0)
    assert c.columns(T0 + 1 + 2 * HOUR_MS)[4] == pytest.approx(
        2.0, abs=1e-6
    )  # hours since last opened


def test_reducer_is_idempotent_so_redelivery_and_snapshots_combine_safely():
    c = DeviceContext("d")
    e = work_order("d", T0, "w1")
    c.apply_work_order(e)
    assert not c.apply_work_order(e)
    a = alarm("d", T0, "a1")
    assert c.apply_alarm(a)
    assert not c.apply_alarm(a)
    assert c.columns(T0)[2] == 1.0


def test_alarms_count_in_a_sliding_hour_by_severity_and_cleared_ones_do_not_count():
    c = DeviceContext("d")
    c.apply_alarm(alarm("d", T0, "a1", "critical"))
    c.apply_alarm(alarm("d", T0 + 10, "a2", "major"))
    c.apply_alarm(alarm("d", T0 + 20, "a3", "warning"))
    assert not c.apply_alarm(alarm("d", T0 + 30, "a4", "info"))
    assert not c.apply_alarm(alarm("d", T0 + 40, "a5", "critical", cleared=True))
    assert c.columns(T0 + 40)[2:4] == (2.0, 1.0)
    assert c.columns(T0 + HOUR_MS + 15)[2:4] == (0.0, 1.0)  # a1, a2 left the window
    c.apply_alarm(alarm("d", T0 + 3 * HOUR_MS, "a6", "warning"))
    assert set(c.alarms) == {"a6"}  # pruned, bounded


def test_open_work_orders_are_bounded():
    c = DeviceContext("d")
    for i in range(MAX_OPEN_WORK_ORDERS + 10):
        c.apply_work_order(work_order("d", T0 + i, f"w{i}"))
    assert len(c.open_work_orders) == MAX_OPEN_WORK_ORDERS


def test_snapshot_round_trip_and_newer_local_state_wins():
    c = DeviceContext("d")
    c.apply_work_order(work_order("d", T0, "w1"))
    c.apply_alarm(alarm("d", T0 + 5, "a1"))
    back = DeviceContext.from_json(c.to_json(T0 + 9))
    assert back == c
    local = DeviceContext("d")
    local.apply_work_order(work_order("d", T0 + 100, "w9"))
    local.merge_snapshot(back)  # older snapshot: ignored
    assert set(local.open_work_orders) == {"w9"}
    fresh = DeviceContext("d", as_of_ms=T0 + 200)
    local.merge_snapshot(fresh)
    assert local.open_work_orders == {}
    with pytest.raises(ValueError):
        DeviceContext.from_json(b'{"schema_version": 9}')


def test_context_columns_feed_the_one_feature_function():
    c = DeviceContext("d")
    c.apply_work_order(work_order("d", T0, "w1", priority="critical"))
    cols = context_columns([None, c], np.array([T0, T0 + HOUR_MS]))
    assert list(cols) == list(CONTEXT_COLUMNS)
    assert cols["open_work_orders"].tolist() == [EMPTY_CONTEXT["open_work_orders"], 1.0]
    hb = {
        "cpu_pct": np.array([1.0, 2.0]),
        "mem_pct": np.zeros(2),
        "temperature_c": np.zeros(2),
        "error_rate": np.zeros(2),
        "signal_quality": np.ones(2),
        "uptime_s": np.zeros(2),
        "firmware_is_latest": np.ones(2),
        "device_type_idx": np.array([0, 3]),
    }
    x = build_features({**hb, **cols})
    assert x.shape == (2, len(FEATURE_NAMES))
    assert x[1, FEATURE_NAMES.index("open_high_priority")] == 1.0
    assert x[1, FEATURE_NAMES.index("log_hours_since_last_wo")] == pytest.approx(np.log1p(1.0))
    assert x[0, FEATURE_NAMES.index("log_hours_since_last_wo")] == pytest.approx(np.log1p(24 * 90))


def test_training_and_serving_share_the_feature_function():
    import workers.precompute.heartbeats
    import workers.training.train

    assert workers.training.train.build_features is workers.precompute.heartbeats.build_features
