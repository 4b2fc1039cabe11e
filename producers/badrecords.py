"""Malformed records for `--bad-rate`: one of every kind the consumers must dead-letter.

Each bad record is built from a real event (so it looks like traffic, not noise) and carries a
`x-sim-bad-kind` header naming what was done to it; dead letters keep original headers, so a
test can check the reason every consumer gave against the injury. Deterministic under the rng.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

import numpy as np
import orjson

from schemas.deadletters import Reason
from schemas.events import MAX_EVENT_BYTES
from schemas.spec import FleetSpec, load_spec
from schemas.spec.fields import Metric

H_BAD_KIND = "x-sim-bad-kind"

# kind -> the reason `schemas.validation.validate_event` must give
BAD_KINDS: dict[str, Reason] = {
    "not_json": Reason.NOT_JSON,
    "wrong_type": Reason.INVALID,
    "missing_field": Reason.INVALID,
    "missing_key": Reason.MISSING_KEY,
    "empty_key": Reason.MISSING_KEY,
    "oversized": Reason.OVERSIZED,
    "non_finite": Reason.NON_FINITE,
    "unknown_schema_version": Reason.UNKNOWN_SCHEMA_VERSION,
    "tombstone": Reason.TOMBSTONE,
    "key_mismatch": Reason.KEY_MISMATCH,
}
KIND_NAMES = tuple(BAD_KINDS)
# A value of another JSON type than the field's (a string is fine where a string is due).
_WRONG_FOR_TEXT: tuple[Any, ...] = (42, [], {"v": 1}, True, None)
_WRONG_FOR_OTHER: tuple[Any, ...] = ("high", [], True, None)
_NON_FINITE = (b"NaN", b"Infinity", b"-Infinity", b"1e999")


@dataclass(frozen=True, slots=True)
class BadRecord:
    role: str
    key: bytes | None
    value: bytes | None
    kind: str

    @property
    def headers(self) -> list[tuple[str, bytes]]:
        return [(H_BAD_KIND, self.kind.encode())]

    @property
    def expected_reason(self) -> Reason:
        return BAD_KINDS[self.kind]


def kinds_for(spec: FleetSpec) -> tuple[str, ...]:
    """The bad kinds a fleet's records can be injured with (no schema version: not that one)."""
    has_version = all(s.envelope.schema_version is not None for s in spec.streams.values())
    return tuple(k for k in KIND_NAMES if has_version or k != "unknown_schema_version")


def _stream(spec: FleetSpec, role: str) -> Any:
    return next(s for s in spec.streams.values() if s.topic == role)


def corrupt(
    event: dict[str, Any],
    role: str,
    kind: str,
    rng: np.random.Generator,
    spec: FleetSpec | None = None,
) -> BadRecord:
    """`event` (a valid wire dict of the `role` topic) injured in the way `kind` names."""
    spec = spec or load_spec()
    s = _stream(spec, role)
    env = s.envelope
    device = getattr(event, "device_id", None) or event["device_id"]
    key = device.encode()
    e = dict(event)
    if kind == "not_json":
        raw = orjson.dumps(e)
        choice = int(rng.integers(3))
        value = (
            raw[: int(rng.integers(1, len(raw) - 1))]
            if choice == 0  # truncated
            else b"\xff\xfe" + raw
            if choice == 1  # not UTF-8
            else raw.replace(b'"', b"'", 4)
        )  # JS-ish quotes
        return BadRecord(role, key, value, kind)
    if kind == "wrong_type":
        # a required top-level value (extras are ignored, a null optional one is absent), not
        # an object (those hold optional fields and tolerated shapes), not a boolean (True is a
        # valid flag), not the record's kind (absent is tolerated)
        required = {f.path[0][0] for f in s.fields.values() if f.required and len(f.path[0]) == 1}
        required |= {p[0] for p in _required(s) if len(p) == 1} | {env.device_id[0][0]}
        field = _pick(
            rng, sorted(k for k, v in e.items() if k in required and not isinstance(v, dict | bool))
        )
        wrong = _WRONG_FOR_TEXT if isinstance(e[field], str) else _WRONG_FOR_OTHER
        e[field] = wrong[int(rng.integers(len(wrong)))]
        return BadRecord(role, key, orjson.dumps(e), kind)
    if kind == "missing_field":
        _delete(e, _pick_path(rng, [p for p in _required(s) if _has(e, p)]))
        return BadRecord(role, key, orjson.dumps(e), kind)
    if kind in ("missing_key", "empty_key"):
        return BadRecord(role, None if kind == "missing_key" else b"", orjson.dumps(e), kind)
    if kind == "oversized":
        e["padding"] = "x" * (MAX_EVENT_BYTES + int(rng.integers(1, 4096)))
        return BadRecord(role, key, orjson.dumps(e), kind)
    if kind == "non_finite":
        metrics = [f.path[0] for f in s.fields.values() if isinstance(f, Metric)]
        return BadRecord(role, key, _with_non_finite(e, metrics, rng), kind)
    if kind == "unknown_schema_version":
        assert env.schema_version is not None
        path = env.schema_version.path[0]
        _set(e, path, max(env.schema_version.supported) + 1 + int(rng.integers(100)))
        return BadRecord(role, key, orjson.dumps(e), kind)
    if kind == "tombstone":
        return BadRecord(role, key, None, kind)
    if kind == "key_mismatch":
        return BadRecord(role, b"x" + key, orjson.dumps(e), kind)
    raise ValueError(f"unknown bad-record kind {kind!r}")


def _required(s: Any) -> list[tuple[str, ...]]:
    """First paths of the envelope parts every record must carry (the device ID aside)."""
    env = s.envelope
    out = [env.event_time.path[0]]
    if env.event_id is not None:
        out.append(env.event_id[0])
    if env.produced_at is not None:
        out.append(env.produced_at.path[0])
    if env.schema_version is not None and env.schema_version.required:
        out.append(env.schema_version.path[0])
    return out


def _set(doc: dict[str, Any], path: tuple[str, ...], value: Any) -> None:
    node = doc
    for k in path[:-1]:
        node = node.setdefault(k, {})
    node[path[-1]] = value


def _pick(rng: np.random.Generator, options: list[str]) -> str:
    return options[int(rng.integers(len(options)))]


def _with_non_finite(
    e: dict[str, Any], metrics: list[tuple[str, ...]], rng: np.random.Generator
) -> bytes:
    token = _NON_FINITE[int(rng.integers(len(_NON_FINITE)))]
    doc = json.loads(json.dumps(e))  # a deep copy
    present = [p for p in metrics if _has(doc, p)]
    if present:  # a metric of the record
        _set(doc, _pick_path(rng, present), float("nan"))
    else:  # other events: a new numeric field
        numeric = [k for k, v in e.items() if isinstance(v, float)]
        doc[_pick(rng, numeric) if numeric else "score"] = float("nan")
    # orjson refuses NaN, the stdlib writes it as the bare token devices send
    return json.dumps(doc, separators=(",", ":")).encode().replace(b"NaN", token)


def _has(doc: Any, path: tuple[str, ...]) -> bool:
    for k in path:
        if not isinstance(doc, dict) or k not in doc:
            return False
        doc = doc[k]
    return True


def _delete(doc: dict[str, Any], path: tuple[str, ...]) -> None:
    node = doc
    for k in path[:-1]:
        node = node[k]
    del node[path[-1]]


def _pick_path(rng: np.random.Generator, options: list[tuple[str, ...]]) -> tuple[str, ...]:
    return options[int(rng.integers(len(options)))]
