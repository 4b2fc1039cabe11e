"""The heartbeat contract (`schemas.events.Heartbeat`) as typed msgspec structs: the worker's
fast decoder, plus the column-wise checks the structs cannot express and the bulk trace-id
parser for lineage.

A record is accepted here only if the contract validator would accept it with the same
values; anything else is left to `schemas.validation.validate_event` (tests/unit/
test_worker_decode.py holds both paths to that). What makes that hold:
- strict types (msgspec refuses `true` for a number, `1.5` or `1.0` for an integer, and
  numbers that overflow), the envelope's ranges and lengths as struct constraints;
- the strict struct forbids unknown fields, so every byte of a record it accepts was parsed
  by it; a record with unknown fields (tolerated by the contract) is decoded by the lenient
  struct only if orjson, the validator's JSON judge, also parses the whole record (msgspec
  skips unknown values without checking them, e.g. `1e999` or bad UTF-8);
- metrics may arrive as JSON-number text (a tolerated variant): the variant structs take
  `float | str` and the caller checks text against the contract's own number grammar;
- metadata (`meta`, in any layout) is kept raw and checked by `meta_ok` the first time a
  device sends it; afterwards identical bytes from that device need no parse.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from operator import attrgetter, methodcaller
from typing import Annotated, Any, Literal

import msgspec
import numpy as np
import orjson

from precast.kafka import KafkaMessage
from schemas import events as ev
from schemas.fleet import DEVICE_TYPES, LATEST_FIRMWARE
from schemas.normalize import INT_TEXT

DecodeError = msgspec.DecodeError  # ValidationError is a subclass

_Text = Annotated[str, msgspec.Meta(min_length=1, max_length=64)]  # ShortText / EventId length
_Ms = Annotated[int, msgspec.Meta(ge=ev.MIN_TIME_MS, le=ev.MAX_TIME_MS)]  # EpochMs
_Num = float | str  # text is checked against the contract's number grammar by the caller
_METRICS = ("cpu_pct", "mem_pct", "temperature_c", "error_rate", "signal_quality", "uptime_s")


def _struct(name: str, number: Any, forbid: bool) -> type[msgspec.Struct]:
    metrics = msgspec.defstruct(
        f"{name}Metrics", [(k, number) for k in _METRICS], forbid_unknown_fields=forbid, gc=False
    )
    return msgspec.defstruct(
        name,
        [
            ("schema_version", Literal[1]),
            ("event_id", _Text),
            ("kind", Literal["heartbeat"]),
            ("device_id", str),
            ("event_time_ms", _Ms),
            ("produced_at_ms", _Ms),
            ("device_type", _Text),
            ("firmware", _Text),
            ("metrics", metrics),
            ("meta", msgspec.Raw, msgspec.Raw()),
        ],
        forbid_unknown_fields=forbid,
        gc=False,
    )


# Tried in this order: canonical (numbers, no unknown fields), numbers as text, unknown fields.
decode_canonical = msgspec.json.Decoder(_struct("Canonical", float, True)).decode
_as_text = msgspec.json.Decoder(_struct("AsText", _Num, True)).decode
_extra = msgspec.json.Decoder(_struct("Extra", _Num, False)).decode


def decode_variant(value: bytes, error: Exception | None = None) -> Any:
    """A record in a tolerated variant (metrics as text, unknown fields), or None when the
    structs refuse it or, with unknown fields, orjson (the validator's JSON judge) does.
    `error` is the canonical decoder's: when it names an unknown field, skip to that struct
    (an optimisation only: any other error tries both)."""
    if error is None or "unknown field" not in str(error):
        try:
            return _as_text(value)
        except DecodeError:
            pass
    try:
        row = _extra(value)
        orjson.loads(value)
    except (DecodeError, orjson.JSONDecodeError):
        return None
    return row


# Column extraction (C-level attribute access): the first 7 fields, then the metrics struct.
FIELDS = attrgetter(
    "device_id",
    "event_id",
    "event_time_ms",
    "produced_at_ms",
    "device_type",
    "firmware",
    "meta",
    "metrics",
)
METRICS = attrgetter(*_METRICS)
LATEST = frozenset(LATEST_FIRMWARE.items())
TYPE_INDEX = {
    t: i for i, t in enumerate(DEVICE_TYPES)
}  # unknown types: -1 (features.device_type_index)

# -- identifiers ------------------------------------------------------------------------------------
# EventId is [A-Za-z0-9._:-]{1,64}: drop the punctuation, the rest must be ASCII alphanumerics.
_ID_PUNCT = str.maketrans("", "", "._:-")
# fullmatch: `$` in the contract's pattern would let Python's re accept a trailing newline.
_DEVICE_ID = re.compile(ev.DEVICE_ID_PATTERN)
_VALID_IDS: set[str] = set()  # device IDs that matched the pattern (bounded, see below)
_CACHE_MAX = 1_000_000


def event_ids_ok(ids: Sequence[str]) -> bool:
    text = "".join(ids).translate(_ID_PUNCT)
    return text.isascii() and (text.isalnum() or not text)


def device_ids_bad(ids: Sequence[str]) -> list[int]:
    """Rows whose device ID does not match the contract's pattern."""
    if _VALID_IDS.issuperset(ids):
        return []
    if len(_VALID_IDS) >= _CACHE_MAX:
        _VALID_IDS.clear()
    bad = []
    for i, d in enumerate(ids):
        if d not in _VALID_IDS:
            if _DEVICE_ID.fullmatch(d):
                _VALID_IDS.add(d)
            else:
                bad.append(i)
    return bad


# -- metadata -------------------------------------------------------------------------------------------
_VERSION_KEY = re.compile(r"v([1-9][0-9]{0,3})")
_ABSENT = object()


def _info_ok(info: dict) -> bool:
    for k in ("site", "hw_model", "serial"):
        v = info.get(k)
        if v is not None and not (type(v) is str and 0 < len(v) <= 64):
            return False
    r = info.get("hw_rev")
    if type(r) is str and INT_TEXT.fullmatch(r):  # an integer sent as text: tolerated
        r = int(r)
    return r is None or type(r) is int and 0 <= r <= 10_000


def meta_ok(meta: Any) -> bool:
    """Device metadata in any layout `schemas.normalize` tolerates (nested `meta.info`, flat,
    versioned `meta.info.vN`, unknown keys ignored) with well-typed fields. The worker does not
    use metadata, but must not accept what the contract rejects."""
    if meta is None or meta == {}:
        return True
    if type(meta) is not dict:
        return False
    info = meta.get("info", _ABSENT)
    if info is _ABSENT:
        return _info_ok(meta)  # flat
    if type(info) is not dict:
        return False
    versions = [
        (int(m.group(1)), k)
        for k, v in info.items()
        if type(v) is dict and (m := _VERSION_KEY.fullmatch(k))
    ]
    return _info_ok(info[max(versions)[1]] if versions else info)


# device -> raw metadata last found valid: a device's metadata rarely changes, so after its
# first heartbeat the check is one comparison of raw bytes. Bounded: cleared when it gets big.
_META_GOOD: dict[str, msgspec.Raw] = {}


def bad_metadata(devices: Sequence[str], metas: Sequence[msgspec.Raw]) -> list[int]:
    """Rows whose raw `meta` the contract would reject."""
    known = list(map(_META_GOOD.get, devices))
    if known == metas:  # element-wise Raw == Raw, in C
        return []
    if len(_META_GOOD) >= _CACHE_MAX:
        _META_GOOD.clear()
    bad = []
    for i, (d, raw, seen) in enumerate(zip(devices, metas, known, strict=True)):
        if raw == seen:
            continue
        if len(raw):
            try:
                ok = meta_ok(orjson.loads(bytes(raw)))
            except orjson.JSONDecodeError:
                ok = False
        else:
            ok = True  # absent: the contract's default
        if ok:
            _META_GOOD[d] = raw.copy()  # copy: do not keep the whole record alive
        else:
            bad.append(i)
    return bad


# -- trace ids (W3C traceparent) ------------------------------------------------------------------------
_HEADERS = methodcaller("headers")
_HEX = np.zeros(256, dtype=bool)
_HEX[np.frombuffer(b"0123456789abcdef", dtype=np.uint8)] = True


_SMALL = 32
_HEX_CHARS = b"0123456789abcdef"


def _trace_id_json(v: bytes | None) -> bytes:
    """One traceparent value checked like the batch path of `trace_ids_json`."""
    if v is None or len(v) != 55 or not v[2] == v[35] == v[52] == 45:
        return b"null"
    tid = v[3:35]
    return b"null" if tid.translate(None, _HEX_CHARS) or tid == b"0" * 32 else b'"' + tid + b'"'


def trace_ids_json(msgs: Sequence[KafkaMessage]) -> list[bytes]:
    """The trace id of each record's first `traceparent` header as JSON (`b'"<32 hex>"'`), or
    `b"null"` where it has none or an invalid one: version(2) - trace id(32 hex, not all zero) -
    parent id(16) - flags(2). Checked for the whole batch at once with numpy."""
    values: list[bytes | None] = [None] * len(msgs)
    for i, h in enumerate(map(_HEADERS, msgs)):
        if h:
            for k, v in h:
                if k == "traceparent":
                    values[i] = v
                    break
    if len(values) < _SMALL:  # numpy's fixed cost per call is more than a few records' checks
        return list(map(_trace_id_json, values))
    rows: list[int] = []
    found: list[bytes] = []
    for i, v in enumerate(values):
        if v is not None and len(v) == 55:
            rows.append(i)
            found.append(v)
    if not rows:
        return [b"null"] * len(values)
    a = np.frombuffer(b"".join(found), dtype=np.uint8).reshape(len(rows), 55)
    tid = a[:, 3:35]
    ok = (
        (a[:, 2] == 45)
        & (a[:, 35] == 45)
        & (a[:, 52] == 45)
        & _HEX[tid].all(axis=1)
        & (tid != 48).any(axis=1)
    )
    quoted = np.full((len(rows), 34), 34, dtype=np.uint8)  # '"' + trace id + '"'
    quoted[:, 1:33] = tid
    found = quoted.view("S34").ravel().tolist()
    if len(rows) == len(values) and ok.all():
        return found  # every record has a valid one (the common case)
    out = [b"null"] * len(values)
    for j in np.flatnonzero(ok).tolist():
        out[rows[j]] = found[j]
    return out


def traceparent(msg: KafkaMessage) -> bytes | None:
    """A record's first `traceparent` header value, unchecked (`trace_ids_json` inlines this
    lookup for whole batches)."""
    for k, v in msg.headers() or ():
        if k == "traceparent":
            return v if isinstance(v, bytes) else None
    return None


def trace_id(msg: KafkaMessage) -> str | None:
    """The trace id from one record's `traceparent` header, if it has a valid one."""
    q = trace_ids_json([msg])[0]
    return None if q == b"null" else q[1:-1].decode()
