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
from schemas.events import EVENT_MODELS, MAX_EVENT_BYTES, SUPPORTED_SCHEMA_VERSIONS

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
_REQUIRED = ("event_id", "device_id", "event_time_ms", "produced_at_ms", "schema_version")
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


def corrupt(event: dict[str, Any], role: str, kind: str, rng: np.random.Generator) -> BadRecord:
    """`event` (a valid wire dict) injured in the way `kind` names."""
    key = event["device_id"].encode()
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
        # a field the contract knows (extras are ignored), not `kind`/`meta` (tolerated shapes),
        # not a boolean (True is a valid `cleared`)
        known = EVENT_MODELS[role].model_fields
        field = _pick(
            rng,
            [
                k
                for k, v in e.items()
                if k in known and k not in ("kind", "meta") and not isinstance(v, bool)
            ],
        )
        wrong = _WRONG_FOR_TEXT if isinstance(e[field], str) else _WRONG_FOR_OTHER
        e[field] = wrong[int(rng.integers(len(wrong)))]
        return BadRecord(role, key, orjson.dumps(e), kind)
    if kind == "missing_field":
        del e[_pick(rng, [k for k in _REQUIRED if k != "device_id"])]
        return BadRecord(role, key, orjson.dumps(e), kind)
    if kind in ("missing_key", "empty_key"):
        return BadRecord(role, None if kind == "missing_key" else b"", orjson.dumps(e), kind)
    if kind == "oversized":
        e["padding"] = "x" * (MAX_EVENT_BYTES + int(rng.integers(1, 4096)))
        return BadRecord(role, key, orjson.dumps(e), kind)
    if kind == "non_finite":
        return BadRecord(role, key, _with_non_finite(e, rng), kind)
    if kind == "unknown_schema_version":
        e["schema_version"] = max(SUPPORTED_SCHEMA_VERSIONS) + 1 + int(rng.integers(100))
        return BadRecord(role, key, orjson.dumps(e), kind)
    if kind == "tombstone":
        return BadRecord(role, key, None, kind)
    if kind == "key_mismatch":
        return BadRecord(role, b"x" + key, orjson.dumps(e), kind)
    raise ValueError(f"unknown bad-record kind {kind!r}")


def _pick(rng: np.random.Generator, options: list[str]) -> str:
    return options[int(rng.integers(len(options)))]


def _with_non_finite(e: dict[str, Any], rng: np.random.Generator) -> bytes:
    token = _NON_FINITE[int(rng.integers(len(_NON_FINITE)))]
    numeric = [k for k, v in e.items() if isinstance(v, float)]
    target = e.get("metrics") if isinstance(e.get("metrics"), dict) else None
    if target:  # heartbeats: a metric; other events: a new numeric field
        name = _pick(rng, sorted(target))
        doc = {**e, "metrics": {**target, name: float("nan")}}
    else:
        name = _pick(rng, numeric) if numeric else "score"
        doc = {**e, name: float("nan")}
    # orjson refuses NaN, the stdlib writes it as the bare token devices send
    return json.dumps(doc, separators=(",", ":")).encode().replace(b"NaN", token)
