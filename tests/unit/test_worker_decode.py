"""Heartbeat decode: canonical records on the fast path, everything else judged by the
validator, rejections with a reason, and both paths giving the same columns."""

import orjson
import pytest

from precast.fleet import load_fleet
from tests.worker_events import T0, heartbeat, record
from workers.precompute.ingest.decode import Decoder, trace_id

TOPIC = "t.heartbeats"
DEC = Decoder(load_fleet())


def run(records, dec=DEC):
    rejected = []
    hb = dec.heartbeats(records, lambda m, r, d: rejected.append((m.offset(), str(r))))
    return hb, rejected


def test_canonical_heartbeats_decode_to_columns():
    hb, rejected = run(
        [
            record(TOPIC, heartbeat("d1", T0, cpu_pct=12.5), 0),
            record(TOPIC, heartbeat("d2", T0 + 1), 1),
        ]
    )
    assert rejected == []
    assert hb.device_ids == ["d1", "d2"]
    assert hb.event_time_ms.tolist() == [T0, T0 + 1]
    assert DEC.state[-2].name == "firmware_is_latest" and DEC.state[-1].name == "device_type"
    assert hb.cols[0].tolist() == [
        12.5,
        40.0,
        45.0,
        0.01,
        0.9,
        36_000.0,
        1.0,
        0.0,
    ]  # latest fw, gateway


@pytest.mark.parametrize(
    "bad, reason",
    [
        (lambda e: b"{nope", "not_json"),
        (lambda e: orjson.dumps({**e, "metrics": {**e["metrics"], "cpu_pct": 101}}), "invalid"),
        (lambda e: orjson.dumps({**e, "metrics": {**e["metrics"], "cpu_pct": None}}), "invalid"),
        (lambda e: orjson.dumps({**e, "event_time_ms": 5}), "invalid"),
        (lambda e: orjson.dumps({**e, "schema_version": 99}), "unknown_schema_version"),
        (lambda e: orjson.dumps({k: v for k, v in e.items() if k != "event_id"}), "invalid"),
    ],
)
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
    odd = {**e, "metrics": {**e["metrics"], "cpu_pct": "1e1"}, "meta": {"info": {"hw_rev": "3"}}}
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


def test_simulator_heartbeats_every_wire_style_decode_the_same_on_both_paths(monkeypatch):
    from producers.simulator import Fleet

    fleet = Fleet(400, seed=2)
    events = fleet.heartbeats(400, T0)
    recs = [record(TOPIC, e, i, key=e.device_id.encode()) for i, e in enumerate(events)]
    dec = Decoder(load_fleet())
    fast, rejected = run(recs, dec)
    assert rejected == [] and len(fast) == 400
    slow_calls = []
    real = dec.validate
    monkeypatch.setattr(dec, "validate", lambda role, m: slow_calls.append(m) or real(role, m))
    run(recs, dec)
    styles = [fleet.style[int(e.device_id[4:])] for e in events]
    # every wire style the simulator sends (alternative paths, undeclared fields, numbers as
    # text) stays on the fast path
    assert slow_calls == []
    assert {"canonical", "path:2", "path:3", "undeclared", "numbers_as_text"} <= set(styles)
    # both paths give the same columns: decode each record alone through the validator
    by_id = dict(zip(fast.device_ids, fast.cols.tolist(), strict=True))
    state_row = load_fleet().features.state_row
    for r, e in zip(recs, events, strict=True):
        v = real("heartbeats", r)
        assert isinstance(v, dict), v
        assert by_id[e.device_id] == state_row(v)


@pytest.mark.parametrize(
    "meta, ok",
    [
        (None, True),
        ({}, True),
        ({"info": {"site": "s", "hw_rev": 2}}, True),
        ({"site": "s"}, True),
        ({"info": {"v2": {"site": "s"}, "v10": {"hw_rev": 3}}}, True),
        ({"info": {"hw_rev": -1}}, False),
        ({"info": {"site": ""}}, False),
        ({"info": "x"}, False),
        ([], False),
        ({"hw_rev": True}, False),
        ({"info": {"v2": {"site": 5}}}, False),
    ],
)
def test_fast_path_metadata_check_agrees_with_the_contract(meta, ok):
    e = {**heartbeat("d1"), "meta": meta}
    assert DEC.wire.raw_keys == ("meta",)  # device metadata: no feature reads it
    assert DEC.wire.raw_ok({"meta": orjson.dumps(meta)}) is ok
    assert isinstance(DEC.validate("heartbeats", record(TOPIC, e, 0)), dict) is ok
    hb, rejected = run([record(TOPIC, e, 0)])
    assert (len(hb) == 1) is ok and (rejected == []) is ok


@pytest.mark.parametrize(
    "text, reason",
    [
        ("12,5", "invalid"),
        ("NaN", "non_finite"),
        ("1e999", "non_finite"),
        (" 12", "invalid"),
        ("0x10", "invalid"),
    ],
)
def test_numbers_as_text_outside_the_json_grammar_leave_the_fast_path_and_are_rejected(
    text, reason
):
    e = heartbeat("d1")
    e["metrics"]["cpu_pct"] = text
    hb, rejected = run([record(TOPIC, heartbeat("d0"), 0), record(TOPIC, e, 1)])
    assert hb.device_ids == ["d0"] and rejected == [(1, reason)]
