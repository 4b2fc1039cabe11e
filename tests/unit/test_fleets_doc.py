"""docs/fleets.md is how a new team writes its spec: its minimal spec must load as it stands, and
each table's snippet must load added to it (and to the snippets before it), so the page cannot
teach a shape the loader refuses."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path
from typing import Any

import jsonschema
import pytest

from schemas.spec import json_schema
from schemas.spec.load import parse

DOC = Path("docs/fleets.md")
BLOCKS = re.findall(r"```toml\n(.*?)```", DOC.read_text(), flags=re.S)


def _merge(into: dict[str, Any], extra: dict[str, Any]) -> None:
    """A snippet added to a spec: tables merge key by key, arrays of tables append."""
    for key, value in extra.items():
        have = into.get(key)
        if isinstance(have, dict) and isinstance(value, dict):
            _merge(have, value)
        elif (
            isinstance(have, list)
            and isinstance(value, list)
            and value
            and isinstance(value[0], dict)
        ):
            have.extend(value)
        else:
            into[key] = value


def _loads(spec: dict[str, Any]) -> list[str]:
    _, problems = parse(spec, "docs/fleets.md")
    errors = [e.message for e in jsonschema.Draft202012Validator(json_schema()).iter_errors(spec)]
    return [str(p) for p in problems] + errors


def test_the_page_has_a_minimal_spec_and_a_snippet_per_table():
    tables = {k for block in BLOCKS[1:] for k in tomllib.loads(block)}
    assert tables >= {
        "fleet",
        "serving",
        "time",
        "streams",
        "context",
        "features",
        "board",
        "outcomes",
        "simulator",
    }


def test_the_minimal_spec_loads_as_it_stands():
    assert _loads(tomllib.loads(BLOCKS[0])) == []


@pytest.mark.parametrize("upto", range(1, len(BLOCKS)))
def test_each_snippet_loads_added_to_the_spec(upto: int):
    spec = tomllib.loads(BLOCKS[0])
    for block in BLOCKS[1 : upto + 1]:
        _merge(spec, tomllib.loads(block))
    assert _loads(spec) == []
