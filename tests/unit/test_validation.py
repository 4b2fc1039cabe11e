"""The one validation entry point: round trips, wire variants, and every kind of bad record."""
# Deadlines off: CI is a shared 2-core box; speed is measured by `python -m bench producer`.

from __future__ import annotations

import json

import orjson
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from schemas.deadletters import Reason
from schemas.events import (
    MAX_CLOCK_SKEW_MS,
    MAX_EVENT_BYTES,
    MAX_TIME_MS,
    MIN_TIME_MS,
    Alarm,
    DeviceInfo,
    Heartbeat,
    HeartbeatMetrics,
    WorkOrderEvent,
)
from schemas.validation import Accepted, Rejected, canonical_dict, encode, validate_event

ids = st.from_regex(r"[A-Za-z0-9][A-Za-z0-9._:\-]{0,40}", fullmatch=True)
texts = st.text(st.characters(codec="utf-8", exclude_categories=("Cs",)), min_size=1, max_size=64)
times = st.integers(MIN_TIME_MS, MAX_TIME_MS - MAX_CLOCK_SKEW_MS)


def pct(lo: float, hi: float):
    return st.floats(lo, hi, allow_nan=False, allow_infinity=False)


metrics = st.builds(
    HeartbeatMetrics,
    cpu_pct=pct(0, 100),
    mem_pct=pct(0, 100),
    temperature_c=pct(-80, 250),
    error_rate=pct(0, 1),
    signal_quality=pct(0, 1),
    uptime_s=pct(0, 1e12),
)
infos = st.builds(
    DeviceInfo,
    site=st.none() | texts,
    hw_model=st.none() | texts,
    hw_rev=st.none() | st.integers(0, 10_000),
    serial=st.none() | texts,
)


@st.composite
def envelopes(draw):
    t = draw(times)
    return {
        "event_id": draw(ids),
        "device_id": draw(ids),
        "event_time_ms": t,
        "produced_at_ms": draw(st.integers(t, MAX_TIME_MS)),
    }


heartbeats = st.builds(
    lambda e, m, i, dt, fw: Heartbeat(**e, metrics=m, meta=i, device_type=dt, firmware=fw),
    envelopes(),
    metrics,
    infos,
    texts,
    texts,
)
work_orders = st.builds(
    lambda e, wo, s, p, c: WorkOrderEvent(**e, work_order_id=wo, status=s, priority=p, category=c),
    envelopes(),
    ids,
    st.sampled_from(["opened", "updated", "closed"]),
    st.sampled_from(["low", "medium", "high", "critical"]),
    texts,
)
alarms = st.builds(
    lambda e, a, s, c, cl: Alarm(**e, alarm_id=a, severity=s, code=c, cleared=cl),
    envelopes(),
    ids,
    st.sampled_from(["info", "warning", "major", "critical"]),
    texts,
    st.booleans(),
)
ROLE = {Heartbeat: "heartbeats", WorkOrderEvent: "work_orders", Alarm: "alarms"}


def check(event, wire: dict) -> Accepted:
    r = validate_event(ROLE[type(event)], event.device_id.encode(), orjson.dumps(wire))
    assert isinstance(r, Accepted), r
    assert r.event == event
    return r


@settings(max_examples=300, suppress_health_check=[HealthCheck.too_slow])
@given(st.one_of(heartbeats, work_orders, alarms))
def test_any_valid_event_survives_encode_decode_unchanged(event):
    r = check(event, canonical_dict(event))
    assert (
        r.variant.coerced == () and r.variant.extra == () and r.variant.layout in ("none", "nested")
    )
    # canonical form is a fixed point: encoding the decoded event gives the same bytes
    assert encode(canonical_dict(r.event)) == encode(canonical_dict(event))


def _strings(obj, paths: list[str], prefix: str = ""):
    """Every number in `obj` sent as a JSON string, the way some firmware does."""
    if isinstance(obj, dict):
        return {k: _strings(v, paths, f"{prefix}.{k}" if prefix else k) for k, v in obj.items()}
    if isinstance(obj, (int, float)) and not isinstance(obj, bool):
        paths.append(prefix)
        return json.dumps(obj)
    return obj


@settings(max_examples=200, suppress_health_check=[HealthCheck.too_slow])
@given(
    heartbeats,
    st.sampled_from(["flat", "nested", "versioned"]),
    st.booleans(),
    st.booleans(),
    st.integers(2, 9),
)
def test_every_metadata_variant_normalizes_to_the_same_model(
    hb, layout, as_strings, extra, version
):
    wire = canonical_dict(hb)
    info = wire["meta"].get("info", {})
    if extra:
        info = {**info, "firmware_channel": "beta"}
        wire["metrics"]["fan_rpm"] = 1200
        wire["vendor"] = {"x": 1}
    wire["meta"] = {
        "flat": info,
        "nested": {"info": info},
        "versioned": {"info": {f"v{version}": info}},
    }[layout]
    paths: list[str] = []
    if as_strings:
        wire = _strings(wire, paths)
    r = check(hb, wire)
    want_layout = "none" if layout == "flat" and not info else layout  # `meta: {}` is no metadata
    assert r.variant.layout == want_layout
    assert r.variant.version_key == (f"v{version}" if layout == "versioned" else None)
    assert bool(r.variant.coerced) == as_strings
    assert bool(r.variant.extra) == extra
    if extra:
        assert "vendor" in r.variant.extra and "metrics.fan_rpm" in r.variant.extra


def _hb() -> dict:
    return canonical_dict(
        Heartbeat(
            event_id="e-1",
            device_id="dev-000001",
            event_time_ms=1_700_000_000_000,
            produced_at_ms=1_700_000_000_000,
            device_type="camera",
            firmware="6.0.0",
            metrics=HeartbeatMetrics(
                cpu_pct=10,
                mem_pct=20,
                temperature_c=30,
                error_rate=0.01,
                signal_quality=0.9,
                uptime_s=100,
            ),
            meta=DeviceInfo(site="s1", hw_rev=2),
        )
    )


def _with(path: str, value) -> bytes:
    d = _hb()
    *parents, leaf = path.split(".")
    node = d
    for p in parents:
        node = node[p]
    node[leaf] = value
    return orjson.dumps(d)


KEY = b"dev-000001"
BAD = [
    ("tombstone", KEY, None, Reason.TOMBSTONE),
    ("no key", None, orjson.dumps(_hb()), Reason.MISSING_KEY),
    ("empty key", b"", orjson.dumps(_hb()), Reason.MISSING_KEY),
    ("oversized", KEY, _with("meta.info.serial", "x" * MAX_EVENT_BYTES), Reason.OVERSIZED),
    ("not json", KEY, b"\x00\xff{not json", Reason.NOT_JSON),
    ("truncated", KEY, orjson.dumps(_hb())[:-3], Reason.NOT_JSON),
    (
        "NaN literal",
        KEY,
        orjson.dumps(_hb()).replace(b'"cpu_pct":10.0', b'"cpu_pct":NaN'),
        Reason.NON_FINITE,
    ),
    (
        "Infinity literal",
        KEY,
        orjson.dumps(_hb()).replace(b'"cpu_pct":10.0', b'"cpu_pct":-Infinity'),
        Reason.NON_FINITE,
    ),
    (
        "overflow",
        KEY,
        orjson.dumps(_hb()).replace(b'"cpu_pct":10.0', b'"cpu_pct":1e999'),
        Reason.NON_FINITE,
    ),
    ("NaN string", KEY, _with("metrics.cpu_pct", "NaN"), Reason.NON_FINITE),
    ("not an object", KEY, b"[1, 2]", Reason.INVALID),
    ("wrong type", KEY, _with("metrics.cpu_pct", "high"), Reason.INVALID),
    ("wrong type bool", KEY, _with("metrics.cpu_pct", True), Reason.INVALID),
    (
        "missing field",
        KEY,
        orjson.dumps({k: v for k, v in _hb().items() if k != "firmware"}),
        Reason.INVALID,
    ),
    ("out of range", KEY, _with("metrics.cpu_pct", 101), Reason.INVALID),
    ("bad device id", b"dev 1", _with("device_id", "dev 1"), Reason.INVALID),
    ("time in 1970", KEY, _with("event_time_ms", 5), Reason.INVALID),
    (
        "event after produce",
        KEY,
        _with("event_time_ms", 1_700_000_000_000 + MAX_CLOCK_SKEW_MS + 1),
        Reason.INVALID,
    ),
    ("wrong kind", KEY, _with("kind", "alarm"), Reason.INVALID),
    ("float time", KEY, _with("event_time_ms", 1.7e12), Reason.INVALID),
    ("meta not object", KEY, _with("meta", [1]), Reason.INVALID),
    (
        "no schema_version",
        KEY,
        orjson.dumps({k: v for k, v in _hb().items() if k != "schema_version"}),
        Reason.INVALID,
    ),
    ("unknown schema_version", KEY, _with("schema_version", 99), Reason.UNKNOWN_SCHEMA_VERSION),
    ("schema_version 0", KEY, _with("schema_version", "0"), Reason.UNKNOWN_SCHEMA_VERSION),
    ("key mismatch", b"dev-000002", orjson.dumps(_hb()), Reason.KEY_MISMATCH),
]


@pytest.mark.parametrize(("name", "key", "value", "reason"), BAD, ids=[b[0] for b in BAD])
def test_every_bad_kind_has_its_reason(name, key, value, reason):
    r = validate_event("heartbeats", key, value)
    assert isinstance(r, Rejected), r
    assert r.reason == reason, r.detail
    assert r.detail and len(r.detail) <= 500
    assert validate_event("heartbeats", key, value) == r  # deterministic


def test_unknown_role_is_a_rejection_not_an_exception():
    r = validate_event("nope", KEY, orjson.dumps(_hb()))
    assert isinstance(r, Rejected) and r.reason == Reason.UNKNOWN


@settings(max_examples=500)
@given(
    st.one_of(st.none(), st.binary(max_size=300)),
    st.one_of(st.none(), st.binary(max_size=40)),
    st.sampled_from(["heartbeats", "work_orders", "alarms", "predictions", "precompute_requests"]),
)
def test_never_raises_on_arbitrary_bytes(value, key, role):
    r = validate_event(role, key, value)
    assert isinstance(r, (Accepted, Rejected))
    if isinstance(r, Rejected):
        assert r.reason in set(Reason)


@settings(max_examples=300)
@given(
    st.recursive(
        st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=8),
        lambda c: st.lists(c, max_size=4) | st.dictionaries(st.text(max_size=8), c, max_size=4),
        max_leaves=20,
    )
)
def test_never_raises_on_arbitrary_json(doc):
    value = json.dumps({**_hb(), "metrics": doc} if isinstance(doc, dict) else doc).encode()
    r = validate_event("heartbeats", KEY, value)
    assert isinstance(r, (Accepted, Rejected))
