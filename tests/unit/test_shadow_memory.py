"""A shadow run's memory is bounded by the fleet, not by the range: what the comparison keeps
for the report does not grow with the events of the same devices, and a device waiting out a
throttle window holds slim references to its inputs (`workers.shadow.replay.HeldRecord`), not whole
records, with the lineage unchanged."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from schemas.predictions import PredictionSet
from schemas.topics import catalog
from schemas.validation import validate_event
from tests.worker_events import T0, flush, heartbeat, record, work_order
from workers.model.inference import ModelSession
from workers.precompute.config import PolicyConfig
from workers.precompute.items import Reason
from workers.precompute.pipeline import PipelineConfig, build_pipeline
from workers.settings import DEFAULT_MODEL_DIR
from workers.shadow.compare import Comparison
from workers.shadow.replay import HeldRecord, slim

LABELS = ("a", "b", "c", "d")
TOPICS = catalog("u.", 3)
HB, WO = TOPICS.heartbeats.name, TOPICS.work_orders.name


def _retained(obj: Any, seen: set[int] | None = None) -> int:
    """Elements held by every container reachable from `obj` (dict entries, list, set and
    tuple items, array cells, object attributes): what grows if something is kept per event."""
    seen = set() if seen is None else seen
    if id(obj) in seen or isinstance(obj, str | bytes | int | float | bool | type(None)):
        return 0
    seen.add(id(obj))
    if isinstance(obj, np.ndarray):
        return int(obj.size)
    if isinstance(obj, dict):
        return len(obj) + sum(_retained(k, seen) + _retained(v, seen) for k, v in obj.items())
    if isinstance(obj, list | tuple | set | frozenset):
        return len(obj) + sum(_retained(v, seen) for v in obj)
    if hasattr(obj, "__dict__"):
        return _retained(vars(obj), seen)
    return 0


def _fed(batches: int, devices: int = 300, seed: int = 5) -> Comparison:
    """A comparison fed `batches` batches of the same devices: every row carries scores from
    both models (a third of the candidate's top-1s differ), groups and ground truth."""
    rng = np.random.default_rng(seed)
    ids = [f"d{i}" for i in range(devices)]
    groups = {
        "device_type": [("gateway", "meter")[i % 2] for i in range(devices)],
        "site": [f"s{i % 7}" for i in range(devices)],
        "trigger": [("heartbeat", "work_order", "alarm")[i % 3] for i in range(devices)],
    }
    c = Comparison(LABELS, keep_changed=20)
    for _ in range(batches):
        live = rng.random((devices, len(LABELS))).astype(np.float32)
        cand = live.copy()
        flip = rng.random(devices) < 1 / 3
        cand[flip] = rng.random((int(flip.sum()), len(LABELS)))
        c.add(ids, groups, live, cand, rng.integers(0, len(LABELS), devices).tolist())
        c.time("live", devices, 0.001)
        c.time("candidate", devices, 0.002)
        c.reject("malformed")
    c.events = batches * devices
    return c


def test_what_the_comparison_keeps_does_not_grow_with_the_events_of_the_same_devices():
    small, large = _fed(20), _fed(200)
    assert large.overall.n == 10 * small.overall.n  # ten times the events went in
    # the same containers of the same sizes, but for the bounded list of the largest changes
    # (pruned back to keep_changed whenever it passes 4 x keep_changed)
    assert _kept(large) == _kept(small)
    assert len(large.changed) <= 4 * large.keep_changed
    # and so do the checkpoint and the summary it writes
    assert _retained(large.to_dict()) == _retained(small.to_dict())
    assert len(large.to_dict()["top_changes"]) == 20


def _kept(c: Comparison) -> int:
    return _retained(c) - _retained(c.changed)


def test_the_measure_sees_what_grows():
    """The measure above sees growth where there is some (so its equality means something):
    with the devices (the changed-device set), and with anything kept per event."""
    assert _kept(_fed(20, devices=600)) > _kept(_fed(20, devices=300))
    c = _fed(20)
    before = _kept(c)
    c.latencies = [0.001] * c.events  # type: ignore[attr-defined] - what must never be there
    assert _kept(c) >= before + c.events


@pytest.fixture(scope="module")
def model():
    return ModelSession(DEFAULT_MODEL_DIR, provider="cpu")


INPUTS = [  # the same records (and event ids) for both runs
    record(HB, heartbeat("d1", T0), 0),
    record(WO, work_order("d1", T0 + 5), 0),
    *[
        record(HB, heartbeat("d1", T0 + 6 + i, cpu_pct=90 - i, error_rate=0.8), 1 + i)
        for i in range(3)
    ],
]


def _site(value: bytes | None) -> dict[str, str]:
    got = validate_event("heartbeats", b"d1", value)
    return {"site": str(got.event["site"]) if got.ok else "unknown"}


def _run(model: ModelSession, slimmed: bool) -> tuple[list[PredictionSet], list[Any], dict]:
    """d1 predicted, then a work order and three changed heartbeats inside its throttle
    window: they wait as one deferred item, then one prediction answers all four."""
    p = build_pipeline(TOPICS, PipelineConfig(policy=PolicyConfig(throttle_ms=1_000)), _no_reject)
    sites: dict[str, dict[str, str]] = {}
    if slimmed:
        p.on_defer = lambda item: slim(item, {}, sites, HB, _site)
    out = []
    first, *later = INPUTS
    p.ingest([first], T0, 0.0)
    out += flush(p, model, T0)
    for i, rec in enumerate(later):
        p.ingest([rec], T0 + 5 + i, 0.0)
    held = [m for m, _ in p.queue.deferred["d1"].refs]
    # the waiting inputs still hold back the commit offsets, slimmed or not
    assert {(o.topic, o.partition): o.offset for o in p.commit_offsets()} == {
        (HB, 0): 1,
        (WO, 0): 0,
    }
    assert p.release_deferred(T0 + 1_000, 0.0) == 1
    out += flush(p, model, T0 + 1_000)
    return out, held, sites


def _no_reject(m: Any, reason: Any, detail: str) -> None:
    raise AssertionError(f"rejected {reason}: {detail}")


def test_a_deferred_device_holds_slim_references_and_its_lineage_is_unchanged(model):
    whole, held_whole, _ = _run(model, slimmed=False)
    slimmed, held, sites = _run(model, slimmed=True)
    assert len(held) == len(held_whole) == 4  # the work order and three heartbeats wait
    assert all(type(m) is HeldRecord and m.value() is None for m in held)
    assert all(m.value() is not None for m in held_whole)  # the worker keeps whole records
    assert set(sites) == {"d1"}  # its site was read before the payload went
    assert len(whole) == len(slimmed) == 2
    lineage = [[r.model_dump() for r in x.lineage] for x in whole]
    assert [[r.model_dump() for r in x.lineage] for x in slimmed] == lineage
    assert [(r["topic"], r["offset"]) for r in lineage[1]] == [
        (WO, 0),
        (HB, 1),
        (HB, 2),
        (HB, 3),
    ]
    assert all(r["trace_id"] == "a" * 32 for r in lineage[1])
    assert [str(x.trigger) for x in slimmed] == [str(x.trigger) for x in whole]


def test_slim_leaves_held_records_as_they_are():
    item_refs = [(HeldRecord(HB, 0, 7, None), "e1")]
    from workers.precompute.items import Pending

    item = Pending("d1", 0, Reason.THROTTLED, list(item_refs))
    slim(item, {}, {}, HB, _site)
    assert item.refs == item_refs
