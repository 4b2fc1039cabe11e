"""Reading a fleet spec file (TOML, read with the standard library's `tomllib`): both validation
passes, every problem with its path in the file."""

from __future__ import annotations

import tomllib
from functools import lru_cache
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from schemas.spec.checks import Problem, problems
from schemas.spec.messages import message
from schemas.spec.model import FleetSpec

FLEETS = Path(__file__).resolve().parent.parent / "fleets"
# The built-in fleet, used unless PRECAST_FLEET__SPEC names another file.
DEFAULT_SPEC = FLEETS / "devices.toml"


class SpecError(ValueError):
    """A spec that cannot be used; `problems` lists every one found."""

    def __init__(self, source: str, found: list[Problem]) -> None:
        self.source, self.problems = source, found
        first = found[0] if found else Problem("spec", "invalid")
        more = f" (+{len(found) - 1} more: precast fleet check {source})" if len(found) > 1 else ""
        super().__init__(f"fleet spec {source}: {first}{more}")


def parse(data: dict[str, Any], source: str = "<spec>") -> tuple[FleetSpec | None, list[Problem]]:
    """(spec, problems) of a parsed TOML document; the spec is None when its shape is wrong."""
    try:
        spec = FleetSpec.model_validate(data)
    except ValidationError as exc:
        found = [Problem(*message(e, FleetSpec, data)) for e in exc.errors(include_url=False)]
        return None, found
    return spec, problems(spec)


def check(path: Path) -> tuple[FleetSpec | None, list[Problem]]:
    try:
        text = Path(path).read_bytes().decode()
    except (OSError, UnicodeDecodeError) as exc:
        return None, [Problem("", f"cannot read: {exc}")]
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        return None, [Problem("", f"not TOML: {exc}")]
    return parse(data, str(path))


@lru_cache(maxsize=8)
def _load(path: Path, mtime_ns: int) -> FleetSpec:
    spec, found = check(path)
    if found or spec is None:
        raise SpecError(str(path), found)
    return spec


def load_spec(path: Path | str | None = None) -> FleetSpec:
    """The spec in `path` (the built-in fleet when None); raises SpecError on any problem."""
    p = Path(path) if path is not None else DEFAULT_SPEC
    try:
        mtime = p.stat().st_mtime_ns
    except OSError as exc:
        raise SpecError(str(p), [Problem("", f"cannot read: {exc.strerror}")]) from None
    return _load(p.resolve(), mtime)


def json_schema() -> dict[str, Any]:
    """The spec file's JSON Schema, for editors (TOML language servers read JSON Schema)."""
    schema = FleetSpec.model_json_schema()
    schema["$schema"] = "https://json-schema.org/draft/2020-12/schema"
    schema["title"] = "precast fleet spec"
    return schema
