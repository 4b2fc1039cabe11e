"""Wire variants -> the one normalized shape the models in `schemas.events` validate.

Devices differ in how they send the same thing. Tolerated, and recorded in a `Variant`:
- device metadata canonical under `meta.info`, flat under `meta`, or one level deeper under a
  version key (`meta.info.v2`, a newer camera firmware);
- unknown extra fields anywhere (adding optional fields is a compatible change, so readers
  must ignore what they do not know);
- numbers sent as JSON strings (`"42.5"`), on numeric fields only.
Everything else stays strict: the models validate the normalized dict in strict mode.
Pure and deterministic: the same input gives the same output and the same `Variant`.
"""

from __future__ import annotations

import math
import re
import types
import typing
from dataclasses import dataclass, field
from functools import cache
from typing import Any

from pydantic import BaseModel

from schemas.deadletters import Reason

# A JSON number, exactly as the JSON grammar spells it (no spaces, no '+', no '_', no hex).
# Public: the workers' fast decoders accept numbers-as-text by this same grammar.
INT_TEXT = re.compile(r"-?(?:0|[1-9][0-9]{0,18})")
NUMBER_TEXT = re.compile(r"-?(?:0|[1-9][0-9]*)(?:\.[0-9]+)?(?:[eE][+-]?[0-9]+)?")
_NON_FINITE_TEXT = frozenset(
    {"nan", "-nan", "infinity", "-infinity", "+infinity", "inf", "-inf", "+inf"}
)
# A metadata version key: `v2`, `v10`.
_VERSION_KEY = re.compile(r"v([1-9][0-9]{0,3})")
# Metadata lives here on the canonical wire form.
META_FIELD, META_INFO = "meta", "info"


class Rejection(Exception):
    """Raised inside normalization; `schemas.validation` turns it into a `Rejected`."""

    def __init__(self, reason: Reason, detail: str) -> None:
        super().__init__(detail)
        self.reason, self.detail = reason, detail


@dataclass(frozen=True, slots=True)
class Variant:
    """How a record differed from the canonical wire form (all empty = canonical)."""

    # which declared paths: "canonical" (every field at its first path), "path:N" (an N-th
    # alternative was used), "none" (a contract without alternatives: predictions, requests)
    layout: str = "none"
    version_key: str | None = None  # unused since the fleet spec (kept for a stable shape)
    coerced: tuple[str, ...] = ()  # paths of numbers that arrived as strings
    extra: tuple[str, ...] = ()  # paths of undeclared fields that were ignored
    upgraded_from: int | None = None  # schema_version the record was upgraded from
    unknown: tuple[str, ...] = ()  # categorical fields whose value is outside the vocabulary

    @property
    def label(self) -> str:
        """Low-cardinality name for metrics: layout plus flags."""
        parts = [self.layout]
        if self.coerced:
            parts.append("strings")
        if self.extra:
            parts.append("extra")
        if self.upgraded_from is not None:
            parts.append(f"from_v{self.upgraded_from}")
        return "+".join(parts)


@dataclass
class _Notes:
    coerced: list[str] = field(default_factory=list)
    extra: list[str] = field(default_factory=list)


# -- field kinds, derived once per model from its annotations ------------------------------------
@cache
def field_kinds(model: type[BaseModel]) -> dict[str, tuple[str, Any]]:
    """name -> ("int"|"float", None) | ("model", cls) | ("models", cls) | ("other", None)."""
    out: dict[str, tuple[str, Any]] = {}
    for name, info in model.model_fields.items():
        out[name] = _kind(info.annotation)
    return out


def _kind(ann: Any) -> tuple[str, Any]:
    origin = typing.get_origin(ann)
    if origin is typing.Annotated:
        return _kind(typing.get_args(ann)[0])
    if origin in (typing.Union, types.UnionType):
        kinds = [_kind(a) for a in typing.get_args(ann) if a is not type(None)]
        return kinds[0] if len(kinds) == 1 else ("other", None)
    if ann is int or ann is float:
        return (ann.__name__, None)
    if origin is typing.Literal and all(type(a) is int for a in typing.get_args(ann)):
        return ("int", None)  # e.g. schema_version: Literal[1]
    if isinstance(ann, type) and issubclass(ann, BaseModel):
        return ("model", ann)
    if origin is list:
        (item,) = typing.get_args(ann)
        if isinstance(item, type) and issubclass(item, BaseModel):
            return ("models", item)
    return ("other", None)


# -- numbers ------------------------------------------------------------------------------------------
def _number(value: Any, kind: str, path: str, notes: _Notes) -> Any:
    if isinstance(value, float) and not math.isfinite(value):
        raise Rejection(Reason.NON_FINITE, f"{path}: not a finite number")
    if not isinstance(value, str):
        return value  # the model's strict validation judges the type
    if value.lower() in _NON_FINITE_TEXT:
        raise Rejection(Reason.NON_FINITE, f"{path}: {value[:20]!r} is not a finite number")
    if kind == "int" and INT_TEXT.fullmatch(value):
        notes.coerced.append(path)
        return int(value)
    if kind == "float" and NUMBER_TEXT.fullmatch(value):
        number = float(value)
        if not math.isfinite(number):
            raise Rejection(Reason.NON_FINITE, f"{path}: {value[:20]!r} overflows to infinity")
        notes.coerced.append(path)
        return number
    return value  # not a number in text form either: strict validation rejects it


# -- objects ------------------------------------------------------------------------------------------
def normalize_object(
    data: dict[str, Any], model: type[BaseModel], path: str, notes: _Notes
) -> dict[str, Any]:
    """Known fields of `model` with numbers coerced and nested objects normalized; unknown
    fields noted and left out."""
    kinds = field_kinds(model)
    out: dict[str, Any] = {}
    for name, value in data.items():
        where = f"{path}.{name}" if path else name
        spec = kinds.get(name)
        if spec is None:
            notes.extra.append(where)
            continue
        kind, sub = spec
        if kind in ("int", "float"):
            value = _number(value, kind, where, notes)
        elif kind == "model" and isinstance(value, dict):
            value = normalize_object(value, sub, where, notes)
        elif kind == "models" and isinstance(value, list):
            value = [
                normalize_object(v, sub, f"{where}[{i}]", notes) if isinstance(v, dict) else v
                for i, v in enumerate(value)
            ]
        elif isinstance(value, float) and not math.isfinite(value):
            raise Rejection(Reason.NON_FINITE, f"{where}: not a finite number")
        out[name] = value
    return out


def _metadata(
    meta: Any, info_model: type[BaseModel], notes: _Notes
) -> tuple[dict[str, Any], str, str | None]:
    """(normalized metadata fields, layout, version key) from whatever `meta` holds."""
    if meta is None or meta == {}:
        return {}, "none", None
    if not isinstance(meta, dict):
        raise Rejection(
            Reason.INVALID, f"{META_FIELD}: must be an object, got {type(meta).__name__}"
        )
    if META_INFO not in meta:
        return normalize_object(meta, info_model, META_FIELD, notes), "flat", None
    notes.extra.extend(f"{META_FIELD}.{k}" for k in meta if k != META_INFO)
    info = meta[META_INFO]
    base = f"{META_FIELD}.{META_INFO}"
    if not isinstance(info, dict):
        raise Rejection(Reason.INVALID, f"{base}: must be an object, got {type(info).__name__}")
    versions = sorted(
        (
            (int(m.group(1)), k)
            for k in info
            if isinstance(info[k], dict) and (m := _VERSION_KEY.fullmatch(k))
        ),
        reverse=True,
    )
    if not versions:
        return normalize_object(info, info_model, base, notes), "nested", None
    key = versions[0][1]  # the newest layout wins; anything else beside it is noted as extra
    notes.extra.extend(f"{base}.{k}" for k in info if k != key)
    return normalize_object(info[key], info_model, f"{base}.{key}", notes), "versioned", key


def normalize(
    data: dict[str, Any], model: type[BaseModel], upgraded_from: int | None = None
) -> tuple[dict[str, Any], Variant]:
    """The dict `model.model_validate(..., strict=True)` should see, and the variant seen."""
    notes = _Notes()
    kinds = field_kinds(model)
    meta_spec = kinds.get(META_FIELD)
    if meta_spec is not None and meta_spec[0] == "model":
        rest = {k: v for k, v in data.items() if k != META_FIELD}
        out = normalize_object(rest, model, "", notes)
        fields, layout, version_key = _metadata(data.get(META_FIELD), meta_spec[1], notes)
        out[META_FIELD] = fields
    else:
        out = normalize_object(data, model, "", notes)
        layout, version_key = "none", None
    return out, Variant(
        layout, version_key, tuple(sorted(notes.coerced)), tuple(sorted(notes.extra)), upgraded_from
    )
