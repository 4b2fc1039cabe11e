"""Outcomes in the contract and in the simulator: a resolution on a work-order close is a
compatible, optional field whose vocabulary is the serving labels (an unknown one is a dead
letter with its reason), the spec checks the `[outcomes]` table, the simulator resolves work
orders as each device's hidden condition calls for (with wrong and missing ones), and its
drift profile changes the conditions' mix and signatures."""

from __future__ import annotations

import tomllib
from collections import Counter
from pathlib import Path

import numpy as np
import orjson
import pytest

from precast.fleet import load_fleet
from precast.fleet.simulate.devices import SimEvent
from precast.fleet.simulate.drift import DriftProfile, new_prevalence, rotation
from producers.simulator import Fleet, Resolutions
from schemas.deadletters import Reason
from schemas.spec.load import FLEETS, parse
from tests.worker_events import T0, work_order

SPECS = {"devices": None, "trailers": "schemas/fleets/trailers.toml"}


def _close(resolution=None, **extra) -> bytes:
    e = work_order("d1", T0, "w1", status="closed")
    if resolution is not None:
        e["resolution"] = resolution
    return orjson.dumps({**e, **extra})


def test_a_resolution_is_optional_and_must_be_a_serving_label():
    v = load_fleet().validator
    old = v.validate("work_orders", b"d1", _close())  # an old producer: no resolution
    assert old.ok and old.event["resolution"] is None
    ok = v.validate("work_orders", b"d1", _close("replace_part", resolved_by="tech-3"))
    assert (
        ok.ok and ok.event["resolution"] == "replace_part" and ok.event["resolved_by"] == "tech-3"
    )
    bad = v.validate("work_orders", b"d1", _close("reboot_harder"))
    assert not bad.ok and bad.reason == Reason.INVALID
    assert "resolution" in bad.detail and "reboot_harder" in bad.detail


def test_the_worker_dead_letters_an_unknown_resolution_with_its_reason():
    from precast.kafka import Record
    from schemas.topics import catalog
    from workers.precompute.pipeline import PipelineConfig, build_pipeline

    topics = catalog("u.", 1)
    rejected = []
    p = build_pipeline(
        topics, PipelineConfig(), lambda m, r, d: rejected.append((m.offset(), r, d))
    )
    good, bad = _close("replace_part"), _close("reboot_harder")
    wo = topics.work_orders.name
    p.ingest([Record(wo, 0, 0, b"d1", good), Record(wo, 0, 1, b"d1", bad)], T0 + 1, 0.0)
    assert [(o, r) for o, r, _ in rejected] == [(1, Reason.INVALID)]
    assert "reboot_harder" in rejected[0][2]


def test_the_trailer_fleet_nests_its_resolution_elsewhere():
    v = load_fleet(SPECS["trailers"]).validator
    doc = {
        "deviceId": "tr-1",
        "msgId": "m1",
        "ts": T0 / 1000,
        "ticket": "t1",
        "state": "resolved",
        "area": "reefer",
        "resolution": {"action": "refuel", "tech": "ana"},
    }
    got = v.validate("work_orders", b"tr-1", orjson.dumps(doc))
    assert got.ok and (got.event["resolution"], got.event["resolved_by"]) == ("refuel", "ana")
    doc["resolution"] = {"action": "no_such_action"}
    assert v.validate("work_orders", b"tr-1", orjson.dumps(doc)).reason == Reason.INVALID


def _problems(edit) -> list[str]:
    data = tomllib.loads((FLEETS / "devices.toml").read_text())
    edit(data)
    spec, found = parse(data)
    return [str(p) for p in found]


@pytest.mark.parametrize(
    ("edit", "expected"),
    [
        (lambda d: d["outcomes"].update(stream="alarms"), "outcomes.entity: stream 'alarms'"),
        (lambda d: d["outcomes"].update(resolved=["done"]), "outcomes.resolved: 'done' is not"),
        (lambda d: d["outcomes"].update(opened=["closed"]), "both opens and resolves"),
        (
            lambda d: d["streams"]["work_orders"]["fields"]["resolution"].update(
                values=["monitor_only", "pray"]
            ),
            "must be the serving labels (not labels: ['pray']",
        ),
        (
            lambda d: d["streams"]["work_orders"]["fields"]["resolution"].update(unknown="accept"),
            'must be "reject"',
        ),
        (
            lambda d: d["streams"]["work_orders"]["fields"]["resolution"].update(required=True),
            "closes without a resolution stay valid",
        ),
        (lambda d: d["outcomes"].update(resolution="category"), "a resolution is categorical"),
    ],
)
def test_the_outcomes_table_is_checked(edit, expected):
    found = _problems(edit)
    assert any(expected in p for p in found), found


def test_outcomes_change_neither_hash():
    """Models and context snapshots of the spec before outcomes stay valid."""
    for name, path in SPECS.items():
        data = tomllib.loads(Path(path or FLEETS / "devices.toml").read_text())
        with_outcomes, _ = parse(data)
        del data["outcomes"]
        for stream in data["streams"].values():
            stream["fields"].pop("resolution", None)
            stream["fields"].pop("resolved_by", None)
        without, found = parse(data)
        assert not found and with_outcomes is not None and without is not None
        from schemas.spec import context_hash, feature_hash

        assert feature_hash(with_outcomes) == feature_hash(without), name
        assert context_hash(with_outcomes) == context_hash(without), name


def _closes(fleet: Fleet, rounds: int, n: int) -> list[tuple[int, dict]]:
    o = fleet.fleet.spec.outcomes
    out = []
    for r in range(rounds):
        for e in fleet.sim.step(n, T0 + r):
            if e.stream == o.stream and e.event.get(o.status) in o.resolved:
                out.append((e.device, e.event))
    return out


@pytest.mark.parametrize("name", sorted(SPECS))
def test_the_simulator_resolves_work_orders_as_the_condition_calls_for(name):
    fleet = load_fleet(SPECS[name])
    f = Fleet(
        600,
        seed=4,
        fleet=fleet,
        speedup=6_000,
        drift_share=0.0,
        resolutions=Resolutions(wrong_share=0.1, missing_share=0.2, delay_s=600),
    )
    closes = _closes(f, 40, 600)
    assert len(closes) > 300
    labels = [f.sim.labels[c] for c in f.conditions]
    missing = sum(e.get("resolution") is None for _, e in closes) / len(closes)
    given = [(d, e["resolution"]) for d, e in closes if e.get("resolution") is not None]
    right = sum(lab == labels[d] for d, lab in given) / len(given)
    assert 0.14 < missing < 0.26
    assert 0.85 < right < 0.95  # 10 % wrong
    assert all(
        e.get("resolved_by", "").startswith("tech-") for _, e in closes if e.get("resolution")
    )
    # every close validates on the wire, resolution included
    o = fleet.spec.outcomes
    role = fleet.spec.streams[o.stream].topic
    for d, e in closes[:200]:
        w = f.wire(SimEvent(d, o.stream, e))
        assert fleet.validator.validate(role, w.device_id.encode(), orjson.dumps(w)).ok


def test_without_resolutions_the_events_are_the_same_but_for_the_resolution():
    a = Fleet(300, seed=2, speedup=3_000, run_id="x")
    b = Fleet(300, seed=2, speedup=3_000, run_id="x", resolutions=None)
    strip = lambda evs: [  # noqa: E731
        {k: v for k, v in e.items() if k not in ("resolution", "resolved_by")} for e in evs
    ]
    resolved = 0
    for r in range(5):
        ea, eb = a.step(900, T0 + r), b.step(900, T0 + r)
        assert strip(ea) == strip(eb)
        resolved += sum("resolution" in e for e in ea)
        assert not any("resolution" in e for e in eb)
    assert resolved > 0


def test_the_drift_profile_changes_the_mix_and_the_signatures():
    fleet = load_fleet()
    names = [c.name for c in fleet.spec.simulator.conditions]
    profile = DriftProfile(at_s=100.0, ramp_s=0.0, mix=0.4)
    plain = Fleet(2_000, seed=8, drift_share=0.0, resolutions=None, run_id="p")
    f = Fleet(2_000, seed=8, drift_share=0.0, resolutions=None, run_id="p", drift=profile)
    # before the shift: the same fleet, the same events
    assert plain.step(2_000, T0) == f.step(2_000, T0)
    f.sim.heartbeats(2_000 * 99, T0)  # 100 simulated seconds: everyone has switched
    now = f.conditions_now()
    moved = (now != f.conditions).mean()
    assert 0.25 < moved < 0.4  # 40 % redrawn, some land where they were
    # healthy: 0.6 x 55 % kept + 0.4 x 27.5 % drawn = 44 % of the fleet, from 55 %
    assert Counter(now.tolist())[0] < 0.85 * Counter(f.conditions.tolist())[0]
    # memory_leak devices now read like bad_firmware did (the next fault): high error rate
    leak, firmware = names.index("memory_leak"), names.index("bad_firmware")
    assert rotation(len(names))[leak] == firmware
    events = f.heartbeats(2_000, T0)
    err = np.array([float(e["metrics"]["error_rate"]) for e in events])
    mem = np.array([float(e["metrics"]["mem_pct"]) for e in events])
    is_leak = now == leak
    assert err[is_leak].mean() > 0.12 and mem[is_leak].mean() < 70  # was ~0.05 and ~87
    # and the labels follow the new conditions
    assert (f.sim.label_now(np.arange(2_000), f.sim.sim_s) == now).all()


def test_the_new_mix_halves_the_normal_state_and_reverses_the_faults():
    p = new_prevalence(np.array([0.6, 0.3, 0.1]))
    assert np.allclose(p, [0.3, 0.175, 0.525])
    assert rotation(4).tolist() == [0, 2, 3, 1]
