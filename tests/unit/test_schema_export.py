"""JSON Schema export and the compatibility policy: within one schema_version, contracts may
only gain optional fields (docs/events.md)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from schemas.events import SCHEMA_VERSION, SUPPORTED_SCHEMA_VERSIONS
from schemas.export import breaking_changes, json_schemas
from schemas.validation import CONTRACTS, UPGRADES

BASELINES = Path(__file__).parent / "schema_baselines"


def test_one_schema_per_contract_in_canonical_form():
    schemas = json_schemas()
    assert set(schemas) == {f"{role}.v{SCHEMA_VERSION}.schema.json" for role in CONTRACTS}
    hb = schemas[f"heartbeats.v{SCHEMA_VERSION}.schema.json"]
    assert hb["$schema"].endswith("2020-12/schema")
    assert hb["properties"]["meta"]["properties"]["info"]["$ref"] == "#/$defs/DeviceInfo"
    assert hb["$defs"]["HeartbeatMetrics"]["properties"]["cpu_pct"] == {
        "maximum": 100,
        "minimum": 0,
        "title": "Cpu Pct",
        "type": "number",
    }
    assert "additionalProperties" not in json.dumps(schemas)  # readers ignore unknown fields


@pytest.mark.parametrize("name", sorted(json_schemas()))
def test_no_breaking_change_within_a_schema_version(name):
    """The frozen baseline of this version must still be satisfiable: nothing removed,
    retyped or newly required. A breaking change needs a new schema_version (and a baseline)."""
    baseline = BASELINES / name
    assert baseline.exists(), f"freeze {name} into {BASELINES} when releasing a schema_version"
    assert breaking_changes(json.loads(baseline.read_text()), json_schemas()[name]) == []


def test_breaking_changes_are_detected():
    old = json_schemas()[f"alarms.v{SCHEMA_VERSION}.schema.json"]
    new = json.loads(json.dumps(old))
    del new["properties"]["code"]
    new["properties"]["severity"] = {"type": "integer"}
    new["required"].append("ticket")
    new["properties"]["note"] = {"type": "string"}  # optional addition: fine
    assert sorted(breaking_changes(old, new)) == [
        "code: removed",
        "severity: type ('string',) -> ('integer',)",
        "ticket: became required",
    ]


def test_consumers_accept_current_and_previous_version():
    assert {v for v in (SCHEMA_VERSION - 1, SCHEMA_VERSION) if v >= 1} == SUPPORTED_SCHEMA_VERSIONS
    # every accepted older version has an upgrade to the current shape
    assert set(UPGRADES) == SUPPORTED_SCHEMA_VERSIONS - {SCHEMA_VERSION}
