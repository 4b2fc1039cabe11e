"""The one validation entry point, driven by the fleet spec: round trips of any valid event,
every tolerated wire variant (alternative paths, numbers as text, undeclared fields), and every
kind of bad record with its reason."""
# Deadlines off: CI is a shared 2-core box; speed is measured by `python -m bench producer`.

from __future__ import annotations

import json
import tomllib

import orjson
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from schemas.canonical import StreamWriter
from schemas.deadletters import Reason
from schemas.events import MAX_CLOCK_SKEW_MS, MAX_EVENT_BYTES, MAX_TIME_MS, MIN_TIME_MS
from schemas.spec import load_spec
from schemas.spec.fields import Boolean, Categorical, Metric, Stream
from schemas.spec.load import parse
from schemas.validation import Accepted, Rejected, Validator, validate_event

SPEC = load_spec()
ids = st.from_regex(r"[A-Za-z0-9][A-Za-z0-9._:\-]{0,40}", fullmatch=True)
texts = st.text(st.characters(codec="utf-8", exclude_categories=("Cs",)), min_size=1, max_size=64)
times = st.integers(MIN_TIME_MS, MAX_TIME_MS - MAX_CLOCK_SKEW_MS)


def _value(f):
    """A valid normalized value of a declared field (None where it may be absent)."""
    if isinstance(f, Metric):
        lo = f.min if f.min is not None else -1e9
        hi = f.max if f.max is not None else 1e12
        v = st.floats(lo, hi, allow_nan=False, allow_infinity=False)
    elif isinstance(f, Categorical):
        v = (
            st.sampled_from(f.values)
            if f.unknown == "reject"
            else st.sampled_from(f.values) | texts
        )
    elif isinstance(f, Boolean):
        v = st.booleans()
    elif f.type == "string":
        v = ids if f.format == "id" else texts
    else:
        v = st.integers(int(f.min or 0), int(f.max if f.max is not None else 10**9))
    return v if f.required else st.none() | v


@st.composite
def events(draw, stream: Stream):
    t = draw(times)
    e = {
        "device_id": draw(ids),
        "event_id": draw(ids),
        "event_time_ms": t,
        "produced_at_ms": draw(st.integers(t, MAX_TIME_MS)),
    }
    for name, f in stream.fields.items():
        v = draw(_value(f))
        e[name] = f.default if v is None and isinstance(f, Boolean) else v
    return e


STREAMS = {s.topic: s for s in SPEC.streams.values()}
any_event = st.one_of(*(st.tuples(st.just(r), events(s)) for r, s in STREAMS.items()))


def check(role: str, event: dict, wire: dict) -> Accepted:
    r = validate_event(role, event["device_id"].encode(), orjson.dumps(wire))
    assert isinstance(r, Accepted), r
    assert r.event == event
    return r


@settings(max_examples=300, suppress_health_check=[HealthCheck.too_slow])
@given(any_event)
def test_any_valid_event_survives_encode_decode_unchanged(role_event):
    role, event = role_event
    writer = StreamWriter(STREAMS[role])
    r = check(role, event, writer.write(event))
    assert r.variant.coerced == () and r.variant.extra == () and r.variant.layout == "canonical"
    # canonical form is a fixed point: encoding the decoded event gives the same bytes
    assert orjson.dumps(writer.write(r.event)) == orjson.dumps(writer.write(event))


@settings(max_examples=200, suppress_health_check=[HealthCheck.too_slow])
@given(events(STREAMS["heartbeats"]), st.integers(0, 2), st.booleans(), st.booleans())
def test_every_wire_variant_normalizes_to_the_same_event(event, alternative, as_text, extra):
    """Alternative paths (meta.info, meta.info.v2, flat meta), numbers as text, undeclared
    fields: the same event, and the variant says what differed."""
    wire = StreamWriter(STREAMS["heartbeats"]).write(event, alternative, numbers_as_text=as_text)
    if extra:
        wire["vendor"] = {"x": 1}
        wire["metrics"]["fan_rpm"] = 1200
    r = check("heartbeats", event, wire)
    has_meta = any(event[k] is not None for k in ("site", "hw_model", "hw_rev", "serial"))
    assert r.variant.layout == (
        f"path:{alternative + 1}" if alternative and has_meta else "canonical"
    )
    assert bool(r.variant.coerced) == as_text
    assert bool(r.variant.extra) == extra
    if extra:
        assert "vendor" in r.variant.extra and "metrics.fan_rpm" in r.variant.extra


def test_a_value_outside_a_categorys_vocabulary_is_accepted_and_reported_unknown():
    e = _hb()
    e["device_type"] = "toaster"
    r = validate_event("heartbeats", KEY, orjson.dumps(e))
    assert isinstance(r, Accepted) and r.event["device_type"] == "toaster"
    assert r.variant.unknown == ("device_type",)


def _hb() -> dict:
    return {
        "schema_version": 1,
        "event_id": "e-1",
        "kind": "heartbeat",
        "device_id": "dev-000001",
        "event_time_ms": 1_700_000_000_000,
        "produced_at_ms": 1_700_000_000_000,
        "device_type": "camera",
        "firmware": "6.0.0",
        "metrics": {
            "cpu_pct": 10.0,
            "mem_pct": 20.0,
            "temperature_c": 30.0,
            "error_rate": 0.01,
            "signal_quality": 0.9,
            "uptime_s": 100.0,
        },
        "meta": {"info": {"site": "s1", "hw_rev": 2}},
    }


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
    ("meta.info not object", KEY, _with("meta.info", "x"), Reason.INVALID),
    ("attribute out of range", KEY, _with("meta.info.hw_rev", 10_001), Reason.INVALID),
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


@pytest.mark.parametrize(
    ("policy", "value", "expect"),
    [
        ("reject", 120.0, Reason.INVALID),
        ("clip", 120.0, 100.0),
        ("null", 120.0, None),
        ("clip", -5.0, 0.0),
    ],
)
def test_a_metric_out_of_range_follows_its_declared_policy(policy, value, expect):
    data = SPEC.model_dump(mode="json", exclude_none=True)
    data["streams"]["heartbeats"]["fields"]["cpu_pct"]["out_of_range"] = policy
    spec, problems = parse(data)
    assert spec is not None and not problems
    r = Validator(spec).validate("heartbeats", KEY, _with("metrics.cpu_pct", value))
    if isinstance(expect, Reason):
        assert isinstance(r, Rejected) and r.reason == expect
    else:
        assert isinstance(r, Accepted) and r.event["cpu_pct"] == expect


def test_undeclared_fields_are_dead_lettered_when_the_stream_says_so():
    data = SPEC.model_dump(mode="json", exclude_none=True)
    data["streams"]["heartbeats"]["undeclared"] = "dead_letter"
    spec, _ = parse(data)
    assert spec is not None
    v = Validator(spec)
    assert isinstance(v.validate("heartbeats", KEY, orjson.dumps(_hb())), Accepted)
    r = v.validate("heartbeats", KEY, _with("meta.info.uplink", "lte"))
    assert isinstance(r, Rejected) and r.reason == Reason.INVALID and "meta.info.uplink" in r.detail


TRAILERS_WIRE = """
[fleet]
name = "t"
version = 1
[serving]
labels = ["a", "b"]
default_label = "a"
top_k = 2
[streams.hb]
topic = "heartbeats"
[streams.hb.envelope]
device_id = "deviceId"
event_time = { path = ["ts", "t"], unit = "s" }
[streams.hb.fields]
box_c = { kind = "metric", path = ["sensors.box", "box"], min = -40, max = 40 }
[[features]]
name = "box_c"
source = "box_c"
"""


def test_a_fleet_with_its_own_key_time_in_seconds_and_alternative_paths():
    spec, problems = parse(tomllib.loads(TRAILERS_WIRE))
    assert spec is not None and not problems, problems
    v = Validator(spec)
    doc = {"deviceId": "tr-1", "ts": 1_700_000_000.25, "sensors": {"box": "-18.5"}}
    r = v.validate("heartbeats", b"tr-1", orjson.dumps(doc))
    assert isinstance(r, Accepted), r
    assert r.event == {
        "device_id": "tr-1",
        "event_id": None,
        "event_time_ms": 1_700_000_000_250,
        "produced_at_ms": None,
        "box_c": -18.5,
    }
    alt = v.validate(
        "heartbeats", b"tr-1", orjson.dumps({"deviceId": "tr-1", "t": 1_700_000_000, "box": 3})
    )
    assert (
        isinstance(alt, Accepted) and alt.event["box_c"] == 3.0 and alt.variant.layout == "path:2"
    )
    wrong = v.validate("heartbeats", b"tr-1", orjson.dumps({**doc, "ts": 5}))
    assert isinstance(wrong, Rejected) and "ts" in wrong.detail


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
