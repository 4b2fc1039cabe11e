"""The run of `python -m bench speculation`: every arm over one and the same simulated event
stream and read sequence on the virtual clock, the read API's read hints and prefetch requests
fed back as it would publish them (`bench slim` runs it too, for its student models)."""

from __future__ import annotations

import itertools
import tempfile
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import orjson

from bench.support.parts.speculation_arm import T0, TICK_MS, TOPICS, Arm, Outcome, Reads
from precast.fleet import Fleet as CompiledFleet
from precast.kafka import Record
from producers.simulator import Fleet
from workers.model.inference import ModelSession
from workers.precompute.config import LeaseConfig, PolicyConfig

ROLE_TOPIC = {
    "heartbeat": TOPICS.heartbeats.name,
    "work_order": TOPICS.work_orders.name,
    "alarm": TOPICS.alarms.name,
}
HINT_EVERY_MS = 1_000  # the read API publishes read hints once a second
HOT_FOR_MS = 30_000  # a read keeps a device hot this long


def _records(events: Sequence[Any], offsets: Iterator[int]) -> list[Record]:
    out = []
    for e in events:
        if isinstance(e, dict) and e.get("kind") in ROLE_TOPIC:
            out.append(
                Record(
                    ROLE_TOPIC[e["kind"]],
                    0,
                    next(offsets),
                    e["device_id"].encode(),
                    orjson.dumps(e),
                )
            )
        elif hasattr(TOPICS, getattr(e, "role", "")):  # another fleet's wire event: its role
            topic = getattr(TOPICS, e.role).name
            out.append(Record(topic, 0, next(offsets), e.device_id.encode(), orjson.dumps(e)))
    return out


def _requests(asks: list[tuple[str, str]], t_ms: int, offsets: Iterator[int]) -> list[Record]:
    ids = itertools.count()
    return [
        Record(
            TOPICS.precompute_requests.name,
            0,
            next(offsets),
            d.encode(),
            orjson.dumps(
                {
                    "schema_version": 1,
                    "request_id": f"r{t_ms}-{next(ids)}",
                    "device_id": d,
                    "reason": reason,
                    "requested_at_ms": t_ms,
                }
            ),
        )
        for d, reason in asks
    ]


def simulate(
    profile: str,
    policies: dict[str, PolicyConfig | tuple[PolicyConfig, LeaseConfig]],
    model: ModelSession,
    *,
    devices: int,
    seconds: int,
    read_rate: float,
    seed: int = 5,
    audit: tuple[str, ...] = (),
    spec_fleet: CompiledFleet | None = None,
) -> dict[str, Outcome]:
    """Run every policy (with leases unless a `LeaseConfig` says otherwise) over one and the
    same event stream and read sequence; the arms named in `audit` also write an audit log."""
    fleet = Fleet(
        devices,
        seed,
        fleet=spec_fleet,
        profile=profile,
        drift_share=0.05,
        drift_s=120.0,
        run_id="bench",
    )
    reads = Reads(fleet.ids, read_rate, seed)
    tmp = tempfile.TemporaryDirectory(prefix="bench-speculation-")
    arms: dict[str, Arm] = {}
    for name, p in policies.items():
        policy, lease = p if isinstance(p, tuple) else (p, None)
        log = Path(tmp.name) / f"arm{len(arms)}" if name in audit else None
        if log is not None:
            log.mkdir()
        arms[name] = Arm(policy, model, lease, log, spec_fleet)
    ref = next(iter(arms.values())).pipe  # every arm holds the same newest data
    offsets = itertools.count()
    per_tick = devices * TICK_MS // 1000
    hot: set[str] = set()
    pending_asks: dict[str, list[tuple[str, str]]] = {name: [] for name in arms}
    prefetch_next: list[str] = []
    for tick in range(seconds * 1000 // TICK_MS):
        t = T0 + tick * TICK_MS
        recs = _records(fleet.step(per_tick, t), offsets)
        for name, arm in arms.items():
            arm.out.events += sum(r.topic_ == TOPICS.heartbeats.name for r in recs)
            arm.ingest(recs + _requests(pending_asks[name], t, offsets), t)
            pending_asks[name] = [(d, "prefetch") for d in prefetch_next]
        read, prefetch_next = reads.tick(t)
        hot.update(read)
        hot.update(prefetch_next)
        if (t - T0) % HINT_EVERY_MS == 0 and hot:
            for arm in arms.values():
                arm.pipe.mark_hot(sorted(hot), t + HOT_FOR_MS)
            hot.clear()
        if read:
            slots = np.fromiter((ref.table.slot.get(d, 0) for d in read), dtype=np.int64)
            x, _ = ref.features_of(read, slots, t)
            probs = model.predict(x)
            order = np.argsort(-probs, axis=1, kind="stable")
            truth1 = order[:, 0]
            truth3 = [frozenset(r) for r in order[:, :3].tolist()]
            for name, arm in arms.items():
                pending_asks[name] += arm.read(read, truth1, truth3, t)
    for arm in arms.values():
        arm.close()
    tmp.cleanup()
    return {name: arm.out for name, arm in arms.items()}
