"""The speculation policy's cheap check: sensitivities, log margins, the bound, and the
decisions it drives for hot and cold devices."""

import numpy as np
import pytest

from workers.features import N_FEATURES
from workers.policy import PolicyConfig, Reason, decide_heartbeats
from workers.sensitivity import estimate, margins, score_bound


class Softmax:
    """A linear-softmax model with known logit weights: d log p_k / dx_f is W[f, k] minus a
    probability-weighted mean, bounded by the spread of W's row."""

    def __init__(self, w: np.ndarray) -> None:
        self.w = w

    def predict(self, x: np.ndarray) -> np.ndarray:
        z = x @ self.w
        e = np.exp(z - z.max(axis=1, keepdims=True))
        return (e / e.sum(axis=1, keepdims=True)).astype(np.float32)


def test_a_feature_the_model_ignores_has_zero_sensitivity_and_one_it_uses_does_not():
    w = np.zeros((N_FEATURES, 4), dtype=np.float32)
    w[3] = [0.0, 2.0, -1.0, 0.5]  # only feature 3 matters
    sample = np.random.default_rng(1).normal(size=(64, N_FEATURES)).astype(np.float32) * 0.1
    s = estimate(Softmax(w), sample, quantile=1.0)
    assert s.shape == (N_FEATURES,)
    assert np.all(s[np.arange(N_FEATURES) != 3] < 1e-3)
    # |d(z_k - lse)/dx| <= max_k |w_k - sum p_j w_j| <= spread of the row (3.0)
    assert 0.5 < s[3] <= 3.0 + 1e-3


def test_log_margins_are_gaps_between_ranked_log_scores():
    p = np.array([[0.7, 0.2, 0.06, 0.04], [0.25, 0.25, 0.25, 0.25]], dtype=np.float32)
    m1, mk = margins(p, 3)
    assert m1 == pytest.approx([np.log(0.7 / 0.2), 0.0], abs=1e-5)
    assert mk == pytest.approx([np.log(0.06 / 0.04), 0.0], abs=1e-5)
    m1, mk = margins(p[:, :3] / p[:, :3].sum(1, keepdims=True), 3)
    assert np.isinf(mk).all()  # three classes: the top-3 set cannot change


def test_the_bound_is_weighted_by_sensitivity_and_zero_without_a_move():
    sens = np.zeros(N_FEATURES, dtype=np.float32)
    sens[0], sens[1] = 2.0, 0.5
    a = np.zeros((2, N_FEATURES), dtype=np.float32)
    b = a.copy()
    b[1, 0], b[1, 1] = 0.1, -1.0
    assert score_bound(sens, a, b) == pytest.approx([0.0, 0.7])


def _decide(cfg, *, margin1, margink, hot, move, valid_until=10_000, t=1_000):
    n = len(margin1)
    sens = np.zeros(N_FEATURES, dtype=np.float32)
    sens[0] = 1.0
    last = np.zeros((n, N_FEATURES), dtype=np.float32)
    new = last.copy()
    new[:, 0] = move
    return decide_heartbeats(
        cfg,
        has_prediction=np.ones(n, dtype=bool),
        last_x=last,
        new_x=new,
        event_time_ms=np.full(n, t),
        newest_seen_ms=np.full(n, t - 1_000),
        valid_until_ms=np.full(n, valid_until),
        horizon_ms=5_000,
        sensitivity=sens,
        margin_top1=np.asarray(margin1, dtype=np.float32),
        margin_topk=np.asarray(margink, dtype=np.float32),
        hot=np.asarray(hot),
    ).tolist()


def test_cold_devices_guard_the_top1_hot_devices_the_whole_top_k():
    cfg = PolicyConfig(safety=1.0, hot_safety=1.0, max_change=1e9)
    # move 0.1 -> bound 2 * 0.1 = 0.2 on any gap
    out = _decide(
        cfg,
        margin1=[0.5, 0.1, 0.5, 0.5],
        margink=[0.05, 0.5, 0.05, 0.5],
        hot=[False, False, True, True],
        move=0.1,
    )
    assert out == [
        Reason.UNCHANGED,  # cold, top-1 safe (its top-K may move: not guarded)
        Reason.HEARTBEAT_CHANGED,  # cold, top-1 could flip
        Reason.HEARTBEAT_CHANGED,  # hot, top-K could change
        Reason.UNCHANGED,  # hot, both safe
    ]


def test_near_expiry_a_cold_device_is_renewed_and_a_hot_one_refreshed():
    cfg = PolicyConfig(safety=1.0, hot_safety=1.0)
    out = _decide(
        cfg, margin1=[1.0, 1.0], margink=[1.0, 1.0], hot=[False, True], move=0.0, valid_until=1_500
    )
    assert out == [Reason.RENEWED, Reason.REFRESH]


def test_an_unknown_margin_always_predicts_and_a_large_move_ignores_the_bound():
    cfg = PolicyConfig(safety=1.0, max_change=0.5)
    out = _decide(cfg, margin1=[0.0, 1e9], margink=[1e9, 1e9], hot=[False, False], move=1e-6)
    assert out == [Reason.HEARTBEAT_CHANGED, Reason.UNCHANGED]
    out = _decide(cfg, margin1=[1e9], margink=[1e9], hot=[False], move=60.0)  # 0.6 scales of cpu
    assert out == [Reason.HEARTBEAT_CHANGED]
