"""The optional `[outcomes]` table: which events say how a work order ended, so the topics carry
the fleet's own ground truth (docs/fleets.md, "Outcomes").

A work order (an entity of a lifecycle stream) is opened, and later closed with a `resolution`:
one of the spec's serving labels, the strategy that actually fixed the device, optionally with
who resolved it. `precast dataset build` pairs each resolution with the features the worker
would have computed when the work order was opened (point in time), and `precast shadow
--truth outcomes` scores models against the resolutions of a range.

The resolution is an ordinary optional field of the stream (a categorical whose vocabulary is
the serving labels, `unknown = "reject"`), so adding it is a compatible contract change: old
producers keep working, and an unknown label is a dead letter with its reason.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence

from pydantic import Field

from schemas.spec.fields import Attribute, Categorical, FieldSpec, Name, Stream, Strict


class Outcomes(Strict):
    stream: Name  # the lifecycle stream (work orders)
    entity: Name  # the field holding the work order's ID
    status: Name  # the lifecycle field
    opened: tuple[str, ...] = Field(min_length=1)  # status values that open one
    resolved: tuple[str, ...] = Field(min_length=1)  # status values that close it
    resolution: Name  # the field holding the label on a close
    resolved_by: Name | None = None  # optional: who resolved it (an attribute)
    description: str = ""


def outcome_problems(
    o: Outcomes, streams: Mapping[str, Stream], labels: Sequence[str]
) -> Iterator[tuple[str, str]]:
    """(path, message) of everything wrong with the outcomes table against the spec."""
    s = streams.get(o.stream)
    if s is None or s.topic == "heartbeats":
        yield "outcomes.stream", f"no event stream {o.stream!r} besides the heartbeats"
        return
    fields = s.fields
    for role in ("entity", "status", "resolution", "resolved_by"):
        name = getattr(o, role)
        if name is not None and name not in fields:
            yield f"outcomes.{role}", f"stream {o.stream!r} has no field {name!r}"
    yield from _lifecycle(o, fields.get(o.status))
    yield from _resolution(
        f"streams.{o.stream}.fields.{o.resolution}", fields.get(o.resolution), labels
    )
    by = fields.get(o.resolved_by) if o.resolved_by else None
    if by is not None and not (isinstance(by, Attribute) and by.type == "string"):
        yield f"streams.{o.stream}.fields.{o.resolved_by}", "resolved_by is a text attribute"


def _lifecycle(o: Outcomes, status: FieldSpec | None) -> Iterator[tuple[str, str]]:
    if status is not None and not isinstance(status, Categorical):
        yield "outcomes.status", "the lifecycle field must be categorical"
    elif isinstance(status, Categorical):
        for role in ("opened", "resolved"):
            bad = [v for v in getattr(o, role) if v not in status.values]
            if bad:
                yield f"outcomes.{role}", f"{bad[0]!r} is not a value of {o.status!r}"
        both = set(o.opened) & set(o.resolved)
        if both:
            yield "outcomes.resolved", f"{sorted(both)[0]!r} both opens and resolves"


def _resolution(
    where: str, res: FieldSpec | None, labels: Sequence[str]
) -> Iterator[tuple[str, str]]:
    if res is not None and not isinstance(res, Categorical):
        yield where, "a resolution is categorical: its values are the serving labels"
    elif isinstance(res, Categorical):
        if set(res.values) != set(labels):
            extra = sorted(set(res.values) - set(labels))
            lacking = sorted(set(labels) - set(res.values))
            yield (
                where + ".values",
                (f"must be the serving labels (not labels: {extra}, missing: {lacking})"),
            )
        if res.unknown != "reject":
            yield where + ".unknown", 'must be "reject": an unknown label is a dead letter'
        if res.required:
            yield where + ".required", "must be false: closes without a resolution stay valid"
