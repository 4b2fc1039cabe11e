"""The fleet spec's JSON Schema is what editors check a spec file against: it must accept every
shipped spec and reject the broken shapes the loader rejects, with a standard validator."""

from __future__ import annotations

import copy
import json
import tomllib
from collections.abc import Callable
from pathlib import Path
from typing import Any

import jsonschema
import pytest

from schemas.spec import FLEETS, json_schema
from schemas.spec.load import parse

SPECS = sorted(FLEETS.glob("*.toml"))
VALIDATOR = jsonschema.Draft202012Validator(json_schema())


def _spec(name: str = "devices.toml") -> dict[str, Any]:
    return tomllib.loads((FLEETS / name).read_text())


def test_the_schema_itself_is_a_valid_draft_2020_12_schema():
    jsonschema.Draft202012Validator.check_schema(json_schema())


@pytest.mark.parametrize("path", SPECS, ids=lambda p: p.name)
def test_every_shipped_spec_is_valid_under_the_schema(path: Path):
    errors = [e.message for e in VALIDATOR.iter_errors(tomllib.loads(path.read_text()))]
    assert errors == []


def test_the_schema_file_for_editors_is_the_one_the_cli_prints():
    shipped = json.loads(Path("docs/fleet-spec.schema.json").read_text())
    assert shipped == json_schema(), (
        "regenerate: precast fleet schema > docs/fleet-spec.schema.json"
    )


def _hb(spec: dict[str, Any]) -> dict[str, Any]:
    return spec["streams"]["heartbeats"]


Break = Callable[[dict[str, Any]], None]
BROKEN: dict[str, Break] = {
    "event_time as a bare string": lambda s: _hb(s)["envelope"].update(event_time="ts"),
    "a path with an empty segment": lambda s: _hb(s)["envelope"].update(device_id="a..b"),
    "a path with a space": lambda s: _hb(s)["envelope"].update(device_id="device id"),
    "an empty path list": lambda s: _hb(s)["envelope"].update(device_id=[]),
    "a path that is a number": lambda s: _hb(s)["envelope"].update(device_id=7),
    "a misspelt field kind": lambda s: _hb(s)["fields"]["temperature_c"].update(kind="metirc"),
    "an unknown key in a field": lambda s: _hb(s)["fields"]["temperature_c"].update(units="C"),
    "an unknown top-level table": lambda s: s.update(servng={}),
    "a missing fleet name": lambda s: s["fleet"].pop("name"),
    "labels that are not a list": lambda s: s["serving"].update(labels="monitor_only"),
}


@pytest.mark.parametrize("name", sorted(BROKEN))
def test_a_broken_spec_is_rejected_by_both_the_loader_and_the_schema(name: str):
    spec = copy.deepcopy(_spec())
    BROKEN[name](spec)
    loaded, problems = parse(spec)
    assert loaded is None or problems, "the loader accepted it"
    assert list(VALIDATOR.iter_errors(spec)), "the schema accepted it"
