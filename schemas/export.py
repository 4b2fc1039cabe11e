"""JSON Schema (draft 2020-12) of every contract, in its canonical wire form.

`precast schemas export DIR` writes these files. The event topics' schemas come from the fleet
spec (every field at its first declared path; alternatives are named in each field's
description); predictions and precompute requests from their pydantic models. They describe
what a producer should send; consumers are more tolerant (alternative paths, numbers as text,
undeclared fields), and unknown fields are allowed by the schemas too, because adding optional
fields is a compatible change (docs/events.md).
"""

from __future__ import annotations

from typing import Any

from schemas.events import (
    DEVICE_ID_PATTERN,
    EVENT_ID_PATTERN,
    MAX_TIME_MS,
    MIN_TIME_MS,
    SCHEMA_VERSION,
)
from schemas.spec import FleetSpec, load_spec
from schemas.spec.fields import Attribute, Boolean, Categorical, FieldSpec, Metric, Stream, dotted
from schemas.validation import CONTRACTS

DIALECT = "https://json-schema.org/draft/2020-12/schema"


def file_name(role: str, version: int = SCHEMA_VERSION) -> str:
    return f"{role}.v{version}.schema.json"


def json_schemas(spec: FleetSpec | None = None) -> dict[str, dict[str, Any]]:
    """file name -> schema, one per topic role with a contract."""
    spec = spec or load_spec()
    out = {}
    for s in spec.streams.values():
        out[file_name(s.topic)] = {
            "$schema": DIALECT,
            "x-precast-topic-role": s.topic,
            "x-precast-fleet": spec.fleet.name,
            "x-precast-schema-version": SCHEMA_VERSION,
            **stream_schema(s),
        }
    for role, model in CONTRACTS.items():
        schema = model.model_json_schema(mode="validation")
        _allow_unknown_fields(schema)
        out[file_name(role)] = {
            "$schema": DIALECT,
            "x-precast-topic-role": role,
            "x-precast-schema-version": SCHEMA_VERSION,
            **schema,
        }
    return out


def _leaf(f: FieldSpec) -> dict[str, Any]:
    alternatives = [dotted(p) for p in f.path[1:]]
    extra = f" (also read from: {', '.join(alternatives)})" if alternatives else ""
    doc: dict[str, Any]
    if isinstance(f, Metric):
        doc = {"type": "number"}
        if f.min is not None:
            doc["minimum"] = f.min
        if f.max is not None:
            doc["maximum"] = f.max
        unit = f" [{f.unit}]" if f.unit else ""
        doc["description"] = (
            f"{f.description or 'metric'}{unit}; out of range: {f.out_of_range}{extra}"
        )
    elif isinstance(f, Categorical):
        doc = {"type": "string", "minLength": 1, "maxLength": f.max_length}
        if f.unknown == "reject":
            doc["enum"] = list(f.values)
        else:
            doc["examples"] = list(f.values)
        rule = "anything else is rejected" if f.unknown == "reject" else "others read as unknown"
        doc["description"] = (f.description or f"one of the vocabulary; {rule}") + extra
    elif isinstance(f, Boolean):
        doc = {"type": "boolean", "description": (f.description or "flag") + extra}
    else:
        assert isinstance(f, Attribute)
        if f.type == "string":
            doc = {"type": "string", "minLength": 1, "maxLength": f.max_length}
            if f.format == "id":
                doc["pattern"] = EVENT_ID_PATTERN
        else:
            doc = {"type": "integer" if f.type == "integer" else "number"}
            if f.min is not None:
                doc["minimum"] = f.min
            if f.max is not None:
                doc["maximum"] = f.max
        doc["description"] = (
            f.description or "attribute (shown on the board, not a feature)"
        ) + extra
    return doc


def stream_schema(s: Stream) -> dict[str, Any]:
    """The canonical wire form of one stream as a JSON Schema object."""
    root: dict[str, Any] = {"type": "object", "properties": {}, "required": []}

    def put(path: tuple[str, ...], doc: dict[str, Any], required: bool) -> None:
        node = root
        for key in path[:-1]:
            props = node["properties"]
            if key not in props:
                props[key] = {"type": "object", "properties": {}, "required": []}
            if required and key not in node["required"]:
                node["required"].append(key)
            node = props[key]
        node["properties"][path[-1]] = doc
        if required:
            node["required"].append(path[-1])

    _envelope(s, put)
    for f in s.fields.values():
        put(f.path[0], _leaf(f), f.required)
    _drop_empty_required(root)
    return root


def _envelope(s: Stream, put: Any) -> None:
    env = s.envelope
    put(env.device_id[0], {"type": "string", "pattern": DEVICE_ID_PATTERN}, True)
    if env.event_id is not None:
        put(env.event_id[0], {"type": "string", "pattern": EVENT_ID_PATTERN}, True)
    for ref, required in ((env.event_time, True), (env.produced_at, True)):
        if ref is None:
            continue
        if ref.unit == "ms":
            t = {"type": "integer", "minimum": MIN_TIME_MS, "maximum": MAX_TIME_MS}
        else:
            t = {"type": "number", "minimum": MIN_TIME_MS / 1000, "maximum": MAX_TIME_MS / 1000}
        put(ref.path[0], {**t, "description": f"Unix time in {ref.unit}"}, required)
    if env.schema_version is not None:
        v = env.schema_version
        put(v.path[0], {"type": "integer", "enum": list(v.supported)}, v.required)
    if env.kind is not None:
        put(env.kind.path[0], {"const": env.kind.value}, False)


def _drop_empty_required(node: dict[str, Any]) -> None:
    if not node.get("required"):
        node.pop("required", None)
    for v in node.get("properties", {}).values():
        if isinstance(v, dict) and v.get("type") == "object":
            _drop_empty_required(v)


def _allow_unknown_fields(node: Any) -> None:
    if isinstance(node, dict):
        if node.get("additionalProperties") is False:
            del node["additionalProperties"]
        for v in node.values():
            _allow_unknown_fields(v)
    elif isinstance(node, list):
        for v in node:
            _allow_unknown_fields(v)


def _inline(node: Any, defs: dict[str, Any]) -> Any:
    """`$ref`s into `$defs` replaced by what they name (and `allOf` of one by its member)."""
    if isinstance(node, dict):
        ref = node.get("$ref")
        if isinstance(ref, str) and ref.startswith("#/$defs/"):
            return _inline(defs[ref.rsplit("/", 1)[1]], defs)
        if list(node) == ["allOf"] and len(node["allOf"]) == 1:
            return _inline(node["allOf"][0], defs)
        return {k: _inline(v, defs) for k, v in node.items() if k != "$defs"}
    if isinstance(node, list):
        return [_inline(v, defs) for v in node]
    return node


def breaking_changes(old: dict[str, Any], new: dict[str, Any], path: str = "") -> list[str]:
    """What in `new` would break a reader or writer of `old` within one schema_version:
    a removed or retyped field, or a field that became required. Adding optional fields is fine."""
    if not path:
        old, new = _inline(old, old.get("$defs", {})), _inline(new, new.get("$defs", {}))
    problems = []
    old_props, new_props = old.get("properties", {}), new.get("properties", {})
    for name, spec in old_props.items():
        where = f"{path}{name}"
        if name not in new_props:
            problems.append(f"{where}: removed")
        elif _types(spec) != _types(new_props[name]):
            problems.append(f"{where}: type {_types(spec)} -> {_types(new_props[name])}")
        elif "properties" in spec:
            problems += breaking_changes(spec, new_props[name], f"{where}.")
    for name in sorted(set(new.get("required", [])) - set(old.get("required", []))):
        problems.append(f"{path}{name}: became required")
    return problems


def _types(spec: dict[str, Any]) -> tuple[str, ...]:
    if "anyOf" in spec:
        return tuple(sorted({t for s in spec["anyOf"] for t in _types(s) if t != "null"}))
    if "const" in spec and "type" not in spec:
        return (type(spec["const"]).__name__.replace("str", "string"),)
    return (str(spec.get("type") or "any"),)
