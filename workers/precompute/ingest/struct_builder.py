"""Nested msgspec structs from declared wire paths: the one builder behind the worker's
decoders (`heartbeat_structs.HeartbeatWire`'s record structs, `metadata.RawCheck`'s metadata layouts)."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

import msgspec

from schemas.spec.fields import WirePath

# A leaf's struct field: (type,) when required, (type, default) when not.
Field = tuple[Any] | tuple[Any, Any]


def tree(items: Iterable[tuple[WirePath, Any]]) -> dict[str, Any]:
    """{key: subtree or item}: each path's last key holds its item."""
    root: dict[str, Any] = {}
    for path, item in items:
        node = root
        for key in path[:-1]:
            node = node.setdefault(key, {})
        node[path[-1]] = item
    return root


def struct(
    name: str, node: dict[str, Any], field: Callable[[Any], Field], forbid: bool
) -> tuple[type[msgspec.Struct], bool]:
    """The struct of one object level, and whether anything beneath it is required (an object
    with nothing required is optional: `T | None`). Attributes are f0, f1, ... in tree order,
    renamed to the wire's keys."""
    fields: list[Any] = []
    rename: dict[str, str] = {}
    for i, (key, sub) in enumerate(node.items()):
        attr = f"f{i}"
        rename[attr] = key
        if isinstance(sub, dict):
            t, required = struct(f"{name}_{i}", sub, field, forbid)
            fields.append((attr, t) if required else (attr, t | None, None))
        else:
            fields.append((attr, *field(sub)))
    fields.sort(key=lambda f: len(f) != 2)  # msgspec: no required field after an optional one
    cls = msgspec.defstruct(name, fields, rename=rename, forbid_unknown_fields=forbid, gc=False)
    return cls, any(len(f) == 2 for f in fields)
