"""A fleet spec's stream contract applied to one parsed record: declared paths (ordered
alternatives: the first one present wins) -> the normalized event, a flat dict

    {"device_id", "event_id", "event_time_ms", "produced_at_ms", <field>: value, ...}

with times in integer milliseconds, metrics as floats (None when nulled as out of range),
categories as sent (a value outside the vocabulary is kept and reported as unknown), booleans,
attributes. Tolerated, and recorded in the `Variant`: alternative paths, numbers sent as JSON
number text (on numeric leaves only), undeclared fields (unless the stream dead-letters them).
Pure and deterministic; raises `Rejection` with the dead-letter reason and the wire path.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from typing import Any

from schemas.deadletters import Reason
from schemas.events import (
    DEVICE_ID_PATTERN,
    EVENT_ID_PATTERN,
    MAX_TIME_MS,
    MIN_TIME_MS,
    is_device_id,
)
from schemas.normalize import INT_TEXT, NUMBER_TEXT, Rejection, Variant
from schemas.spec.fields import (
    Attribute,
    Boolean,
    Categorical,
    FieldSpec,
    Metric,
    Stream,
    WirePath,
    dotted,
)

_EVENT_ID = re.compile(EVENT_ID_PATTERN)
_NON_FINITE_TEXT = frozenset(
    {"nan", "-nan", "infinity", "-infinity", "+infinity", "inf", "-inf", "+inf"}
)
_ABSENT = object()


@dataclass
class _Notes:
    coerced: list[str] = field(default_factory=list)
    extra: list[str] = field(default_factory=list)
    unknown: list[str] = field(default_factory=list)
    alternative: int = 0  # highest alternative index used (0: canonical paths only)


def _lookup(data: dict[str, Any], path: WirePath) -> Any:
    node: Any = data
    for i, key in enumerate(path):
        if node is None:
            return _ABSENT
        if not isinstance(node, dict):
            where = dotted(path[:i])
            raise Rejection(Reason.INVALID, f"{where}: must be an object, got {json_type(node)}")
        node = node.get(key, _ABSENT)
        if node is _ABSENT:
            return _ABSENT
    return node


def _find(data: dict[str, Any], paths: tuple[WirePath, ...], notes: _Notes) -> tuple[Any, str]:
    """(value, wire path) of the first declared path present; (_ABSENT, first path) if none.
    A JSON null counts as absent."""
    for i, p in enumerate(paths):
        v = _lookup(data, p)
        if v is not _ABSENT and v is not None:
            if i > notes.alternative:
                notes.alternative = i
            return v, dotted(p)
    return _ABSENT, dotted(paths[0])


def _number(v: Any, where: str, integer: bool, notes: _Notes) -> float | int:
    if isinstance(v, str):
        if v.lower() in _NON_FINITE_TEXT:
            raise Rejection(Reason.NON_FINITE, f"{where}: {v[:20]!r} is not a finite number")
        if integer and INT_TEXT.fullmatch(v):
            notes.coerced.append(where)
            return int(v)
        if not integer and NUMBER_TEXT.fullmatch(v):
            x = float(v)
            if not math.isfinite(x):
                raise Rejection(Reason.NON_FINITE, f"{where}: {v[:20]!r} overflows to infinity")
            notes.coerced.append(where)
            return x
        raise Rejection(Reason.INVALID, f"{where}: expected a number, got a string")
    if isinstance(v, bool) or not isinstance(v, int | float):
        raise Rejection(Reason.INVALID, f"{where}: expected a number, got {json_type(v)}")
    if isinstance(v, float):
        if not math.isfinite(v):
            raise Rejection(Reason.NON_FINITE, f"{where}: not a finite number")
        if integer:
            raise Rejection(Reason.INVALID, f"{where}: expected an integer, got a fraction")
    return v


def _text(v: Any, where: str, max_length: int, is_id: bool = False) -> str:
    if not isinstance(v, str):
        raise Rejection(Reason.INVALID, f"{where}: expected a string, got {json_type(v)}")
    if not 1 <= len(v) <= max_length:
        raise Rejection(Reason.INVALID, f"{where}: length {len(v)} outside 1..{max_length}")
    if is_id and not _EVENT_ID.fullmatch(v):
        raise Rejection(Reason.INVALID, f"{where}: not an ID ([A-Za-z0-9._:-], up to 64)")
    return v


def _range(x: float, lo: float | None, hi: float | None) -> str | None:
    if lo is not None and x < lo:
        return f"must be >= {lo:g}"
    if hi is not None and x > hi:
        return f"must be <= {hi:g}"
    return None


def read_field(name: str, f: FieldSpec, v: Any, where: str, notes: _Notes) -> Any:
    """The normalized value of one present field."""
    if isinstance(f, Metric):
        x = float(_number(v, where, False, notes))
        bad = _range(x, f.min, f.max)
        if bad is None:
            return x
        if f.out_of_range == "reject":
            raise Rejection(Reason.INVALID, f"{where}: {x:g} {bad}")
        if f.out_of_range == "null":
            return None
        lo = f.min if f.min is not None else x
        hi = f.max if f.max is not None else x
        return min(max(x, lo), hi)
    if isinstance(f, Categorical):
        s = _text(v, where, f.max_length)
        if s not in f.values:
            if f.unknown == "reject":
                raise Rejection(
                    Reason.INVALID, f"{where}: {s[:40]!r} is not one of {list(f.values)}"
                )
            notes.unknown.append(name)
        return s
    if isinstance(f, Boolean):
        if not isinstance(v, bool):
            raise Rejection(Reason.INVALID, f"{where}: expected true or false, got {json_type(v)}")
        return v
    assert isinstance(f, Attribute)
    if f.type == "string":
        return _text(v, where, f.max_length, f.format == "id")
    x = _number(v, where, f.type == "integer", notes)
    bad = _range(float(x), f.min, f.max)
    if bad is not None:
        raise Rejection(Reason.INVALID, f"{where}: {x:g} {bad}")
    return x


def _time(
    data: dict[str, Any], paths: tuple[WirePath, ...], unit: str, notes: _Notes, what: str
) -> int | None:
    v, where = _find(data, paths, notes)
    if v is _ABSENT:
        return None
    x = _number(v, where, unit == "ms", notes)
    ms = int(x) if unit == "ms" else round(x * 1000)
    if not MIN_TIME_MS <= ms <= MAX_TIME_MS:
        raise Rejection(Reason.INVALID, f"{where}: {what} {ms} ms is outside 2015..2100")
    return ms


class StreamReader:
    """One stream's contract (`Stream` of the spec) as a reader of parsed records."""

    def __init__(self, name: str, stream: Stream, max_skew_ms: int) -> None:
        self.name, self.stream, self.max_skew_ms = name, stream, max_skew_ms
        self._trie = _trie(stream)

    def read(self, data: dict[str, Any]) -> tuple[dict[str, Any], Variant]:
        notes = _Notes()
        s = self.stream
        self._version_and_kind(data, notes)
        out = self._envelope(data, notes)
        for name, f in s.fields.items():
            v, where = _find(data, f.path, notes)
            if v is not _ABSENT:
                out[name] = read_field(name, f, v, where, notes)
            elif f.required:
                raise Rejection(Reason.INVALID, f"{where}: field required")
            else:
                out[name] = f.default if isinstance(f, Boolean) else None
        _undeclared(data, self._trie, "", notes)
        if notes.extra and s.undeclared == "dead_letter":
            raise Rejection(Reason.INVALID, f"{notes.extra[0]}: not declared by the fleet spec")
        return out, Variant(
            "canonical" if notes.alternative == 0 else f"path:{notes.alternative + 1}",
            None,
            tuple(sorted(notes.coerced)),
            tuple(sorted(notes.extra)),
            None,
            tuple(notes.unknown),
        )

    def event_time(self, data: dict[str, Any]) -> int | None:
        """The event time in ms of a parsed record as `read` finds it (None when absent);
        raises `Rejection` where `read` would for the time itself. A cheap look at a record
        that may never need a full read (`precast dataset build` picks heartbeats with it)."""
        env = self.stream.envelope
        return _time(data, env.event_time.path, env.event_time.unit, _Notes(), "event time")

    def check_fields(
        self, data: dict[str, Any], names: tuple[str, ...], keys: tuple[str, ...]
    ) -> dict[str, Any]:
        """Read only these fields (with their alternatives) of `data`, which holds only the
        top-level `keys` of a record; raises `Rejection` where `read` would. The worker's fast
        path checks metadata it keeps raw with this."""
        notes = _Notes()
        out: dict[str, Any] = {}
        for name in names:
            f = self.stream.fields[name]
            v, where = _find(data, f.path, notes)
            if v is not _ABSENT:
                out[name] = read_field(name, f, v, where, notes)
            elif f.required:
                raise Rejection(Reason.INVALID, f"{where}: field required")
        if self.stream.undeclared == "dead_letter":
            _undeclared({k: data[k] for k in keys if k in data}, self._trie, "", notes)
            if notes.extra:
                raise Rejection(Reason.INVALID, f"{notes.extra[0]}: not declared by the fleet spec")
        return out

    def _version_and_kind(self, data: dict[str, Any], notes: _Notes) -> None:
        env = self.stream.envelope
        if env.schema_version is not None:
            v, where = _find(data, env.schema_version.path, notes)
            if v is _ABSENT:
                if env.schema_version.required:
                    raise Rejection(Reason.INVALID, f"{where}: field required")
            else:
                version = _number(v, where, True, notes)
                if version not in env.schema_version.supported:
                    raise Rejection(
                        Reason.UNKNOWN_SCHEMA_VERSION,
                        f"schema_version {version} (supported: {sorted(env.schema_version.supported)})",
                    )
        if env.kind is not None:
            v, where = _find(data, env.kind.path, notes)
            if v is not _ABSENT and v != env.kind.value:
                raise Rejection(
                    Reason.INVALID, f"{where}: expected {env.kind.value!r}, got {str(v)[:40]!r}"
                )

    def _envelope(self, data: dict[str, Any], notes: _Notes) -> dict[str, Any]:
        env = self.stream.envelope
        device, where = _find(data, env.device_id, notes)
        if device is _ABSENT:
            raise Rejection(Reason.INVALID, f"{where}: field required")
        if not is_device_id(device):
            raise Rejection(Reason.INVALID, f"{where}: not a device ID ({DEVICE_ID_PATTERN})")
        event_id = None
        if env.event_id is not None:
            v, where = _find(data, env.event_id, notes)
            if v is _ABSENT:
                raise Rejection(Reason.INVALID, f"{where}: field required")
            event_id = _text(v, where, 64, is_id=True)
        t = _time(data, env.event_time.path, env.event_time.unit, notes, "event time")
        if t is None:
            raise Rejection(Reason.INVALID, f"{dotted(env.event_time.path[0])}: field required")
        produced = None
        if env.produced_at is not None:
            produced = _time(data, env.produced_at.path, env.produced_at.unit, notes, "produced at")
            if produced is None:
                raise Rejection(
                    Reason.INVALID, f"{dotted(env.produced_at.path[0])}: field required"
                )
            if t > produced + self.max_skew_ms:
                raise Rejection(
                    Reason.INVALID,
                    "event_time_ms is later than produced_at_ms by more than the allowed clock skew",
                )
        return {
            "device_id": device,
            "event_id": event_id,
            "event_time_ms": t,
            "produced_at_ms": produced,
        }


# A trie of declared paths: key -> subtrie, or None where a declared value sits.
Trie = dict[str, Any]


def _trie(stream: Stream) -> Trie:
    root: Trie = {}
    for path in stream.declared_paths():
        node = root
        for key in path[:-1]:
            nxt = node.setdefault(key, {})
            if nxt is None:  # a value declared above (checks reject this spec)
                break
            node = nxt
        else:
            node[path[-1]] = None
    return root


def _undeclared(data: Any, trie: Trie, prefix: str, notes: _Notes) -> None:
    if not isinstance(data, dict):
        return
    for key, value in data.items():
        where = f"{prefix}{key}"
        if key not in trie:
            notes.extra.append(where)
        elif trie[key] is not None:
            _undeclared(value, trie[key], where + ".", notes)


def json_type(v: Any) -> str:
    """The JSON name of a decoded value's type, for a rejection's reason."""
    names = {
        dict: "object",
        list: "array",
        str: "string",
        bool: "boolean",
        int: "number",
        float: "number",
        type(None): "null",
    }
    return names.get(type(v), type(v).__name__)
