"""Device metadata the worker keeps raw (a top-level object no feature reads): structs of its
declared layouts, the shortcut of `HeartbeatWire.raw_ok`.

Each struct accepts a subset of what the contract (`schemas.wire.read_field`) accepts: the
contract's constraints at the paths of one layout, no text numbers, and no other key at any
level (or, where the stream ignores undeclared fields, none that a declared path reaches).
Anything they refuse goes to the contract's own reading; tests/unit/test_worker_raw_meta.py
holds the two together.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Annotated, Any, Literal

import msgspec

from schemas import events as ev
from schemas.spec import FleetSpec
from schemas.spec.fields import Attribute, Boolean, Categorical, Metric, WirePath
from workers.precompute.ingest import struct_builder

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


class RawCheck:
    """The shortcut for one raw top-level object: `accepts(data, doc)` is True only where the
    contract's reading accepts too; False leaves the verdict to the contract.

    One struct per layout: layout i puts every field at its i-th declared path (or its last),
    so a device that sends all of its metadata in one of the declared shapes (canonical,
    nested under a version key, flat) takes a struct. Strict structs refuse any other key at
    any level; where the stream ignores undeclared fields, lenient ones allow them, provided no
    declared path outside the layout reaches into the parsed document (the contract would read
    that path, or refuse what is on its way)."""

    def __init__(self, spec: FleetSpec, names: list[str]) -> None:
        fields = spec.heartbeats.fields
        self.key = fields[names[0]].path[0][0]
        self.required = any(fields[n].required for n in names)
        declared = {p[1:] for n in names for p in fields[n].path}
        self.strict: list[Callable[[bytes], Any]] = []
        self.lenient: list[tuple[Callable[[bytes], Any], tuple[WirePath, ...]]] = []
        for i in range(max(len(fields[n].path) for n in names)):
            place = {n: fields[n].path[min(i, len(fields[n].path) - 1)][1:] for n in names}
            if not _clean(place, {n: fields[n].path for n in names}):
                continue
            name, tree = (
                f"Raw_{self.key}_{i}",
                struct_builder.tree((p, n) for n, p in place.items()),
            )
            self.strict.append(msgspec.json.Decoder(_top(name, tree, fields, True)).decode)
            if spec.heartbeats.undeclared == "ignore":
                others = tuple(p for p in declared if p not in place.values())
                lenient = msgspec.json.Decoder(_top(name + "_l", tree, fields, False))
                self.lenient.append((lenient.decode, others))

    def accepts(self, data: bytes, doc: Any) -> bool:
        for decode in self.strict:
            try:
                decode(data)
            except (msgspec.DecodeError, RecursionError):
                continue
            return True
        for decode, others in self.lenient:
            try:
                decode(data)
            except (msgspec.DecodeError, RecursionError):
                continue
            return not any(_reaches(doc, p) for p in others)
        return False


def _clean(place: dict[str, WirePath], paths: dict[str, tuple[WirePath, ...]]) -> bool:
    """Whether a layout reads as the contract reads it: no two placed paths overlap, and no
    path a field declares before its placed one overlaps a placed path (the contract tries
    those first)."""
    placed = list(place.values())

    def overlap(a: WirePath, b: WirePath) -> bool:
        n = min(len(a), len(b))
        return a[:n] == b[:n]

    for i, a in enumerate(placed):
        if any(overlap(a, b) for b in placed[i + 1 :]):
            return False
    for n, at in place.items():
        for earlier in paths[n]:
            if earlier[1:] == at:
                break
            if any(overlap(earlier[1:], b) for b in placed):
                return False
    return True


def _top(name: str, tree: dict[str, Any], fields: dict[str, Any], forbid: bool) -> Any:
    """The object's type: `T | None` when nothing in it is required (an absent or null
    object)."""

    def field(n: str) -> struct_builder.Field:
        t = _strict_type(fields[n])
        return (t,) if fields[n].required else (t | None, None)

    t, required = struct_builder.struct(name, tree, field, forbid)
    return t if required else t | None


def _reaches(doc: Any, path: WirePath) -> bool:
    """Whether the contract's lookup of `path` would find a value or refuse a non-object on
    its way (anything but absent)."""
    node = doc
    for key in path:
        if node is None:
            return False
        if not isinstance(node, dict):
            return True
        if key not in node:
            return False
        node = node[key]
    return node is not None
