"""JSON Schema export and the compatibility policy: within one schema_version, contracts may
only gain optional fields (docs/events.md)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from schemas.events import SCHEMA_VERSION, SUPPORTED_SCHEMA_VERSIONS
from schemas.export import breaking_changes, json_schemas
from schemas.spec import load_spec
from schemas.validation import CONTRACTS, UPGRADES

BASELINES = Path(__file__).parent / "schema_baselines"


def test_one_schema_per_contract_in_canonical_form():
    schemas = json_schemas()
    roles = {*CONTRACTS, *(s.topic for s in load_spec().streams.values())}
    assert set(schemas) == {f"{role}.v{SCHEMA_VERSION}.schema.json" for role in roles}
    hb = schemas[f"heartbeats.v{SCHEMA_VERSION}.schema.json"]
    assert hb["$schema"].endswith("2020-12/schema") and hb["x-precast-fleet"] == "devices"
    site = hb["properties"]["meta"]["properties"]["info"]["properties"]["site"]
    assert site["type"] == "string" and "meta.info.v2.site" in site["description"]
    cpu = hb["properties"]["metrics"]["properties"]["cpu_pct"]
    assert (cpu["type"], cpu["minimum"], cpu["maximum"]) == ("number", 0, 100)
    assert "metrics" in hb["required"] and "meta" not in hb.get("required", [])
    assert "additionalProperties" not in json.dumps(schemas)  # readers ignore unknown fields


def test_every_record_the_simulator_sends_canonically_satisfies_the_schema():
    """The JSON Schema says what the validator accepts, checked with a real validator."""
    jsonschema = pytest.importorskip("jsonschema")
    import orjson

    from producers.simulator import Fleet

    schemas = json_schemas()
    fleet = Fleet(300, seed=1, speedup=20_000)
    records = [
        r
        for r in fleet.step(600, 1_700_000_000_000)
        if fleet.style[int(r.device_id[4:])] == "canonical"
    ]
    assert {r.role for r in records} == {"heartbeats", "work_orders", "alarms"}
    # One checked validator per schema: `jsonschema.validate` checks the schema itself and
    # builds a validator again for every record (most of this test's time).
    validators = {}
    for name, schema in schemas.items():
        cls = jsonschema.validators.validator_for(schema)
        cls.check_schema(schema)
        validators[name] = cls(schema)
    for r in records:
        validators[f"{r.role}.v{SCHEMA_VERSION}.schema.json"].validate(
            orjson.loads(orjson.dumps(r))
        )


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
