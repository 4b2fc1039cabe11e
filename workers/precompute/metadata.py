"""Device metadata the worker keeps raw (a top-level object no feature reads): a strict struct
of its canonical layout, the shortcut of `HeartbeatWire.raw_ok`.

The struct accepts a subset of what the contract (`schemas.wire.read_field`) accepts: the
contract's constraints at the first declared path of every field, no text numbers, no other key
at any level (so no alternative path and no undeclared field). Anything it refuses goes to the
contract's own reading; tests/unit/test_worker_raw_meta.py holds the two together.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Annotated, Any, Literal

import msgspec

from schemas import events as ev
from schemas.spec import FleetSpec
from schemas.spec.fields import Attribute, Boolean, Categorical, Metric

# msgspec matches patterns with re.search: anchor with \A..\Z (`$` would let a newline through).
assert ev.EVENT_ID_PATTERN.startswith("^") and ev.EVENT_ID_PATTERN.endswith("$")
_ID_TEXT = r"\A" + ev.EVENT_ID_PATTERN[1:-1] + r"\Z"


def _strict_type(f: Any) -> Any:
    """The msgspec type that accepts exactly the values `schemas.wire.read_field` accepts
    unchanged (no text numbers, no unknown category where those are rejected)."""
    if isinstance(f, Metric):
        if f.out_of_range == "reject":
            return Annotated[float, msgspec.Meta(ge=f.min, le=f.max)]
        return float
    if isinstance(f, Categorical):
        if f.unknown == "reject":
            return Literal[tuple(v for v in f.values if 1 <= len(v) <= f.max_length)]
        return Annotated[str, msgspec.Meta(min_length=1, max_length=f.max_length)]
    if isinstance(f, Boolean):
        return bool
    assert isinstance(f, Attribute)
    if f.type == "integer":
        lo = None if f.min is None else math.ceil(f.min)
        hi = None if f.max is None else math.floor(f.max)
        return Annotated[int, msgspec.Meta(ge=lo, le=hi)]
    if f.type == "number":
        return Annotated[float, msgspec.Meta(ge=f.min, le=f.max)]
    pattern = _ID_TEXT if f.format == "id" else None
    return Annotated[str, msgspec.Meta(min_length=1, max_length=f.max_length, pattern=pattern)]


def strict_decoder(spec: FleetSpec, names: list[str]) -> tuple[Callable[[bytes], Any], bool]:
    """A decoder of one raw top-level object's canonical layout, refusing any other key, and
    whether the object must be present."""
    fields = spec.heartbeats.fields
    tree: dict[str, Any] = {}
    for name in names:
        path = fields[name].path[0]
        node = tree
        for key in path[1:-1]:
            node = node.setdefault(key, {})
        node[path[-1]] = name

    def level(name: str, node: dict[str, Any]) -> tuple[Any, bool]:
        out: list[Any] = []
        rename: dict[str, str] = {}
        for i, (key, sub) in enumerate(node.items()):
            attr = f"f{i}"
            rename[attr] = key
            if isinstance(sub, dict):
                t, required = level(f"{name}_{i}", sub)
            else:
                t, required = _strict_type(fields[sub]), fields[sub].required
            out.append((attr, t) if required else (attr, t | None, None))
        out.sort(key=lambda f: len(f) != 2)  # msgspec: required fields first
        struct = msgspec.defstruct(name, out, rename=rename, forbid_unknown_fields=True, gc=False)
        required = any(len(f) == 2 for f in out)
        return (struct if required else struct | None), required

    t, required = level(f"Raw_{fields[names[0]].path[0][0]}", tree)
    return msgspec.json.Decoder(t).decode, required
