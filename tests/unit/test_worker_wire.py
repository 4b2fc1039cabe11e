"""The typed heartbeat decoder (workers.precompute.ingest.heartbeat_structs) against the contract
validator: on every wire style the simulator sends, on records where msgspec and orjson/pydantic
disagree if not held apart, and on a few thousand random mutations, the worker's decode gives
exactly the validator's verdict (accepted with the same values, or rejected with the same
reason)."""

import random

import numpy as np
import orjson
import pytest

from precast.fleet import load_fleet
from schemas.validation import validate_event
from tests.worker_events import T0, heartbeat, record
from workers.precompute.ingest import trace
from workers.precompute.ingest.decode import Decoder

TOPIC = "t.heartbeats"
METRICS = ("cpu_pct", "mem_pct", "temperature_c", "error_rate", "signal_quality", "uptime_s")
DEC = Decoder(load_fleet())


def fast(records, dec=DEC):
    rejected = []
    hb = dec.heartbeats(records, lambda m, r, d: rejected.append((m.offset(), str(r))))
    return hb, rejected


def verdict_of_validator(rec):
    v = validate_event("heartbeats", rec.key(), rec.value(), rec.headers())
    if not v.ok:
        return ("rejected", str(v.reason))
    e = v.event
    return (
        "accepted",
        e["device_id"],
        e["event_id"],
        e["event_time_ms"],
        tuple(float(e[k]) for k in METRICS),
    )


def verdicts_of_worker(records):
    hb, rejected = fast(records)
    out = {off: ("rejected", reason) for off, reason in rejected}
    for j, m in enumerate(hb.msgs):
        out[m.offset()] = (
            "accepted",
            hb.device_ids[j],
            hb.event_ids[j],
            int(hb.event_time_ms[j]),
            tuple(hb.cols[j, :6].tolist()),
        )
    assert len(out) == len(records), "every record is accepted or rejected exactly once"
    return out


def rec(value, offset=0, key=b"d1"):
    return record(TOPIC, {"device_id": "x"}, offset, key=key, value=value)


def raw(e, **top):
    return orjson.dumps({**e, **top})


GOOD = heartbeat("d1", T0)
# Where a bare msgspec decode would differ from orjson + the pydantic contract.
TRICKY = {
    "canonical": raw(GOOD),
    "unknown field non-finite": raw(GOOD)[:-1] + b',"x":1e999}',
    "unknown field bad utf-8": raw(GOOD)[:-1] + b',"x":"\xff"}',
    "unknown nested field non-finite": raw(GOOD).replace(
        b'"uptime_s":36000.0', b'"uptime_s":36000.0,"fan":-1e400'
    ),
    "meta non-finite": raw(GOOD, meta={"info": {"site": "s"}}).replace(
        b'"site":"s"', b'"site":"s","n":1e999'
    ),
    "meta bad utf-8": raw(GOOD, meta={"info": {"site": "s"}}).replace(
        b'"site":"s"', b'"site":"\xff"'
    ),
    "meta wrong type": raw(GOOD, meta={"info": {"hw_rev": True}}),
    "meta rev as text": raw(GOOD, meta={"info": {"hw_rev": "3"}}),
    "meta flat": raw(GOOD, meta={"site": "s", "hw_rev": 2}),
    "meta versioned": raw(GOOD, meta={"info": {"v2": {"site": "s"}, "v10": {"hw_rev": 3}}}),
    "meta null": raw(GOOD, meta=None),
    "meta absent": orjson.dumps({k: v for k, v in GOOD.items() if k != "meta"}),
    "schema_version true": raw(GOOD, schema_version=True),
    "schema_version 1.0": raw(GOOD).replace(b'"schema_version":1', b'"schema_version":1.0'),
    "schema_version text": raw(GOOD, schema_version="1"),
    "event time 1.0": raw(GOOD).replace(
        f'"event_time_ms":{T0}'.encode(), f'"event_time_ms":{T0}.0'.encode()
    ),
    "event time huge": raw(GOOD).replace(
        f'"event_time_ms":{T0}'.encode(), b'"event_time_ms":1' + b"0" * 30
    ),
    "event time text": raw(GOOD, event_time_ms=str(T0)),
    "event before skew": raw(GOOD, produced_at_ms=T0 - 400_000),
    "metric bool": raw(GOOD, metrics={**GOOD["metrics"], "cpu_pct": True}),
    "metric text": raw(GOOD, metrics={**GOOD["metrics"], "cpu_pct": "1e1"}),
    "metric text nan": raw(GOOD, metrics={**GOOD["metrics"], "cpu_pct": "NaN"}),
    "metric text spaces": raw(GOOD, metrics={**GOOD["metrics"], "cpu_pct": " 12"}),
    "metric text overflow": raw(GOOD, metrics={**GOOD["metrics"], "uptime_s": "1e999"}),
    "metric out of range": raw(GOOD, metrics={**GOOD["metrics"], "error_rate": 1.5}),
    "metric huge int": raw(GOOD).replace(b'"uptime_s":36000.0', b'"uptime_s":1' + b"0" * 400),
    "metric missing": raw(
        GOOD, metrics={k: v for k, v in GOOD["metrics"].items() if k != "mem_pct"}
    ),
    "event id punctuation only": raw(GOOD, event_id="..."),
    "event id with space": raw(GOOD, event_id="a b"),
    "event id non-ascii": raw(GOOD, event_id="é1"),
    "event id too long": raw(GOOD, event_id="a" * 65),
    "device type empty": raw(GOOD, device_type=""),
    "kind wrong": raw(GOOD, kind="alarm"),
    "duplicate key": raw(GOOD)[:-1] + b',"device_id":"d2"}',
    "not json": raw(GOOD)[:-1],
    "bom": b"\xef\xbb\xbf" + raw(GOOD),
    "lone surrogate": raw(GOOD)[:-1] + b',"x":"\\ud800"}',
    "array": b"[" + raw(GOOD) + b"]",
    "oversized": raw(GOOD)[:-1] + b',"pad":"' + b"x" * 33_000 + b'"}',
}


@pytest.mark.parametrize("name", list(TRICKY))
def test_worker_and_validator_agree_on_tricky_records(name):
    r = rec(TRICKY[name])
    assert verdicts_of_worker([r])[0] == verdict_of_validator(r)


@pytest.mark.parametrize("key", [b"d1\n", b"d2", b"", None])
def test_worker_and_validator_agree_on_keys(key):
    r = rec(raw(GOOD), key=key)
    assert verdicts_of_worker([r])[0] == verdict_of_validator(r)


def test_device_id_with_trailing_newline_is_rejected_as_the_contract_does():
    e = heartbeat("d1\n", T0)
    r = record(TOPIC, e, 0)
    assert verdict_of_validator(r) == ("rejected", "invalid")
    assert verdicts_of_worker([r])[0] == ("rejected", "invalid")


def _mutations(rng, e):
    """A record of the simulator's, damaged in one of many ways."""
    choice = rng.randrange(9)
    e = orjson.loads(orjson.dumps(e))
    paths = [("",)] + [("metrics", k) for k in e["metrics"]] + [(k,) for k in e if k != "metrics"]
    path = rng.choice(paths[1:])
    where = e if len(path) == 1 else e[path[0]]
    values = [
        None,
        True,
        1.5,
        1,
        -1,
        0,
        "",
        "x",
        "1e1",
        " 1",
        "NaN",
        [],
        {},
        2**63 - 1,
        1e300,
        T0,
        "é",
        "a" * 70,
    ]
    if choice == 0:
        where.pop(path[-1], None)
    elif choice == 1:
        where[path[-1]] = rng.choice(values)
    elif choice == 2:
        where["unknown_" + str(rng.randrange(3))] = rng.choice(values)
    value = orjson.dumps(e)
    if choice == 3:  # truncate or cut
        value = value[: rng.randrange(len(value))]
    elif choice == 4:  # flip one byte
        i = rng.randrange(len(value))
        value = value[:i] + bytes([rng.randrange(256)]) + value[i + 1 :]
    elif choice == 5:  # an unknown field with a token orjson refuses
        value = (
            value[:-1]
            + b',"z":'
            + rng.choice([b"1e999", b'"\xfe"', b"NaN", b'"\\udc00"', b"-0", b"1E400"])
            + b"}"
        )
    elif choice == 6:  # a number turned into JSON-number text
        value = value.replace(b'"event_time_ms":', b'"event_time_ms":"', 1).replace(
            b',"produced', b'","produced', 1
        )
    return value


def test_worker_and_validator_agree_on_random_mutations_of_every_wire_style():
    from producers.simulator import Fleet

    rng = random.Random(11)
    fleet = Fleet(300, seed=5)
    events = fleet.heartbeats(300, T0) + fleet.heartbeats(300, T0 + 1000)
    records = []
    for i, e in enumerate(events * 4):
        value = orjson.dumps(e) if i < len(events) else _mutations(rng, e)
        records.append(record(TOPIC, e, i, key=e.device_id.encode(), value=value))
    styles = {fleet.style[int(e.device_id[4:])] for e in events}
    assert {"canonical", "path:2", "path:3", "undeclared", "numbers_as_text"} <= styles
    expected = {r.offset(): verdict_of_validator(r) for r in records}
    # one batch with everything mixed, and record by record: the same verdicts
    assert verdicts_of_worker(records) == expected
    assert {
        o: verdicts_of_worker([r])[o] for o, r in zip(expected, records, strict=True)
    } == expected
    kinds = {v[0] if v[0] == "accepted" else v[1] for v in expected.values()}
    assert {"accepted", "invalid", "not_json", "non_finite"} <= kinds  # the mutations reach each


def test_every_simulator_style_takes_the_fast_path(monkeypatch):
    from producers.simulator import Fleet

    fleet = Fleet(400, seed=2)
    records = [
        record(TOPIC, e, i, key=e.device_id.encode())
        for i, e in enumerate(fleet.heartbeats(400, T0))
    ]
    calls = []
    dec = Decoder(load_fleet())
    real = dec.validate
    monkeypatch.setattr(dec, "validate", lambda role, m: calls.append(m) or real(role, m))
    hb, rejected = fast(records, dec)
    assert len(hb) == 400 and rejected == [] and calls == []


def test_trace_ids_are_parsed_for_a_batch_like_one_by_one():
    tid = "0af7651916cd43dd8448eb211c80319c"
    good = f"00-{tid}-b7ad6b7169203331-01".encode()
    cases = [
        ([("traceparent", good)], tid),
        ([("event_id", b"e1"), ("traceparent", good)], tid),
        ([("traceparent", good.upper())], None),  # not lower-case hex
        ([("traceparent", good[:-1])], None),  # too short
        ([("traceparent", b"00-" + b"0" * 32 + good[35:])], None),  # all-zero trace id
        ([("traceparent", good.replace(b"-", b"_", 1))], None),  # separator
        ([("traceparent", None)], None),
        ([("traceparent", b"x" * 55), ("traceparent", good)], None),  # the first one counts
        ([], None),
        (None, None),
    ]
    records = [record(TOPIC, GOOD, i) for i in range(len(cases))]
    for r, (headers, _) in zip(records, cases, strict=True):
        r.headers_ = headers
    expected = [None if want is None else want for _, want in cases]
    as_json = [b"null" if t is None else b'"%s"' % t.encode() for t in expected]
    assert [trace.trace_id(r) for r in records] == expected
    assert trace.trace_ids_json(records) == as_json
    many = records * 10  # past the small-batch path: numpy checks, same answers
    assert len(many) > trace._SMALL and trace.trace_ids_json(many) == as_json * 10


def test_unchanged_metadata_of_a_known_device_is_not_parsed_again(monkeypatch):
    dec = Decoder(load_fleet())
    e = {**heartbeat("meta-dev", T0), "meta": {"info": {"site": "s1", "hw_rev": 2}}}
    assert len(fast([record(TOPIC, e, 0)], dec)[0]) == 1
    parsed = []
    real = dec.wire.raw_ok
    monkeypatch.setattr(dec.wire, "raw_ok", lambda raws: parsed.append(raws) or real(raws))
    assert len(fast([record(TOPIC, {**e, "event_id": "e2"}, 1)], dec)[0]) == 1
    assert parsed == []  # the same bytes from the same device: no parse
    changed = {**e, "event_id": "e3", "meta": {"info": {"site": "s2"}}}
    assert len(fast([record(TOPIC, changed, 2)], dec)[0]) == 1
    assert [orjson.loads(bytes(r["meta"])) for r in parsed] == [{"info": {"site": "s2"}}]


def test_columns_are_float64_with_latest_firmware_and_type_index():
    hb, _ = fast([record(TOPIC, heartbeat("d1", T0), 0)])
    assert hb.cols.dtype == np.float64 and hb.cols.shape == (1, len(DEC.state))
    assert hb.partitions == [0]
