"""Dataset rows (precast.fleet.outcomes), without a broker: no feature uses an event after the
label's time (leakage), the rows equal what the worker's own pipeline computes when the work
order opens (skew), on both shipped fleets and every wire variant their simulators send."""

from __future__ import annotations

import numpy as np
import orjson
import pytest

from precast.fleet import load_fleet
from precast.fleet.outcomes import Window
from precast.kafka import Record
from schemas.deadletters import Reason
from tests.outcome_support import T0, TOPICS, Simulated, build, features, simulate, window
from tests.worker_events import alarm, heartbeat, work_order
from workers.precompute.config import PolicyConfig
from workers.precompute.pipeline import PipelineConfig, build_pipeline

FLEETS = {"devices": None, "trailers": "schemas/fleets/trailers.toml"}
HB, WO, AL = TOPICS.heartbeats.name, TOPICS.work_orders.name, TOPICS.alarms.name


class Uniform:
    """A stand-in model: the pipeline's features are what is compared, not the scores."""

    version = "test"

    def __init__(self, labels):
        self.labels = labels

    def predict(self, x):
        return np.full((len(x), len(self.labels)), 1 / len(self.labels), dtype=np.float32)


def worker_features(s: Simulated) -> dict[tuple[str, str], np.ndarray]:
    """(device, entity) -> the feature row the worker's pipeline computed for the prediction
    each open of the outcome stream triggered, records fed in the order they were sent."""
    fleet = s.fleet
    o = fleet.spec.outcomes
    rejected: list = []
    p = build_pipeline(
        TOPICS,
        PipelineConfig(policy=PolicyConfig(throttle_ms=0)),
        lambda m, r, d: rejected.append((m, r, d)),
        fleet=fleet,
    )
    model, out = Uniform(fleet.spec.labels), {}
    for r in s.records:
        now = r.timestamp()[1] + 1
        p.ingest([r], now, 0.0)
        if r.topic() != WO:
            continue
        e = fleet.validator.validate("work_orders", r.key(), r.value()).event
        if e[o.status] not in o.opened:
            continue
        while True:
            items, _ = p.next_batch(0.0, force=True)
            if not items:
                break
            res = p.compute(items, model, now)
            p.mark_predicted(res, now)
            for j, it in enumerate(res.items):
                if it.device == e["device_id"]:
                    out[(e["device_id"], str(e[o.entity]))] = res.features[j]
    assert rejected == []
    return out


@pytest.mark.parametrize("name", sorted(FLEETS))
def test_rows_equal_what_the_worker_computes_when_the_work_order_opens(name):
    fleet = load_fleet(FLEETS[name])
    s = simulate(fleet, devices=150, rounds=60, seed=5)
    rows = build(s)
    cols = rows.rows()
    assert len(cols["label"]) >= 40 and len(set(cols["label"])) >= 4, rows.dropped
    worker = worker_features(s)
    x = features(cols, fleet)
    mine = np.stack(
        [worker[(d, e)] for d, e in zip(cols["device_id"], cols["entity_id"], strict=True)]
    )
    diff = np.abs(mine - x).max(axis=0)
    bad = [fleet.features.names[j] for j in np.flatnonzero(diff > 1e-5)]
    assert not bad, f"dataset and worker differ on {bad}"
    # the comparison has teeth: context and heartbeat columns vary across the rows
    assert (x.std(axis=0) > 0).sum() >= x.shape[1] // 2
    ctx = [
        fleet.features.names.index(f.name)
        for f in fleet.spec.features
        if f.source in fleet.context.names
    ]
    assert (x[:, ctx].std(axis=0) > 0).sum() >= 2
    assert all(h <= t for h, t in zip(cols["heartbeat_time_ms"], cols["time_ms"], strict=True))


def _rec(topic: str, event: dict, offset: int, **extra) -> Record:
    doc = {**event, **extra}
    return Record(topic, 0, offset, event["device_id"].encode(), orjson.dumps(doc), [], 0)


def test_no_feature_uses_an_event_after_the_open_whatever_order_the_topics_hold():
    """Events after the open that would change every kind of feature (a new heartbeat, an
    alarm, a closed and a new work order) come *before* the open in the topics: the row is the
    one computed from the events at or before the open alone, and differs from the one they
    would give (so this test fails on a leak)."""
    fleet = load_fleet()
    T = T0
    before_hb = heartbeat("d1", T - 10_000, cpu_pct=30.0, mem_pct=40.0)
    later_hb = heartbeat("d1", T + 1_000, cpu_pct=95.0, mem_pct=97.0, uptime_s=10.0)
    before = [
        (WO, work_order("d1", T - 4_000, "w0", priority="high")),
        (AL, alarm("d1", T - 5_000, "al-1", severity="critical")),
    ]
    opening = (WO, work_order("d1", T, "w1", priority="low"))
    later = [
        (WO, work_order("d1", T + 200, "w0", status="closed")),
        (WO, work_order("d1", T + 300, "w2", priority="critical")),
        (WO, work_order("d1", T + 400, "w3", priority="critical")),
        (AL, alarm("d1", T + 500, "al-2", severity="critical")),
        (AL, alarm("d1", T + 600, "al-3", severity="warning")),
    ]
    resolved = (WO, work_order("d1", T + 60_000, "w1", status="closed"))
    # read order: everything later first, the open near the end
    order = [*later, *before, opening, resolved]
    offsets = {HB: 0, WO: 0, AL: 0}
    recs = [_rec(HB, later_hb, 0), _rec(HB, before_hb, 1)]
    offsets[HB] = 2
    for topic, ev in order:
        extra = {"resolution": "replace_part", "resolved_by": "tech-7"} if ev is resolved[1] else {}
        recs.append(_rec(topic, ev, offsets[topic], **extra))
        offsets[topic] += 1
    s = Simulated(fleet, TOPICS, recs, T + 60_000)
    cols = build(s, Window(T - 60_000, T + 1, T + 120_000, 3_600_000, 3_600_000)).rows()
    assert cols["label"] == ["replace_part"] and cols["resolved_by"] == ["tech-7"]
    assert cols["time_ms"] == [T] and cols["heartbeat_time_ms"] == [T - 10_000]
    row = dict(zip(fleet.features.names, features(cols, fleet)[0], strict=True))
    # written out by hand: w0 (high) and w1 open, one critical alarm, a work order opened now
    assert row["cpu_pct"] == 30.0 and row["mem_pct"] == 40.0
    assert row["open_work_orders"] == 2 and row["open_high_priority"] == 1
    assert row["alarms_critical_1h"] == 1 and row["alarms_warning_1h"] == 0
    assert row["log_hours_since_last_wo"] == 0.0
    # ...and what the later events would have made of it: every one of those columns moves
    model, ctx = fleet.context, fleet.context.new("d1")
    for _topic, ev in sorted([*before, opening, *later], key=lambda x: x[1]["event_time_ms"]):
        e = fleet.validator.validate(
            "work_orders" if _topic == WO else "alarms", b"d1", orjson.dumps(ev)
        ).event
        model.apply(ctx, "work_orders" if _topic == WO else "alarms", e)
    hb = fleet.validator.validate("heartbeats", b"d1", orjson.dumps(later_hb)).event
    leaked = fleet.features.build(
        np.array([fleet.features.state_row(hb)]), np.array([model.values(ctx, T + 1_000)])
    )[0]
    leaked_row = dict(zip(fleet.features.names, leaked, strict=True))
    for name in (
        "cpu_pct",
        "mem_pct",
        "log_uptime_h",
        "open_work_orders",
        "open_high_priority",
        "alarms_critical_1h",
        "alarms_warning_1h",
        "log_hours_since_last_wo",
    ):
        assert leaked_row[name] != row[name], name


def test_drops_are_counted_with_their_reason_and_bad_resolutions_are_rejected():
    fleet = load_fleet()
    T = T0
    evs = [
        (HB, heartbeat("d1", T - 1_000)),
        (WO, work_order("d1", T, "w-open")),  # never closed
        (WO, work_order("d1", T + 1, "w-bare")),
        (WO, work_order("d1", T + 2, "w-bare", status="closed")),  # no resolution
        (WO, work_order("d2", T + 3, "w-nohb")),  # d2 sends no heartbeat
        (WO, work_order("d2", T + 4, "w-nohb", status="closed")),
        (WO, work_order("d1", T - 99_000, "w-old", status="closed")),  # opened before the range
        (WO, work_order("d1", T + 5, "w-bad", status="closed")),
    ]
    extras = {
        4: {"resolution": "remote_restart"},
        5: {"resolution": "monitor_only"},
        6: {"resolution": "replace_part"},
        7: {"resolution": "turn_it_off_and_on"},  # not a label: a dead letter
    }
    recs, offs = [], {HB: 0, WO: 0}
    for i, (topic, ev) in enumerate(evs):
        recs.append(_rec(topic, ev, offs[topic], **extras.get(i, {})))
        offs[topic] += 1
    s = Simulated(fleet, TOPICS, recs, T + 10)
    rows = build(s, Window(T - 10, T + 100, T + 100, 3_600_000, 3_600_000))
    cols = rows.rows()
    assert cols["label"] == [] and dict(rows.dropped) == {
        "unresolved": 1,
        "closed_without_resolution": 1,
        "no_heartbeat": 1,
        "opened_outside_range": 1,
    }
    assert dict(rows.rejected) == {f"work_orders:{Reason.INVALID.value}": 1}
    verdict = fleet.validator.validate("work_orders", b"d1", recs[-1].value())
    assert not verdict.ok and "turn_it_off_and_on" in verdict.detail


def test_only_heartbeats_within_the_lookback_count_and_a_rejected_candidate_gives_way():
    fleet = load_fleet()
    T = T0
    good = heartbeat("d1", T - 3_000, cpu_pct=33.0)
    newer_bad = {**heartbeat("d1", T - 1_000), "metrics": {"cpu_pct": 500.0}}  # out of range
    recs = [
        _rec(HB, heartbeat("d1", T - 50_000, cpu_pct=11.0), 0),
        _rec(HB, good, 1),
        _rec(HB, newer_bad, 2),
        _rec(WO, work_order("d1", T, "w1"), 0),
        _rec(WO, work_order("d1", T + 9, "w1", status="closed"), 1, resolution="monitor_only"),
    ]
    s = Simulated(fleet, TOPICS, recs, T + 10)
    rows = build(s, Window(T - 10, T + 100, T + 100, 0, 10_000))
    cols = rows.rows()
    assert cols["heartbeat_time_ms"] == [T - 3_000]
    assert features(cols, fleet)[0][fleet.features.names.index("cpu_pct")] == 33.0
    assert dict(rows.rejected) == {"heartbeats:invalid": 1}
    # with a 1 s lookback none of them is close enough: the row is dropped, and says why
    short = build(s, Window(T - 10, T + 100, T + 100, 0, 1_000))
    assert short.rows()["label"] == [] and short.dropped["no_heartbeat"] == 1


@pytest.mark.parametrize("name", sorted(FLEETS))
def test_the_same_records_in_another_read_order_give_the_same_rows(name):
    fleet = load_fleet(FLEETS[name])
    s = simulate(fleet, devices=80, rounds=30, seed=9)
    a = build(s).rows()
    shuffled = Simulated(fleet, TOPICS, list(reversed(s.records)), s.last_ms)
    b = build(shuffled, window(s)).rows()
    assert a["entity_id"] == b["entity_id"] and len(a["entity_id"]) > 10
    assert np.array_equal(features(a, fleet), features(b, fleet))
