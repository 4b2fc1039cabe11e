"""Records -> columns. Heartbeats take a fast path (orjson + column-wise checks) when their
fields have the contract's types or its tolerated variants (any metadata layout, unknown fields
ignored, numbers sent as JSON-number text); anything else goes through the full contract
validator, which names the reason for a rejection (and judges anything odd the same way).
Work orders, alarms and precompute requests are low-rate and always take the validator."""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Container, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import orjson

from precast.kafka import KafkaMessage
from schemas import events as ev
from schemas.fleet import DEVICE_TYPES, LATEST_FIRMWARE
from schemas.normalize import _INT_TEXT, _NUMBER_TEXT  # the contract's own number grammar
from schemas.predictions import PrecomputeRequest
from schemas.validation import validate_event
from workers.features import device_type_index

# (msg, reason, detail) for the dead-letter topic
Reject = Callable[[KafkaMessage, str, str], None]

_DEVICE_ID = re.compile(ev.DEVICE_ID_PATTERN)
_NUM = frozenset({int, float})
_HEX = b"0123456789abcdef"
# Column order of Heartbeats.cols (== workers.features.HEARTBEAT_COLUMNS)
_LO = np.array([0, 0, -80, 0, 0, 0], dtype=np.float64)
_HI = np.array([100, 100, 250, 1, 1, np.inf], dtype=np.float64)
_MAX_SKEW_MS = ev.MAX_CLOCK_SKEW_MS


@dataclass
class Heartbeats:
    """Accepted heartbeats of one batch, in consumption order."""

    msgs: list[KafkaMessage] = field(default_factory=list)
    device_ids: list[str] = field(default_factory=list)
    event_ids: list[str] = field(default_factory=list)
    event_time_ms: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.int64))
    cols: np.ndarray = field(default_factory=lambda: np.zeros((0, 8)))  # HEARTBEAT_COLUMNS

    def __len__(self) -> int:
        return len(self.device_ids)


def trace_id(msg: KafkaMessage) -> str | None:
    """The W3C trace id from the record's `traceparent` header, if it has a valid one."""
    for k, v in msg.headers() or ():
        if k == "traceparent":
            # version(2) - trace id(32 hex) - parent id(16 hex) - flags(2): checked by slicing, not
            # a regex, since this runs for every input named in a prediction's lineage.
            if v and len(v) == 55 and v[2] == v[35] == v[52] == 45 and not v[3:35].translate(None, _HEX) \
                    and v[3:35] != b"0" * 32:
                return v[3:35].decode()
            return None
    return None


# -- the slow path: the full contract --------------------------------------------------------------
def validate(role: str, msg: KafkaMessage) -> tuple[dict[str, Any] | None, str, str]:
    """(event as a dict, "", "") or (None, dead-letter reason, detail), by the one contract
    validator every consumer uses (`schemas.validation`)."""
    result = validate_event(role, msg.key(), msg.value(), msg.headers())
    if result.ok:
        return result.event.model_dump(), "", ""
    return None, str(result.reason), result.detail


# -- heartbeats: the fast path ------------------------------------------------------------------------
_TYPE_INDEX = {t: i for i, t in enumerate(DEVICE_TYPES)}
_LATEST = frozenset(LATEST_FIRMWARE.items())
_STR = {str}
_INT = {int}


def _extract(msgs: Sequence[KafkaMessage], slow: list[KafkaMessage]) -> list[tuple]:
    """One tuple per record that parses and has every field; the rest go to `slow`."""
    loads = orjson.loads
    out = []
    append = out.append
    for m in msgs:
        try:
            e = loads(m.value())
            mt = e["metrics"]
            append((m, e["schema_version"], e["kind"], e["device_id"], e["event_id"], e["event_time_ms"],
                    e["produced_at_ms"], e["device_type"], e["firmware"], e.get("meta"), mt["cpu_pct"],
                    mt["mem_pct"], mt["temperature_c"], mt["error_rate"], mt["signal_quality"], mt["uptime_s"]))
        except Exception:  # noqa: BLE001 - anything odd is for the validator to judge
            slow.append(m)
    return out


# EventId is [A-Za-z0-9._:-]{1,64}: drop the punctuation, the rest must be ASCII alphanumerics.
_ID_PUNCT = str.maketrans("", "", "._:-")
_VERSION_KEY = re.compile(r"v([1-9][0-9]{0,3})")
_ABSENT = object()


def _info_ok(info: dict) -> bool:
    for k in ("site", "hw_model", "serial"):
        v = info.get(k)
        if v is not None and not (type(v) is str and 0 < len(v) <= 64):
            return False
    r = info.get("hw_rev")
    if type(r) is str and _INT_TEXT.fullmatch(r):  # an integer sent as text: tolerated
        r = int(r)
    return r is None or type(r) is int and 0 <= r <= 10_000


def _number(v: Any) -> Any:
    if type(v) is str and _NUMBER_TEXT.fullmatch(v):
        f = float(v)
        return f if math.isfinite(f) else v
    return v


def _coerce_columns(columns: list[tuple]) -> list[tuple]:
    """Metric columns with JSON-number text turned into floats (what is not, stays as it was)."""
    out = list(columns)
    for i in range(10, len(out)):
        if str in set(map(type, out[i])):
            col = list(out[i])
            for j in [j for j, v in enumerate(col) if type(v) is str]:
                col[j] = _number(col[j])
            out[i] = tuple(col)
    return out


def _coerced(r: tuple) -> tuple | None:
    """The row with metrics sent as JSON-number text turned into floats (the contract tolerates
    them), or None when there are none or one is not a finite number in that grammar."""
    head, metrics = r[:10], r[10:]
    if str not in set(map(type, metrics)):
        return None
    out = []
    for v in metrics:
        if type(v) is str:
            if not _NUMBER_TEXT.fullmatch(v):
                return None
            v = float(v)
            if not math.isfinite(v):
                return None
        out.append(v)
    return (*head, *out)


def _meta_ok(meta: Any) -> bool:
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
    versions = [(int(m.group(1)), k) for k, v in info.items() if type(v) is dict and (m := _VERSION_KEY.fullmatch(k))]
    return _info_ok(info[max(versions)[1]] if versions else info)


# device -> the metadata JSON last found valid: a device's metadata rarely changes, so the
# per-record check becomes one small dumps and a compare. Bounded: cleared when it gets big.
_META_GOOD: dict[str, bytes] = {}
_META_CACHE_MAX = 1_000_000


def _meta_ok_cached(device: Any, meta: Any) -> bool:
    if meta is None or meta == {}:
        return True
    try:
        raw = orjson.dumps(meta)
    except TypeError:
        return False
    if _META_GOOD.get(device) == raw:
        return True
    if not _meta_ok(meta):
        return False
    if len(_META_GOOD) >= _META_CACHE_MAX:
        _META_GOOD.clear()
    if type(device) is str:
        _META_GOOD[device] = raw
    return True


def _short_texts(col: tuple) -> bool:
    return set(map(type, col)) <= _STR and min(map(len, col)) > 0 and max(map(len, col)) <= 64


def _all_canonical(cols: list[tuple], known: Container[str]) -> bool:
    """Column-wise checks (C-speed set/map/join) that every record is in the canonical form."""
    ms, sv, kind, did, eid, t, pt, dt, fw, meta, *metrics = cols
    if not (set(sv) == {1} and set(kind) == {"heartbeat"} and all(map(_meta_ok_cached, did, meta))
            and set(map(type, t)) <= _INT and set(map(type, pt)) <= _INT):
        return False
    if not all(set(map(type, c)) <= _NUM for c in metrics):
        return False
    if not (_short_texts(eid) and _short_texts(dt) and _short_texts(fw) and set(map(type, did)) <= _STR):
        return False
    ids = "".join(eid).translate(_ID_PUNCT)
    if not (ids.isascii() and ids.isalnum()):
        return False
    if [m.key() for m in ms] != list(map(str.encode, did)):
        return False
    return all(_DEVICE_ID.match(d) for d in did if d not in known)


def _row_canonical(r: tuple, known: Container[str]) -> bool:
    _m, sv, kind, did, eid, t, pt, dt, fw, meta, *metrics = r
    try:
        return (sv == 1 and kind == "heartbeat" and _meta_ok_cached(did, meta)
                and set(map(type, metrics)) <= _NUM and type(t) is int and type(pt) is int
                and type(eid) is str and 0 < len(eid) <= 64 and eid.isascii() and eid.translate(_ID_PUNCT).isalnum()
                and type(dt) is str and 0 < len(dt) <= 64 and type(fw) is str and 0 < len(fw) <= 64
                and type(did) is str and (did in known or _DEVICE_ID.match(did) is not None)
                and _m.key() == did.encode())
    except TypeError:
        return False


def decode_heartbeats(msgs: Sequence[KafkaMessage], reject: Reject, known: Container[str] = ()) -> Heartbeats:
    """Columns for `build_features` from heartbeat records. `known` holds device IDs already
    validated (their key pattern need not be checked again)."""
    out = Heartbeats()
    slow: list[KafkaMessage] = []
    parsed = _extract(msgs, slow)
    columns = list(zip(*parsed, strict=True))
    if parsed and not _all_canonical(columns, known):
        # Numbers sent as text, column by column; only if that is not enough, record by record.
        columns = _coerce_columns(columns)
        if not _all_canonical(columns, known):
            good = []
            for r in parsed:
                if _row_canonical(r, known):
                    good.append(r)
                elif (c := _coerced(r)) is not None and _row_canonical(c, known):
                    good.append(c)
                else:
                    slow.append(r[0])
            columns = list(zip(*good, strict=True))
    if columns:
        ms, _sv, _k, did, eid, t, pt, dt, fw, _meta, *metrics = columns
        parsed = ms
        out.msgs, out.device_ids, out.event_ids = list(ms), list(did), list(eid)
        cols = np.empty((len(parsed), 8), dtype=np.float64)
        cols[:, :6] = np.array(metrics, dtype=np.float64).T
        cols[:, 6] = [p in _LATEST for p in zip(dt, fw, strict=True)]
        cols[:, 7] = [_TYPE_INDEX.get(x, -1) for x in dt]
        _check_ranges(out, cols, np.array([t, pt], dtype=np.int64).T, slow)
    for m in slow:
        e, reason, detail = validate("heartbeats", m)
        if e is None:
            reject(m, reason, detail)
            continue
        mt = e["metrics"]
        out.msgs.append(m)
        out.device_ids.append(e["device_id"])
        out.event_ids.append(e["event_id"])
        dt = e["device_type"]
        out.cols = np.vstack([out.cols, [[mt["cpu_pct"], mt["mem_pct"], mt["temperature_c"], mt["error_rate"],
                                          mt["signal_quality"], mt["uptime_s"],
                                          1.0 if LATEST_FIRMWARE.get(dt) == e["firmware"] else 0.0,
                                          device_type_index(dt)]]])
        out.event_time_ms = np.append(out.event_time_ms, np.int64(e["event_time_ms"]))
    return out


def _check_ranges(out: Heartbeats, cols: np.ndarray, t: np.ndarray, slow: list[KafkaMessage]) -> None:
    """Vectorized contract ranges; rows outside them leave the fast path for the validator."""
    ok = ((cols[:, :6] >= _LO) & (cols[:, :6] <= _HI)).all(axis=1) & np.isfinite(cols).all(axis=1)
    ok &= (t >= ev.MIN_TIME_MS).all(axis=1) & (t <= ev.MAX_TIME_MS).all(axis=1)
    ok &= t[:, 0] <= t[:, 1] + _MAX_SKEW_MS
    if not ok.all():
        bad = np.flatnonzero(~ok).tolist()
        slow.extend(out.msgs[i] for i in bad)
        keep = np.flatnonzero(ok)
        out.msgs = [out.msgs[i] for i in keep]
        out.device_ids = [out.device_ids[i] for i in keep]
        out.event_ids = [out.event_ids[i] for i in keep]
        cols, t = cols[keep], t[keep]
    out.cols, out.event_time_ms = cols, t[:, 0].copy()


# -- low-rate topics ----------------------------------------------------------------------------------
def decode_events(role: str, msgs: Sequence[KafkaMessage], reject: Reject) -> list[tuple[KafkaMessage, dict]]:
    out = []
    for m in msgs:
        e, reason, detail = validate(role, m)
        if e is None:
            reject(m, reason, detail)
        else:
            out.append((m, e))
    return out


def decode_requests(msgs: Sequence[KafkaMessage], reject: Reject) -> list[tuple[KafkaMessage, PrecomputeRequest]]:
    out = []
    for m in msgs:
        result = validate_event("precompute_requests", m.key(), m.value(), m.headers())
        if result.ok:
            out.append((m, result.event))
        else:
            reject(m, str(result.reason), result.detail)
    return out
