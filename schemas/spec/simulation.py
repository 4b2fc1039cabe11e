"""The optional `[simulator]` section: how `precast-simulator` makes a fleet of this kind, and the
hidden conditions that give labelled ground truth (each device is in one condition; a condition
has a right label, characteristic heartbeat distributions and event rates).

Without `conditions`, the simulator still runs from the declared fields alone: metrics uniform
within their ranges, categories uniform, no events; good for wiring a pipeline, useless for
training. With them, `precast train --simulate` trains a first model from the ground truth.
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field, model_validator

from schemas.spec.fields import Name, Strict


class Distribution(Strict):
    """A heartbeat metric's distribution in one condition: exactly one of normal (mean, sd;
    clipped to the field's range), lognormal (mu, sigma of the log, times `scale`), uniform."""

    normal: tuple[float, Annotated[float, Field(ge=0)]] | None = None
    lognormal: tuple[float, Annotated[float, Field(ge=0)]] | None = None
    uniform: tuple[float, float] | None = None
    scale: float = Field(default=1.0, gt=0)
    clip: tuple[float, float] | None = None  # narrower than the field's range, when given

    @model_validator(mode="after")
    def _one(self) -> Distribution:
        if sum(x is not None for x in (self.normal, self.lognormal, self.uniform)) != 1:
            raise ValueError("give exactly one of normal, lognormal, uniform")
        return self


class DeviceDraw(Strict):
    """A field drawn once per device: a category (uniformly or by weights), a release of a list
    per another field's value (`releases`, the last one is the latest; each condition says what
    share runs it), or text from a format (`{i}` device index, `{n}` = start + i % cardinality,
    `{seed3}` = seed % 1000, and any field drawn before it by name)."""

    uniform: bool = False
    weights: dict[str, Annotated[float, Field(ge=0)]] | None = None
    by: Name | None = None
    releases: dict[str, tuple[str, ...]] | None = None
    format: str | None = None
    cardinality: int | None = Field(default=None, ge=1)
    start: int = 0
    type: Literal["string", "integer"] = "string"

    @model_validator(mode="after")
    def _one(self) -> DeviceDraw:
        kinds = [
            self.uniform,
            self.weights is not None,
            self.releases is not None,
            self.format is not None,
        ]
        if sum(kinds) != 1:
            raise ValueError("give exactly one of uniform, weights, releases (with by), format")
        if (self.releases is None) != (self.by is None):
            raise ValueError("releases and by go together")
        return self


WireStyle = Annotated[str, Field(pattern=r"^(path:[2-9]|numbers_as_text|undeclared)$")]


class WireVariant(Strict):
    """Devices that send a tolerated variant of the contract: `path:N` uses the N-th declared
    path of every field that has alternatives, `numbers_as_text` sends metrics as JSON strings,
    `undeclared` adds fields the spec does not know. Chosen by device fields (`when`) or for a
    share of the devices."""

    style: WireStyle
    when: dict[Name, str] = Field(default_factory=dict)
    share: float | None = Field(default=None, gt=0, le=1)

    @model_validator(mode="after")
    def _selector(self) -> WireVariant:
        if bool(self.when) == (self.share is not None):
            raise ValueError("give when (device fields) or share, not both")
        return self


class StreamSim(Strict):
    """How the simulator makes one context stream's events: entities with a lifecycle (opened,
    updated, closed after `mean_open_s` on average) or occurrences that clear (a boolean field
    set on a second event after `mean_open_s`), each with a generated ID."""

    entity: Name
    status: Name | None = None
    open: str | None = None
    update: str | None = None
    close: str | None = None
    clear: Name | None = None
    mean_open_s: float = Field(default=3600.0, gt=0)
    max_open: int = Field(default=8, ge=1, le=256)

    @model_validator(mode="after")
    def _lifecycle(self) -> StreamSim:
        lifecycle = (self.status, self.open, self.close)
        if any(v is not None for v in lifecycle) and not all(v is not None for v in lifecycle):
            raise ValueError("a lifecycle needs status, open and close")
        if self.update is not None and self.status is None:
            raise ValueError("update needs a lifecycle (status, open, close)")
        return self


# A generated event field: a constant (text, number, flag), a uniform choice from a list of
# texts, or weights by text.
ValueGen = bool | float | str | tuple[str, ...] | dict[str, Annotated[float, Field(ge=0)]]


class EventRate(Strict):
    stream: Name
    per_hour: float | None = Field(default=None, ge=0)
    per_day: float | None = Field(default=None, ge=0)
    fields: dict[Name, ValueGen] = Field(default_factory=dict)

    @model_validator(mode="after")
    def _rate(self) -> EventRate:
        if (self.per_hour is None) == (self.per_day is None):
            raise ValueError("give per_hour or per_day")
        return self

    @property
    def per_s(self) -> float:
        return (
            (self.per_hour / 3600.0)
            if self.per_hour is not None
            else (self.per_day or 0) / 86_400.0
        )


class Condition(Strict):
    name: Name
    label: str
    prevalence: float = Field(gt=0)
    heartbeat: dict[Name, Distribution] = Field(default_factory=dict)
    # share of this condition's devices that run the last of their `releases`
    latest_share: float | None = Field(default=None, ge=0, le=1)
    events: tuple[EventRate, ...] = ()
    description: str = ""


class Simulator(Strict):
    heartbeat_every_s: float = Field(default=1.0, gt=0)
    # A share of the devices slides from its condition into another over `drift_s` of simulated
    # time, each starting at its own moment in [0, drift_s).
    drift_share: float = Field(default=0.0, ge=0, le=1)
    drift_s: float = Field(default=1800.0, gt=0)
    # Training from the simulator: share of labels flipped at random (field labels are never
    # perfect).
    label_noise: float = Field(default=0.03, ge=0, lt=1)
    devices: dict[Name, DeviceDraw] = Field(default_factory=dict)
    wire: tuple[WireVariant, ...] = ()
    streams: dict[Name, StreamSim] = Field(default_factory=dict)
    conditions: tuple[Condition, ...] = ()
