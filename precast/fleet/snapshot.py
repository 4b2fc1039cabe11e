"""The device-context snapshot: the value of the compacted device-context topic (key = device
ID), written by the context aggregator and read by workers and the board.

    {"schema_version": 2, "context": "<context hash>", "device_id", "as_of_ms", "updated_at_ms",
     "open": [{entity ID: [field values]}, ...],      one object per open group
     "windows": [{ID: [event time, mask]}, ...],      one object per window group
     "since": {name: event time}, "last": {name: [event time, value]}}

A snapshot carries the hash of the context definitions it was written under: a reader with
other definitions refuses it (`ForeignSnapshot`) instead of misreading it, and the aggregator
of the new spec rebuilds every device's context from the topics (docs/fleets.md, evolution).
"""

from __future__ import annotations

import math
from typing import Any

import orjson

from precast.fleet.context import ContextModel, DeviceContext

SNAPSHOT_VERSION = 2


class ForeignSnapshot(ValueError):
    """A snapshot written under other context definitions (another spec, or version 1)."""


def to_json(model: ContextModel, ctx: DeviceContext, updated_at_ms: int) -> bytes:
    return orjson.dumps(
        {
            "schema_version": SNAPSHOT_VERSION,
            "context": model.hash,
            "device_id": ctx.device_id,
            "as_of_ms": ctx.as_of_ms,
            "updated_at_ms": updated_at_ms,
            "open": [{k: list(v) for k, v in g.items()} for g in ctx.open],
            "windows": [{k: [t, m] for k, (t, m) in g.items()} for g in ctx.windows],
            "since": ctx.since,
            "last": {k: [t, v] for k, (t, v) in ctx.last.items()},
        }
    )


def from_json(model: ContextModel, raw: bytes) -> DeviceContext:
    """Parse a snapshot; `ForeignSnapshot` for one of another definition, ValueError for a
    malformed one, whatever it holds (the topic is writable by more than the aggregator)."""
    d: Any = orjson.loads(raw)  # JSONDecodeError is a ValueError (nesting, UTF-8, NaN)
    try:
        return _context(model, d)
    except (KeyError, TypeError, IndexError, AttributeError, OverflowError) as exc:
        raise ValueError(f"malformed device-context snapshot: {type(exc).__name__}") from None


def _context(model: ContextModel, d: Any) -> DeviceContext:
    if not isinstance(d, dict):
        raise ValueError("a device-context snapshot is a JSON object")
    if d.get("schema_version") != SNAPSHOT_VERSION or d.get("context") != model.hash:
        raise ForeignSnapshot(
            f"snapshot of context {d.get('context')!r} (schema_version "
            f"{d.get('schema_version')!r}); this spec's is {model.hash!r}"
        )
    opens, windows = list(d["open"]), list(d["windows"])
    if len(opens) != len(model.open_groups) or len(windows) != len(model.window_groups):
        raise ValueError("snapshot groups differ from the spec's")
    return DeviceContext(
        str(d["device_id"]),
        [{str(k): tuple(v) for k, v in dict(g).items()} for g in opens],
        [{str(k): (_int(v[0]), _int(v[1])) for k, v in dict(g).items()} for g in windows],
        {str(k): _int(v) for k, v in dict(d["since"]).items()},
        {str(k): (_int(v[0]), _num(v[1])) for k, v in dict(d["last"]).items()},
        _int(d["as_of_ms"]),
    )


def _int(v: Any) -> int:
    if type(v) is not int:  # not text, a float or a bool: what to_json writes is an integer
        raise TypeError
    return v


def _num(v: Any) -> float:
    if type(v) is not int and (type(v) is not float or not math.isfinite(v)):
        raise TypeError
    return float(v)
