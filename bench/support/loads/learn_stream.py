"""The simulated stream of `python -m bench learn`: a fleet whose conditions drifted after its
live model was trained (the drift profile `shift`, in force from the start), its work orders
resolved as each device's condition calls for (with the simulator's wrong and missing
resolutions), published to a topic catalog. Beside the topics the benchmark keeps, for every
work order opened, the device's true label at that moment and the reference features: the
spec's own reducer and feature matrix over the device's events in the order they happened,
every event at or before the open and none after (what `point_in_time_leaks` compares the
dataset with). "At or before" is by event time, as the dataset reads it: with more events a
round than milliseconds, an alarm can share the open's millisecond and come after it in the
stream, and it counts."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np
import orjson

from bench.support.harness import progress
from precast.fleet import Fleet as CompiledFleet
from precast.fleet.context import DeviceContext
from precast.fleet.simulate.drift import DriftProfile
from precast.kafka import Producer
from precast.settings import KafkaSettings
from producers.simulator import Fleet, Resolutions
from schemas.topics import Topics

T0_OFFSET_MS = 3 * 3_600_000  # the stream starts this long before now (inside retention)
DRIFT = DriftProfile(at_s=0.0, ramp_s=0.0, mix=0.3)  # every device drifted from the start


@dataclass
class Stream:
    first_ms: int
    cut_ms: int  # the training window ends here; the test window runs to end_ms
    end_ms: int
    records: dict[str, int] = field(default_factory=dict)  # topic role -> records published
    truth: dict[str, int] = field(default_factory=dict)  # work order -> true label index
    reference: dict[str, np.ndarray] = field(default_factory=dict)  # work order -> features
    reference_hb_ms: dict[str, int] = field(default_factory=dict)  # its heartbeat's event time


@dataclass
class _Device:
    context: DeviceContext
    heartbeat: list[float] | None = None
    heartbeat_ms: int = 0


def publish(
    kafka: KafkaSettings,
    fleet: CompiledFleet,
    topics: Topics,
    *,
    devices: int,
    hb_s: float,
    speedup: float,
    train_min: float,
    test_min: float,
    seed: int,
    now_ms: int,
) -> Stream:
    sim = Fleet(
        devices,
        seed,
        fleet=fleet,
        hb_interval_s=hb_s,
        speedup=speedup,
        drift=DRIFT,
        resolutions=Resolutions(),
        run_id="learn",
    )
    spec, model, fm = fleet.spec, fleet.context, fleet.features
    o = spec.outcomes
    assert o is not None
    hb_stream, role_of = spec.heartbeat_stream, {n: s.topic for n, s in spec.streams.items()}
    first = now_ms - T0_OFFSET_MS
    rounds = int(round((train_min + test_min) * 60 / hb_s))
    out = Stream(first, first + int(train_min * 60_000), first + int(rounds * hb_s * 1000))
    state: dict[int, _Device] = {}
    pending: list[tuple[_Device, str, int]] = []  # opens whose millisecond may still get events
    p = Producer(kafka)
    names = {role: getattr(topics, role).name for role in set(role_of.values())}
    t = first
    for r in range(rounds):
        events = sim.sim.step(devices, 0)
        dt = hb_s * 1000 / max(1, len(events))
        for j, e in enumerate(events):
            te = t + int(j * dt)
            if pending and te > pending[0][2]:
                _references(out, fleet, pending)
            e.event["event_time_ms"] = e.event["produced_at_ms"] = te
            dev = state.get(e.device)
            if dev is None:
                dev = state[e.device] = _Device(model.new(e.event["device_id"]))
            if e.stream == hb_stream:
                dev.heartbeat, dev.heartbeat_ms = fm.state_row(e.event), te
            else:
                model.apply(dev.context, e.stream, e.event)
                if e.stream == o.stream and e.event.get(o.status) in o.opened:
                    pending.append((dev, _open(out, sim, fleet, e.device, e.event), te))
            w = sim.wire(e)
            role = role_of[e.stream]
            p.produce(names[role], w.device_id.encode(), orjson.dumps(w), timestamp_ms=te)
            out.records[role] = out.records.get(role, 0) + 1
        p.poll(0)
        t += int(hb_s * 1000)
        if r % max(1, rounds // 10) == 0:
            progress(
                f"learn: simulated {r + 1}/{rounds} rounds, {sum(out.records.values()):,} records"
            )
    _references(out, fleet, pending)
    p.flush(300)
    return out


def _open(out: Stream, sim: Fleet, fleet: CompiledFleet, device: int, event: dict[str, Any]) -> str:
    """The truth of a work order opened now; its reference features come once its millisecond
    is over (`_references`)."""
    o = fleet.spec.outcomes
    assert o is not None
    entity = str(event[o.entity])
    cond = int(sim.sim.label_now(np.array([device]), sim.sim.sim_s)[0])
    out.truth[entity] = fleet.spec.labels.index(sim.sim.labels[cond])
    return entity


def _references(out: Stream, fleet: CompiledFleet, pending: list[tuple[_Device, str, int]]) -> None:
    """The reference features of the pending opens: every event up to their millisecond."""
    for dev, entity, te in pending:
        if dev.heartbeat is not None:
            x = fleet.features.build(
                np.asarray([dev.heartbeat], dtype=np.float64),
                np.asarray([fleet.context.values(dev.context, te)], dtype=np.float64),
            )
            out.reference[entity] = x[0]
            out.reference_hb_ms[entity] = dev.heartbeat_ms
    pending.clear()
