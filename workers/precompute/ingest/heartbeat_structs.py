"""The heartbeat stream's contract (from the fleet spec) as generated msgspec structs: the
worker's fast decoder, plus the column-wise checks the structs cannot express.

A record is accepted here only if the contract validator (`schemas.validation`) would accept it
with the same values; anything else is left to the validator (tests/unit/test_worker_wire.py
holds both paths to that on every simulator wire style and thousands of mutations). What makes
that hold:
- structs are generated from the *first* declared path of every field, with strict types
  (msgspec refuses `true` for a number, `1.5` for an integer, numbers that overflow) and the
  envelope's lengths as constraints; a record that uses an alternative path fails them and
  takes the validator;
- three structs are tried in order: canonical (numbers, no undeclared fields), numeric leaves as
  JSON-number text, undeclared fields allowed (only if the stream ignores them; then orjson, the
  validator's JSON judge, must also parse the record, since msgspec skips unknown values without
  checking them, and the record must not hold any alternative path);
- a top-level object that holds only fields no feature reads (device metadata) is kept raw and
  checked the first time a device sends it: orjson judges the JSON, then a struct of one of its
  declared layouts (`metadata.RawCheck`) accepts it, or the validator's own code decides;
  identical bytes from that device later need no parse.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from operator import attrgetter
from typing import Annotated, Any, Literal

import msgspec
import orjson

from precast.fleet.features import FeatureModel
from schemas import events as ev
from schemas.normalize import Rejection
from schemas.spec import FleetSpec
from schemas.spec.fields import Attribute, Boolean, Categorical, Metric, WirePath
from schemas.wire import StreamReader
from workers.precompute.ingest import metadata, struct_builder

DecodeError = msgspec.DecodeError  # ValidationError is a subclass

_Ms = Annotated[int, msgspec.Meta(ge=ev.MIN_TIME_MS, le=ev.MAX_TIME_MS)]
_EventId = Annotated[str, msgspec.Meta(min_length=1, max_length=64)]


@dataclass(frozen=True)
class Leaf:
    """One value the structs decode: a field or an envelope part, at its first path."""

    name: str
    path: WirePath
    role: str  # device_id event_id time_ms time_s version kind metric code boolean text id int num
    required: bool = True
    default: Any = None
    max_length: int = 64
    alternatives: tuple[WirePath, ...] = ()

    @property
    def numeric(self) -> bool:
        return self.role in ("metric", "int", "num")


def _leaves(spec: FleetSpec) -> list[Leaf]:
    s = spec.heartbeats
    env = s.envelope
    out = [Leaf("device_id", env.device_id[0], "device_id")]
    if env.event_id is not None:
        out.append(Leaf("event_id", env.event_id[0], "event_id"))
    t = env.event_time
    out.append(Leaf("event_time_ms", t.path[0], "time_ms" if t.unit == "ms" else "time_s"))
    if env.produced_at is not None:
        p = env.produced_at
        out.append(Leaf("produced_at_ms", p.path[0], "time_ms" if p.unit == "ms" else "time_s"))
    if env.schema_version is not None:
        v = env.schema_version
        out.append(Leaf("schema_version", v.path[0], "version", v.required, v.supported[-1]))
    if env.kind is not None:
        out.append(Leaf("kind", env.kind.path[0], "kind", False, env.kind.value))
    for name, f in s.fields.items():
        if isinstance(f, Metric):
            role = "metric"
        elif isinstance(f, Categorical):
            role = "code"
        elif isinstance(f, Boolean):
            role = "boolean"
        else:
            assert isinstance(f, Attribute)
            role = {"integer": "int", "number": "num"}.get(
                f.type, "id" if f.format == "id" else "text"
            )
        default = f.default if isinstance(f, Boolean) else None
        length = f.max_length if isinstance(f, Categorical | Attribute) else 64
        out.append(Leaf(name, f.path[0], role, f.required, default, length, f.path[1:]))
    return out


def _type(leaf: Leaf, spec: FleetSpec, text_numbers: bool) -> Any:
    r = leaf.role
    if r == "version":
        return Literal[tuple(spec.heartbeats.envelope.schema_version.supported)]  # type: ignore[union-attr]
    if r == "kind":
        return Literal[leaf.default]
    if r == "time_ms":
        return _Ms
    if r == "time_s":
        return float
    if r == "event_id":
        return _EventId
    if r in ("metric", "num"):
        return float | str if text_numbers else float
    if r == "int":
        return int | str if text_numbers else int
    if r == "boolean":
        return bool
    if r == "device_id":
        return str
    return Annotated[str, msgspec.Meta(min_length=1, max_length=leaf.max_length)]


class HeartbeatWire:
    """Typed decoders and column extractors for one spec's heartbeat stream."""

    def __init__(self, spec: FleetSpec, features: FeatureModel) -> None:
        self.spec, self.features = spec, features
        self.reader = StreamReader(
            spec.heartbeat_stream, spec.heartbeats, round(spec.time.max_skew_s * 1000)
        )
        self.leaves = _leaves(spec)
        needed = {
            "device_id",
            "event_id",
            "event_time_ms",
            "produced_at_ms",
            "schema_version",
            "kind",
        }
        for c in features.state:
            needed.add(c.source if c.kind == "member" else c.name)
            if c.by:
                needed.add(c.by)
        # top-level objects of fields nobody reads on the hot path: kept raw, checked per device
        tops: dict[str, list[Leaf]] = {}
        for leaf in self.leaves:
            tops.setdefault(leaf.path[0], []).append(leaf)
        self.raw_keys = tuple(
            k for k, ls in tops.items() if all(len(x.path) > 1 and x.name not in needed for x in ls)
        )
        self.raw_fields = tuple(x.name for k in self.raw_keys for x in tops[k])
        self.typed = [x for x in self.leaves if x.path[0] not in self.raw_keys]
        self.alternatives = tuple(p for x in self.typed for p in x.alternatives)
        self._raw_checks = {
            k: metadata.RawCheck(spec, [x.name for x in tops[k]]) for k in self.raw_keys
        }
        self.lenient_ok = spec.heartbeats.undeclared == "ignore"
        self.canonical = msgspec.json.Decoder(self._struct("Canonical", False, True)).decode
        self._as_text = msgspec.json.Decoder(self._struct("AsText", True, True)).decode
        self._lenient = msgspec.json.Decoder(self._struct("Lenient", True, False)).decode
        self.names = [x.name for x in self.typed] + [f"raw:{k}" for k in self.raw_keys]
        self._extract = self._extractor()

    # -- structs -------------------------------------------------------------------------------
    def _struct(self, name: str, text_numbers: bool, forbid: bool) -> type[msgspec.Struct]:
        def field(leaf: Leaf | str) -> struct_builder.Field:
            if leaf == "raw":
                return msgspec.Raw, msgspec.Raw()
            assert isinstance(leaf, Leaf)
            t = _type(leaf, self.spec, text_numbers)
            if leaf.required:
                return (t,)
            if leaf.role in ("kind", "version", "boolean") and leaf.default is not None:
                return t, leaf.default
            return t | None, None

        items = [(x.path, x) for x in self.typed] + [((k,), "raw") for k in self.raw_keys]
        return struct_builder.struct(name, struct_builder.tree(items), field, forbid)[0]

    def decode_variant(self, value: bytes, error: Exception | None = None) -> Any:
        """A record in a tolerated variant (numbers as text, undeclared fields), or None when the
        structs refuse it (or, with undeclared fields, orjson does, or it uses an alternative
        path). `error` is the canonical decoder's: when it names an unknown field, skip ahead."""
        if error is None or "unknown field" not in str(error):
            try:
                return self._as_text(value)
            except (DecodeError, RecursionError):  # msgspec recurses into skipped values
                pass
        if not self.lenient_ok:
            return None
        try:
            row = self._lenient(value)
            doc = orjson.loads(value)
        except (DecodeError, orjson.JSONDecodeError, RecursionError):
            return None
        if self.alternatives and any(_has(doc, p) for p in self.alternatives):
            return None
        return row

    # -- columns -------------------------------------------------------------------------------
    def _extractor(self) -> Any:
        """rows -> {leaf name: column list} (C-level attribute access, level by level)."""
        tree = struct_builder.tree(
            [(x.path, x.name) for x in self.typed] + [((k,), f"raw:{k}") for k in self.raw_keys]
        )

        def level(node: dict[str, Any]) -> tuple[Any, list[tuple[int, Any]]]:
            attrs = [f"f{i}" for i in range(len(node))]
            get = attrgetter(*attrs) if len(attrs) > 1 else (lambda o, a=attrs[0]: (getattr(o, a),))
            subs = [
                (i, level(v)) if isinstance(v, dict) else (i, v)
                for i, v in enumerate(node.values())
            ]
            return get, subs

        spec = level(tree)

        def run(
            objs: Sequence[Any], lv: tuple[Any, list[tuple[int, Any]]], out: dict[str, list[Any]]
        ) -> None:
            get, subs = lv
            cols: list[Any] = (
                list(zip(*map(get, objs), strict=True)) if objs else [() for _ in subs]
            )
            for i, sub in subs:
                if isinstance(sub, str):
                    out[sub] = list(cols[i])
                else:
                    col = cols[i]
                    if None in col:  # an optional object absent: its leaves absent
                        inner: dict[str, list[Any]] = {}
                        present = [o for o in col if o is not None]
                        run(present, sub, inner)
                        it = {k: iter(v) for k, v in inner.items()}
                        for k in inner:
                            out[k] = [next(it[k]) if o is not None else None for o in col]
                    else:
                        run(col, sub, out)

        def extract(rows: Sequence[Any]) -> dict[str, list[Any]]:
            out: dict[str, list[Any]] = {}
            run(rows, spec, out)
            return out

        return extract

    def columns(self, rows: Sequence[Any]) -> dict[str, list[Any]]:
        cols: dict[str, list[Any]] = self._extract(rows)
        return cols

    # -- metadata kept raw -------------------------------------------------------------------------
    def raw_ok(self, raws: dict[str, Any]) -> bool:
        """Whether the raw top-level objects of one record hold valid fields (the validator's
        own reading of them, alternatives included)."""
        doc: dict[str, Any] = {}
        shortcut = True
        try:
            for k, raw in raws.items():
                if len(raw):
                    doc[k] = orjson.loads(memoryview(raw))  # no copy
                    shortcut = shortcut and self._raw_checks[k].accepts(raw, doc[k])
                elif self._raw_checks[k].required:
                    shortcut = False  # absent but required: the contract names what is missing
        except orjson.JSONDecodeError:
            return False
        if shortcut:
            return True  # a subset of what the contract accepts (tests hold the two together)
        try:
            self.reader.check_fields(doc, self.raw_fields, self.raw_keys)
        except Rejection:
            return False
        return True


def _has(doc: Any, path: WirePath) -> bool:
    for key in path:
        if not isinstance(doc, dict) or key not in doc:
            return False
        doc = doc[key]
    return doc is not None


# -- identifiers (checked column-wise) --------------------------------------------------------------
# EventId is [A-Za-z0-9._:-]{1,64}: drop the punctuation, the rest must be ASCII alphanumerics.
_ID_PUNCT = str.maketrans("", "", "._:-")
_VALID_IDS: set[str] = set()  # device IDs that matched the pattern (bounded, see below)
_CACHE_MAX = 1_000_000


def event_ids_ok(ids: Sequence[str]) -> bool:
    text = "".join(ids).translate(_ID_PUNCT)
    return text.isascii() and (text.isalnum() or not text)


def device_ids_bad(ids: Sequence[str]) -> list[int]:
    """Rows whose device ID does not match the contract's pattern."""
    if _VALID_IDS.issuperset(ids):
        return []
    if len(_VALID_IDS) >= _CACHE_MAX:
        _VALID_IDS.clear()
    bad = []
    for i, d in enumerate(ids):
        if d not in _VALID_IDS:
            if ev.is_device_id(d):
                _VALID_IDS.add(d)
            else:
                bad.append(i)
    return bad
