"""The hand-written heartbeat decoder and feature function of the built-in fleet, as main had
them before the fleet spec (workers/wire.py, workers/decode.py and workers/features.py of
commit 85c5705, the fast path only), kept as the reference `python -m bench fleets` measures
the spec-driven path against (`fleet_spec_vs_builtin`). Not used by precast itself."""

# ruff: noqa
# mypy: ignore-errors
from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from operator import attrgetter, methodcaller
from typing import Annotated, Any, Literal

import msgspec
import numpy as np
import orjson

from schemas import events as ev
from schemas.events import MAX_EVENT_BYTES
from schemas.normalize import INT_TEXT, NUMBER_TEXT

DEVICE_TYPES = ("gateway", "camera", "meter", "pump_controller")
LATEST_FIRMWARE = {
    "gateway": "2.5.0",
    "camera": "6.0.0",
    "meter": "1.9.3",
    "pump_controller": "3.2.0",
}
Reject = Callable[[Any, Any, str], None]

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


# Column order of Heartbeats.cols (== workers.features.HEARTBEAT_COLUMNS)
_LO = np.array([0, 0, -80, 0, 0, 0], dtype=np.float64)
_HI = np.array([100, 100, 250, 1, 1, np.inf], dtype=np.float64)
_VALUE, _KEY, _PARTITION = methodcaller("value"), methodcaller("key"), methodcaller("partition")


@dataclass
class Heartbeats:
    """Accepted heartbeats of one batch, in consumption order (the slow path's at the end)."""

    msgs: list[KafkaMessage] = field(default_factory=list)
    device_ids: list[str] = field(default_factory=list)
    event_ids: list[str] = field(default_factory=list)
    partitions: list[int] = field(default_factory=list)
    event_time_ms: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.int64))
    cols: np.ndarray = field(default_factory=lambda: np.zeros((0, 8)))  # HEARTBEAT_COLUMNS
    slow: list = field(default_factory=list)

    def __len__(self) -> int:
        return len(self.device_ids)


# -- heartbeats: the fast path ------------------------------------------------------------------------
def _parse(
    msgs: Sequence[KafkaMessage], slow: list[KafkaMessage]
) -> tuple[list[KafkaMessage], list, list[int]]:
    """Typed decode of each record: (records, rows, indexes of the rows that may hold metrics as
    text). What the typed decoders refuse goes to `slow`."""
    values = list(map(_VALUE, msgs))
    try:
        oversized = max(map(len, values)) > MAX_EVENT_BYTES
    except (TypeError, ValueError):  # a null value (tombstone), or no records
        oversized = bool(values)
    strict = decode_canonical
    ok_msgs, rows, odd = [], [], []
    for m, v in zip(msgs, values, strict=True):
        try:
            if oversized and (v is None or len(v) > MAX_EVENT_BYTES):
                raise TypeError
            rows.append(strict(v))
            ok_msgs.append(m)
        except (DecodeError, TypeError) as exc:
            row = decode_variant(v, exc) if v is not None and len(v) <= MAX_EVENT_BYTES else None
            if row is None:
                slow.append(m)
            else:
                odd.append(len(rows))
                rows.append(row)
                ok_msgs.append(m)
    return ok_msgs, rows, odd


# Many numbers as text, checked in one regex pass: joined by newlines, which none may contain.
_NUMBERS_TEXT = re.compile(rf"(?:(?:{NUMBER_TEXT.pattern})\n)*(?:{NUMBER_TEXT.pattern})")


def _coerce(metrics: list[tuple], odd: list[int], bad: set[int]) -> None:
    """Metrics sent as JSON-number text (only the variant rows can hold any) must be in the
    contract's number grammar; a row with other text is bad. Valid text stays as it is: numpy
    parses it like float() when the columns are built, and a non-finite result (`"1e999"`)
    fails the range check there."""
    texts = [v for i in odd for v in metrics[i] if type(v) is str]
    joined = "\n".join(texts)
    if not texts or (joined.count("\n") == len(texts) - 1 and _NUMBERS_TEXT.fullmatch(joined)):
        return
    for i in odd:
        if any(type(v) is str and not NUMBER_TEXT.fullmatch(v) for v in metrics[i]):
            bad.add(i)
            metrics[i] = (0.0,) * len(metrics[i])


def _check_rows(msgs: list[KafkaMessage], cols: list[tuple]) -> set[int]:
    """Column-wise checks of what the typed decoders cannot express; returns the rows that fail
    (they leave the fast path)."""
    did, eid, _t, _pt, _dt, _fw, meta, _metrics = cols
    bad: set[int] = set()
    keys = list(map(_KEY, msgs))
    encoded = list(map(str.encode, did))
    if keys != encoded:
        bad.update(i for i, (k, d) in enumerate(zip(keys, encoded, strict=True)) if k != d)
    if not event_ids_ok(eid):
        bad.update(i for i, e in enumerate(eid) if not event_ids_ok((e,)))
    bad.update(device_ids_bad(did))
    bad.update(bad_metadata(did, meta))
    return bad


def decode_heartbeats(msgs: Sequence[KafkaMessage], reject: Reject) -> Heartbeats:
    """Columns for `build_features` from heartbeat records; rejections go to `reject`."""
    out = Heartbeats()
    slow: list[KafkaMessage] = []
    ok_msgs, rows, odd = _parse(msgs, slow)
    if rows:
        cols = list(zip(*map(FIELDS, rows), strict=True))
        bad = _check_rows(ok_msgs, cols)
        metrics = list(map(METRICS, cols[7]))
        if odd:
            _coerce(metrics, odd, bad)
        did, eid, t, pt, dt, fw, _meta, _m = cols
        values = np.empty((len(rows), 8), dtype=np.float64)
        values[:, :6] = np.array(metrics, dtype=np.float64)  # (parses number text, see _coerce)
        values[:, 6] = list(map(LATEST.__contains__, zip(dt, fw, strict=True)))
        get = TYPE_INDEX.get
        values[:, 7] = [get(x, -1) for x in dt]
        times = np.array([t, pt], dtype=np.int64).T
        ok = ((values[:, :6] >= _LO) & (values[:, :6] <= _HI)).all(axis=1) & np.isfinite(
            values
        ).all(axis=1)
        ok &= times[:, 0] <= times[:, 1] + ev.MAX_CLOCK_SKEW_MS
        if bad:
            ok[list(bad)] = False
        if ok.all():
            out.msgs, out.device_ids, out.event_ids = ok_msgs, list(did), list(eid)
        else:
            keep = np.flatnonzero(ok).tolist()
            slow.extend(ok_msgs[i] for i in np.flatnonzero(~ok).tolist())
            out.msgs = [ok_msgs[i] for i in keep]
            out.device_ids, out.event_ids = [did[i] for i in keep], [eid[i] for i in keep]
            values, times = values[keep], times[keep]
        out.cols, out.event_time_ms = values, times[:, 0].copy()
        out.partitions = list(map(_PARTITION, out.msgs))
    out.slow = slow  # the reference leaves the contract validator out: the bench sends none
    return out


FEATURE_NAMES: tuple[str, ...] = (
    "cpu_pct",
    "mem_pct",
    "temperature_c",
    "error_rate",
    "signal_quality",
    "log_uptime_h",
    "firmware_is_latest",
    *(f"type_{t}" for t in DEVICE_TYPES),
    "open_work_orders",
    "open_high_priority",
    "alarms_critical_1h",
    "alarms_warning_1h",
    "log_hours_since_last_wo",
)
N_FEATURES = len(FEATURE_NAMES)

# Raw columns the caller provides (one array each, same length).
HEARTBEAT_COLUMNS = (
    "cpu_pct",
    "mem_pct",
    "temperature_c",
    "error_rate",
    "signal_quality",
    "uptime_s",
    "firmware_is_latest",
    "device_type_idx",
)
CONTEXT_COLUMNS = (
    "open_work_orders",
    "open_high_priority",
    "alarms_critical_1h",
    "alarms_warning_1h",
    "hours_since_last_wo",
)
# Context of a device nobody has reported anything about: nothing open, nothing recent, and
# the last work order long ago (90 days, the cap used in training).
EMPTY_CONTEXT = {
    "open_work_orders": 0.0,
    "open_high_priority": 0.0,
    "alarms_critical_1h": 0.0,
    "alarms_warning_1h": 0.0,
    "hours_since_last_wo": 24.0 * 90,
}


def device_type_index(device_type: str) -> int:
    """Index into DEVICE_TYPES; unknown types get -1 (all one-hot columns zero)."""
    try:
        return DEVICE_TYPES.index(device_type)
    except ValueError:
        return -1


def build_features(cols: Mapping[str, np.ndarray]) -> np.ndarray:
    """(n, N_FEATURES) float32 matrix from raw heartbeat and context columns, vectorized."""
    n = len(cols["cpu_pct"])
    x = np.empty((n, N_FEATURES), dtype=np.float32)
    x[:, 0] = cols["cpu_pct"]
    x[:, 1] = cols["mem_pct"]
    x[:, 2] = cols["temperature_c"]
    x[:, 3] = cols["error_rate"]
    x[:, 4] = cols["signal_quality"]
    x[:, 5] = np.log1p(np.asarray(cols["uptime_s"], dtype=np.float64) / 3600.0)
    x[:, 6] = cols["firmware_is_latest"]
    t = np.asarray(cols["device_type_idx"])
    x[:, 7 : 7 + len(DEVICE_TYPES)] = t[:, None] == np.arange(len(DEVICE_TYPES))[None, :]
    base = 7 + len(DEVICE_TYPES)
    x[:, base + 0] = cols["open_work_orders"]
    x[:, base + 1] = cols["open_high_priority"]
    x[:, base + 2] = cols["alarms_critical_1h"]
    x[:, base + 3] = cols["alarms_warning_1h"]
    x[:, base + 4] = np.log1p(np.asarray(cols["hours_since_last_wo"], dtype=np.float64))
    return x
