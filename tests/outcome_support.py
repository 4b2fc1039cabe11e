"""Simulated records with resolved work orders, for the dataset tests: the simulator's events
of any fleet spec in their wire form (every wire variant the spec declares), each with its own
event time, so "at or before the open" has one answer in every order."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

import numpy as np
import orjson

from precast.fleet import Fleet as CompiledFleet
from precast.fleet.outcomes import PartitionRows, Window
from precast.kafka import Record
from producers.simulator import Fleet, Resolutions
from schemas.partitioning import partition_for
from schemas.topics import Topics, catalog

T0 = 1_700_000_000_000
TOPICS = catalog("u.", 1)
ROLES = ("heartbeats", "work_orders", "alarms")


@dataclass
class Simulated:
    fleet: CompiledFleet
    topics: Topics
    records: list[Record] = field(default_factory=list)  # in the order they were sent
    last_ms: int = T0

    def by_role(self, role: str) -> list[Record]:
        name = getattr(self.topics, role).name
        return [r for r in self.records if r.topic() == name]


def simulate(
    fleet: CompiledFleet,
    devices: int = 200,
    rounds: int = 40,
    seed: int = 3,
    speedup: float = 3_000,
    delay_s: float = 600,
    step_ms: int = 7,
    topics: Topics = TOPICS,
    t0: int = T0,
) -> Simulated:
    """`rounds` heartbeats per device with work orders resolved after `delay_s` simulated
    seconds on average (fast simulated time: many of them), event times `step_ms` apart."""
    sim = Fleet(
        devices,
        seed,
        fleet=fleet,
        speedup=speedup,
        run_id="s",
        resolutions=Resolutions(wrong_share=0.05, missing_share=0.1, delay_s=delay_s),
    )
    out = Simulated(fleet, topics)
    offsets: Counter[tuple[str, int]] = Counter()
    parts = topics.heartbeats.partitions
    t = t0
    for _ in range(rounds):
        for e in sim.sim.step(devices, 0):
            t += step_ms
            e.event["event_time_ms"] = e.event["produced_at_ms"] = t
            w = sim.wire(e)
            name, key = getattr(topics, w.role).name, w.device_id.encode()
            p = partition_for(key, parts)
            out.records.append(Record(name, p, offsets[(name, p)], key, orjson.dumps(w), [], t))
            offsets[(name, p)] += 1
    out.last_ms = t
    return out


def window(s: Simulated, lookback_ms: int = 10**12) -> Window:
    first = min((r.timestamp()[1] for r in s.records), default=T0)
    return Window(first, s.last_ms + 1, s.last_ms + 1, lookback_ms, lookback_ms)


def build(s: Simulated, w: Window | None = None) -> PartitionRows:
    """The dataset builder's passes over the records (each topic in its own order)."""
    rows = PartitionRows(s.fleet, w or window(s))
    rows.outcomes(s.by_role(rows.outcome_role))
    rows.plan()
    for role in rows.context_roles:
        rows.context(role, s.by_role(role))
    rows.fold()
    rows.heartbeats(s.by_role("heartbeats"))
    return rows


def features(cols: dict, fleet: CompiledFleet) -> np.ndarray:
    return np.stack([np.asarray(cols[n], dtype=np.float32) for n in fleet.features.names], axis=1)
