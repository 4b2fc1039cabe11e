"""Events of the context streams (work orders, alarms, ...) whose rates follow each device's
hidden condition (the spec's `events` per condition), so a device's history carries real signal
about its right label. Each device keeps what it has open: entities with a lifecycle (opened,
updated, closed after `mean_open_s` on average) and occurrences that clear, bounded by
`max_open` per device and stream (the oldest is closed to make room).

Outcomes (the spec's `[outcomes]`): a work order of the outcome stream is closed with the
resolution its device's hidden condition calls for at that moment, after the stream's
`mean_open_s` on average (or `Resolutions.delay_s`), with a share of wrong and of missing
resolutions (`Resolutions`). Those draws come from a generator of their own, so every other
event is the same with or without resolutions."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from precast.fleet.simulate.truth import conditions_of
from schemas.spec import FleetSpec
from schemas.spec.fields import Boolean, Categorical, Stream
from schemas.spec.simulation import EventRate, StreamSim, ValueGen

Event = tuple[int, str, dict[str, Any]]  # (device index, stream, fields without envelope)


@dataclass(frozen=True)
class Resolutions:
    """How the simulated operations center resolves work orders: `wrong_share` of the closes
    name another label (uniformly), `missing_share` name none; `delay_s` is the mean simulated
    time a work order stays open (None: the spec's `mean_open_s` of its stream)."""

    wrong_share: float = 0.05
    missing_share: float = 0.1
    delay_s: float | None = None
    technicians: int = 40


@dataclass
class _Open:
    """What one device has open on one stream: [ID, fields] in opening order."""

    items: list[tuple[str, dict[str, Any]]] = field(default_factory=list)


class Incidents:
    def __init__(
        self,
        spec: FleetSpec,
        devices: int,
        run_id: str = "0",
        resolutions: Resolutions | None = None,
        seed: int = 0,
    ) -> None:
        sim = spec.simulator
        self.streams: dict[str, StreamSim] = dict(sim.streams) if sim else {}
        self.defs: dict[str, Stream] = {n: spec.streams[n] for n in self.streams}
        self.conds = conditions_of(spec)
        self.labels = spec.labels
        o = spec.outcomes
        # the outcome stream's close values get a resolution (None: no outcomes simulated)
        self.outcome = o if (o is not None and resolutions is not None) else None
        self.resolutions = resolutions or Resolutions()
        self._res_rng = np.random.default_rng([seed, 4])
        # fields only a resolver sets: never drawn for an opening event
        self._resolver_fields = {o.resolution, o.resolved_by} if o is not None else set()
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
        # the label each device's condition calls for now (what a resolver would find)
        now = np.where(w >= 0.5, tgt, src)
        out: list[Event] = []
        for j in np.flatnonzero(busy).tolist():
            d = int(devices[j])
            label = self.conds[int(now[j])].label
            out += self._lifecycle(d, u[j], dt_s, label)
            for k, r in counts:
                for _ in range(int(k[j])):
                    out += self._new(rng, d, r, label)
        return out

    def _mean_open_s(self, name: str, st: StreamSim) -> float:
        delay = self.resolutions.delay_s
        if self.outcome is not None and name == self.outcome.stream and delay is not None:
            return delay
        return st.mean_open_s

    def _lifecycle(self, d: int, u: np.ndarray, dt_s: float, label: str) -> list[Event]:
        out: list[Event] = []
        for i, (name, st) in enumerate(self.streams.items()):
            items = self.open.get((d, name))
            if items is None or not items.items:
                continue
            p_end = 1.0 - np.exp(-dt_s / self._mean_open_s(name, st))
            if u[min(i, 1)] < p_end:
                out.append((d, name, self._end(d, name, st, items, label)))
            elif st.update is not None and st.status is not None and u[2] < p_end:
                eid, fields = items.items[0]
                out.append((d, name, {**fields, st.status: st.update}))
        return out

    def _end(self, d: int, name: str, st: StreamSim, items: _Open, label: str) -> dict[str, Any]:
        _, fields = items.items.pop(0)
        self.n_open[d] -= 1
        if st.close is not None and st.status is not None:
            return {**fields, st.status: st.close, **self._resolution(name, st.close, label)}
        assert st.clear is not None
        return {**fields, st.clear: True}

    def _resolution(self, stream: str, status: str, label: str) -> dict[str, Any]:
        o = self.outcome
        if o is None or stream != o.stream or status not in o.resolved:
            return {}
        r, rng = self.resolutions, self._res_rng
        u = rng.random(3)
        if u[0] < r.missing_share:
            return {}
        if u[1] < r.wrong_share and len(self.labels) > 1:
            others = [lab for lab in self.labels if lab != label]
            label = others[int(u[2] * len(others))]
        out: dict[str, Any] = {o.resolution: label}
        if o.resolved_by is not None:
            out[o.resolved_by] = f"tech-{int(rng.integers(r.technicians)):03d}"
        return out

    def _new(self, rng: np.random.Generator, d: int, r: EventRate, label: str) -> list[Event]:
        name, st = r.stream, self.streams[r.stream]
        fields = self._fields(rng, self.defs[name], r.fields, self._resolver_fields)
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
                out.append((d, name, self._end(d, name, st, items, label)))
            items.items.append((fields[st.entity], fields))
            self.n_open[d] += 1
        out.append((d, name, fields))
        return out

    @staticmethod
    def _fields(
        rng: np.random.Generator, s: Stream, gens: dict[str, ValueGen], skip: set[str | None]
    ) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for name, f in s.fields.items():
            if name in skip:
                continue
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
