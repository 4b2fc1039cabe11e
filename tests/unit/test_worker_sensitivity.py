"""The speculation policy's cheap check: decision-boundary sensitivities, log margins, the gap
estimate, and the decisions it drives for hot and cold devices."""

import numpy as np
import pytest

from precast.fleet import load_fleet
from workers.model.sensitivity import Sensitivity, estimate, ranking
from workers.precompute.config import PolicyConfig
from workers.precompute.decide.policy import decide_heartbeats
from workers.precompute.items import Reason

SCALE = load_fleet().features.change_scale
N_FEATURES = len(SCALE)


class Softmax:
    """A linear-softmax model with known logit weights W: log p_i - log p_j = x.(W_i - W_j), so
    every gap's slope is exact and its spread zero."""

    def __init__(self, w: np.ndarray) -> None:
        self.w = w

    def predict(self, x: np.ndarray) -> np.ndarray:
        z = x.astype(np.float64) @ self.w
        e = np.exp(z - z.max(axis=1, keepdims=True))
        return (e / e.sum(axis=1, keepdims=True)).astype(np.float32)


def test_a_linear_models_gap_slopes_are_its_weight_differences_with_no_spread():
    rng = np.random.default_rng(1)
    w = np.zeros((N_FEATURES, 4))
    w[3] = [0.0, 2.0, -1.0, 0.5]  # only features 3 and 4 matter
    w[4] = [1.0, 0.0, 0.0, -1.0]
    sens = estimate(
        Softmax(w), rng.normal(size=(256, N_FEATURES)).astype(np.float32) * 0.3, SCALE, k=3
    )
    assert sens.slope.shape == (4, 4, N_FEATURES)
    for i, j in [(1, 0), (0, 3), (2, 1)]:
        assert sens.slope[i, j] == pytest.approx(w[:, i] - w[:, j], abs=2e-3)
        assert np.all(sens.spread[i, j] < 2e-3)


def test_ranking_gives_ordered_classes_and_log_margins():
    p = np.array([[0.06, 0.7, 0.04, 0.2], [0.25, 0.25, 0.25, 0.25]], dtype=np.float32)
    order, m1, mk = ranking(p, 3)
    assert order.tolist()[0] == [1, 3, 0, 2] and order.tolist()[1] == [0, 1, 2, 3]
    assert m1 == pytest.approx([np.log(0.7 / 0.2), 0.0], abs=1e-5)
    assert mk == pytest.approx([np.log(0.06 / 0.04), 0.0], abs=1e-5)
    _, _, mk3 = ranking(p[:, :3] / p[:, :3].sum(1, keepdims=True), 3)
    assert np.isinf(mk3).all()  # three classes: the top-3 set cannot change


def _sens() -> Sensitivity:
    """Gap of class 0 over class 1 shrinks by 1 per unit of feature 0 (+- 0.5); every other
    pair of classes has slope 0 and spread 0.5 on feature 0."""
    slope = np.zeros((4, 4, N_FEATURES), dtype=np.float32)
    spread = np.zeros((4, 4, N_FEATURES), dtype=np.float32)
    slope[0, 1, 0], slope[1, 0, 0] = -1.0, 1.0
    spread[:, :, 0] = 0.5
    return Sensitivity(slope, spread)


def _decide(cfg, *, m1, mk, hot, move, valid_until=10_000, t=1_000):
    n = len(m1)
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
        change_scale=SCALE,
        sensitivity=_sens(),
        rank=np.tile(np.array([0, 1, 2, 3]), (n, 1)),
        margin_top1=np.asarray(m1, dtype=np.float32),
        margin_topk=np.asarray(mk, dtype=np.float32),
        hot=np.asarray(hot),
    ).tolist()


def test_the_top1_may_change_when_the_estimated_gap_falls_within_its_uncertainty():
    cfg = PolicyConfig(safety=1.0, hot_safety=2.0, max_change=1e9)
    # move 0.2: estimated top-1 gap = m1 - 0.2, uncertainty 0.1 (x2 when hot)
    out = _decide(cfg, m1=[0.5, 0.25, 0.35, 0.45], mk=[1, 1, 1, 1], hot=[0, 0, 1, 1], move=0.2)
    assert out == [
        Reason.UNCHANGED,  # 0.30 > 0.1
        Reason.HEARTBEAT_CHANGED,  # 0.05 <= 0.1
        Reason.HEARTBEAT_CHANGED,  # hot: 0.15 <= 0.2
        Reason.UNCHANGED,  # hot: 0.25 > 0.2
    ]
    # a move the other way widens the gap: nothing to do
    assert _decide(cfg, m1=[0.05], mk=[1], hot=[0], move=-0.2) == [Reason.UNCHANGED]


def test_hot_devices_guard_their_top_k_set_when_asked():
    cfg = PolicyConfig(safety=1.0, hot_safety=1.0, hot_top_k=True, max_change=1e9)
    out = _decide(cfg, m1=[5, 5], mk=[0.05, 0.05], hot=[0, 1], move=0.2)  # K-th gap: 0.05 vs 0.1
    assert out == [Reason.UNCHANGED, Reason.HEARTBEAT_CHANGED]


def test_near_expiry_a_stable_answer_is_renewed_and_one_that_may_change_predicted():
    cfg = PolicyConfig()
    out = _decide(cfg, m1=[5, 5, 0.01], mk=[5, 5, 5], hot=[0, 1, 1], move=0.1, valid_until=1_500)
    assert out == [Reason.RENEWED, Reason.RENEWED, Reason.HEARTBEAT_CHANGED]


def test_an_unknown_answer_predicts_and_a_large_move_ignores_the_estimate():
    cfg = PolicyConfig(max_change=0.5)
    assert _decide(cfg, m1=[-1, 5], mk=[5, 5], hot=[0, 0], move=-1e-3) == [
        Reason.HEARTBEAT_CHANGED,
        Reason.UNCHANGED,
    ]
    assert _decide(cfg, m1=[1e9], mk=[1e9], hot=[0], move=-60.0) == [Reason.HEARTBEAT_CHANGED]


def test_read_hints_mark_known_devices_hot_and_bad_ones_are_dead_lettered():
    from schemas.topics import catalog
    from tests.worker_events import T0, heartbeat, record
    from workers.precompute.pipeline import PipelineConfig, build_pipeline

    topics = catalog("u.", 3)
    rejected = []
    p = build_pipeline(
        topics, PipelineConfig(), lambda m, r, d: rejected.append((m.offset(), str(r)))
    )
    p.ingest([record(topics.heartbeats.name, heartbeat("d1", T0), 0)], T0, 0.0)

    def hint(offset, device, until, key=None, **extra):
        body = {
            "schema_version": 1,
            "device_id": device,
            "source": "read",
            "hinted_at_ms": T0,
            "hot_until_ms": until,
            **extra,
        }
        return record(topics.read_hints.name, body, offset, key=key)

    p.ingest(
        [
            hint(0, "d1", T0 + 30_000),
            hint(1, "nobody", T0 + 30_000),  # no state here: ignored, not stored
            hint(2, "d1", T0 + 30_000, key=b"d2"),
            hint(3, "d1", -5),
            hint(4, "d1", T0, surprise=1),
        ],
        T0,
        0.0,
    )
    assert p.table.hot_until[p.table.slot["d1"]] == T0 + 30_000
    assert "nobody" not in p.table
    assert rejected == [(2, "key_mismatch"), (3, "invalid"), (4, "invalid")]


def test_a_restored_device_keeps_the_policys_view_of_its_last_inference():
    """A worker that takes a partition over renews a stable answer instead of re-inferring."""
    from schemas.topics import catalog
    from tests.worker_events import T0, heartbeat, record
    from workers.model.inference import ModelSession
    from workers.precompute.pipeline import PipelineConfig, build_pipeline
    from workers.settings import DEFAULT_MODEL_DIR

    topics = catalog("u.", 3)
    model = ModelSession(DEFAULT_MODEL_DIR, provider="cpu")
    first = build_pipeline(topics, PipelineConfig(), lambda m, r, d: None)
    first.ingest([record(topics.heartbeats.name, heartbeat("d1", T0), 0)], T0, 0.0)
    items, _ = first.next_batch(0.0, force=True)
    r = first.compute(items, model, T0)
    first.mark_predicted(r, T0)
    state = first.state_records(r)
    devices, rec, bad, foreign = first.scorer.layout.decode([b"d1"], state)
    assert bad == 0 and foreign == 0

    second = build_pipeline(topics, PipelineConfig(), lambda m, r, d: None)
    decisions = []
    second.decisions = lambda reason, n: decisions.extend([reason] * n)
    second.table.restore(devices, [0], rec)
    second.prime(model)  # what the worker does at start
    t1, t2 = first.table.slot["d1"], second.table.slot["d1"]
    assert second.table.margin_top1[t2] == first.table.margin_top1[t1] > 0
    assert (second.table.rank_idx[t2] == first.table.rank_idx[t1]).all()
    # the next heartbeat, due for refresh and unchanged: a renewal of the restored answer
    second.ingest([record(topics.heartbeats.name, heartbeat("d1", T0 + 4_500), 1)], T0, 0.0)
    assert decisions == [Reason.RENEWED]
    items, _ = second.next_batch(0.0, force=True)
    r2 = second.compute(items, model, T0 + 4_600)
    assert r2.inferred is not None and not r2.inferred.any()
    assert (r2.idx == r.idx).all()
