"""PredictionSet records built column-wise (workers.precompute.score.encode): every field round-trips through the
contract (pydantic, via the one validator) and the serving store's decoder, for one input per
prediction, several (coalesced), backfill runs; scores keep exactly the 6-decimal values."""

import numpy as np
import orjson
import pytest

from precast.serving.entry import entry_from_prediction
from schemas.validation import validate_event
from tests.worker_events import T0, heartbeat, record
from workers.model.topk import top_k
from workers.precompute.items import LINEAGE_MAX, Pending, Reason, merge
from workers.precompute.score.encode import encode, score_text

LABELS = ("monitor_only", "remote_restart", 'odd "label" %s', "replace_part")
TRACE = "a" * 32


def batch(n, refs_per_item=1, reasons=None, rng=None):
    rng = rng or np.random.default_rng(0)
    items, off = [], 0
    for i in range(n):
        refs = []
        for _ in range(refs_per_item if isinstance(refs_per_item, int) else refs_per_item[i]):
            refs.append(
                (record("p.heartbeats", heartbeat(f"d{i}"), off, partition=i % 3), f"e{off}")
            )
            off += 1
        items.append(Pending(f"d{i}", i % 3, (reasons or [Reason.HEARTBEAT_CHANGED] * n)[i], refs))
    probs = rng.random((n, len(LABELS))).astype(np.float32)
    probs /= probs.sum(axis=1, keepdims=True)
    idx, scores = top_k(probs, 3)
    return items, idx, scores


def decoded(out):
    preds = []
    for k, v in zip(out.keys, out.values, strict=True):
        verdict = validate_event("predictions", k, v)
        assert verdict.ok, (verdict, v)
        entry_from_prediction(v, T0, k)  # what the read API's store decodes
        preds.append(verdict.event)
    return preds


@pytest.mark.parametrize("refs_per_item", [1, [1, 3, 2, 1]])
def test_every_field_round_trips_through_the_contract(refs_per_item):
    items, idx, scores = batch(4, refs_per_item)
    computed = np.array([T0, T0 + 1, T0 + 2, T0 + 3], dtype=np.int64)
    out = encode(items, idx, scores, LABELS, "1.2.3-rc%1", computed, 5_000, T0 + 50, False, 7)
    preds = decoded(out)
    assert out.keys == [b"d0", b"d1", b"d2", b"d3"]
    for j, (p, it) in enumerate(zip(preds, items, strict=True)):
        assert p.device_id == it.device and p.model_version == "1.2.3-rc%1"
        assert (
            p.computed_at_ms == T0 + j
            and p.valid_until_ms == T0 + j + 5_000
            and p.produced_at_ms == T0 + 50
        )
        assert p.trigger == "heartbeat" and p.backfill is False and p.inference_ms == 7
        assert [c.strategy for c in p.candidates] == [LABELS[c] for c in idx[j]]
        assert [c.score for c in p.candidates] == np.round(scores[j].astype(np.float64), 6).tolist()
        assert [(r.topic, r.partition, r.offset, r.event_id, r.trace_id) for r in p.lineage] == [
            (m.topic(), m.partition(), m.offset(), e, TRACE) for m, e in it.refs
        ]


def test_triggers_and_backfill_flags():
    reasons = [Reason.WORK_ORDER, Reason.BACKFILL, Reason.REFRESH, Reason.API_MISS]
    items, idx, scores = batch(4, reasons=reasons)
    comp = np.full(4, T0, dtype=np.int64)
    preds = decoded(encode(items, idx, scores, LABELS, "1", comp, 5_000, T0, False))
    assert [(p.trigger, p.backfill) for p in preds] == [
        ("work_order", False),
        ("backfill", True),
        ("expiry", False),
        ("api_miss", False),
    ]
    preds = decoded(encode(items, idx, scores, LABELS, "1", comp, 5_000, T0, True))
    assert {(p.trigger, p.backfill) for p in preds} == {("backfill", True)}


def test_a_reference_without_a_trace_id_says_null():
    items, idx, scores = batch(2)
    items[1].refs[0][0].headers_ = []
    (a, b) = decoded(encode(items, idx, scores, LABELS, "1", np.full(2, T0), 5_000, T0, False))
    assert a.lineage[0].trace_id == TRACE and b.lineage[0].trace_id is None
    assert (
        orjson.loads(
            encode(items, idx, scores, LABELS, "1", np.full(2, T0), 5_000, T0, False).values[1]
        )["lineage"][0]["trace_id"]
        is None
    )


def test_score_text_parses_to_exactly_the_rounded_score():
    edges = np.array(
        [0.0, 1.0, 5e-7, 4.9e-7, 0.9999995, 0.1234565, 1e-4, 0.5, 0.3], dtype=np.float64
    )
    rand = np.random.default_rng(1).random(20_000).astype(np.float32)
    for scores in (edges, rand):
        text = score_text(scores)
        assert [float(t) for t in text] == np.round(scores.astype(np.float64), 6).tolist()
    assert score_text(np.array([0.5, 1.0], dtype=np.float32)) == [b"0.500000", b"1.000000"]


def test_non_finite_or_out_of_range_scores_are_a_model_failure():
    items, idx, scores = batch(2)
    for bad in (np.nan, 1.5, -0.1):
        s = scores.copy()
        s[1, 0] = bad
        with pytest.raises(ValueError):
            encode(items, idx, s, LABELS, "1", np.full(2, T0), 5_000, T0, False)


def test_small_and_large_batches_format_scores_the_same():
    scores = np.random.default_rng(2).random(300).astype(np.float32)
    scores[:4] = [0.0, 1.0, 5e-7, 0.9999995]
    assert score_text(scores) == [
        t for i in range(0, 300, 10) for t in score_text(scores[i : i + 10])
    ]


def _item(reason: Reason, offset: int, topic: str = "hb") -> Pending:
    return Pending("d1", 0, reason, [(record(topic, heartbeat("d1", T0), offset), f"e{offset}")])


def _offsets(p: Pending) -> list[tuple[str, int]]:
    return [(m.topic(), m.offset()) for m, _ in p.refs]


def test_a_long_lineage_drops_the_oldest_heartbeats_and_keeps_every_event():
    # A work order waiting with a flood of heartbeats: the heartbeats a newer one supersedes go,
    # the work order and the alarm (events of their own) stay named in lineage.
    p = _item(Reason.HEARTBEAT_CHANGED, 0)
    p = merge(p, _item(Reason.WORK_ORDER, 0, "wo"))
    for o in range(1, 100):
        p = merge(p, _item(Reason.HEARTBEAT_CHANGED, o))
    p = merge(p, _item(Reason.ALARM, 0, "al"))
    refs = _offsets(p)
    assert len(refs) == LINEAGE_MAX and p.truncated == 100 + 2 - LINEAGE_MAX
    assert ("wo", 0) in refs and ("al", 0) in refs and p.reason == Reason.ALARM
    beats = [o for t, o in refs if t == "hb"]
    assert beats == list(range(100 - len(beats), 100))  # the newest heartbeats, in order


def test_more_events_than_the_cap_keep_the_newest_events():
    p = _item(Reason.WORK_ORDER, 0, "wo")
    for o in range(1, LINEAGE_MAX + 10):
        p = merge(p, _item(Reason.WORK_ORDER, o, "wo"))
    p = merge(p, _item(Reason.HEARTBEAT_CHANGED, 5))
    assert [o for _, o in _offsets(p)] == list(range(10, LINEAGE_MAX + 10))
    assert p.truncated == 11
