"""Heartbeat metrics of simulated devices: each condition's distribution per metric (normal,
lognormal or uniform, from the spec's `[[simulator.conditions]]`), clipped to the metric's
range; without one, uniform within the declared range.

Noise over time (`profile`): each device carries a latent standard-normal score per metric that
moves as an AR(1) process between heartbeats (`persistence` = correlation of consecutive
heartbeats), and each reading adds independent measurement noise (`measurement` = its share of
the variance). Every reading keeps its condition's mean and spread; profiles differ only in how
readings of one device hang together over time: `iid` draws every heartbeat afresh (the worst
case), `noisy` is a real but jittery sensor, `steady` a device that changes slowly.
"""

from __future__ import annotations

import math

import numpy as np

from precast.fleet.simulate.truth import conditions_of
from schemas.spec import FleetSpec
from schemas.spec.fields import Metric
from schemas.spec.simulation import Distribution

PROFILES: dict[str, tuple[float, float]] = {
    "iid": (0.0, 1.0),
    "noisy": (0.9, 0.2),
    "steady": (0.99, 0.01),
}


def _phi(z: np.ndarray) -> np.ndarray:
    """The standard normal CDF (for uniform distributions driven by normal scores)."""
    erf = np.vectorize(math.erf, otypes=[np.float64])
    out: np.ndarray = 0.5 * (1.0 + erf(z / math.sqrt(2.0)))
    return out


class Readings:
    """Metric values for devices in given conditions, from standard-normal scores."""

    def __init__(self, spec: FleetSpec) -> None:
        self.metrics = [n for n, f in spec.heartbeats.fields.items() if isinstance(f, Metric)]
        fields = spec.heartbeats.fields
        conds = conditions_of(spec)
        # (condition, metric) -> (kind, a, b, scale, lo, hi)
        self._table: list[list[tuple[str, float, float, float, float, float]]] = []
        for c in conds:
            row = []
            for name in self.metrics:
                f = fields[name]
                assert isinstance(f, Metric)
                row.append(_params(c.heartbeat.get(name), f))
            self._table.append(row)

    def values(self, conditions: np.ndarray, z: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        """Readings of devices in `conditions` from scores `z` per metric (so a caller can
        correlate them over time): each device's condition's distribution."""
        out: dict[str, np.ndarray] = {}
        for j, name in enumerate(self.metrics):
            params = [self._table[c][j] for c in range(len(self._table))]
            kind = np.array([p[0] for p in params])[conditions]
            a = np.array([p[1] for p in params])[conditions]
            b = np.array([p[2] for p in params])[conditions]
            scale = np.array([p[3] for p in params])[conditions]
            lo = np.array([p[4] for p in params])[conditions]
            hi = np.array([p[5] for p in params])[conditions]
            zz = z[name]
            v = np.where(kind == "normal", a + b * zz, 0.0)
            if (kind == "lognormal").any():
                v = np.where(kind == "lognormal", np.exp(a + b * zz) * scale, v)
            if (kind == "uniform").any():
                v = np.where(kind == "uniform", a + (b - a) * _phi(zz), v)
            out[name] = np.clip(v, lo, hi)
        return out

    def sample(self, rng: np.random.Generator, conditions: np.ndarray) -> dict[str, np.ndarray]:
        """One independent draw per device from its condition's distribution."""
        n = len(conditions)
        return self.values(conditions, {k: rng.standard_normal(n) for k in self.metrics})


def _params(d: Distribution | None, f: Metric) -> tuple[str, float, float, float, float, float]:
    lo = -np.inf if f.min is None else f.min
    hi = np.inf if f.max is None else f.max
    if d is not None and d.clip is not None:
        lo, hi = max(lo, d.clip[0]), min(hi, d.clip[1])
    if d is None:
        if np.isfinite(lo) and np.isfinite(hi):
            return ("uniform", lo, hi, 1.0, lo, hi)
        if np.isfinite(lo):
            return ("lognormal", 0.0, 1.0, 1.0, lo, hi)
        return ("normal", 0.0, 1.0, 1.0, lo, hi)
    if d.normal is not None:
        return ("normal", d.normal[0], d.normal[1], 1.0, lo, hi)
    if d.lognormal is not None:
        return ("lognormal", d.lognormal[0], d.lognormal[1], d.scale, lo, hi)
    assert d.uniform is not None
    return ("uniform", d.uniform[0], d.uniform[1], 1.0, lo, hi)
