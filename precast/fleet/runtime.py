"""One fleet spec, compiled once per process: its validator, context reducer and feature
matrix. Applications build it at their entry point from the spec their settings name
(`PRECAST_FLEET__SPEC`, the built-in fleet by default) and pass it down."""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

from precast.fleet.context import ContextModel
from precast.fleet.features import FeatureModel
from schemas.spec import FleetSpec, load_spec
from schemas.validation import Validator


@dataclass(frozen=True)
class Fleet:
    spec: FleetSpec
    validator: Validator
    context: ContextModel
    features: FeatureModel

    @classmethod
    def of(cls, spec: FleetSpec) -> Fleet:
        context = ContextModel(spec)
        return cls(spec, Validator(spec), context, FeatureModel(spec, context))

    @property
    def name(self) -> str:
        return self.spec.fleet.name

    def describe(self) -> str:
        """`devices v1 (features 3f2a...)`: what a log line or an error names."""
        return f"{self.name} v{self.spec.fleet.version} (features {self.features.hash[:12]})"


@lru_cache(maxsize=8)
def _load(path: str | None) -> Fleet:
    return Fleet.of(load_spec(path))


def load_fleet(path: Path | str | None = None) -> Fleet:
    """The compiled fleet of the spec in `path` (the built-in fleet when None); raises
    `schemas.spec.SpecError` naming every problem of a bad spec."""
    return _load(None if path is None else str(Path(path).resolve()))
