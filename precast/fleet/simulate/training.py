"""Labelled feature rows from a simulated fleet, computed the way the worker computes them: the
simulator's events folded by the spec's context reducer, each heartbeat's state columns and its
device's context as of the heartbeat's event time through the spec's feature matrix, labelled
with the hidden condition's label at that moment. Point-in-time by construction (a row sees
only events before it), and no second feature code to drift from the worker's."""

from __future__ import annotations

import numpy as np

from precast.fleet.context import DeviceContext
from precast.fleet.runtime import Fleet
from precast.fleet.simulate.devices import SimFleet
from precast.fleet.simulate.drift import DriftProfile

# Simulated seconds between two heartbeats of a device: long enough that work orders (days)
# and alarm windows (hours) reach their steady state within the warm-up.
_SPACING_S = 900.0
_WARMUP_ROUNDS = 24  # 6 simulated hours before the first row
_T0_MS = 1_700_000_000_000


def training_rows(
    fleet: Fleet,
    n: int,
    seed: int,
    devices: int | None = None,
    label_noise: float | None = None,
    drift: DriftProfile | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """(x, y): `n` feature rows and label indexes (into `fleet.spec.labels`); with `drift`, of
    a fleet under that drift profile (`DriftProfile(at_s=0, ramp_s=0)`: drifted throughout)."""
    spec = fleet.spec
    dev = devices or max(64, min(5_000, n // 8))
    sim = SimFleet(
        fleet, dev, seed, hb_interval_s=_SPACING_S, run_id=f"t{seed % 100000}", drift=drift
    )
    model, features = fleet.context, fleet.features
    contexts: dict[int, DeviceContext] = {}
    label_of = {lab: i for i, lab in enumerate(spec.labels)}
    cond_label = np.array([label_of[lab] for lab in sim.labels], dtype=np.int64)
    rounds = _WARMUP_ROUNDS + int(np.ceil(n / dev))
    xs, ys = [], []
    for r in range(rounds):
        now = _T0_MS + int(r * _SPACING_S * 1000)
        events = sim.step(dev, now)
        states, ats, ctxs, devs = [], [], [], []
        for e in events:
            if e.stream != sim.hb_stream:
                ctx = contexts.get(e.device)
                if ctx is None:
                    ctx = contexts[e.device] = model.new(e.event["device_id"])
                model.apply(ctx, e.stream, e.event)
            elif r >= _WARMUP_ROUNDS:
                states.append(features.state_row(e.event))
                ats.append(e.event["event_time_ms"])
                ctxs.append(e.device)
                devs.append(e.device)
        if not states:
            continue
        at = np.asarray(ats, dtype=np.int64)
        ctx_cols = model.columns([contexts.get(d) for d in ctxs], at)
        xs.append(features.build(np.asarray(states, dtype=np.float64), ctx_cols))
        idx = np.asarray(devs, dtype=np.int64)
        ys.append(cond_label[sim.label_now(idx, sim.sim_s)])
    x, y = np.concatenate(xs)[:n], np.concatenate(ys)[:n]
    noise = (
        label_noise
        if label_noise is not None
        else (spec.simulator.label_noise if spec.simulator else 0.0)
    )
    if noise > 0:
        rng = np.random.default_rng([seed, 3])
        flip = rng.random(len(y)) < noise  # field labels are never perfect
        y = y.copy()
        y[flip] = rng.integers(0, len(spec.labels), int(flip.sum()))
    return x, y
