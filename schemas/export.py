"""JSON Schema (draft 2020-12) of every contract, in its canonical wire form.

`precast schemas export DIR` writes these files. They describe what a producer should send;
consumers are more tolerant (schemas.normalize: metadata layouts, numbers as strings, unknown
fields), and unknown fields are allowed by the schemas too, because adding optional fields is a
compatible change (docs/events.md).
"""

from __future__ import annotations

from typing import Any

from schemas.events import SCHEMA_VERSION
from schemas.normalize import META_FIELD, META_INFO
from schemas.validation import CONTRACTS

DIALECT = "https://json-schema.org/draft/2020-12/schema"


def file_name(role: str, version: int = SCHEMA_VERSION) -> str:
    return f"{role}.v{version}.schema.json"


def json_schemas() -> dict[str, dict[str, Any]]:
    """file name -> schema, one per topic role with a contract."""
    out = {}
    for role, model in CONTRACTS.items():
        schema = model.model_json_schema(mode="validation")
        _allow_unknown_fields(schema)
        props = schema.get("properties", {})
        if META_FIELD in props:  # canonical layout: metadata under meta.info
            ref = props[META_FIELD].get("$ref") or props[META_FIELD]["allOf"][0]["$ref"]
            props[META_FIELD] = {
                "type": "object",
                "properties": {META_INFO: {"$ref": ref}},
                "description": "device metadata under `info` (canonical); consumers also accept it "
                "flat under `meta` or under a version key such as `meta.info.v2`",
            }
        out[file_name(role)] = {
            "$schema": DIALECT,
            "x-precast-topic-role": role,
            "x-precast-schema-version": SCHEMA_VERSION,
            **schema,
        }
    return out


def _allow_unknown_fields(node: Any) -> None:
    if isinstance(node, dict):
        if node.get("additionalProperties") is False:
            del node["additionalProperties"]
        for v in node.values():
            _allow_unknown_fields(v)
    elif isinstance(node, list):
        for v in node:
            _allow_unknown_fields(v)


def breaking_changes(old: dict[str, Any], new: dict[str, Any], path: str = "") -> list[str]:
    """What in `new` would break a reader or writer of `old` within one schema_version:
    a removed or retyped field, or a field that became required. Adding optional fields is fine."""
    problems = []
    old_props, new_props = old.get("properties", {}), new.get("properties", {})
    for name, spec in old_props.items():
        where = f"{path}{name}"
        if name not in new_props:
            problems.append(f"{where}: removed")
        elif _types(spec) != _types(new_props[name]):
            problems.append(f"{where}: type {_types(spec)} -> {_types(new_props[name])}")
    for name in sorted(set(new.get("required", [])) - set(old.get("required", []))):
        problems.append(f"{path}{name}: became required")
    for name, spec in old.get("$defs", {}).items():
        if name in new.get("$defs", {}):
            problems += breaking_changes(spec, new["$defs"][name], f"{name}.")
    return problems


def _types(spec: dict[str, Any]) -> tuple[str, ...]:
    if "anyOf" in spec:
        return tuple(sorted(t for s in spec["anyOf"] for t in _types(s)))
    return (str(spec.get("type") or spec.get("$ref") or spec.get("const") or "any"),)
