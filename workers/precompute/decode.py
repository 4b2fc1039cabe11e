"""Records -> columns. Heartbeats take a typed fast path (`workers.precompute.wire`: msgspec structs for
the heartbeat contract, column-wise checks at C speed) for every wire style the contract
tolerates; anything the fast path does not accept goes through the full contract validator,
which names the reason for a rejection (and judges anything odd the same way). Work orders,
alarms and precompute requests are low-rate and always take the validator."""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from operator import methodcaller
from typing import Any

import numpy as np
from pydantic import ValidationError

from precast.kafka import KafkaMessage
from schemas import events as ev
from schemas.deadletters import Reason
from schemas.events import MAX_EVENT_BYTES
from schemas.fleet import LATEST_FIRMWARE
from schemas.hints import ReadHint
from schemas.normalize import NUMBER_TEXT  # the contract's own number grammar
from schemas.predictions import PrecomputeRequest
from schemas.validation import Rejected, validate_event
from workers.features import device_type_index
from workers.precompute import wire

# (msg, reason, detail) for the dead-letter topic
Reject = Callable[[KafkaMessage, Reason, str], None]

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

    def __len__(self) -> int:
        return len(self.device_ids)


trace_id = wire.trace_id


# -- the slow path: the full contract --------------------------------------------------------------
def validate(role: str, msg: KafkaMessage) -> dict[str, Any] | Rejected:
    """The event as a dict, or why it is rejected, by the one contract validator every consumer
    uses (`schemas.validation`)."""
    result = validate_event(role, msg.key(), msg.value(), msg.headers())
    if result.ok:
        event: dict[str, Any] = result.event.model_dump()
        return event
    return result


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
    strict = wire.decode_canonical
    ok_msgs, rows, odd = [], [], []
    for m, v in zip(msgs, values, strict=True):
        try:
            if oversized and (v is None or len(v) > MAX_EVENT_BYTES):
                raise TypeError
            rows.append(strict(v))
            ok_msgs.append(m)
        except (wire.DecodeError, TypeError) as exc:
            row = (
                wire.decode_variant(v, exc) if v is not None and len(v) <= MAX_EVENT_BYTES else None
            )
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
    if not wire.event_ids_ok(eid):
        bad.update(i for i, e in enumerate(eid) if not wire.event_ids_ok((e,)))
    bad.update(wire.device_ids_bad(did))
    bad.update(wire.bad_metadata(did, meta))
    return bad


def decode_heartbeats(msgs: Sequence[KafkaMessage], reject: Reject) -> Heartbeats:
    """Columns for `build_features` from heartbeat records; rejections go to `reject`."""
    out = Heartbeats()
    slow: list[KafkaMessage] = []
    ok_msgs, rows, odd = _parse(msgs, slow)
    if rows:
        cols = list(zip(*map(wire.FIELDS, rows), strict=True))
        bad = _check_rows(ok_msgs, cols)
        metrics = list(map(wire.METRICS, cols[7]))
        if odd:
            _coerce(metrics, odd, bad)
        did, eid, t, pt, dt, fw, _meta, _m = cols
        values = np.empty((len(rows), 8), dtype=np.float64)
        values[:, :6] = np.array(metrics, dtype=np.float64)  # (parses number text, see _coerce)
        values[:, 6] = list(map(wire.LATEST.__contains__, zip(dt, fw, strict=True)))
        get = wire.TYPE_INDEX.get
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
    if slow:
        _slow_heartbeats(out, slow, reject)
    return out


def _slow_heartbeats(out: Heartbeats, slow: list[KafkaMessage], reject: Reject) -> None:
    rows, times = [], []
    for m in slow:
        e = validate("heartbeats", m)
        if isinstance(e, Rejected):
            reject(m, e.reason, e.detail)
            continue
        mt, dt = e["metrics"], e["device_type"]
        out.msgs.append(m)
        out.device_ids.append(e["device_id"])
        out.event_ids.append(e["event_id"])
        out.partitions.append(m.partition())
        rows.append(
            [
                mt["cpu_pct"],
                mt["mem_pct"],
                mt["temperature_c"],
                mt["error_rate"],
                mt["signal_quality"],
                mt["uptime_s"],
                1.0 if LATEST_FIRMWARE.get(dt) == e["firmware"] else 0.0,
                device_type_index(dt),
            ]
        )
        times.append(e["event_time_ms"])
    if rows:
        out.cols = np.vstack([out.cols, np.array(rows, dtype=np.float64)])
        out.event_time_ms = np.concatenate([out.event_time_ms, np.array(times, dtype=np.int64)])


# -- low-rate topics ----------------------------------------------------------------------------------
def decode_events(
    role: str, msgs: Sequence[KafkaMessage], reject: Reject
) -> list[tuple[KafkaMessage, dict]]:
    out = []
    for m in msgs:
        e = validate(role, m)
        if isinstance(e, Rejected):
            reject(m, e.reason, e.detail)
        else:
            out.append((m, e))
    return out


def decode_requests(
    msgs: Sequence[KafkaMessage], reject: Reject
) -> list[tuple[KafkaMessage, PrecomputeRequest]]:
    out = []
    for m in msgs:
        result = validate_event("precompute_requests", m.key(), m.value(), m.headers())
        if result.ok:
            out.append((m, result.event))
        else:
            reject(m, result.reason, result.detail)
    return out


def decode_hints(
    msgs: Sequence[KafkaMessage], reject: Reject
) -> list[tuple[KafkaMessage, str, int]]:
    """(record, device, hot until ms) of each valid read hint (schemas.hints.ReadHint)."""
    out = []
    for m in msgs:
        key, value = m.key(), m.value()
        if not key:
            reject(m, Reason.MISSING_KEY, "read hint without a key")
            continue
        try:
            h = ReadHint.model_validate_json(value or b"")
        except ValidationError as exc:
            first = exc.errors()[0]
            reason = Reason.NOT_JSON if first["type"] == "json_invalid" else Reason.INVALID
            where = ".".join(str(p) for p in first["loc"]) or "record"
            reject(m, reason, f"read hint: {where}: {first['msg']}")
            continue
        if key.decode(errors="replace") != h.device_id:
            reject(m, Reason.KEY_MISMATCH, "read hint key differs from its device_id")
            continue
        out.append((m, h.device_id, h.hot_until_ms))
    return out
