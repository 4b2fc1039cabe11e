"""The speculation policy: every rule, its priority and the throttle, on plain arrays."""

import numpy as np
import pytest

from precast.fleet import load_fleet
from workers.precompute.config import PolicyConfig
from workers.precompute.decide.policy import (
    decide_heartbeats,
    expected_gap,
    release_at,
    throttle,
    throttle_one,
)
from workers.precompute.items import Reason

CFG = PolicyConfig(min_change=0.05, refresh_lead_ms=1_000, throttle_ms=250)
SCALE = load_fleet().features.change_scale
N_FEATURES = len(SCALE)


def decide(cfg=CFG, *, has=True, dx=0.0, col=0, t=10_000, seen=9_000, until=20_000):
    last = np.zeros((1, N_FEATURES), dtype=np.float32)
    new = last.copy()
    new[0, col] = dx
    return Reason(
        decide_heartbeats(
            cfg,
            has_prediction=np.array([has]),
            last_x=last,
            new_x=new,
            event_time_ms=np.array([t]),
            newest_seen_ms=np.array([seen]),
            valid_until_ms=np.array([until]),
            horizon_ms=5_000,
            change_scale=SCALE,
        )[0]
    )


def test_first_heartbeat_of_a_device_predicts():
    assert decide(has=False, seen=-1) == Reason.FIRST_SEEN


def test_material_change_is_relative_to_the_feature_scale():
    assert decide(dx=4.9, col=0) == Reason.UNCHANGED  # cpu: 4.9 of 100 points
    assert decide(dx=5.0, col=0) == Reason.HEARTBEAT_CHANGED  # 5 % of its range
    assert decide(dx=0.06, col=3) == Reason.HEARTBEAT_CHANGED  # error rate: 0.06 of 1
    assert decide(dx=1.0, col=N_FEATURES - 3) == Reason.HEARTBEAT_CHANGED  # one more critical alarm


def test_refresh_ahead_of_expiry_only_when_close():
    # no earlier heartbeat known (expected gap 0): within refresh_lead_ms of valid_until
    assert decide(t=18_999, seen=-1, until=20_000) == Reason.UNCHANGED
    assert decide(t=19_000, seen=-1, until=20_000) == Reason.REFRESH
    assert decide(t=25_000, until=20_000) == Reason.REFRESH  # already expired


def test_refresh_when_the_next_heartbeat_would_arrive_after_expiry():
    # heartbeats every 2 s, prediction valid until 20 s, lead 1 s: neither heartbeat below lies
    # in the lead window (19..20 s), but after the second one the next comes only at 19.5 s
    assert (
        decide(t=16_500, seen=14_500, until=20_000) == Reason.UNCHANGED
    )  # next at 18.5 s: in time
    assert decide(t=17_500, seen=15_500, until=20_000) == Reason.REFRESH  # next at 19.5 s: too late
    # the same heartbeat from a device that beats every 0.5 s: its next one comes in time
    assert decide(t=17_500, seen=17_000, until=20_000) == Reason.UNCHANGED
    # the gap is clipped to the horizon (5 s): a device silent for a minute is not refreshed early
    assert decide(t=10_000, seen=1, until=20_000) == Reason.UNCHANGED
    assert decide(t=14_000, seen=1, until=20_000) == Reason.REFRESH


def test_expected_gap_is_the_last_interval_clipped_to_the_horizon():
    gap = expected_gap(
        np.array([10_000, 10_000, 10_000, 10_000]), np.array([-1, 8_000, 10_000, 1_000]), 5_000
    )
    assert gap.tolist() == [0, 2_000, 0, 5_000]


def test_stale_and_duplicate_heartbeats_are_skipped_whatever_else_holds():
    assert decide(t=9_000, seen=9_000, dx=50) == Reason.STALE
    assert decide(t=8_000, seen=9_000, has=False) == Reason.STALE


def test_backfill_mode_predicts_everything():
    assert decide(PolicyConfig(always=True), t=1, seen=5) == Reason.BACKFILL


def test_vectorized_over_a_batch():
    n = 4
    last = np.zeros((n, N_FEATURES), dtype=np.float32)
    new = last.copy()
    new[1, 1] = 50
    out = decide_heartbeats(
        CFG,
        has_prediction=np.array([False, True, True, True]),
        last_x=last,
        new_x=new,
        event_time_ms=np.array([5, 5, 5, 19_500]),
        newest_seen_ms=np.array([-1, 1, 9, 1]),
        valid_until_ms=np.array([-1, 20_000, 20_000, 20_000]),
        horizon_ms=5_000,
        change_scale=SCALE,
    )
    assert [Reason(c) for c in out] == [
        Reason.FIRST_SEEN,
        Reason.HEARTBEAT_CHANGED,
        Reason.STALE,
        Reason.REFRESH,
    ]


def test_throttle_defers_only_predicting_decisions_of_recently_predicted_devices():
    d = np.array(
        [Reason.HEARTBEAT_CHANGED, Reason.HEARTBEAT_CHANGED, Reason.UNCHANGED], dtype=np.int8
    )
    out = throttle(CFG, d, np.array([900, 700, 990]), now_ms=1_000)
    assert [Reason(c) for c in out] == [
        Reason.THROTTLED,
        Reason.HEARTBEAT_CHANGED,
        Reason.UNCHANGED,
    ]
    assert d[0] == Reason.HEARTBEAT_CHANGED  # input untouched
    assert throttle(PolicyConfig(throttle_ms=0), d, np.array([999, 999, 999]), 1_000) is d


@pytest.mark.parametrize("reason", [Reason.WORK_ORDER, Reason.ALARM, Reason.API_MISS])
def test_low_rate_triggers_are_throttled_too_and_released_after_the_window(reason):
    assert throttle_one(CFG, reason, last_predicted_ms=900, now_ms=1_000) == Reason.THROTTLED
    assert throttle_one(CFG, reason, last_predicted_ms=700, now_ms=1_000) == reason
    assert throttle_one(CFG, Reason.CONTEXT_ONLY, 999, 1_000) == Reason.CONTEXT_ONLY
    assert release_at(CFG, 900) == 1_150


def test_every_reason_has_a_metric_label_and_predicting_ones_a_trigger():
    from workers.precompute.items import TRIGGER

    assert len({r.label for r in Reason}) == len(Reason)
    assert {r for r in Reason if r.emits} == set(TRIGGER)
