"""Reading a fleet spec file (TOML, read with the standard library's `tomllib`): both validation
passes, every problem with its path in the file."""

from __future__ import annotations

import tomllib
from functools import lru_cache
from pathlib import Path
from typing import Any

from pydantic import ValidationError
from pydantic_core import ErrorDetails

from schemas.spec.checks import Problem, problems
from schemas.spec.model import FleetSpec

FLEETS = Path(__file__).resolve().parent.parent / "fleets"
# The built-in fleet, used unless PRECAST_FLEET__SPEC names another file.
DEFAULT_SPEC = FLEETS / "devices.toml"
# Tags of the spec's discriminated unions: pydantic puts them into an error's location.
_TAGS = {"kind"}


class SpecError(ValueError):
    """A spec that cannot be used; `problems` lists every one found."""

    def __init__(self, source: str, found: list[Problem]) -> None:
        self.source, self.problems = source, found
        first = found[0] if found else Problem("spec", "invalid")
        more = f" (+{len(found) - 1} more: precast fleet check {source})" if len(found) > 1 else ""
        super().__init__(f"fleet spec {source}: {first}{more}")


def _where(loc: tuple[Any, ...], data: Any) -> str:
    """A TOML path for a pydantic error location; union tags pydantic inserts are dropped."""
    out: list[str] = []
    node = data
    for part in loc:
        if isinstance(node, dict) and part not in node and node.get("kind") == part:
            continue  # the discriminator's tag, not a key of the file
        if isinstance(part, int):
            out.append(f"[{part}]")
        else:
            out.append(("." if out else "") + str(part))
        try:
            node = node[part]
        except (KeyError, IndexError, TypeError):
            node = None
    return "".join(out) or "spec"


def _message(err: ErrorDetails) -> str:
    msg = str(err["msg"])
    if err["type"] == "extra_forbidden":
        return "unknown key (a misspelling? see `precast fleet schema`)"
    return msg.removeprefix("Value error, ")


def parse(data: dict[str, Any], source: str = "<spec>") -> tuple[FleetSpec | None, list[Problem]]:
    """(spec, problems) of a parsed TOML document; the spec is None when its shape is wrong."""
    try:
        spec = FleetSpec.model_validate(data)
    except ValidationError as exc:
        found = [
            Problem(_where(tuple(e["loc"]), data), _message(e))
            for e in exc.errors(include_url=False)
        ]
        return None, found
    return spec, problems(spec)


def check(path: Path) -> tuple[FleetSpec | None, list[Problem]]:
    try:
        text = Path(path).read_bytes().decode()
    except (OSError, UnicodeDecodeError) as exc:
        return None, [Problem(str(path), f"cannot read: {exc}")]
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        return None, [Problem(str(path), f"not TOML: {exc}")]
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
        raise SpecError(str(p), [Problem(str(p), f"cannot read: {exc.strerror}")]) from None
    return _load(p.resolve(), mtime)


def json_schema() -> dict[str, Any]:
    """The spec file's JSON Schema, for editors (TOML language servers read JSON Schema)."""
    schema = FleetSpec.model_json_schema()
    schema["$schema"] = "https://json-schema.org/draft/2020-12/schema"
    schema["title"] = "precast fleet spec"
    return schema
