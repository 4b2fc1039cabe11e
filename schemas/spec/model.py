"""The fleet spec: one file that says what a fleet sends, what precast derives from it and what
the model sees (docs/fleets.md). Validated in two passes: pydantic for shape and types (unknown
keys are errors), then `problems()` for what refers to what (a feature's source exists, a
one-hot source is categorical, ...). `schemas.spec.load` runs both and reports every problem
with its path in the file.
"""

from __future__ import annotations

from functools import cached_property
from typing import Annotated, Literal

from pydantic import Field

from schemas.spec.context import ContextSpec
from schemas.spec.features import Feature
from schemas.spec.fields import (
    Attribute,
    Boolean,
    Categorical,
    FieldSpec,
    Metric,
    Name,
    Stream,
    Strict,
)
from schemas.spec.outcomes import Outcomes
from schemas.spec.simulation import Simulator


class FleetInfo(Strict):
    name: Annotated[str, Field(pattern=r"^[a-z][a-z0-9_-]{0,62}$")]
    version: int = Field(ge=1)
    description: str = ""


class Serving(Strict):
    labels: tuple[Annotated[str, Field(min_length=1, max_length=64)], ...] = Field(min_length=2)
    default_label: str
    top_k: int = Field(default=3, ge=1)
    horizon_s: float = Field(default=5.0, gt=0, le=86_400)
    # the folder name models of this fleet get (workers/models/<model_name>/<version>)
    model_name: Annotated[str, Field(pattern=r"^[a-z][a-z0-9_-]{0,62}$")] = "fleet-model"


class TimeBounds(Strict):
    max_skew_s: float = Field(default=300.0, ge=0)
    max_ahead_s: float = Field(default=5.0, ge=0)
    max_lateness_s: float = Field(default=3600.0, ge=0)


class AlertRule(Strict):
    state: Annotated[str, Field(pattern=r"^[a-z][a-z0-9_]{0,30}$")]
    context: Name


# What the board calls its own columns and the fleet query's parameters (consumer_api's board
# layout): a spec's board column or filter may not take one of these names.
BOARD_RESERVED = frozenset(
    {
        "device_id", "strategy", "score", "source", "computed_at_ms", "valid_until_ms",
        "delay_origin", "model_version", "trigger", "lease", "age_ms", "alarm",
        "sort", "order", "offset", "limit",
    }
)  # fmt: skip


class Board(Strict):
    columns: tuple[Name, ...] = ()
    filters: tuple[Name, ...] = ()
    alert: tuple[AlertRule, ...] = ()
    detail: tuple[Name, ...] = ()


StreamRole = Literal["heartbeats", "work_orders", "alarms"]


class FleetSpec(Strict):
    fleet: FleetInfo
    serving: Serving
    time: TimeBounds = TimeBounds()
    streams: dict[Name, Stream]
    context: dict[Name, ContextSpec] = Field(default_factory=dict)
    features: tuple[Feature, ...] = Field(min_length=1)
    board: Board = Board()
    outcomes: Outcomes | None = None
    simulator: Simulator | None = None

    # -- derived views (the spec is frozen, so they are computed once) --------------------------
    @cached_property
    def by_topic(self) -> dict[str, tuple[str, Stream]]:
        """topic role -> (stream name, stream)."""
        return {s.topic: (name, s) for name, s in self.streams.items()}

    @cached_property
    def heartbeats(self) -> Stream:
        """The stream of device readings (the only one features read fields from)."""
        return self.by_topic["heartbeats"][1]

    @cached_property
    def heartbeat_stream(self) -> str:
        return self.by_topic["heartbeats"][0]

    def field(self, name: str) -> FieldSpec | None:
        return self.heartbeats.fields.get(name)

    def vocabulary(self, feature: Feature) -> tuple[str, ...]:
        f = self.field(feature.source)
        return f.values if isinstance(f, Categorical) else ()

    @cached_property
    def feature_names(self) -> tuple[str, ...]:
        """The model's input columns, expanded (`device_type=camera`), in order."""
        return tuple(c for f in self.features for c in f.columns(self.vocabulary(f)))

    @cached_property
    def labels(self) -> tuple[str, ...]:
        return self.serving.labels

    def source_kind(self, name: str) -> str | None:
        """What a feature source is: a heartbeat field's kind, "context", or None (unknown)."""
        f = self.field(name)
        if f is not None:
            return f.kind
        return "context" if name in self.context else None


def numeric_field(f: FieldSpec) -> bool:
    return isinstance(f, Metric | Boolean) or (
        isinstance(f, Attribute) and f.type in ("integer", "number")
    )
