"""What a fleet spec says about one stream: where each field is on the wire (declared paths with
ordered alternatives), its kind, and the stream's envelope (device key, event time, version).

A path is dotted (`meta.info.site`); a field may list several, tried in order: the first one a
record has wins. The first path of every field is the canonical wire form (what precast's own
producers send, and what the worker's fast decoder reads without a fallback).
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, model_validator

# Names a spec gives to fields, context values and features: they become metric label values,
# column names and Python identifiers in generated code, so keep them plain.
NAME_PATTERN = r"^[a-z][a-z0-9_]{0,62}$"
Name = Annotated[str, Field(pattern=NAME_PATTERN)]


class Strict(BaseModel):
    """Every table of a spec: unknown keys are errors (a misspelt key must never be ignored)."""

    model_config = ConfigDict(extra="forbid", frozen=True)


WirePath = tuple[str, ...]


def _paths(value: Any) -> Any:
    """`"a.b"` or `["a.b", "c"]` -> (("a", "b"), ("c",)); anything else is left to pydantic."""
    items = [value] if isinstance(value, str) else value
    if not isinstance(items, list | tuple) or not items:
        return value
    out = []
    for p in items:
        if not isinstance(p, str):
            return value
        parts = tuple(p.split("."))
        if not all(parts) or any(c.isspace() for c in p):
            raise ValueError(f"malformed path {p!r}: dotted keys, none empty, no spaces")
        out.append(parts)
    if len(set(out)) != len(out):
        raise ValueError("a path is listed twice")
    return tuple(out)


# The JSON Schema describes what a spec file holds (a dotted path or a list of them), not the
# parsed tuples: editors validate the TOML against it.
_DOTTED = r"^[^.\s]+(\.[^.\s]+)*$"
_PathsInput = (
    Annotated[str, Field(pattern=_DOTTED)]
    | Annotated[list[Annotated[str, Field(pattern=_DOTTED)]], Field(min_length=1)]
)
Paths = Annotated[
    tuple[WirePath, ...],
    BeforeValidator(_paths, json_schema_input_type=_PathsInput),
    Field(min_length=1),
]


def dotted(path: WirePath) -> str:
    return ".".join(path)


class _Field(Strict):
    path: Paths
    required: bool = True
    description: str = ""


class Metric(_Field):
    """A number with a unit and a valid range. Out of range: `reject` (dead letter), `clip` to
    the range, or `null` (the value counts as missing; the feature's `missing` rule applies)."""

    kind: Literal["metric"]
    unit: str = ""
    min: float | None = None
    max: float | None = None
    out_of_range: Literal["reject", "clip", "null"] = "reject"

    @model_validator(mode="after")
    def _range(self) -> Metric:
        if self.min is not None and self.max is not None and self.min > self.max:
            raise ValueError(f"min {self.min:g} is above max {self.max:g}")
        return self


class Categorical(_Field):
    """One of a closed vocabulary. Anything else is the implicit `unknown` (counted) unless
    `unknown = "reject"` makes it a dead letter."""

    kind: Literal["categorical"]
    values: tuple[Annotated[str, Field(min_length=1, max_length=64)], ...] = Field(min_length=1)
    unknown: Literal["accept", "reject"] = "accept"
    max_length: int = Field(default=64, ge=1, le=1024)

    @model_validator(mode="after")
    def _unique(self) -> Categorical:
        if len(set(self.values)) != len(self.values):
            raise ValueError("values are listed twice")
        if "unknown" in self.values:
            raise ValueError('"unknown" is implicit: do not list it')
        return self


class Boolean(_Field):
    kind: Literal["boolean"]
    default: bool | None = None  # the value of an absent optional field


class Attribute(_Field):
    """Shown and filtered on the board, never a feature itself (site, serial)."""

    kind: Literal["attribute"]
    type: Literal["string", "integer", "number"] = "string"
    format: Literal["text", "id"] = "text"  # id: [A-Za-z0-9._:-], like event IDs
    max_length: int = Field(default=64, ge=1, le=1024)
    min: float | None = None
    max: float | None = None


FieldSpec = Annotated[Metric | Categorical | Boolean | Attribute, Field(discriminator="kind")]


class TimeRef(Strict):
    path: Paths
    unit: Literal["ms", "s"] = "ms"


class VersionRef(Strict):
    path: Paths
    supported: tuple[int, ...] = Field(min_length=1)
    required: bool = True


class KindRef(Strict):
    """A discriminator the stream's records carry (absent is tolerated, another value is not)."""

    path: Paths
    value: str


class Envelope(Strict):
    device_id: Paths
    event_id: Paths | None = None
    event_time: TimeRef
    produced_at: TimeRef | None = None
    schema_version: VersionRef | None = None
    kind: KindRef | None = None

    def role_paths(self) -> list[tuple[str, tuple[WirePath, ...]]]:
        """Each envelope role with the wire paths declared for it (alternatives in order)."""
        refs = [
            ("device_id", self.device_id),
            ("event_id", self.event_id),
            ("event_time", self.event_time.path),
            ("produced_at", self.produced_at.path if self.produced_at else None),
            ("schema_version", self.schema_version.path if self.schema_version else None),
            ("kind", self.kind.path if self.kind else None),
        ]
        return [(role, paths) for role, paths in refs if paths]

    def all_paths(self, fields: dict[str, FieldSpec]) -> list[tuple[WirePath, str]]:
        """Every wire path of the envelope and of `fields` with what it is (role or field
        name), repeats kept: what the spec checks look for clashes in."""
        refs = [*self.role_paths(), *((name, f.path) for name, f in fields.items())]
        return [(p, name) for name, paths in refs for p in paths]


TopicRole = Literal["heartbeats", "work_orders", "alarms"]


class Stream(Strict):
    """One event stream of the fleet, read from a topic of the catalog (schemas.topics)."""

    topic: TopicRole
    envelope: Envelope
    fields: dict[Annotated[str, Field(pattern=NAME_PATTERN)], FieldSpec] = Field(
        default_factory=dict
    )
    # Fields on the wire that the spec does not declare: ignored (and counted), or dead-lettered.
    undeclared: Literal["ignore", "dead_letter"] = "ignore"
    # When an event of this stream asks for a prediction: always, only when a context value
    # counts it (an alarm raised, not an info or a clear), or never.
    trigger: Literal["any", "counted", "none"] = "any"
    description: str = ""

    def declared_paths(self) -> dict[WirePath, str]:
        """Every wire path this stream declares -> what it is (field name or envelope role)."""
        out: dict[WirePath, str] = {}
        for p, name in self.envelope.all_paths(self.fields):
            out.setdefault(p, name)
        return out
