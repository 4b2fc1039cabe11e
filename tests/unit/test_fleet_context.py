"""The context reducer compiled from a fleet spec: idempotent, bounded, read as of a time, the
same in the aggregator and the worker; snapshots that refuse to be misread under another spec."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from precast.fleet import Fleet, load_fleet, snapshot
from precast.fleet.context import ContextModel
from schemas.spec import load_spec
from schemas.spec.load import parse
from tests.worker_events import T0, alarm, work_order

HOUR_MS = 3_600_000
FLEET = load_fleet()
M: ContextModel = FLEET.context
NAMES = M.names  # open_work_orders, open_high_priority, alarms_critical_1h, alarms_warning_1h, hours_since_last_wo


def values(ctx, at):
    return dict(zip(NAMES, M.values(ctx, at), strict=True))


def test_work_orders_open_update_close_and_priority_counts():
    c = M.new("d")
    assert M.apply(c, "work_orders", work_order("d", T0, "w1", "opened", "high"))
    assert M.apply(c, "work_orders", work_order("d", T0 + 1, "w2", "opened", "low"))
    v = values(c, T0 + HOUR_MS)
    assert (v["open_work_orders"], v["open_high_priority"]) == (2.0, 1.0)
    assert M.apply(c, "work_orders", work_order("d", T0 + 2, "w2", "updated", "critical"))
    v = values(c, T0 + 2)
    assert (v["open_work_orders"], v["open_high_priority"]) == (2.0, 2.0)
    assert M.apply(c, "work_orders", work_order("d", T0 + 3, "w1", "closed"))
    v = values(c, T0 + 3)
    assert (v["open_work_orders"], v["open_high_priority"]) == (1.0, 1.0)
    assert values(c, T0 + 1 + 2 * HOUR_MS)["hours_since_last_wo"] == pytest.approx(2.0, abs=1e-6)


def test_reducer_is_idempotent_so_redelivery_and_snapshots_combine_safely():
    c = M.new("d")
    e = work_order("d", T0, "w1")
    M.apply(c, "work_orders", e)
    assert not M.apply(c, "work_orders", e)
    a = alarm("d", T0, "a1")
    assert M.apply(c, "alarms", a)
    assert not M.apply(c, "alarms", a)
    assert values(c, T0)["alarms_critical_1h"] == 1.0


def test_alarms_count_in_a_sliding_hour_by_severity_and_cleared_ones_do_not_count():
    c = M.new("d")
    M.apply(c, "alarms", alarm("d", T0, "a1", "critical"))
    M.apply(c, "alarms", alarm("d", T0 + 10, "a2", "major"))
    M.apply(c, "alarms", alarm("d", T0 + 20, "a3", "warning"))
    assert not M.apply(c, "alarms", alarm("d", T0 + 30, "a4", "info"))
    assert not M.apply(c, "alarms", alarm("d", T0 + 40, "a5", "critical", cleared=True))
    v = values(c, T0 + 40)
    assert (v["alarms_critical_1h"], v["alarms_warning_1h"]) == (2.0, 1.0)
    v = values(c, T0 + HOUR_MS + 15)  # a1, a2 left the window
    assert (v["alarms_critical_1h"], v["alarms_warning_1h"]) == (0.0, 1.0)
    M.apply(c, "alarms", alarm("d", T0 + 3 * HOUR_MS, "a6", "warning"))
    assert set(c.windows[0]) == {"a6"}  # pruned, bounded
    # the trigger rule: counted (raised, warning or worse) or not
    assert M.counts("alarms", alarm("d", T0, "x", "critical"))
    assert not M.counts("alarms", alarm("d", T0, "x", "info"))
    assert not M.counts("alarms", alarm("d", T0, "x", "critical", cleared=True))


def test_open_entities_are_bounded_by_the_specs_limit():
    c = M.new("d")
    limit = M.open_groups[0].limit
    for i in range(limit + 10):
        M.apply(c, "work_orders", work_order("d", T0 + i, f"w{i}"))
    assert len(c.open[0]) == limit


def test_snapshot_round_trip_newer_local_state_wins_and_other_specs_are_refused():
    c = M.new("d")
    M.apply(c, "work_orders", work_order("d", T0, "w1"))
    M.apply(c, "alarms", alarm("d", T0 + 5, "a1"))
    back = snapshot.from_json(M, snapshot.to_json(M, c, T0 + 9))
    assert back == c
    local = M.new("d")
    M.apply(local, "work_orders", work_order("d", T0 + 100, "w9"))
    M.merge_snapshot(local, back)  # older snapshot: ignored
    assert set(local.open[0]) == {"w9"}
    M.merge_snapshot(local, M.new("d").__class__("d", [{}], [{}], {}, {}, T0 + 200))
    assert local.open == [{}]
    with pytest.raises(snapshot.ForeignSnapshot):  # the snapshots before fleet specs
        snapshot.from_json(M, b'{"schema_version": 1, "device_id": "d", "as_of_ms": 1}')
    other = ContextModel(_spec_with_other_window())
    with pytest.raises(snapshot.ForeignSnapshot, match="this spec's is"):
        snapshot.from_json(other, snapshot.to_json(M, c, T0))
    with pytest.raises((ValueError, KeyError, TypeError)):
        snapshot.from_json(M, b'{"schema_version": 2, "context": "%s"}' % M.hash.encode())


def _spec_with_other_window():
    """The built-in spec with the critical-alarm window at 2 hours: other context meaning."""
    data = load_spec().model_dump(mode="json", exclude_none=True)
    data["context"]["alarms_critical_1h"]["window_s"] = 7200
    spec, problems = parse(data)
    assert spec is not None and not problems, problems
    return spec


SECOND = """
[fleet]
name = "pumps"
version = 1
[serving]
labels = ["ok", "service"]
default_label = "ok"
top_k = 2
[streams.hb]
topic = "heartbeats"
[streams.hb.envelope]
device_id = "id"
event_time = { path = "ts", unit = "s" }
[streams.hb.fields]
rpm = { kind = "metric", path = "rpm", min = 0 }
[streams.ev]
topic = "alarms"
trigger = "counted"
[streams.ev.envelope]
device_id = "id"
event_time = { path = "ts", unit = "s" }
[streams.ev.fields]
level = { kind = "metric", path = "level", min = 0, max = 10 }
type = { kind = "categorical", path = "type", values = ["leak", "noise"] }
[context.last_level]
kind = "last"
stream = "ev"
field = "level"
default = -1
[context.minutes_since_leak]
kind = "time_since_last"
stream = "ev"
where = { type = ["leak"] }
unit = "min"
cap = 600
[context.noise_10m]
kind = "window_count"
stream = "ev"
window_s = 600
where = { type = ["noise"] }
[[features]]
name = "rpm"
source = "rpm"
[[features]]
name = "last_level"
source = "last_level"
[[features]]
name = "leak_recent"
source = "minutes_since_leak"
transform = "clip"
clip = [0, 60]
"""


def test_other_context_kinds_of_another_fleet():
    import tomllib

    spec, problems = parse(tomllib.loads(SECOND))
    assert spec is not None and not problems, problems
    fleet = Fleet.of(spec)
    m = fleet.context
    c = m.new("p1")
    assert m.values(c, T0) == (-1.0, 600.0, 0.0)  # nothing reported: the defaults and the cap
    ev = {"device_id": "p1", "event_id": None, "event_time_ms": T0, "level": 3.5, "type": "leak"}
    assert m.apply(c, "ev", ev)
    assert m.counts("ev", ev)  # "counted": the time since a leak reads it
    m.apply(
        c,
        "ev",
        {**ev, "event_time_ms": T0 + 60_000, "level": 7.0, "type": "noise", "event_id": "n1"},
    )
    m.apply(c, "ev", {**ev, "event_time_ms": T0 - 60_000, "level": 1.0})  # older: not the last
    assert m.values(c, T0 + 120_000) == (7.0, 2.0, 1.0)
    # the noise event (at +1 min) leaves the 10-minute window after +11 min
    assert m.values(c, T0 + 12 * 60_000) == (7.0, 12.0, 0.0)
    x = fleet.features.build(np.array([[1200.0]]), m.columns([c], np.array([T0 + 120_000])))
    assert x.tolist() == [[1200.0, 7.0, 2.0]]


class _ScanningModel(ContextModel):
    """The reducer with the window fold as it was before the heap: every entry scanned per
    event, the oldest found with `min`. The reference the heap must agree with."""

    @staticmethod
    def _apply_window(ctx, g, group, event, t):
        entries = ctx.windows[g]
        cutoff = ctx.as_of_ms - group.window_ms
        if any(et < cutoff for et, _ in entries.values()):
            ctx.windows[g] = entries = {k: v for k, v in entries.items() if v[0] >= cutoff}
        mask = 0
        for bit, where in group.members:
            if all(event.get(k) in allowed for k, allowed in where.items()):
                mask |= bit
        key = event.get(group.distinct) if group.distinct else event.get("event_id")
        if not mask or key is None or str(key) in entries or t < cutoff:
            return False
        entries[str(key)] = (t, mask)
        if len(entries) > group.limit:
            entries.pop(min(entries, key=lambda k: entries[k][0]))
        return True


@settings(max_examples=300, deadline=None)
@given(
    st.lists(
        st.tuples(
            st.integers(0, 11),  # event ID (redelivery, or an evicted ID coming back)
            st.integers(0, 15),  # 100 s steps after T0: out of order, ties, at and past the cutoff
            st.sampled_from(["noise", "leak"]),
            st.integers(0, 9),  # 0: round-trip both through a snapshot first
        ),
        max_size=60,
    )
)
def test_the_window_heap_folds_as_the_full_scan_did(events):
    """Pruning and eviction by a heap give the same entries, in the same order, the same
    "changed" answers and the same values as scanning every entry, whatever the order of
    the events, with redeliveries, evictions at a small limit and snapshots in between."""
    import tomllib

    spec, problems = parse(
        tomllib.loads(SECOND.replace("window_s = 600", "window_s = 600\nlimit = 3"))
    )
    assert spec is not None and not problems, problems
    fast, slow = ContextModel(spec), _ScanningModel(spec)
    a, b = fast.new("p1"), slow.new("p1")
    for i, (eid, s, kind, snap) in enumerate(events):
        if snap == 0:
            a = snapshot.from_json(fast, snapshot.to_json(fast, a, T0))
            b = snapshot.from_json(slow, snapshot.to_json(slow, b, T0))
            assert fast.values(a, T0 + s * 100_000) == slow.values(b, T0 + s * 100_000)
        ev = {"device_id": "p1", "event_id": f"e{eid}", "event_time_ms": T0 + s * 100_000,
              "level": 1.0, "type": kind}  # fmt: skip
        assert fast.apply(a, "ev", ev) == slow.apply(b, "ev", ev), i
        assert list(a.windows[0].items()) == list(b.windows[0].items()), i
        for at in (T0 + s * 100_000, T0 + s * 100_000 + 30_000):  # at an entry's time, between
            assert fast.values(a, at) == slow.values(b, at)
