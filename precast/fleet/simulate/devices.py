"""A simulated fleet of any spec: devices in hidden conditions emitting normalized events.

Deterministic under a seed: the same seed and arguments give the same devices and the same
sequence of events. Only the clock passed in and the IDs (which start with a per-run `run_id`)
differ between runs. Time: the simulation runs on its own clock, advanced per heartbeat slot;
each device sends one heartbeat per `hb_interval_s` of simulated time (round-robin over the
fleet) and `speedup` multiplies the simulated time per slot, so slow processes (incidents,
drift) can be watched without changing the heartbeat rate.
"""

from __future__ import annotations

import os
from collections import Counter
from dataclasses import dataclass
from typing import Any

import numpy as np

from precast.fleet.runtime import Fleet
from precast.fleet.simulate.drift import CompiledDrift, DriftProfile, compile_drift
from precast.fleet.simulate.incidents import Incidents, Resolutions
from precast.fleet.simulate.readings import PROFILES, Readings
from precast.fleet.simulate.truth import conditions_of, device_id, draw_fleet


@dataclass(frozen=True, slots=True)
class SimEvent:
    device: int  # device index
    stream: str  # the spec's stream name
    event: dict[str, Any]  # normalized: envelope keys and field names


class SimFleet:
    def __init__(
        self,
        fleet: Fleet,
        devices: int,
        seed: int,
        *,
        hb_interval_s: float | None = None,
        speedup: float = 1.0,
        drift_share: float | None = None,
        drift_s: float | None = None,
        drift_at_s: float | None = None,
        run_id: str | None = None,
        profile: str = "iid",
        drift: DriftProfile | None = None,
        resolutions: Resolutions | None = None,
    ) -> None:
        if profile not in PROFILES:
            raise ValueError(f"unknown fleet profile {profile!r} (have: {', '.join(PROFILES)})")
        spec = fleet.spec
        self.fleet, self.spec = fleet, spec
        sim = spec.simulator
        self.rng = np.random.default_rng(seed)
        n = devices
        self.ids = [device_id(i) for i in range(n)]
        # the start-up draws come first from the same generator the events then continue on
        self.draw = draw_fleet(spec, n, seed, drift_share, drift_s, rng=self.rng)
        self.conditions = self.draw.conditions
        self.drifting, self.drift_target = self.draw.drifting, self.draw.drift_target
        self.drift_start_s = self.draw.drift_start_s.copy()
        if drift_at_s is not None:
            self.drift_start_s[:] = drift_at_s
        self.drift_s = drift_s if drift_s is not None else (sim.drift_s if sim else 1800.0)
        self.hb_interval_s = hb_interval_s or (sim.heartbeat_every_s if sim else 1.0)
        self.speedup = speedup
        self.labels = [c.label for c in conditions_of(spec)]
        self.readings = Readings(spec)
        self.run_id = run_id if run_id is not None else os.urandom(4).hex()
        self.incidents = Incidents(spec, n, self.run_id, resolutions, seed)
        conds = conditions_of(spec)
        self.shift: CompiledDrift | None = (
            compile_drift(drift, self.conditions, np.array([c.prevalence for c in conds]), seed)
            if drift is not None
            else None
        )
        self.profile = profile
        self.persistence, self.measurement = PROFILES[profile]
        self._noise_rng = np.random.default_rng([seed, 1])
        m = len(self.readings.metrics)
        self.latent = self._noise_rng.standard_normal((n, m)) if profile != "iid" else None
        self.hb_stream = spec.heartbeat_stream
        self.sim_s = 0.0
        self._cursor = 0
        self._seq = 0
        self.counts: Counter[str] = Counter()

    # -- ground truth ---------------------------------------------------------------------------
    def drift_weight(self, idx: np.ndarray, t: np.ndarray | float) -> np.ndarray:
        w = np.clip((t - self.drift_start_s[idx]) / self.drift_s, 0.0, 1.0)
        out: np.ndarray = np.where(self.drifting[idx], w, 0.0)
        return out

    def base(self, idx: np.ndarray, t: np.ndarray | float) -> np.ndarray:
        """Each device's condition at simulated time t before its own slide (`drift_share`):
        its drawn condition, or after the drift profile's switch its new one."""
        if self.shift is None:
            same: np.ndarray = self.conditions[idx]
            return same
        out: np.ndarray = np.where(
            t >= self.shift.switch_s[idx], self.shift.after[idx], self.conditions[idx]
        )
        return out

    def conditions_now(self) -> np.ndarray:
        """Each device's hidden condition at the current simulated time."""
        idx = np.arange(len(self.ids))
        return self.label_now(idx, self.sim_s)

    def label_now(self, idx: np.ndarray, t: np.ndarray | float) -> np.ndarray:
        """Condition index (its label: `labels[i]`) of devices at simulated time t."""
        out: np.ndarray = np.where(
            self.drift_weight(idx, t) >= 0.5, self.drift_target[idx], self.base(idx, t)
        )
        return out

    def _signature(self, cond: np.ndarray, idx: np.ndarray, t: np.ndarray) -> np.ndarray:
        """Whose readings each device shows: its condition's, or after the profile's switch the
        rotated signature's."""
        if self.shift is None or not self.shift.signature.any():
            return cond
        out: np.ndarray = np.where(t >= self.shift.switch_s[idx], self.shift.signature[cond], cond)
        return out

    # -- events ---------------------------------------------------------------------------------
    def event_id(self) -> str:
        self._seq += 1
        return f"{self.run_id}-{self._seq:x}"

    def _slots(self, n: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Device index, simulated time and drift weight of the next n heartbeat slots."""
        idx = (self._cursor + np.arange(n)) % len(self.ids)
        self._cursor = int((self._cursor + n) % len(self.ids))
        step = self.hb_interval_s * self.speedup / len(self.ids)
        t = self.sim_s + step * (1 + np.arange(n))
        self.sim_s = float(t[-1]) if n else self.sim_s
        return idx, t, self.drift_weight(idx, t)

    def _scores(self, idx: np.ndarray) -> dict[str, np.ndarray] | None:
        """Standard-normal scores of the next readings of devices `idx` (None: draw iid)."""
        if self.latent is None:
            return None
        rho, meas, rng, n = self.persistence, self.measurement, self._noise_rng, len(self.ids)
        m = self.latent.shape[1]
        parts = []
        for start in range(0, len(idx), n):  # a device appears once per chunk of <= N slots
            i = idx[start : start + n]
            lat = rho * self.latent[i] + np.sqrt(1 - rho * rho) * rng.standard_normal((len(i), m))
            self.latent[i] = lat
            parts.append(np.sqrt(1 - meas) * lat + np.sqrt(meas) * rng.standard_normal(lat.shape))
        z = np.concatenate(parts) if parts else np.zeros((0, m))
        return {k: z[:, j] for j, k in enumerate(self.readings.metrics)}

    def heartbeats(
        self, n: int, now_ms: int
    ) -> tuple[list[SimEvent], np.ndarray, np.ndarray, np.ndarray]:
        """The next n heartbeats (normalized), round-robin over the fleet, with the slots'
        device indexes, simulated times and drift weights."""
        idx, t, w = self._slots(n)
        z = self._scores(idx)
        r = self.readings
        cond = self._signature(self.base(idx, t), idx, t)
        m = r.sample(self.rng, cond) if z is None else r.values(cond, z)
        moving = np.flatnonzero(w > 0)
        if len(moving):  # drifting devices: readings slide toward the target condition's
            tc = self._signature(self.drift_target[idx[moving]], idx[moving], t[moving])
            tgt = (
                r.sample(self.rng, tc)
                if z is None
                else r.values(tc, {k: v[moving] for k, v in z.items()})
            )
            for k in r.metrics:
                m[k][moving] = (1 - w[moving]) * m[k][moving] + w[moving] * tgt[k]
        cols = {k: m[k].round(3).tolist() for k in r.metrics}
        static = self.draw.static
        out = []
        for j, i in enumerate(idx.tolist()):
            e: dict[str, Any] = {
                "device_id": self.ids[i],
                "event_id": self.event_id(),
                "event_time_ms": now_ms,
                "produced_at_ms": now_ms,
            }
            for k, v in static.items():
                e[k] = v[i]
            for k, v in cols.items():
                e[k] = v[j]
            out.append(SimEvent(i, self.hb_stream, e))
        self.counts[self.hb_stream] += n
        return out, idx, t, w

    def step(self, n: int, now_ms: int) -> list[SimEvent]:
        """The next n heartbeat slots: heartbeats, and the context events those devices raise
        meanwhile."""
        events, idx, t, w = self.heartbeats(n, now_ms)
        src, tgt = self.base(idx, t), self.drift_target[idx]
        dt = self.hb_interval_s * self.speedup
        for d, stream, fields in self.incidents.step(self.rng, idx, src, tgt, w, dt):
            e = {
                "device_id": self.ids[d],
                "event_id": self.event_id(),
                "event_time_ms": now_ms,
                "produced_at_ms": now_ms,
                **fields,
            }
            events.append(SimEvent(d, stream, e))
            self.counts[stream] += 1
        return events
