"""Fleet simulator: the fleet spec's devices in hidden conditions emitting events on the wire.

The devices, their readings and incidents come from `precast.fleet.simulate` (any spec: with
its `[simulator]` section's ground truth, or from its declared ranges alone); this class turns
them into wire documents the way real devices send them: canonical (every field at its first
declared path), or in a tolerated variant for the devices the spec's `[[simulator.wire]]` names
(an alternative path, numbers as text, undeclared fields), and with `bad_rate`, malformed
records in place of some events (`producers.badrecords`). Work orders are closed with the
resolution the device's condition calls for (`resolutions`; None sends closes without one),
and a `drift` profile changes the conditions' mix and signatures over time.

Deterministic under a seed: the same seed and arguments give the same devices and the same
sequence of records (content, order, bad records). Only the times (the clock passed in) and the
IDs (which start with a per-run `run_id`, random unless given) differ between runs.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from typing import Any

import numpy as np

from precast.fleet import Fleet as CompiledFleet
from precast.fleet import load_fleet
from precast.fleet.simulate.devices import SimEvent, SimFleet
from precast.fleet.simulate.drift import DriftProfile
from precast.fleet.simulate.incidents import Resolutions
from precast.fleet.simulate.readings import PROFILES
from producers.badrecords import BadRecord, corrupt, kinds_for
from schemas.canonical import StreamWriter

__all__ = ["PROFILES", "DriftProfile", "Fleet", "Resolutions", "WireEvent"]


class WireEvent(dict[str, Any]):
    """One event's wire document, with what the publisher needs beside it: the topic role and
    the record key (the device ID, wherever the spec puts it on the wire)."""

    __slots__ = ("device_id", "event_id", "role")

    def __init__(
        self, doc: dict[str, Any], role: str, device_id: str, event_id: str | None
    ) -> None:
        super().__init__(doc)
        self.role, self.device_id, self.event_id = role, device_id, event_id


class Fleet:
    """N simulated devices of a fleet spec (the built-in fleet unless `fleet` is given)."""

    def __init__(
        self,
        devices: int,
        seed: int,
        *,
        fleet: CompiledFleet | None = None,
        hb_interval_s: float | None = None,
        speedup: float = 1.0,
        drift_share: float | None = None,
        drift_s: float | None = None,
        drift_at_s: float | None = None,
        bad_rate: float = 0.0,
        run_id: str | None = None,
        profile: str = "iid",
        drift: DriftProfile | None = None,
        resolutions: Resolutions | None = Resolutions(),  # noqa: B008 - frozen, shared safely
    ) -> None:
        self.fleet = fleet or load_fleet()
        self.sim = SimFleet(
            self.fleet,
            devices,
            seed,
            hb_interval_s=hb_interval_s,
            speedup=speedup,
            drift_share=drift_share,
            drift_s=drift_s,
            drift_at_s=drift_at_s,
            run_id=run_id,
            profile=profile,
            drift=drift,
            resolutions=resolutions,
        )
        spec = self.fleet.spec
        self.bad_rate = bad_rate
        self.rng = self.sim.rng
        self.writers = {name: StreamWriter(s) for name, s in spec.streams.items()}
        self.roles = {name: s.topic for name, s in spec.streams.items()}
        self.bad_kinds = kinds_for(spec)
        self.style = self._styles(spec, devices, seed)
        self.counts: Counter[str] = Counter()

    # the ground truth, as the simulator core keeps it
    @property
    def ids(self) -> list[str]:
        return self.sim.ids

    @property
    def run_id(self) -> str:
        return self.sim.run_id

    @property
    def conditions(self) -> np.ndarray:
        return self.sim.conditions

    @property
    def drifting(self) -> np.ndarray:
        return self.sim.drifting

    @property
    def drift_target(self) -> np.ndarray:
        return self.sim.drift_target

    @property
    def sim_s(self) -> float:
        return self.sim.sim_s

    def conditions_now(self) -> np.ndarray:
        return self.sim.conditions_now()

    def _styles(self, spec: Any, n: int, seed: int) -> list[str]:
        """Each device's wire style: the first `[[simulator.wire]]` rule that names it."""
        rules = spec.simulator.wire if spec.simulator else ()
        static = self.sim.draw.static
        share_rng = np.random.default_rng([seed, 2])
        u = share_rng.random(n) if any(r.share is not None for r in rules) else np.ones(n)
        out = []
        for i in range(n):
            style = "canonical"
            lo = 0.0
            for r in rules:
                if r.share is not None:
                    hit = lo <= u[i] < lo + r.share
                    lo += r.share
                else:
                    hit = all(str(static.get(k, [None] * n)[i]) == v for k, v in r.when.items())
                if hit:
                    style = r.style
                    break
            out.append(style)
        return out

    # -- records ---------------------------------------------------------------------------------
    def wire(self, e: SimEvent) -> WireEvent:
        """One simulated event as its device sends it."""
        style = self.style[e.device]
        writer = self.writers[e.stream]
        alternative = int(style[5:]) - 1 if style.startswith("path:") else 0
        doc = writer.write(e.event, alternative, numbers_as_text=style == "numbers_as_text")
        if style == "undeclared":
            _undeclared(doc, e.device)
        return WireEvent(doc, self.roles[e.stream], e.event["device_id"], e.event.get("event_id"))

    def heartbeats(self, n: int, now_ms: int) -> list[WireEvent]:
        """The next n heartbeats, round-robin over the fleet."""
        events, *_ = self.sim.heartbeats(n, now_ms)
        self.counts["heartbeat"] += n
        return [self.wire(e) for e in events]

    def step(self, n: int, now_ms: int) -> Sequence[WireEvent | BadRecord]:
        """The next n heartbeat slots: heartbeats, the context events those devices raise
        meanwhile, and (with `bad_rate`) malformed records in place of some events."""
        events = [self.wire(e) for e in self.sim.step(n, now_ms)]
        for e in events:
            self.counts[_KIND.get(e.role, e.role)] += 1
        if self.bad_rate <= 0 or not self.bad_kinds:
            return events
        out: list[WireEvent | BadRecord] = list(events)
        for j in np.flatnonzero(self.rng.random(len(events)) < self.bad_rate).tolist():
            e = events[j]
            kind = self.bad_kinds[int(self.rng.integers(len(self.bad_kinds)))]
            out[j] = corrupt(e, e.role, kind, self.rng, self.fleet.spec)
            self.counts[_KIND.get(e.role, e.role)] -= 1
            self.counts[f"bad:{kind}"] += 1
        return out


# counts by the built-in fleet's event kinds, as the simulator always reported them
_KIND = {"heartbeats": "heartbeat", "work_orders": "work_order", "alarms": "alarm"}


def _undeclared(doc: dict[str, Any], device: int) -> None:
    """Fields a newer firmware sends that the spec does not know (yet): one at the top, one in
    every object of the document."""
    for value in list(doc.values()):
        if isinstance(value, dict):
            value["x_extra"] = 1200 + device % 800
            for inner in value.values():
                if isinstance(inner, dict):
                    inner["x_note"] = "lte"
    doc["fw_channel"] = "stable"
