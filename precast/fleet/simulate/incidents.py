"""Events of the context streams (work orders, alarms, ...) whose rates follow each device's
hidden condition (the spec's `events` per condition), so a device's history carries real signal
about its right label. Each device keeps what it has open: entities with a lifecycle (opened,
updated, closed after `mean_open_s` on average) and occurrences that clear, bounded by
`max_open` per device and stream (the oldest is closed to make room)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from precast.fleet.simulate.truth import conditions_of
from schemas.spec import FleetSpec
from schemas.spec.fields import Boolean, Categorical, Stream
from schemas.spec.simulation import EventRate, StreamSim, ValueGen

Event = tuple[int, str, dict[str, Any]]  # (device index, stream, fields without envelope)


@dataclass
class _Open:
    """What one device has open on one stream: [ID, fields] in opening order."""

    items: list[tuple[str, dict[str, Any]]] = field(default_factory=list)


class Incidents:
    def __init__(self, spec: FleetSpec, devices: int, run_id: str = "0") -> None:
        sim = spec.simulator
        self.streams: dict[str, StreamSim] = dict(sim.streams) if sim else {}
        self.defs: dict[str, Stream] = {n: spec.streams[n] for n in self.streams}
        self.conds = conditions_of(spec)
        self.run_id = run_id
        self.seq = 0
        self.open: dict[tuple[int, str], _Open] = {}
        self.n_open = np.zeros(devices, dtype=np.int64)
        # per condition: the rates of its simulated streams, in declaration order
        self.rates: list[list[EventRate]] = [
            [e for e in c.events if e.stream in self.streams] for c in self.conds
        ]

    def _next_id(self, stream: str) -> str:
        self.seq += 1
        return f"{stream[:3]}-{self.run_id}-{self.seq:x}"

    def step(
        self,
        rng: np.random.Generator,
        devices: np.ndarray,
        src: np.ndarray,
        tgt: np.ndarray,
        w: np.ndarray,
        dt_s: float,
    ) -> list[Event]:
        """Events of one batch of heartbeat slots: `devices` in condition `src`, drifting toward
        `tgt` with weight `w`, `dt_s` of simulated time since each one's previous slot."""
        n = len(devices)
        counts: list[tuple[np.ndarray, EventRate]] = []
        for c, rates in enumerate(self.rates):
            share = np.where(src == c, 1.0 - w, 0.0) + np.where(tgt == c, w, 0.0)
            if not share.any():
                continue
            for r in rates:
                counts.append((rng.poisson(r.per_s * dt_s * share), r))
        u = rng.random((n, 3))
        busy = self.n_open[devices] > 0
        for k, _ in counts:
            busy |= k > 0
        out: list[Event] = []
        for j in np.flatnonzero(busy).tolist():
            d = int(devices[j])
            out += self._lifecycle(d, u[j], dt_s)
            for k, r in counts:
                for _ in range(int(k[j])):
                    out += self._new(rng, d, r)
        return out

    def _lifecycle(self, d: int, u: np.ndarray, dt_s: float) -> list[Event]:
        out: list[Event] = []
        for i, (name, st) in enumerate(self.streams.items()):
            items = self.open.get((d, name))
            if items is None or not items.items:
                continue
            p_end = 1.0 - np.exp(-dt_s / st.mean_open_s)
            if u[min(i, 1)] < p_end:
                out.append((d, name, self._end(d, name, st, items)))
            elif st.update is not None and st.status is not None and u[2] < p_end:
                eid, fields = items.items[0]
                out.append((d, name, {**fields, st.status: st.update}))
        return out

    def _end(self, d: int, name: str, st: StreamSim, items: _Open) -> dict[str, Any]:
        _, fields = items.items.pop(0)
        self.n_open[d] -= 1
        if st.close is not None and st.status is not None:
            return {**fields, st.status: st.close}
        assert st.clear is not None
        return {**fields, st.clear: True}

    def _new(self, rng: np.random.Generator, d: int, r: EventRate) -> list[Event]:
        name, st = r.stream, self.streams[r.stream]
        fields = self._fields(rng, self.defs[name], r.fields)
        fields[st.entity] = self._next_id(name)
        if st.status is not None and st.open is not None:
            fields[st.status] = st.open
        if st.clear is not None:
            fields[st.clear] = False
        out: list[Event] = []
        lifetime = st.status is not None or st.clear is not None
        if lifetime:
            items = self.open.setdefault((d, name), _Open())
            if len(items.items) >= st.max_open:
                out.append((d, name, self._end(d, name, st, items)))
            items.items.append((fields[st.entity], fields))
            self.n_open[d] += 1
        out.append((d, name, fields))
        return out

    @staticmethod
    def _fields(rng: np.random.Generator, s: Stream, gens: dict[str, ValueGen]) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for name, f in s.fields.items():
            g = gens.get(name)
            if g is not None:
                out[name] = _draw(rng, g)
            elif isinstance(f, Categorical):
                out[name] = f.values[int(rng.integers(len(f.values)))]
            elif isinstance(f, Boolean):
                out[name] = bool(f.default) if f.default is not None else False
            elif f.required:
                out[name] = "sim"
        return out


def _draw(rng: np.random.Generator, g: ValueGen) -> Any:
    if isinstance(g, str | bool | int | float):
        return g
    if isinstance(g, tuple):
        return g[int(rng.integers(len(g)))]
    values = list(g)
    p = np.array([g[v] for v in values], dtype=np.float64)
    return values[int(rng.choice(len(values), p=p / p.sum()))]
