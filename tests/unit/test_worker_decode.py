"""Heartbeat decode: canonical records on the fast path, everything else judged by the
validator, rejections with a reason, and both paths giving the same columns."""

import orjson
import pytest

from tests.worker_events import T0, heartbeat, record
from workers.decode import decode_heartbeats, trace_id

TOPIC = "t.heartbeats"


def run(records):
    rejected = []
    hb = decode_heartbeats(records, lambda m, r, d: rejected.append((m.offset(), str(r))))
    return hb, rejected


def test_canonical_heartbeats_decode_to_columns():
    hb, rejected = run([record(TOPIC, heartbeat("d1", T0, cpu_pct=12.5), 0),
                        record(TOPIC, heartbeat("d2", T0 + 1), 1)])
    assert rejected == []
    assert hb.device_ids == ["d1", "d2"]
    assert hb.event_time_ms.tolist() == [T0, T0 + 1]
    assert hb.cols[0].tolist() == [12.5, 40.0, 45.0, 0.01, 0.9, 36_000.0, 1.0, 0.0]  # latest fw, gateway


@pytest.mark.parametrize("bad, reason", [
    (lambda e: b"{nope", "not_json"),
    (lambda e: orjson.dumps({**e, "metrics": {**e["metrics"], "cpu_pct": 101}}), "invalid"),
    (lambda e: orjson.dumps({**e, "metrics": {**e["metrics"], "cpu_pct": None}}), "invalid"),
    (lambda e: orjson.dumps({**e, "event_time_ms": 5}), "invalid"),
    (lambda e: orjson.dumps({**e, "schema_version": 99}), "unknown_schema_version"),
    (lambda e: orjson.dumps({k: v for k, v in e.items() if k != "event_id"}), "invalid"),
])
def test_bad_records_are_rejected_with_a_reason_and_good_ones_survive(bad, reason):
    e = heartbeat("d1")
    hb, rejected = run([record(TOPIC, heartbeat("d0"), 0), record(TOPIC, e, 1, value=bad(e))])
    assert hb.device_ids == ["d0"]
    assert rejected == [(1, reason)]


def test_key_must_match_the_device():
    hb, rejected = run([record(TOPIC, heartbeat("d1"), 0, key=b"d2")])
    assert len(hb) == 0 and rejected == [(0, "key_mismatch")]


def test_null_value_is_a_tombstone_rejection():
    r = record(TOPIC, heartbeat("d1"), 0)
    r.value_ = None
    hb, rejected = run([r])
    assert rejected == [(0, "tombstone")]


def test_slow_path_accepts_what_the_contract_accepts_and_gives_the_same_columns():
    e = heartbeat("d1", T0, cpu_pct=10)
    fast, _ = run([record(TOPIC, e, 0)])
    odd = {**e, "meta": {"site": "north"}}  # non-canonical metadata: not the fast path
    slow, rejected = run([record(TOPIC, odd, 0)])
    assert rejected == []
    assert slow.cols.tolist() == fast.cols.tolist()
    assert slow.event_time_ms.tolist() == fast.event_time_ms.tolist()


def test_trace_id_comes_from_a_valid_traceparent_only():
    r = record(TOPIC, heartbeat("d1"), 0)
    assert trace_id(r) == "a" * 32
    r.headers_ = [("traceparent", b"garbage")]
    assert trace_id(r) is None
    r.headers_ = []
    assert trace_id(r) is None
