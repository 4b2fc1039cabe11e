"""What `precast fleet check` says about a broken spec: the place in the file (list items named),
the expected shape written as TOML, and the nearest key, kind, source or label to a misspelt one."""

from __future__ import annotations

import copy
import tomllib
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from schemas.spec import FLEETS
from schemas.spec.load import check, parse
from schemas.spec.messages import near

BASE = tomllib.loads((FLEETS / "devices.toml").read_text())


def _hb(s: dict[str, Any]) -> dict[str, Any]:
    return s["streams"]["heartbeats"]


def _feature(s: dict[str, Any], name: str) -> dict[str, Any]:
    return next(f for f in s["features"] if f["name"] == name)


CASES: list[tuple[str, Callable[[dict[str, Any]], None], str]] = [
    (
        "event_time as a string",
        lambda s: _hb(s)["envelope"].update(event_time="ts"),
        'streams.heartbeats.envelope.event_time: expected a table, e.g. event_time = { path = "a.b",'
        ' unit = "ms" | "s" }; found "ts"',
    ),
    (
        "a misspelt field kind",
        lambda s: _hb(s)["fields"]["temperature_c"].update(kind="metirc"),
        'streams.heartbeats.fields.temperature_c.kind: "metirc" is not a kind (did you mean'
        ' "metric"?); one of: metric, categorical, boolean, attribute',
    ),
    (
        "a misspelt key",
        lambda s: _hb(s)["fields"]["temperature_c"].update(units="C"),
        'streams.heartbeats.fields.temperature_c.units: unknown key (did you mean "unit"?)',
    ),
    (
        "a misspelt source, named by its feature",
        lambda s: _feature(s, "mem_pct").update(source="mem_pcx"),
        "features[1](mem_pct).source: 'mem_pcx' is neither a heartbeat field nor a context value"
        ' (did you mean "mem_pct"?)',
    ),
    (
        "a misspelt label",
        lambda s: s["serving"].update(default_label="monitr_only"),
        "serving.default_label: 'monitr_only' is not one of the labels"
        ' (did you mean "monitor_only"?)',
    ),
    (
        "a misspelt table",
        lambda s: s.update(servng={}),
        'servng: unknown key (did you mean "serving"?)',
    ),
    (
        "a missing key",
        lambda s: s["fleet"].pop("name"),
        'fleet.name: required key missing: name = "..."',
    ),
    (
        "a unit outside the allowed ones",
        lambda s: _hb(s)["envelope"]["event_time"].update(unit="mss"),
        'streams.heartbeats.envelope.event_time.unit: "mss" is not allowed (did you mean "ms"?);'
        " one of: ms, s",
    ),
]


@pytest.mark.parametrize(("name", "brk", "expected"), CASES, ids=[c[0] for c in CASES])
def test_a_problem_names_its_place_the_shape_and_the_nearest_match(name, brk, expected):
    spec = copy.deepcopy(BASE)
    brk(spec)
    assert _feature(BASE, "mem_pct") is BASE["features"][1]  # the index the message names
    _, problems = parse(spec, "x.toml")
    assert [str(p) for p in problems] == [expected]


def test_no_suggestion_when_nothing_is_close():
    assert near("zzzz", ["metric", "boolean"]) == ""
    assert near(7, ["metric"]) == ""


def test_a_toml_syntax_error_names_the_line_once(tmp_path: Path):
    bad = tmp_path / "bad.toml"
    bad.write_text("[fleet\nname = 1\n")
    spec, problems = check(bad)
    assert spec is None and len(problems) == 1
    text = str(problems[0])
    assert text.startswith("not TOML:") and "line 1" in text and str(bad) not in text
