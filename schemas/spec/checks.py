"""The second validation pass of a fleet spec: what refers to what. Every problem is reported
with its path in the file (`features[6].by`), not just the first one, so `precast fleet check`
can list them all."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from schemas.spec.context import ContextSpec, Last, OpenCount, WindowCount
from schemas.spec.features import Feature
from schemas.spec.fields import (
    Attribute,
    Boolean,
    Categorical,
    FieldSpec,
    Metric,
    Stream,
    WirePath,
)
from schemas.spec.messages import near
from schemas.spec.model import BOARD_RESERVED, FleetSpec, numeric_field
from schemas.spec.outcomes import outcome_problems
from schemas.spec.simulation import Condition

# Keys of a normalized event besides its declared fields (schemas.validation).
RESERVED = frozenset(
    {"device_id", "event_id", "event_time_ms", "produced_at_ms", "schema_version", "kind", "stream"}
)


@dataclass(frozen=True)
class Problem:
    path: str
    message: str

    def __str__(self) -> str:
        # No path: a problem of the whole file (unreadable, not TOML), named by whoever prints it.
        return f"{self.path}: {self.message}" if self.path else self.message


def problems(spec: FleetSpec) -> list[Problem]:
    return [
        *_streams(spec),
        *_serving(spec),
        *_contexts(spec),
        *_features(spec),
        *_board(spec),
        *_outcomes(spec),
        *_simulator(spec),
    ]


def _streams(spec: FleetSpec) -> Iterator[Problem]:
    topics: dict[str, str] = {}
    for name, s in spec.streams.items():
        where = f"streams.{name}"
        if s.topic in topics:
            yield Problem(
                f"{where}.topic", f"topic {s.topic!r} is already read by stream {topics[s.topic]!r}"
            )
        topics.setdefault(s.topic, name)
        for f in s.fields:
            if f in RESERVED:
                yield Problem(f"{where}.fields.{f}", "this name is reserved for the envelope")
        yield from _paths(where, s)
        if s.topic == "heartbeats" and s.trigger != "any":
            yield Problem(f"{where}.trigger", "heartbeats are judged by the speculation policy")
    if "heartbeats" not in topics:
        yield Problem("streams", 'no stream reads topic "heartbeats" (the device readings)')


def _paths(where: str, s: Stream) -> Iterator[Problem]:
    owner: dict[WirePath, str] = {}
    for path, name in s.envelope.all_paths(s.fields):
        if path in owner and owner[path] != name:
            yield Problem(
                f"{where}.fields.{name}.path", f"{'.'.join(path)} is also {owner[path]}'s"
            )
        owner.setdefault(path, name)
    for p, name in owner.items():
        for q, other in owner.items():
            if len(q) > len(p) and q[: len(p)] == p:
                yield Problem(
                    f"{where}.fields.{other}.path",
                    f"{'.'.join(q)} lies inside {'.'.join(p)} ({name}'s value)",
                )


def _serving(spec: FleetSpec) -> Iterator[Problem]:
    sv = spec.serving
    if len(set(sv.labels)) != len(sv.labels):
        yield Problem("serving.labels", "a label is listed twice")
    if sv.default_label not in sv.labels:
        yield Problem(
            "serving.default_label",
            f"{sv.default_label!r} is not one of the labels{near(sv.default_label, sv.labels)}",
        )
    if sv.top_k > len(sv.labels):
        yield Problem("serving.top_k", f"{sv.top_k} is more than the {len(sv.labels)} labels")


def _contexts(spec: FleetSpec) -> Iterator[Problem]:
    for name, c in spec.context.items():
        where = f"context.{name}"
        if name in spec.heartbeats.fields:
            yield Problem(where, "a heartbeat field has the same name")
        entry = spec.streams.get(c.stream)
        if entry is None or entry.topic == "heartbeats":
            yield Problem(f"{where}.stream", f"no event stream {c.stream!r} besides the heartbeats")
            continue
        yield from _where_clause(where, c.stream, c.where, entry.fields)
        yield from _context_kind(where, c, entry.fields)


def _where_clause(
    where: str, stream: str, clause: dict[str, tuple[Any, ...]], fields: dict[str, FieldSpec]
) -> Iterator[Problem]:
    for key, allowed in clause.items():
        f = fields.get(key)
        if f is None:
            yield Problem(f"{where}.where.{key}", f"stream {stream!r} has no field {key!r}")
        elif isinstance(f, Categorical):
            bad = [v for v in allowed if v not in f.values]
            if bad:
                yield Problem(f"{where}.where.{key}", f"{bad[0]!r} is not one of {list(f.values)}")
        elif isinstance(f, Boolean) and not all(isinstance(v, bool) for v in allowed):
            yield Problem(f"{where}.where.{key}", "a boolean field takes true or false")


def _context_kind(where: str, c: ContextSpec, fields: dict[str, FieldSpec]) -> Iterator[Problem]:
    if isinstance(c, OpenCount):
        for role in ("entity", "status"):
            if getattr(c, role) not in fields:
                yield Problem(
                    f"{where}.{role}", f"stream {c.stream!r} has no field {getattr(c, role)!r}"
                )
        st = fields.get(c.status)
        if st is not None and not isinstance(st, Categorical):
            yield Problem(f"{where}.status", "the lifecycle field must be categorical")
        elif isinstance(st, Categorical):
            for role in ("open", "closed"):
                bad = [v for v in getattr(c, role) if v not in st.values]
                if bad:
                    yield Problem(f"{where}.{role}", f"{bad[0]!r} is not a value of {c.status!r}")
    elif isinstance(c, WindowCount) and c.distinct is not None and c.distinct not in fields:
        yield Problem(f"{where}.distinct", f"stream {c.stream!r} has no field {c.distinct!r}")
    elif isinstance(c, Last):
        f = fields.get(c.field)
        if f is None or not numeric_field(f):
            yield Problem(f"{where}.field", f"{c.field!r} is not a numeric field of {c.stream!r}")


def _features(spec: FleetSpec) -> Iterator[Problem]:
    seen: set[str] = set()
    for i, feat in enumerate(spec.features):
        where = f"features[{i}]({feat.name})"
        if feat.name in seen:
            yield Problem(f"{where}.name", f"feature {feat.name!r} is declared twice")
        seen.add(feat.name)
        yield from _source(spec, feat, where)
    cols = spec.feature_names
    dup = sorted({c for c in cols if cols.count(c) > 1})
    if dup:
        yield Problem("features", f"column {dup[0]!r} comes out of two features")


def _sources(spec: FleetSpec) -> list[str]:
    return [*spec.heartbeats.fields, *spec.context]


def _source(spec: FleetSpec, feat: Feature, where: str) -> Iterator[Problem]:
    kind = spec.source_kind(feat.source)
    f, t = spec.field(feat.source), feat.transform
    if kind is None:
        yield Problem(
            f"{where}.source",
            f"{feat.source!r} is neither a heartbeat field nor a context value"
            + near(feat.source, _sources(spec)),
        )
    elif t == "one_hot":
        if not isinstance(f, Categorical):
            yield Problem(f"{where}.transform", "one_hot needs a categorical source")
        elif isinstance(feat.missing, str) and feat.missing not in f.values:
            yield Problem(f"{where}.missing", f"{feat.missing!r} is not one of {list(f.values)}")
    elif t == "member_of":
        yield from _member_of(spec, feat, where)
    elif isinstance(f, Attribute):
        yield Problem(
            f"{where}.source", "an attribute is never a feature (a member_of test of it can be)"
        )
    elif f is not None and not numeric_field(f):
        yield Problem(
            f"{where}.transform", f"{t} needs a numeric source; {feat.source!r} is {f.kind}"
        )
    elif t == "log1p" and isinstance(f, Metric) and (f.min is None or f.min < 0):
        yield Problem(
            f"{where}.transform",
            f"log1p needs a source that cannot be negative (min >= 0 on {feat.source!r})",
        )


def _member_of(spec: FleetSpec, feat: Feature, where: str) -> Iterator[Problem]:
    f = spec.field(feat.source)
    if not isinstance(f, Categorical | Attribute) or (
        isinstance(f, Attribute) and f.type != "string"
    ):
        yield Problem(f"{where}.source", "member_of needs a categorical or text heartbeat field")
    if feat.by is not None:
        by = spec.field(feat.by)
        if not isinstance(by, Categorical | Attribute):
            yield Problem(
                f"{where}.by", f"{feat.by!r} is not a categorical or text heartbeat field"
            )
        elif isinstance(by, Categorical) and isinstance(feat.values, dict):
            bad = [k for k in feat.values if k not in by.values]
            if bad:
                yield Problem(f"{where}.values", f"{bad[0]!r} is not a value of {feat.by!r}")


def _board(spec: FleetSpec) -> Iterator[Problem]:
    b = spec.board
    for role in ("columns", "detail", "filters"):
        for j, name in enumerate(getattr(b, role)):
            kind = spec.source_kind(name)
            if role != "detail" and name in BOARD_RESERVED:
                yield Problem(f"board.{role}[{j}]", f"{name!r} is a name the board uses itself")
            elif kind is None:
                yield Problem(
                    f"board.{role}[{j}]",
                    f"{name!r} is neither a heartbeat field nor a context value"
                    + near(name, _sources(spec)),
                )
            elif role == "filters" and kind not in ("categorical", "attribute"):
                yield Problem(
                    f"board.{role}[{j}]",
                    f"only categorical and attribute fields filter, not {kind}",
                )
    for j, rule in enumerate(b.alert):
        if rule.context not in spec.context:
            yield Problem(
                f"board.alert[{j}].context",
                f"no context value {rule.context!r}{near(rule.context, spec.context)}",
            )


def _outcomes(spec: FleetSpec) -> Iterator[Problem]:
    if spec.outcomes is not None:
        for path, message in outcome_problems(spec.outcomes, spec.streams, spec.labels):
            yield Problem(path, message)


def _simulator(spec: FleetSpec) -> Iterator[Problem]:
    sim = spec.simulator
    if sim is None:
        return
    hb = spec.heartbeats.fields
    for name, d in sim.devices.items():
        if name not in hb:
            yield Problem(f"simulator.devices.{name}", "not a heartbeat field")
        if d.by is not None and d.by not in hb:
            yield Problem(f"simulator.devices.{name}.by", f"{d.by!r} is not a heartbeat field")
    for j, w in enumerate(sim.wire):
        for key in w.when:
            if key not in sim.devices:
                yield Problem(
                    f"simulator.wire[{j}].when.{key}", "not a field the simulator draws per device"
                )
    yield from _simulated_streams(spec)
    for j, c in enumerate(sim.conditions):
        yield from _condition(spec, f"simulator.conditions[{j}]({c.name})", c)


def _simulated_streams(spec: FleetSpec) -> Iterator[Problem]:
    assert spec.simulator is not None
    for name, st in spec.simulator.streams.items():
        s = spec.streams.get(name)
        if s is None:
            yield Problem(f"simulator.streams.{name}", "no such stream")
            continue
        for role in ("entity", "status", "clear"):
            v = getattr(st, role)
            if v is not None and v not in s.fields:
                yield Problem(
                    f"simulator.streams.{name}.{role}", f"stream {name!r} has no field {v!r}"
                )


def _condition(spec: FleetSpec, where: str, c: Condition) -> Iterator[Problem]:
    sim = spec.simulator
    assert sim is not None
    if c.label not in spec.serving.labels:
        yield Problem(
            f"{where}.label",
            f"{c.label!r} is not one of the labels{near(c.label, spec.serving.labels)}",
        )
    for name in c.heartbeat:
        if not isinstance(spec.heartbeats.fields.get(name), Metric):
            yield Problem(f"{where}.heartbeat.{name}", "not a metric of the heartbeats")
    for k, ev in enumerate(c.events):
        s = spec.streams.get(ev.stream)
        if s is None or ev.stream not in sim.streams:
            yield Problem(f"{where}.events[{k}].stream", f"{ev.stream!r} is not a simulated stream")
            continue
        for key in ev.fields:
            if key not in s.fields:
                yield Problem(
                    f"{where}.events[{k}].fields.{key}",
                    f"stream {ev.stream!r} has no field {key!r}",
                )
