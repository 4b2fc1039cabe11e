"""Features: the model's input vector, in declaration order. Each is a heartbeat field or a
context value through a transform, with a rule for a missing source.

    identity     x = source / scale
    log1p        x = log1p(source / scale)              (source >= 0)
    clip         x = clip(source / scale, lo, hi)
    standardize  x = (source / scale - mean) / std      (mean, std fitted on the training set,
                                                         kept in the model's manifest)
    one_hot      one column `name=value` per value of a categorical source (unknown: all zero)
    member_of    1 when the source's value is in `values` (or in `values[by]`, by another
                 field's value), else 0: "runs the latest firmware of its type"

`missing` is the value of the *source column* when a device has none (a precompute request for a
device that never sent a heartbeat, a metric nulled as out of range): a number for numeric
sources and for member_of (0 or 1), a category for one_hot (unset: unknown, all zero).
`change_scale` is how far the feature must move, in its own units, to count as one unit of
change for the speculation policy (docs/workers.md).
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field, model_validator

from schemas.spec.fields import Name, Strict

Transform = Literal["identity", "log1p", "clip", "standardize", "one_hot", "member_of"]


class Feature(Strict):
    name: Name
    source: Name
    transform: Transform = "identity"
    scale: float = Field(default=1.0, gt=0)
    clip: tuple[float, float] | None = None
    by: Name | None = None
    values: dict[str, tuple[str, ...]] | tuple[str, ...] | None = None
    missing: float | str | None = None
    change_scale: float = Field(default=1.0, gt=0)
    description: str = ""

    @model_validator(mode="after")
    def _parameters(self) -> Feature:
        t = self.transform
        if t == "clip":
            if self.clip is None:
                raise ValueError('transform "clip" needs clip = [lo, hi]')
            if self.clip[0] > self.clip[1]:
                raise ValueError(f"clip lower bound {self.clip[0]:g} is above {self.clip[1]:g}")
        elif self.clip is not None:
            raise ValueError(f'clip is only for transform "clip", not {t!r}')
        if t == "member_of":
            if self.values is None:
                raise ValueError('transform "member_of" needs values')
            if (self.by is None) != (not isinstance(self.values, dict)):
                raise ValueError(
                    "member_of: values is a table by the `by` field's value, or a list without `by`"
                )
        elif self.by is not None or self.values is not None:
            raise ValueError(f'by and values are only for transform "member_of", not {t!r}')
        if t == "one_hot" and isinstance(self.missing, float | int):
            raise ValueError("one_hot: missing is a category (or unset for unknown), not a number")
        if t not in ("one_hot",) and isinstance(self.missing, str):
            raise ValueError(f"{t}: missing is a number, not {self.missing!r}")
        if t == "member_of" and self.missing not in (None, 0, 1):
            raise ValueError("member_of: missing is 0 or 1")
        return self

    def columns(self, vocabulary: tuple[str, ...] = ()) -> list[str]:
        """The feature's column names in the model's input: one, or one per category."""
        if self.transform == "one_hot":
            return [f"{self.name}={v}" for v in vocabulary]
        return [self.name]
