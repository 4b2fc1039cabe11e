"""Device metadata the worker keeps raw (workers.precompute.ingest.heartbeat_structs): its strict
struct check is a shortcut, never a second opinion. Whatever it accepts, the contract's own
reading accepts; where it refuses, the contract decides. Checked on a spec whose metadata holds
every field kind with constraints, alternatives and a required field, over random documents."""

import json
import tomllib
from pathlib import Path

import orjson
from hypothesis import given, settings
from hypothesis import strategies as st

from precast.fleet.runtime import Fleet
from schemas.normalize import Rejection
from schemas.spec import load
from workers.precompute.ingest.heartbeat_structs import HeartbeatWire

SPEC = Path(__file__).parents[2] / "schemas" / "fleets" / "devices.toml"


def _fleet() -> Fleet:
    data = tomllib.loads(SPEC.read_text())
    fields = data["streams"]["heartbeats"]["fields"]
    alt = lambda n: [f"meta.info.{n}", f"meta.info.v2.{n}", f"meta.{n}"]  # noqa: E731
    fields |= {
        "serial": {"kind": "attribute", "format": "id", "max_length": 12, "path": alt("serial")},
        "hw_rev": {"kind": "attribute", "type": "integer", "min": 0.5, "max": 10,
                   "path": alt("hw_rev"), "required": False},
        "ratio": {"kind": "attribute", "type": "number", "min": 0, "max": 1,
                  "path": alt("ratio"), "required": False},
        "mode": {"kind": "categorical", "values": ["a", "b"], "unknown": "reject",
                 "path": alt("mode"), "required": False},
        "tag": {"kind": "categorical", "values": ["a"], "max_length": 3,
                "path": alt("tag"), "required": False},
        "flag": {"kind": "boolean", "path": alt("flag"), "required": False},
        "temp": {"kind": "metric", "min": -10, "max": 10, "path": alt("temp"), "required": False},
        "temp2": {"kind": "metric", "min": -10, "max": 10, "out_of_range": "clip",
                  "path": ["meta.info.deep.temp2"], "required": False},
    }  # fmt: skip
    spec, problems = load.parse(data)
    assert spec is not None and not problems, problems
    return Fleet.of(spec)


FLEET = _fleet()
WIRE = HeartbeatWire(FLEET.spec, FLEET.features)
NAMES = ("serial", "hw_rev", "ratio", "mode", "tag", "flag", "temp", "temp2", "x", "v2", "deep")
VALUES = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-3, 12),
    st.integers(-(2**70), 2**70),
    st.floats(allow_nan=False, allow_infinity=False),
    st.sampled_from(
        ["a", "b", "c", "", "abc", "abcd", "SN-1.2:3", "SN\n", "x y", "é", "\U0001f600"]
    ),
    st.text(max_size=14),
)
DOCS = st.recursive(
    VALUES, lambda inner: st.dictionaries(st.sampled_from(("info", *NAMES)), inner, max_size=5),
    max_leaves=12,
)  # fmt: skip


def _contract_accepts(meta: bytes) -> bool:
    try:
        WIRE.reader.check_fields({"meta": orjson.loads(meta)}, WIRE.raw_fields, WIRE.raw_keys)
    except (Rejection, orjson.JSONDecodeError):  # orjson is the validator's JSON judge
        return False
    return True


def test_the_shape_under_test():
    assert WIRE.raw_keys == ("meta",)
    check = WIRE._raw_checks["meta"]
    assert check.required  # serial is required: an absent meta is refused
    assert len(check.strict) == len(check.lenient) == 3  # canonical, under v2, flat


@settings(max_examples=1500, deadline=None)
@given(DOCS)
def test_strict_acceptance_implies_the_contracts(meta):
    data = json.dumps(meta).encode()  # big integers too
    try:
        doc = orjson.loads(data)
    except orjson.JSONDecodeError:
        doc = None
    else:
        if WIRE._raw_checks["meta"].accepts(data, doc):
            assert _contract_accepts(data), meta
    assert WIRE.raw_ok({"meta": data}) is _contract_accepts(data)


@settings(max_examples=1500, deadline=None)
@given(
    st.fixed_dictionaries(
        {"serial": st.sampled_from(["SN1", "SN-1.2:3", "SN\n", "", "x" * 13])},
        optional={n: VALUES for n in NAMES[1:8]},
    )
)
def test_canonical_documents_mostly_take_the_shortcut_and_agree(info):
    data = json.dumps({"info": info}).encode()
    assert WIRE.raw_ok({"meta": data}) is _contract_accepts(data)


def _place(info: dict, layout: int) -> dict:
    return [{"info": info}, {"info": {"v2": info}}, info][layout]


@settings(max_examples=1500, deadline=None)
@given(
    st.fixed_dictionaries(
        {"serial": st.sampled_from(["SN1", "SN-1.2:3", "SN\n"])},
        optional={n: VALUES for n in NAMES[1:8]},
    ),
    st.integers(0, 2),
    st.lists(
        st.tuples(st.sampled_from([(), ("info",), ("info", "v2")]), st.sampled_from(NAMES), VALUES),
        max_size=3,
    ),
)
def test_every_declared_layout_with_undeclared_or_stray_keys_agrees(info, layout, strays):
    meta = _place(info, layout)
    for at, key, value in strays:  # an undeclared key, or a declared path of another layout
        node = meta
        for k in at:
            node = node.setdefault(k, {}) if isinstance(node, dict) else node
        if isinstance(node, dict):
            node[key] = value
    data = json.dumps(meta).encode()
    assert WIRE.raw_ok({"meta": data}) is _contract_accepts(data), meta


def test_each_layout_takes_the_shortcut():
    info = {"serial": "SN1", "hw_rev": 3, "temp": 1.5, "mode": "b", "flag": True}
    for layout in range(3):
        meta = _place(dict(info), layout)
        assert WIRE._raw_checks["meta"].accepts(orjson.dumps(meta), meta), layout
        meta["x_extra"] = {"site": 5}  # undeclared: ignored by this stream
        assert WIRE._raw_checks["meta"].accepts(orjson.dumps(meta), meta), layout
    stray = {"info": {**info, "v2": {"hw_rev": -1}}}  # the contract reads v2's hw_rev? no: ...
    assert WIRE.raw_ok({"meta": orjson.dumps(stray)}) is _contract_accepts(orjson.dumps(stray))
    absent = {"info": {"serial": "SN1", "v2": {"hw_rev": -1}}}  # ... but it does here
    assert not WIRE._raw_checks["meta"].accepts(orjson.dumps(absent), absent)
    assert not WIRE.raw_ok({"meta": orjson.dumps(absent)})
    blocked = {"info": {"serial": "SN1", "v2": 5}}  # the contract refuses what is on its way
    assert not WIRE.raw_ok({"meta": orjson.dumps(blocked)})


def test_examples():
    ok = {"info": {"serial": "SN1", "hw_rev": 1, "ratio": 1, "mode": "a", "tag": "zz",
                   "flag": None, "temp": -10, "deep": {"temp2": 99.5}}}  # fmt: skip
    assert WIRE._raw_checks["meta"].accepts(orjson.dumps(ok), ok)  # the shortcut takes it
    assert WIRE.raw_ok({"meta": orjson.dumps(ok)})
    for bad in (
        {"info": {"serial": "SN\n"}},
        {"info": {"serial": "SN1", "hw_rev": 0}},
        {"info": {"serial": "SN1", "hw_rev": 2.0}},
        {"info": {"serial": "SN1", "mode": "c"}},
        {"info": {"serial": "SN1", "tag": "abcd"}},
        {"info": {"serial": "SN1", "temp": 10.5}},
        {"info": {"serial": "SN1", "flag": 1}},
        {"info": {}},
        None,
    ):
        assert not WIRE.raw_ok({"meta": orjson.dumps(bad)}), bad
    assert not WIRE.raw_ok({"meta": b""})  # absent, but serial is required
    assert WIRE.raw_ok({"meta": orjson.dumps({"info": {"v2": {"serial": "SN2"}}})})
    assert WIRE.raw_ok({"meta": b'{"info":{"serial":"SN1","serial":"SN2"}}'})
    assert not WIRE.raw_ok({"meta": b'{"info":{"serial":"SN1","serial":"SN\\n"}}'})
