"""Records -> columns. Heartbeats take a fast path (orjson + vectorized range checks) when they
are in the canonical wire form; anything the fast path does not accept goes through the full
contract validator, which accepts tolerated variants and names the reason for a rejection.
Work orders, alarms and precompute requests are low-rate and always take the validator."""

from __future__ import annotations

import re
from collections.abc import Callable, Container, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import orjson
from pydantic import ValidationError

from precast.kafka import KafkaMessage
from schemas import events as ev
from schemas.deadletters import Reason as DLReason
from schemas.fleet import LATEST_FIRMWARE
from schemas.predictions import PrecomputeRequest
from workers.features import device_type_index

# (msg, reason, detail) for the dead-letter topic
Reject = Callable[[KafkaMessage, str, str], None]

_DEVICE_ID = re.compile(ev.DEVICE_ID_PATTERN)
_NUM = frozenset({int, float})
_TRACEPARENT = re.compile(rb"^[0-9a-f]{2}-([0-9a-f]{32})-[0-9a-f]{16}-[0-9a-f]{2}$")
# Column order of Heartbeats.cols (== workers.features.HEARTBEAT_COLUMNS)
_LO = np.array([0, 0, -80, 0, 0, 0], dtype=np.float64)
_HI = np.array([100, 100, 250, 1, 1, np.inf], dtype=np.float64)
_MAX_SKEW_MS = getattr(ev, "MAX_CLOCK_SKEW_MS", None)
_MAX_BYTES = getattr(ev, "MAX_EVENT_BYTES", 1 << 20)


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
        if k == "traceparent" and v:
            m = _TRACEPARENT.match(v)
            return m.group(1).decode() if m else None
    return None


# -- the slow path: the full contract --------------------------------------------------------------
def validate(role: str, msg: KafkaMessage) -> tuple[dict[str, Any] | None, str, str]:
    """(event as a dict, "", "") or (None, dead-letter reason, detail)."""
    try:
        from schemas.validation import validate_event  # the contract validator (issue 3)
    except ImportError:
        return _validate_local(role, msg)
    result = validate_event(role, msg.key(), msg.value(), msg.headers())
    event = getattr(result, "event", None)
    if event is not None:
        return event.model_dump(), "", ""
    return None, str(result.reason), str(getattr(result, "detail", ""))


_MODELS = {"heartbeats": ev.Heartbeat, "work_orders": ev.WorkOrderEvent, "alarms": ev.Alarm}


def _validate_local(role: str, msg: KafkaMessage) -> tuple[dict[str, Any] | None, str, str]:
    key, value = msg.key(), msg.value()
    if value is None:
        return None, DLReason.TOMBSTONE, "null value on an event topic"
    if not key:
        return None, DLReason.MISSING_KEY, "record has no key"
    if len(value) > _MAX_BYTES:
        return None, DLReason.OVERSIZED, f"{len(value)} bytes"
    try:
        data = orjson.loads(value)
    except orjson.JSONDecodeError as exc:
        return None, DLReason.NOT_JSON, str(exc)
    if not isinstance(data, dict):
        return None, DLReason.INVALID, "not a JSON object"
    if data.get("schema_version", ev.SCHEMA_VERSION) not in ev.SUPPORTED_SCHEMA_VERSIONS:
        return None, DLReason.UNKNOWN_SCHEMA_VERSION, f"schema_version {data.get('schema_version')!r}"
    try:
        event = _MODELS[role].model_validate(data)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first["loc"])
        reason = DLReason.NON_FINITE if "finite" in first["msg"] else DLReason.INVALID
        return None, reason, f"{where}: {first['msg']}"
    if key != event.device_id.encode():
        return None, DLReason.KEY_MISMATCH, f"key {key[:64]!r} != device_id {event.device_id!r}"
    return event.model_dump(), "", ""


# -- heartbeats: the fast path ------------------------------------------------------------------------
def decode_heartbeats(msgs: Sequence[KafkaMessage], reject: Reject, known: Container[str] = ()) -> Heartbeats:
    """Columns for `build_features` from heartbeat records. `known` holds device IDs already
    validated (their key pattern need not be checked again)."""
    out = Heartbeats()
    rows: list[tuple] = []
    times: list[tuple[int, int]] = []
    slow: list[KafkaMessage] = []
    loads = orjson.loads
    for m in msgs:
        try:
            e = loads(m.value())
            mt = e["metrics"]
            did, t, pt, eid, dt, fw = (e["device_id"], e["event_time_ms"], e["produced_at_ms"], e["event_id"],
                                       e["device_type"], e["firmware"])
            row = (mt["cpu_pct"], mt["mem_pct"], mt["temperature_c"], mt["error_rate"], mt["signal_quality"],
                   mt["uptime_s"])
            canonical = (e["schema_version"] == 1 and e["kind"] == "heartbeat" and len(mt) == 6
                         and (len(e) == 10 and not e["meta"] or len(e) == 9 and "meta" not in e)
                         and {type(x) for x in row} <= _NUM and type(t) is int and type(pt) is int
                         and type(eid) is str and 0 < len(eid) <= 64 and eid.isascii() and eid.isalnum()
                         and type(dt) is str and 0 < len(dt) <= 64 and type(fw) is str and 0 < len(fw) <= 64
                         and (did in known or type(did) is str and _DEVICE_ID.match(did) is not None)
                         and m.key() == did.encode())
        except Exception:  # noqa: BLE001 - anything odd is for the validator to judge
            canonical = False
        if not canonical:
            slow.append(m)
            continue
        out.msgs.append(m)
        out.device_ids.append(did)
        out.event_ids.append(eid)
        times.append((t, pt))
        rows.append((*row, 1.0 if LATEST_FIRMWARE.get(dt) == fw else 0.0, device_type_index(dt)))
    if rows:
        _check_ranges(out, rows, times, slow)
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


def _check_ranges(out: Heartbeats, rows: list[tuple], times: list[tuple[int, int]],
                  slow: list[KafkaMessage]) -> None:
    """Vectorized contract ranges; rows outside them leave the fast path for the validator."""
    cols = np.array(rows, dtype=np.float64)
    t = np.array(times, dtype=np.int64)
    ok = ((cols[:, :6] >= _LO) & (cols[:, :6] <= _HI)).all(axis=1) & np.isfinite(cols).all(axis=1)
    ok &= (t >= ev.MIN_TIME_MS).all(axis=1) & (t <= ev.MAX_TIME_MS).all(axis=1)
    if _MAX_SKEW_MS is not None:
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
        key, value = m.key(), m.value()
        if value is None:
            reject(m, DLReason.TOMBSTONE, "null precompute request")
            continue
        try:
            r = PrecomputeRequest.model_validate_json(value)
        except ValidationError as exc:
            first = exc.errors()[0]
            reason = DLReason.NOT_JSON if first["type"] == "json_invalid" else DLReason.INVALID
            reject(m, reason, f"{'.'.join(str(p) for p in first['loc'])}: {first['msg']}")
            continue
        if not key:
            reject(m, DLReason.MISSING_KEY, "record has no key")
        elif key != r.device_id.encode():
            reject(m, DLReason.KEY_MISMATCH, f"key {key[:64]!r} != device_id {r.device_id!r}")
        else:
            out.append((m, r))
    return out
