"""The fleet spec (docs/fleets.md): what a fleet's devices send, what precast derives from it
(context values, features), what the model sees and what the board shows. One TOML file,
validated here; everything else is derived from it."""

from schemas.spec.checks import Problem
from schemas.spec.identity import context_hash, feature_hash
from schemas.spec.load import DEFAULT_SPEC, FLEETS, SpecError, check, json_schema, load_spec
from schemas.spec.model import FleetSpec

__all__ = [
    "DEFAULT_SPEC",
    "FLEETS",
    "FleetSpec",
    "Problem",
    "SpecError",
    "check",
    "context_hash",
    "feature_hash",
    "json_schema",
    "load_spec",
]
