"""The fleet simulator: deterministic, valid, varied, correlated with device health, drifting."""

from __future__ import annotations

import re
from collections import Counter

import numpy as np
import orjson

from producers.badrecords import BAD_KINDS, BadRecord
from producers.pacing import RateLimiter
from producers.publisher import TraceIds
from producers.simulator import Fleet
from schemas.spec import load_spec
from schemas.validation import Accepted, Rejected, validate_event

CONDITIONS = load_spec().simulator.conditions
NAMES = [c.name for c in CONDITIONS]

NOW = 1_700_000_000_000


def wire(records) -> list[tuple]:
    return [
        (r.role, r.key, r.value) if isinstance(r, BadRecord) else orjson.dumps(r) for r in records
    ]


def test_same_seed_same_records_different_seed_different():
    a = Fleet(300, seed=9, bad_rate=0.1, speedup=500, run_id="r1")
    b = Fleet(300, seed=9, bad_rate=0.1, speedup=500, run_id="r1")
    c = Fleet(300, seed=10, bad_rate=0.1, speedup=500, run_id="r1")
    ra, rb, rc = (wire(f.step(3_000, NOW) + f.step(3_000, NOW)) for f in (a, b, c))
    assert ra == rb
    assert ra != rc


def test_run_ids_keep_event_ids_unique_across_runs():
    a, b = Fleet(50, seed=1), Fleet(50, seed=1)
    ids_a = {e.event_id for e in a.heartbeats(500, NOW)}
    ids_b = {e.event_id for e in b.heartbeats(500, NOW)}
    assert len(ids_a) == 500 and not ids_a & ids_b


def test_every_good_record_validates_and_every_variant_appears():
    f = Fleet(2_000, seed=3, speedup=2_000, run_id="v")
    variants, kinds = Counter(), Counter()
    for e in f.step(20_000, NOW):
        r = validate_event(e.role, e.device_id.encode(), orjson.dumps(e))
        assert isinstance(r, Accepted), (r, e)
        variants[r.variant.label] += 1
        kinds[e.role] += 1
    # every wire style of the spec's [[simulator.wire]]: alternative paths, numbers as text,
    # undeclared fields
    assert {"canonical", "path:2", "path:3", "canonical+strings", "canonical+extra"} <= set(
        variants
    )
    assert kinds["alarms"] > 0 and kinds["work_orders"] > 0
    assert {w.style for w in load_spec().simulator.wire} == {
        "path:2",
        "path:3",
        "numbers_as_text",
        "undeclared",
    }


def test_every_bad_kind_gets_the_reason_it_was_built_for():
    f = Fleet(500, seed=4, bad_rate=0.5, speedup=3_000, run_id="b")
    seen = Counter()
    for r in f.step(5_000, NOW):
        if isinstance(r, BadRecord):
            verdict = validate_event(r.role, r.key, r.value)
            assert isinstance(verdict, Rejected) and verdict.reason == r.expected_reason, (
                r,
                verdict,
            )
            seen[r.kind] += 1
    assert set(seen) == set(BAD_KINDS)
    share = sum(seen.values()) / sum(f.counts.values())
    assert 0.45 < share < 0.55


def test_incidents_follow_device_health():
    """Alarms per device are far more frequent for faulty conditions than for healthy ones."""
    f = Fleet(3_000, seed=5, drift_share=0.0, speedup=200, run_id="i")
    alarms = Counter()
    for e in f.step(60_000, NOW):
        if e.role == "alarms" and not e["cleared"]:
            alarms[int(e.device_id[4:])] += 1
    cond = f.conditions
    healthy = NAMES.index("healthy")
    fault = NAMES.index("hardware_fault")
    per_device = {
        c: sum(alarms[i] for i in np.flatnonzero(cond == c)) / max(1, (cond == c).sum())
        for c in (healthy, fault)
    }
    assert per_device[fault] > 4 * per_device[healthy] > 0


def test_drifting_devices_change_condition_and_metrics():
    f = Fleet(400, seed=6, drift_share=0.5, drift_s=600, speedup=60, run_id="d")
    drifting = np.flatnonzero(f.drifting)
    assert 150 < len(drifting) < 250 and (f.drift_target[drifting] != f.conditions[drifting]).all()
    assert (f.conditions_now() == f.conditions).all()
    early = f.heartbeats(400, NOW)
    f.heartbeats(400 * 30, NOW)  # 30 rounds x 60 simulated s: every drift has finished
    late = f.heartbeats(400, NOW)
    now = f.conditions_now()
    assert (now[drifting] == f.drift_target[drifting]).all()
    assert (now[~f.drifting] == f.conditions[~f.drifting]).all()
    # metrics moved toward the targets' profile: distance to the target mean shrinks
    target_mem = np.array(
        [CONDITIONS[c].heartbeat["mem_pct"].normal[0] for c in f.drift_target[drifting]]
    )

    def gap(events):
        return np.abs(
            np.array([float(events[i]["metrics"]["mem_pct"]) for i in drifting]) - target_mem
        ).mean()

    assert gap(late) < 0.6 * gap(early)


def test_pacer_holds_the_long_run_rate_and_does_not_burst_after_a_stall():
    clock = [0.0]
    pacer = RateLimiter(
        1_000, clock=lambda: clock[0], sleep=lambda s: clock.__setitem__(0, clock[0] + s)
    )
    for _ in range(100):
        pacer.wait(50)
    assert abs(clock[0] - 5.0) < 1e-9  # 5,000 records at 1,000/s
    clock[0] += 10.0  # stalled 10 s (e.g. backpressure): only 1 s of budget carries over
    start = clock[0]
    for _ in range(40):
        pacer.wait(50)
    assert abs(clock[0] - start - 1.0) < 1e-9


def test_traceparent_is_w3c_shaped():
    t = TraceIds(seed=1)
    values = [t.new() for _ in range(1_000)]
    assert all(re.fullmatch(rb"00-[0-9a-f]{32}-[0-9a-f]{16}-01", v) for v in values)
    assert len(set(values)) == 1_000
