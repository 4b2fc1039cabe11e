"""The one validation entry point for records read from precast's topics.

    Validator(spec).validate(role, key, value, headers=None) -> Accepted(event, variant) | Rejected(reason, detail)
    validate_event(role, key, value, headers=None)    # the same, for the built-in fleet

Every consumer (workers, context aggregator, read API, SRE tools) calls this, so a record is
judged the same way everywhere and a rejection carries the same `Reason` into the dead-letter
topic. The event topics' contracts come from the fleet spec (`schemas.wire`: declared paths,
kinds, ranges; the event is a flat dict of the envelope and the declared fields); predictions
and precompute requests have fixed pydantic contracts. It is pure and deterministic, and it
never raises: anything unexpected becomes `Reason.UNKNOWN`. Consumers with a hot path may try a
cheaper decode first and fall back to this for anything the fast path does not accept.

Checks, in order (the first failing one is the reason):
tombstone -> missing/empty key -> oversized -> not JSON / NaN-Infinity -> not an object ->
schema_version -> contract (types, ranges, required fields; tolerant of alternative paths,
numbers as text and undeclared fields) -> key equals the payload's device_id.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Callable
from dataclasses import dataclass
from functools import lru_cache
from typing import Any, ClassVar, Literal

import orjson
from pydantic import BaseModel, ValidationError

from schemas.deadletters import MAX_DETAIL, Reason
from schemas.events import MAX_EVENT_BYTES, SCHEMA_VERSION, SUPPORTED_SCHEMA_VERSIONS
from schemas.normalize import Rejection, Variant, normalize
from schemas.predictions import PrecomputeRequest, PredictionSet
from schemas.spec import FleetSpec, load_spec
from schemas.wire import StreamReader, json_type

__all__ = [
    "CONTRACTS",
    "Accepted",
    "Rejected",
    "Validator",
    "Variant",
    "default_validator",
    "encode",
    "validate_event",
]

# Topic role (schemas.topics) -> the model its records must satisfy, for the topics whose
# contract does not depend on the fleet; the event topics' come from the fleet spec.
CONTRACTS: dict[str, type[BaseModel]] = {
    "precompute_requests": PrecomputeRequest,
    "predictions": PredictionSet,
}

# Upgrades from a previous schema_version to the current one, applied before validation, so
# consumers accept the current and the previous version (docs/events.md). Empty while v1 is
# the only version; v2 adds `{1: upgrade_v1_to_v2}`.
UPGRADES: dict[int, Callable[[dict[str, Any]], dict[str, Any]]] = {}


@dataclass(frozen=True, slots=True)
class Accepted:
    event: Any  # an instance of CONTRACTS[role]
    variant: Variant

    ok: ClassVar[Literal[True]] = True  # a literal tag, so `if result.ok:` narrows the union


@dataclass(frozen=True, slots=True)
class Rejected:
    reason: Reason
    detail: str

    ok: ClassVar[Literal[False]] = False


class Validator:
    """Judges records of every topic role for one fleet spec."""

    def __init__(self, spec: FleetSpec) -> None:
        self.spec = spec
        skew = round(spec.time.max_skew_s * 1000)
        self.readers: dict[str, StreamReader] = {
            s.topic: StreamReader(name, s, skew) for name, s in spec.streams.items()
        }

    def validate(
        self,
        role: str,
        key: bytes | None,
        value: bytes | None,
        headers: list[tuple[str, bytes]] | None = None,
    ) -> Accepted | Rejected:
        """Judge one record from the topic with this role. Never raises. `headers` are accepted
        for a stable signature; no check depends on them yet."""
        try:
            return self._validate(role, key, value)
        except Rejection as r:
            return Rejected(r.reason, r.detail[:MAX_DETAIL])
        except Exception as exc:  # noqa: BLE001 -- the contract is "never raises"
            return Rejected(
                Reason.UNKNOWN, f"validator error: {type(exc).__name__}: {exc}"[:MAX_DETAIL]
            )

    def _validate(self, role: str, key: bytes | None, value: bytes | None) -> Accepted | Rejected:
        reader = self.readers.get(role)
        model = CONTRACTS.get(role)
        if reader is None and model is None:
            return Rejected(Reason.UNKNOWN, f"no contract for topic role {role!r}")
        if value is None:
            return Rejected(Reason.TOMBSTONE, f"null value (tombstone) on the {role} topic")
        if not key:
            return Rejected(
                Reason.MISSING_KEY, "record has no key" if key is None else "record key is empty"
            )
        if len(value) > MAX_EVENT_BYTES:
            return Rejected(Reason.OVERSIZED, f"{len(value)} bytes, limit {MAX_EVENT_BYTES}")
        data = _parse(value)
        if not isinstance(data, dict):
            return Rejected(Reason.INVALID, f"expected a JSON object, got {json_type(data)}")
        event: Any
        if reader is not None:
            event, variant = reader.read(data)
            device = event["device_id"]
        else:
            assert model is not None
            data, upgraded_from = _schema_version(data)
            normalized, variant = normalize(data, model, upgraded_from)
            try:
                event = model.model_validate(normalized, strict=True)
            except ValidationError as exc:
                return Rejected(Reason.INVALID, _first_error(exc))
            device = str(getattr(event, "device_id", ""))
        if key != device.encode():
            return Rejected(
                Reason.KEY_MISMATCH, f"key {key[:80]!r} differs from device_id {device!r}"
            )
        return Accepted(event, variant)


@lru_cache(maxsize=1)
def default_validator() -> Validator:
    """The validator of the built-in fleet (schemas/fleets/devices.toml)."""
    return Validator(load_spec())


def validate_event(
    role: str,
    key: bytes | None,
    value: bytes | None,
    headers: list[tuple[str, bytes]] | None = None,
) -> Accepted | Rejected:
    """`Validator.validate` for the built-in fleet. Applications build their own `Validator`
    from the spec their settings name; this is for tests, tools and the fixed contracts."""
    return default_validator().validate(role, key, value, headers)


def _parse(value: bytes) -> Any:
    try:
        return orjson.loads(value)
    except orjson.JSONDecodeError as exc:
        # orjson is the authority on what is JSON; the lenient stdlib parser only tells
        # NaN/Infinity (and numbers that overflow to infinity) apart from other garbage.
        if _has_non_finite(value):
            raise Rejection(
                Reason.NON_FINITE, f"NaN or Infinity in the JSON text ({exc})"
            ) from None
        raise Rejection(Reason.NOT_JSON, str(exc)) from None


def _has_non_finite(value: bytes) -> bool:
    found = False

    def constant(_: str) -> None:
        nonlocal found
        found = True

    def number(text: str) -> float:
        nonlocal found
        v = float(text)
        found = found or v in (float("inf"), float("-inf"))
        return v

    with contextlib.suppress(ValueError, RecursionError):
        json.loads(value, parse_constant=constant, parse_float=number)
    return found


def _schema_version(data: dict[str, Any]) -> tuple[dict[str, Any], int | None]:
    raw = data.get("schema_version")
    version = (
        int(raw)
        if isinstance(raw, str) and raw.isascii() and raw.isdigit() and len(raw) < 6
        else raw
    )
    if version is None:
        raise Rejection(Reason.INVALID, "schema_version: field required")
    if isinstance(version, bool) or not isinstance(version, int):
        raise Rejection(
            Reason.INVALID, f"schema_version: expected an integer, got {json_type(raw)}"
        )
    if version not in SUPPORTED_SCHEMA_VERSIONS:
        raise Rejection(
            Reason.UNKNOWN_SCHEMA_VERSION,
            f"schema_version {version} (supported: {sorted(SUPPORTED_SCHEMA_VERSIONS)})",
        )
    if version == SCHEMA_VERSION:
        return data, None
    upgraded = UPGRADES[version](data)
    return {**upgraded, "schema_version": SCHEMA_VERSION}, version


def _first_error(exc: ValidationError) -> str:
    errors = exc.errors(include_url=False, include_input=False)
    first = errors[0]
    where = ".".join(str(p) for p in first["loc"]) or "event"
    more = f" (+{len(errors) - 1} more)" if len(errors) > 1 else ""
    return f"{where}: {first['msg']}{more}"


# -- the canonical wire form (what producers send) ------------------------------------------------
def encode(event: dict[str, Any]) -> bytes:
    """Wire bytes of an event dict. orjson refuses NaN (it writes null), so callers building
    dicts by hand must keep numbers finite; the validator is the judge."""
    return orjson.dumps(event)
