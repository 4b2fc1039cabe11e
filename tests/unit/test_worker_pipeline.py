"""The worker's pure core on plain records with the real model: triggers, coalescing,
throttling, lineage, precompute requests and which offsets are safe to commit."""

import numpy as np
import orjson
import pytest

from precast.fleet import load_fleet
from schemas.predictions import PredictionSet
from schemas.topics import catalog
from tests.worker_events import T0, flush, heartbeat, record, request, work_order
from workers.model.inference import ModelSession
from workers.model.topk import top_k
from workers.precompute.config import PolicyConfig
from workers.precompute.items import Reason
from workers.precompute.pipeline import PipelineConfig, build_pipeline
from workers.settings import DEFAULT_MODEL_DIR

TOPICS = catalog("u.", 3)
HB, WO, REQ = TOPICS.heartbeats.name, TOPICS.work_orders.name, TOPICS.precompute_requests.name


@pytest.fixture(scope="module")
def model():
    return ModelSession(DEFAULT_MODEL_DIR, provider="cpu")


def make(throttle_ms=0, **kw):
    rejected, decisions = [], []
    p = build_pipeline(
        TOPICS,
        PipelineConfig(policy=PolicyConfig(throttle_ms=throttle_ms), **kw),
        lambda m, r, d: rejected.append((m.offset(), str(r))),
    )
    p.decisions = lambda reason, n: decisions.extend([reason] * n)
    return p, rejected, decisions


def test_each_device_gets_one_prediction_with_all_its_triggers_in_lineage(model):
    p, rejected, decisions = make()
    recs = [
        record(HB, heartbeat("d1", T0), 0),
        record(HB, heartbeat("d2", T0), 1),
        record(HB, heartbeat("d1", T0 + 1000, cpu_pct=90), 2),
        record(HB, heartbeat("d1", T0 + 500), 3),
    ]
    p.ingest(recs, T0, 0.0)
    preds = {x.device_id: x for x in flush(p, model)}
    assert set(preds) == {"d1", "d2"} and rejected == []
    d1 = preds["d1"]
    assert sorted(ref.offset for ref in d1.lineage) == [0, 2, 3]
    assert d1.computed_at_ms == T0 + 1000  # newest input by event time, not by offset
    assert d1.valid_until_ms == T0 + 1000 + 5000
    assert d1.trigger == "heartbeat" and d1.model_version == model.version
    assert all(ref.trace_id == "a" * 32 and ref.topic == HB for ref in d1.lineage)
    scores = [c.score for c in d1.candidates]
    assert len(scores) == 3 and scores == sorted(scores, reverse=True)
    assert decisions.count(Reason.FIRST_SEEN) == 2


def test_unchanged_and_duplicate_heartbeats_are_skipped_but_committed(model):
    p, _, decisions = make()
    p.ingest([record(HB, heartbeat("d1", T0), 0)], T0, 0.0)
    flush(p, model)
    p.ingest(
        [record(HB, heartbeat("d1", T0 + 100), 1), record(HB, heartbeat("d1", T0), 2)], T0, 0.0
    )
    assert flush(p, model) == []
    assert decisions[-1] == Reason.UNCHANGED
    p.ingest([record(HB, heartbeat("d1", T0 + 50), 3)], T0, 0.0)  # older than the newest seen
    assert decisions[-1] == Reason.STALE
    assert [(o.topic, o.offset) for o in p.commit_offsets()] == [(HB, 4)]
    p.ingest([record(HB, heartbeat("d1", T0 + 4_200), 4)], T0, 0.0)  # within 1 s of valid_until
    assert [x.trigger for x in flush(p, model)] == ["expiry"]


def test_a_stable_answer_is_renewed_without_inference_when_the_next_heartbeat_would_be_late(model):
    p, _, decisions = make()
    p.ingest([record(HB, heartbeat("d1", T0), 0)], T0, 0.0)
    (first,) = flush(p, model)  # valid until T0 + 5 s; the lead window starts at T0 + 4 s
    p.ingest(
        [record(HB, heartbeat("d1", T0 + 1_500), 1)], T0, 0.0
    )  # next expected at +3 s: in time
    assert flush(p, model) == [] and decisions[-1] == Reason.UNCHANGED
    p.ingest([record(HB, heartbeat("d1", T0 + 3_000), 2)], T0, 0.0)  # next at +4.5 s: renew now
    assert decisions[-1] == Reason.RENEWED
    inferred_before = p.table.predicted_at[p.table.slot["d1"]]
    (pred,) = flush(p, model)
    assert pred.trigger == "expiry" and pred.computed_at_ms == T0 + 3_000
    assert pred.valid_until_ms == T0 + 3_000 + 5_000
    assert pred.candidates == first.candidates and pred.inference_ms == 0
    assert p.table.predicted_at[p.table.slot["d1"]] == inferred_before  # no inference


def test_a_hot_device_is_held_to_the_stricter_check(model):
    def probe(rate: float) -> tuple[bool, bool]:
        """Both devices make the same move; which of them is queued for an inference?"""
        p, _, _ = make()
        p.ingest([record(HB, heartbeat(d, T0), i) for i, d in enumerate(("d1", "d2"))], T0, 0.0)
        flush(p, model)
        assert p.mark_hot(["d1", "never-seen"], T0 + 60_000) == 1
        moved = [
            record(HB, heartbeat(d, T0 + 100, error_rate=rate), 2 + i)
            for i, d in enumerate(("d1", "d2"))
        ]
        p.ingest(moved, T0, 0.0)
        return "d1" in p.batcher, "d2" in p.batcher

    seen = [probe(float(r)) for r in np.linspace(0.01, 0.6, 60)]
    assert (True, False) in seen  # a move only the hot device predicts on
    assert (False, True) not in seen  # never the other way round
    assert seen[0] == (False, False) and seen[-1] == (True, True)


def test_a_move_that_cannot_change_the_answer_is_skipped_and_one_that_can_is_not(model):
    p, _, decisions = make()
    p.ingest([record(HB, heartbeat("d1", T0), 0)], T0, 0.0)
    flush(p, model)
    p.ingest([record(HB, heartbeat("d1", T0 + 500, cpu_pct=30.2), 1)], T0, 0.0)
    assert decisions[-1] == Reason.UNCHANGED
    p.ingest([record(HB, heartbeat("d1", T0 + 1_000, error_rate=0.9, cpu_pct=97), 2)], T0, 0.0)
    assert decisions[-1] == Reason.HEARTBEAT_CHANGED


def test_small_moves_add_up_against_the_last_inference_not_the_last_heartbeat(model):
    p, _, decisions = make()
    p.ingest([record(HB, heartbeat("d1", T0), 0)], T0, 0.0)
    flush(p, model)
    margin = float(p.table.margin_top1[p.table.slot["d1"]])
    sens = p.state.sensitivity
    assert sens is not None and margin > 0
    # Walk the error rate up in steps each too small to matter alone.
    t, rate, seen = T0, 0.01, []
    for i in range(1, 200):
        rate += 0.01
        t += 200
        p.ingest([record(HB, heartbeat("d1", t, error_rate=rate), i)], T0, 0.0)
        seen.append(decisions[-1])
        if decisions[-1] == Reason.HEARTBEAT_CHANGED:
            break
    assert seen[0] == Reason.UNCHANGED and seen[-1] == Reason.HEARTBEAT_CHANGED


def test_every_event_mode_predicts_on_each_fresh_heartbeat(model):
    rejected, decisions = [], []
    p = build_pipeline(
        TOPICS,
        PipelineConfig(policy=PolicyConfig(throttle_ms=0, every_event=True)),
        lambda m, r, d: rejected.append(m),
    )
    p.decisions = lambda reason, n: decisions.extend([reason] * n)
    for i in range(5):
        p.ingest([record(HB, heartbeat("d1", T0 + i * 100), i)], T0, 0.0)
        assert len(flush(p, model)) == 1
    assert decisions == [Reason.FIRST_SEEN] + [Reason.HEARTBEAT_CHANGED] * 4


def test_throttled_trigger_is_deferred_holds_back_its_offset_and_is_released(model):
    p, _, decisions = make(throttle_ms=1_000)
    p.ingest([record(HB, heartbeat("d1", T0), 0)], T0, 0.0)
    flush(p, model, now_ms=T0)
    p.ingest(
        [
            record(HB, heartbeat("d1", T0 + 10, cpu_pct=95, error_rate=0.9), 1),
            record(HB, heartbeat("d2", T0), 2),
        ],
        T0 + 10,
        0.0,
    )
    assert decisions[-2:] in (
        [Reason.THROTTLED, Reason.FIRST_SEEN],
        [Reason.FIRST_SEEN, Reason.THROTTLED],
    )
    assert [x.device_id for x in flush(p, model, T0 + 10)] == ["d2"]
    assert [o.offset for o in p.commit_offsets()] == [1]  # d1's trigger still waits
    assert p.release_deferred(T0 + 999, 0.0) == 0
    assert p.release_deferred(T0 + 1_000, 0.0) == 1
    (d1,) = flush(p, model, T0 + 1_000)
    assert [r.offset for r in d1.lineage] == [1]
    assert [o.offset for o in p.commit_offsets()] == [3]


def test_work_order_triggers_with_its_own_context_in_the_features(model):
    p, _, _ = make()
    p.ingest([record(HB, heartbeat("d1", T0), 0)], T0, 0.0)
    (first,) = flush(p, model)
    p.ingest([record(WO, work_order("d1", T0 + 5, "w1", priority="critical"), 0)], T0, 0.0)
    items, _ = p.next_batch(0.0, force=True)
    r = p.compute(items, model, T0)
    assert r.features[0, load_fleet().features.names.index("open_high_priority")] == 1.0
    pred = PredictionSet.model_validate_json(r.out.values[0])
    assert pred.trigger == "work_order" and pred.computed_at_ms == T0 + 5
    assert pred.lineage[0].topic == WO and first.computed_at_ms == T0


def _committed(p) -> dict[str, int]:
    return {o.topic: o.offset for o in p.commit_offsets()}


def test_a_request_before_its_devices_data_waits_for_it_and_is_answered_by_it(model):
    """Kafka orders no two topics: after a failover the request can come first."""
    p, _, _ = make()
    p.ingest([record(REQ, request("d1", T0 + 7, "prefetch"), 0)], T0, 0.0)
    assert flush(p, model) == [] and "d1" not in p.table and len(p.awaiting) == 1
    assert _committed(p)[REQ] == 0  # a worker taking the partition over reads it again
    p.ingest([record(HB, heartbeat("d1", T0 - 1_000), 0)], T0 + 10, 0.1)
    (pred,) = flush(p, model, T0 + 10)
    assert pred.trigger == "prefetch" and pred.computed_at_ms == T0 - 1_000
    assert {(x.topic, x.offset) for x in pred.lineage} == {(REQ, 0), (HB, 0)}
    assert len(p.awaiting) == 0 and _committed(p) == {REQ: 1, HB: 1}


def test_a_request_whose_data_never_comes_is_dropped_after_its_wait_and_committed(model):
    p, _, _ = make(request_wait_s=5.0)
    p.ingest([record(REQ, request("ghost", T0 + 7, "prefetch"), 0)], T0, 0.0)
    p.ingest([record(REQ, request("ghost", T0 + 8, "api_miss"), 1)], T0, 1.0)  # merged
    p.release_deferred(T0, 4.9)
    assert len(p.awaiting) == 1 and _committed(p)[REQ] == 0
    p.release_deferred(T0, 5.1)  # the first request's wait is up: both go
    assert len(p.awaiting) == 0 and _committed(p)[REQ] == 2
    assert flush(p, model) == [] and "ghost" not in p.table


def test_requests_without_data_are_bounded_and_the_oldest_make_room(model):
    p, _, _ = make(request_wait_max=2)
    for i, d in enumerate(["g1", "g2", "g3"]):
        p.ingest([record(REQ, request(d, T0 + i), i)], T0, float(i))
    assert [it.device for it in p.awaiting] == ["g2", "g3"] and _committed(p)[REQ] == 1
    p.forget([0])  # the partition went to another worker: it reads them again
    assert len(p.awaiting) == 0 and REQ not in _committed(p)


def test_exactly_once_keeps_waiting_requests_over_a_revoke_for_the_partitions_it_gets_back():
    """Exactly-once commits a waiting request's offset with the transaction: dropped at the
    revoke, nobody would read it again. It stays until the next assignment says whose it is."""
    p, _, _ = make()
    p.ingest([record(REQ, request("g0", T0), 0, partition=0)], T0, 0.0)
    p.ingest([record(REQ, request("g1", T0), 0, partition=1)], T0, 0.0)
    p.forget([0, 1], keep_awaiting=True)  # an eager rebalance revokes everything
    assert sorted(it.device for it in p.awaiting) == ["g0", "g1"]
    p.awaiting.keep([1])  # partition 1 comes back, partition 0 went to another worker
    assert [it.device for it in p.awaiting] == ["g1"]
    p.ingest([record(HB, heartbeat("g1", T0 - 500), 0, partition=1)], T0 + 10, 0.1)
    assert len(p.awaiting) == 0 and "g1" in p.batcher


def test_with_no_wait_a_request_without_data_is_dropped_and_committed_at_once(model):
    p, _, _ = make(request_wait_s=0.0)
    p.ingest([record(REQ, request("ghost", T0 + 7, "prefetch"), 0)], T0, 0.0)
    assert flush(p, model) == [] and "ghost" not in p.table and len(p.awaiting) == 0
    assert _committed(p) == {REQ: 1}


def test_a_request_is_stamped_with_the_event_time_of_the_data_never_the_request_time(model):
    p, _, _ = make()
    p.ingest([record(HB, heartbeat("d1", T0 - 60_000), 0)], T0, 0.0)
    (first,) = flush(p, model)
    p.ingest([record(REQ, request("d1", T0 + 7, "prefetch"), 0)], T0 + 10, 0.0)
    (again,) = flush(p, model, T0 + 10)
    assert first.computed_at_ms == again.computed_at_ms == T0 - 60_000
    assert again.trigger == "prefetch" and again.candidates == first.candidates
    p.ingest([record(REQ, request("d1", T0 + 8, "backfill"), 1)], T0 + 20, 0.0)
    (bf,) = flush(p, model, T0 + 20)
    assert bf.backfill is True and bf.computed_at_ms == T0 - 60_000


def test_an_answer_from_restored_state_names_the_heartbeat_it_was_computed_from(model):
    """After a restart the worker-state changelog brings the state back; a request answered
    from it names in its lineage the heartbeat record the state came from, beside the request,
    as any answer does, and that old record does not hold back the commit."""
    first, _, _ = make()
    first.ingest([record(HB, heartbeat("d1", T0 - 60_000), 41, partition=2)], T0, 0.0)
    items, _ = first.next_batch(0.0, force=True)
    r = first.compute(items, model, T0)
    first.mark_predicted(r, T0)
    devices, rec, bad, foreign = first.scorer.layout.decode(r.out.keys, first.state_records(r))
    assert bad == foreign == 0 and rec["hb_offset"].tolist() == [41]

    second, _, _ = make()
    second.table.restore(devices, [2], rec)
    second.ingest([record(REQ, request("d1", T0 + 7, "prefetch"), 5, partition=2)], T0 + 10, 0.0)
    assert ("u.heartbeats", 2, 5) not in {
        (o.topic, o.partition, o.offset) for o in second.commit_offsets()
    }
    (again,) = flush(second, model, T0 + 10)
    refs = {(x.topic, x.partition, x.offset, x.state) for x in again.lineage}
    assert refs == {(HB, 2, 41, True), (REQ, 2, 5, False)}
    assert again.computed_at_ms == T0 - 60_000
    assert {o.topic: o.offset for o in second.commit_offsets()}[REQ] == 6


def test_an_event_from_a_clock_running_ahead_is_dead_lettered_and_real_data_wins_again(model):
    p, rejected, _ = make()
    p.ingest([record(HB, heartbeat("d1", T0 + 86_400_000), 5)], T0, 0.0)
    p.ingest([record(WO, work_order("d1", T0 + 86_400_000, "w1"), 6)], T0, 0.0)
    assert rejected == [(5, "future_event_time"), (6, "future_event_time")]
    assert flush(p, model) == []
    p.ingest([record(HB, heartbeat("d1", T0 + 4_000), 7)], T0, 0.0)  # within the tolerance
    (pred,) = flush(p, model)
    assert pred.computed_at_ms == T0 + 4_000 and len(rejected) == 2


def test_bad_records_are_rejected_and_still_committed():
    p, rejected, _ = make()
    p.ingest(
        [record(HB, heartbeat("d1"), 0, value=b"\xff"), record(REQ, request("d1"), 0, value=b"{}")],
        T0,
        0.0,
    )
    assert sorted(r for _, r in rejected) == ["invalid", "not_json"]
    assert {(o.topic, o.offset) for o in p.commit_offsets()} == {(HB, 1), (REQ, 1)}


def test_model_failure_leaves_state_untouched_so_a_retry_is_clean(model):
    class Broken:
        version, labels = "x", model.labels

        def predict(self, x):
            raise RuntimeError("boom")

    p, _, _ = make()
    p.ingest([record(HB, heartbeat("d1", T0), 0)], T0, 0.0)
    items, _ = p.next_batch(0.0, force=True)
    with pytest.raises(RuntimeError):
        p.compute(items, Broken(), T0)
    assert p.table.valid_until[p.table.slot["d1"]] == -1
    r = p.compute(items, model, T0)
    assert orjson.loads(r.out.values[0])["model_version"] == model.version


def test_forgetting_a_partition_drops_its_state_and_waiting_work():
    p, _, _ = make()
    p.ingest(
        [
            record(HB, heartbeat("a", T0), 0, partition=0),
            record(HB, heartbeat("b", T0), 0, partition=1),
        ],
        T0,
        0.0,
    )
    p.forget([0])
    assert "a" not in p.table and "b" in p.table
    assert [it.device for it in p.batcher] == ["b"]
    assert [(o.partition, o.offset) for o in p.commit_offsets(include_pending=True)] == [(1, 1)]


def test_top_k_is_ordered_stable_on_ties_and_capped_at_the_class_count():
    p = np.array([[0.2, 0.4, 0.2, 0.2], [0.1, 0.2, 0.3, 0.4]], dtype=np.float32)
    idx, scores = top_k(p, 3)
    assert idx.tolist() == [[1, 0, 2], [3, 2, 1]]
    assert np.allclose(scores, [[0.4, 0.2, 0.2], [0.4, 0.3, 0.2]])
    idx, _ = top_k(p, 10)
    assert idx.shape == (2, 4)
