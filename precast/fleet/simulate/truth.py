"""A simulated fleet's hidden ground truth, drawn once at start from (spec, devices, seed): each
device's condition, the fields it draws once (device type, firmware, site, ...) and whether it
drifts into another condition. Deterministic, so `precast shadow --truth DEVICES:SEED` and
training rebuild the same truth without the simulator's process."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from schemas.spec import FleetSpec
from schemas.spec.fields import Attribute, Categorical
from schemas.spec.simulation import Condition, DeviceDraw


def device_id(i: int) -> str:
    return f"dev-{i:06d}"


def conditions_of(spec: FleetSpec) -> tuple[Condition, ...]:
    """The spec's hidden conditions; without any, one that is the fleet's default label."""
    sim = spec.simulator
    if sim is not None and sim.conditions:
        return sim.conditions
    return (Condition(name="default", label=spec.serving.default_label, prevalence=1.0),)


@dataclass(frozen=True)
class FleetDraw:
    conditions: np.ndarray  # condition index of each device at simulated time 0
    static: dict[str, list[Any]]  # fields drawn once per device, by name
    drifting: np.ndarray  # slides into `drift_target` over simulated time
    drift_target: np.ndarray
    drift_start_s: np.ndarray


def draw_fleet(
    spec: FleetSpec,
    n: int,
    seed: int,
    drift_share: float | None = None,
    drift_s: float | None = None,
    rng: np.random.Generator | None = None,
) -> FleetDraw:
    """The start-up draws, from `rng` (a fresh generator of `seed` unless given: the simulator
    passes its own and goes on drawing events from it)."""
    rng = rng if rng is not None else np.random.default_rng(seed)
    conds = conditions_of(spec)
    prevalence = np.array([c.prevalence for c in conds], dtype=np.float64)
    draws = _draws(spec)
    # categories first, then the condition, then what depends on it (the order the
    # simulator has always drawn in, so a seed keeps giving the same fleet)
    static = _categories(draws, spec, rng, n)
    cond = rng.choice(len(conds), size=n, p=prevalence / prevalence.sum())
    _dependent(draws, spec, rng, n, cond, seed, static)
    sim = spec.simulator
    share = drift_share if drift_share is not None else (sim.drift_share if sim else 0.0)
    span = drift_s if drift_s is not None else (sim.drift_s if sim else 1800.0)
    drifting = rng.random(n) < share
    # drift goes into one of the other conditions, never the first (the fleet's normal state)
    faulty = np.arange(1, len(conds)) if len(conds) > 1 else np.zeros(1, dtype=np.int64)
    target = faulty[rng.integers(0, len(faulty), n)]
    if len(faulty) > 1:
        same = target == cond
        target[same] = faulty[(np.searchsorted(faulty, target[same]) + 1) % len(faulty)]
    drifting &= target != cond
    start = rng.uniform(0, span, n)
    return FleetDraw(cond, static, drifting, target, start)


def _draws(spec: FleetSpec) -> dict[str, DeviceDraw]:
    """Fields drawn once per device: the simulator's `devices` table, in its order, then a
    uniform category for every other categorical heartbeat field."""
    sim = spec.simulator
    draws: dict[str, DeviceDraw] = dict(sim.devices) if sim else {}
    for name, f in spec.heartbeats.fields.items():
        if name not in draws and isinstance(f, Categorical):
            draws[name] = DeviceDraw(uniform=True)
    return draws


def _categories(
    draws: dict[str, DeviceDraw], spec: FleetSpec, rng: np.random.Generator, n: int
) -> dict[str, list[Any]]:
    out: dict[str, list[Any]] = {}
    for name, d in draws.items():
        f = spec.heartbeats.fields[name]
        if d.weights is not None:
            values = list(d.weights)
            w = np.array([d.weights[v] for v in values], dtype=np.float64)
            pick = rng.choice(len(values), size=n, p=w / w.sum())
        elif d.uniform:
            values = list(f.values) if isinstance(f, Categorical) else ["unknown"]
            pick = rng.integers(0, len(values), n)
        else:
            continue
        out[name] = [values[i] for i in pick.tolist()]
    return out


def _dependent(
    draws: dict[str, DeviceDraw],
    spec: FleetSpec,
    rng: np.random.Generator,
    n: int,
    cond: np.ndarray,
    seed: int,
    out: dict[str, list[Any]],
) -> None:
    conds = conditions_of(spec)
    for name, d in draws.items():
        if name in out:
            continue
        f = spec.heartbeats.fields[name]
        if d.releases is not None and d.by is not None:
            share = np.array([c.latest_share if c.latest_share is not None else 0.5 for c in conds])
            latest = rng.random(n) < share[cond]
            older = rng.random(n).tolist()
            by, lat = out[d.by], latest.tolist()
            picked = []
            for i in range(n):
                rel = d.releases.get(by[i], ("unknown",))
                picked.append(rel[-1] if lat[i] else rel[int(older[i] * (len(rel) - 1))])
            out[name] = picked
        else:
            out[name] = _formatted(d, f, n, seed, out)


def _formatted(d: DeviceDraw, f: Any, n: int, seed: int, drawn: dict[str, list[Any]]) -> list[Any]:
    fmt = d.format or "{i}"
    vals = []
    for i in range(n):
        k = d.start + (i % d.cardinality if d.cardinality else i)
        text = fmt.format(i=i, n=k, seed3=seed % 1000, **{k2: v[i] for k2, v in drawn.items()})
        vals.append(
            int(text)
            if d.type == "integer" or (isinstance(f, Attribute) and f.type == "integer")
            else text
        )
    return vals


def true_labels(
    spec: FleetSpec,
    devices: int,
    seed: int,
    drift_share: float | None = None,
    drift_s: float | None = None,
) -> dict[str, str | None]:
    """Device ID -> the right label of its hidden condition, for a fleet the simulator built
    with these arguments; None for a drifting device (its truth depends on simulated time)."""
    d = draw_fleet(spec, devices, seed, drift_share, drift_s)
    conds = conditions_of(spec)
    cond, drifting = d.conditions.tolist(), d.drifting.tolist()
    return {device_id(i): None if drifting[i] else conds[cond[i]].label for i in range(devices)}
