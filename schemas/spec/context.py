"""Context values: what the low-rate streams (work orders, alarms, ...) say about a device, folded
per device by one idempotent reducer (precast.fleet.context) in the context aggregator and in
the worker, and read as of each prediction's event time.

Kinds (the field's own names for them: feast `Aggregation`, chronon `GroupBy`):
- `open_count`: entities tracked by ID through a lifecycle (work orders: opened -> closed); a
  windowed count cannot say "still open";
- `window_count`: distinct events in a trailing event-time window, with a filter (alarms by
  severity in the last hour);
- `time_since_last`: time since the last matching event, capped (also what a device that never
  had one gets);
- `last`: the newest matching event's value of a numeric field.
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field

from schemas.spec.fields import Name, Strict

# field -> the values that pass (an event passes when every listed field has one of its values)
Where = dict[Name, tuple[str | bool | int | float, ...]]


class _Context(Strict):
    stream: Name
    where: Where = Field(default_factory=dict)
    description: str = ""


class OpenCount(_Context):
    kind: Literal["open_count"]
    entity: Name  # the field holding the entity's ID
    status: Name  # the lifecycle field
    open: tuple[str, ...] = Field(min_length=1)
    closed: tuple[str, ...] = Field(min_length=1)
    # Bound per device: past it the oldest open entity is forgotten (a misbehaving device must
    # not grow a context without limit).
    limit: int = Field(default=256, ge=1, le=100_000)


class WindowCount(_Context):
    kind: Literal["window_count"]
    window_s: float = Field(gt=0, le=90 * 86_400)
    # Count each ID once (redelivery and duplicates change nothing); without it the event ID.
    distinct: Name | None = None
    limit: int = Field(default=1024, ge=1, le=100_000)


Unit = Literal["s", "min", "h", "d"]
UNIT_MS: dict[str, int] = {"s": 1_000, "min": 60_000, "h": 3_600_000, "d": 86_400_000}


class TimeSinceLast(_Context):
    kind: Literal["time_since_last"]
    unit: Unit = "s"
    cap: float = Field(gt=0)


class Last(_Context):
    kind: Literal["last"]
    field: Name
    default: float = 0.0


ContextSpec = Annotated[OpenCount | WindowCount | TimeSinceLast | Last, Field(discriminator="kind")]
