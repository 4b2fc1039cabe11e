"""Fleet simulator: devices in hidden conditions (see `schemas.fleet`) emitting events.

Deterministic under a seed: the same seed and arguments give the same devices and the same
sequence of events (content, order, bad records). Only `event_time_ms`/`produced_at_ms` (the
clock passed in) and the ids (which start with a per-run `run_id`, random unless given) differ
between runs, so two runs never produce colliding `event_id`s.

Heartbeat noise (`profile`, see `PROFILES` and docs/events.md): each device carries a latent
state per metric, a standard-normal score that moves as an AR(1) process from one heartbeat to
the next (`persistence` = the correlation between consecutive heartbeats), and each reading adds
independent measurement noise (`measurement` = its share of the variance). Every reading keeps
its condition's mean and spread (what the model was trained on); the profiles differ only in how
readings of one device hang together over time: `iid` draws every heartbeat afresh (no
persistence: the worst case, and what the simulator did before profiles), `noisy` is a real but
jittery sensor, `steady` a device that changes slowly.

Time: the simulation runs on its own clock, advanced per heartbeat slot. Each device sends one
heartbeat per `hb_interval_s` of simulated time (round-robin over the fleet); `speedup`
multiplies the simulated time that passes per slot, so slow processes (alarms, work orders,
drift) can be watched in a demo without changing the heartbeat rate.
"""

from __future__ import annotations

import os
from collections import Counter
from collections.abc import Sequence
from typing import Any

import numpy as np

from producers.badrecords import KIND_NAMES, BadRecord, corrupt
from producers.incidents import Incidents, Rates
from producers.publisher import topic_role
from schemas import fleet
from schemas.events import SCHEMA_VERSION

# Firmware releases whose devices send a tolerated wire variant (schemas.normalize).
WIRE_STYLES: dict[tuple[str, str], str] = {
    ("camera", "6.0.0"): "versioned",  # moved meta.info to meta.info.v2
    ("meter", "1.8.0"): "flat",  # metadata directly under meta
    ("pump_controller", "3.0.0"): "strings",  # numbers as JSON strings
    ("gateway", "2.5.0"): "extra",  # fields the contract does not know (yet)
}
METRICS = ("cpu_pct", "mem_pct", "temperature_c", "error_rate", "signal_quality", "uptime_s")
HEALTHY = fleet.CONDITION_NAMES.index("healthy")
# profile -> (persistence: AR(1) correlation of the latent state between two heartbeats,
#             measurement: share of a reading's variance that is independent noise)
PROFILES: dict[str, tuple[float, float]] = {
    "iid": (0.0, 1.0),
    "noisy": (0.9, 0.2),
    "steady": (0.99, 0.01),
}


def _table(attr: str) -> np.ndarray:
    return np.array([getattr(c, attr) for c in fleet.CONDITIONS], dtype=np.float64)


_CRIT_H, _WARN_H, _WO_DAY, _HIGH = (
    _table(a) for a in ("critical_alarms_h", "warning_alarms_h", "open_wo", "high_share")
)


class Fleet:
    """N devices with a type, firmware, wire style, metadata and hidden condition; a share of
    them drift from their condition into a faulty one over simulated time."""

    def __init__(
        self,
        devices: int,
        seed: int,
        *,
        hb_interval_s: float = 1.0,
        speedup: float = 1.0,
        drift_share: float = 0.05,
        drift_s: float = 1800.0,
        drift_at_s: float | None = None,
        bad_rate: float = 0.0,
        run_id: str | None = None,
        profile: str = "iid",
    ) -> None:
        if profile not in PROFILES:
            raise ValueError(f"unknown fleet profile {profile!r} (have: {', '.join(PROFILES)})")
        rng = self.rng = np.random.default_rng(seed)
        n = devices
        self.ids = [fleet.device_id(i) for i in range(n)]
        # The start-up draws live in schemas.fleet, so the ground truth can be rebuilt from
        # (devices, seed) without this class (precast shadow scores models against it).
        draw = fleet.draw_fleet(rng, n, drift_share, drift_s)
        self.types, self.conditions = draw.types, draw.conditions
        latest, pick_older = draw.latest, draw.pick_older
        self.firmware, self.style, self.info = [], [], []
        for i in range(n):
            dtype = fleet.DEVICE_TYPES[self.types[i]]
            releases = fleet.FIRMWARE[dtype]
            fw = releases[-1] if latest[i] else releases[int(pick_older[i] * (len(releases) - 1))]
            self.firmware.append(fw)
            self.style.append(WIRE_STYLES.get((dtype, fw), "canonical"))
            rev = 1 + i % 4
            self.info.append(
                {
                    "site": f"site-{i % 97:03d}",
                    "hw_model": f"{dtype}-r{rev}",
                    "hw_rev": rev,
                    "serial": f"SN{seed % 1000:03d}{i:07d}",
                }
            )
        # Drift: a share of the devices slides from its condition into a faulty one, each
        # starting at its own moment in [0, drift_s) (or all at drift_at_s: a fleet-wide event,
        # what the drift monitor is calibrated on) and taking drift_s of simulated time.
        self.drifting, self.drift_target = draw.drifting, draw.drift_target
        self.drift_start_s = draw.drift_start_s
        if drift_at_s is not None:
            self.drift_start_s[:] = drift_at_s
        self.drift_s = drift_s
        self.hb_interval_s, self.speedup, self.bad_rate = hb_interval_s, speedup, bad_rate
        self.run_id = run_id if run_id is not None else os.urandom(4).hex()
        self.incidents = Incidents(n, self.run_id)
        self.profile = profile
        self.persistence, self.measurement = PROFILES[profile]
        # Latent standard-normal state per device and metric (iid: unused); its own generator,
        # so the event sequence of the other draws does not depend on the profile.
        self._noise_rng = np.random.default_rng([seed, 1])
        self.latent = (
            self._noise_rng.standard_normal((n, len(METRICS))) if profile != "iid" else None
        )
        self.sim_s = 0.0
        self._cursor = 0
        self._seq = 0
        self.counts: Counter[str] = Counter()

    # -- ground truth ---------------------------------------------------------------------------
    def drift_weight(self, idx: np.ndarray, t: np.ndarray | float) -> np.ndarray:
        w = np.clip((t - self.drift_start_s[idx]) / self.drift_s, 0.0, 1.0)
        return np.where(self.drifting[idx], w, 0.0)

    def conditions_now(self) -> np.ndarray:
        """Each device's hidden condition at the current simulated time."""
        idx = np.arange(len(self.ids))
        return np.where(
            self.drift_weight(idx, self.sim_s) >= 0.5, self.drift_target, self.conditions
        )

    # -- events ------------------------------------------------------------------------------------
    def _event_id(self) -> str:
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

    def heartbeats(self, n: int, now_ms: int) -> list[dict[str, Any]]:
        """The next n heartbeats, round-robin over the fleet, metrics drawn per condition."""
        return self._heartbeats(n, now_ms)[0]

    def _heartbeats(
        self, n: int, now_ms: int
    ) -> tuple[list[dict[str, Any]], np.ndarray, np.ndarray]:
        idx, _, w = self._slots(n)
        z = self._scores(idx)
        m = (
            fleet.sample_metrics(self.rng, self.conditions[idx])
            if z is None
            else fleet.metrics_from_normals(self.conditions[idx], z)
        )
        moving = np.flatnonzero(w > 0)
        if len(moving):  # drifting devices: metrics slide toward the target condition's
            tgt = (
                fleet.sample_metrics(self.rng, self.drift_target[idx[moving]])
                if z is None
                else fleet.metrics_from_normals(
                    self.drift_target[idx[moving]], {k: v[moving] for k, v in z.items()}
                )
            )
            for k in METRICS:
                m[k][moving] = (1 - w[moving]) * m[k][moving] + w[moving] * tgt[k]
        cols = [m[k].round(3).tolist() for k in METRICS]
        out = [self._heartbeat(i, [c[j] for c in cols], now_ms) for j, i in enumerate(idx.tolist())]
        self.counts["heartbeat"] += n
        return out, idx, w

    def _scores(self, idx: np.ndarray) -> dict[str, np.ndarray] | None:
        """Standard-normal scores of the next readings of devices `idx` (None: draw iid)."""
        if self.latent is None:
            return None
        rho, meas, rng, n = self.persistence, self.measurement, self._noise_rng, len(self.ids)
        parts = []
        for start in range(0, len(idx), n):  # a device appears once per chunk of <= N slots
            i = idx[start : start + n]
            lat = rho * self.latent[i] + np.sqrt(1 - rho * rho) * rng.standard_normal((len(i), 6))
            self.latent[i] = lat
            parts.append(np.sqrt(1 - meas) * lat + np.sqrt(meas) * rng.standard_normal(lat.shape))
        z = np.concatenate(parts) if parts else np.zeros((0, len(METRICS)))
        return {k: z[:, j] for j, k in enumerate(METRICS)}

    def _heartbeat(self, i: int, values: list[float], now_ms: int) -> dict[str, Any]:
        style, info = self.style[i], self.info[i]
        metrics = dict(zip(METRICS, values, strict=True))
        meta: dict[str, Any] = {"info": info}
        e = {
            "schema_version": SCHEMA_VERSION,
            "event_id": self._event_id(),
            "kind": "heartbeat",
            "device_id": self.ids[i],
            "event_time_ms": now_ms,
            "produced_at_ms": now_ms,
            "device_type": fleet.DEVICE_TYPES[self.types[i]],
            "firmware": self.firmware[i],
            "metrics": metrics,
            "meta": meta,
        }
        if style == "canonical":
            return e
        if style == "versioned":
            e["meta"] = {"info": {"v2": info}}
        elif style == "flat":
            e["meta"] = info
        elif style == "strings":
            e["metrics"] = {k: repr(v) for k, v in metrics.items()}
            e["meta"] = {"info": {**info, "hw_rev": str(info["hw_rev"])}}
        elif style == "extra":
            e["fw_channel"] = "stable"
            metrics["fan_rpm"] = 1200 + i % 800
            e["meta"] = {"info": {**info, "uplink": "lte"}, "boot_count": i % 50}
        return e

    def step(self, n: int, now_ms: int) -> Sequence[dict[str, Any] | BadRecord]:
        """The next n heartbeat slots: heartbeats, the alarms and work orders those devices
        raise meanwhile, and (with `bad_rate`) malformed records in place of some events."""
        events, idx, w = self._heartbeats(n, now_ms)
        cond = np.where(w >= 0.5, self.drift_target[idx], self.conditions[idx])
        src, tgt = self.conditions[idx], self.drift_target[idx]

        def blend(table: np.ndarray) -> np.ndarray:
            return (1 - w) * table[src] + w * table[tgt]

        rates = Rates(
            idx,
            cond,
            blend(_CRIT_H) / 3600,
            blend(_WARN_H) / 3600,
            blend(_WO_DAY) / 86_400,
            blend(_HIGH),
        )
        for d, fields in self.incidents.step(self.rng, rates, self.hb_interval_s * self.speedup):
            events.append(
                {
                    "schema_version": SCHEMA_VERSION,
                    "event_id": self._event_id(),
                    "device_id": self.ids[d],
                    "event_time_ms": now_ms,
                    "produced_at_ms": now_ms,
                    **fields,
                }
            )
            self.counts[fields["kind"]] += 1
        if self.bad_rate <= 0:
            return events
        out: list[dict[str, Any] | BadRecord] = list(events)
        for j in np.flatnonzero(self.rng.random(len(events)) < self.bad_rate).tolist():
            e = events[j]
            kind = KIND_NAMES[int(self.rng.integers(len(KIND_NAMES)))]
            out[j] = corrupt(e, topic_role(e["kind"]), kind, self.rng)
            self.counts[e["kind"]] -= 1
            self.counts[f"bad:{kind}"] += 1
        return out
