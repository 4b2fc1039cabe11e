"""Point-in-time training rows from a fleet's own history: every work order that got a
resolution (the spec's `[outcomes]`), with the features the worker would have computed at the
moment it was opened. Pure: records in (anything satisfying `KafkaMessage`), rows out; `precast
dataset build` feeds it from the topics, one partition at a time (co-partitioning keeps a
device's records in one partition), and tests feed it lists.

Three passes over a partition, each in read order:

1. the outcome stream (`outcomes`): opens inside [from, to) paired with the first close that
   carries a resolution before `resolved_until` (the labels, and why others were dropped);
2. the context streams (`context`), from `from - context_lookback`, of the labelled devices
   only: each device's events are folded by the spec's reducer in event-time order, and the
   context values are read as of each open, after every event at or before it (the open
   itself included: the worker's trigger sees its own event) and none after;
3. the heartbeats (`heartbeats`), from `from - heartbeat_lookback`, of the labelled devices
   only: the newest heartbeat at or before each open (a tie in event time: the first read,
   as the worker keeps it). Only the few newest candidates per open are kept as raw bytes and
   judged by the validator at the end (a candidate it rejects gives way to the next one), so
   the pass costs a set lookup for the heartbeats of devices without outcomes, and one JSON
   parse for the others.

Memory: the opens and resolutions of the partition's range, the context events of labelled
devices up to their last open (only the fields the reducer reads), and a few raw heartbeats
per label; nothing grows with the heartbeats read.

Leakage is excluded by construction (no event after an open reaches its row; the context is
folded in event-time order whatever order the topics hold); the skew test
(tests/unit/test_dataset_rows.py) compares the rows with the worker's own pipeline.
"""

from __future__ import annotations

import bisect
import logging
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import orjson

from precast.fleet.runtime import Fleet
from precast.guard import Guard
from precast.kafka import KafkaMessage
from schemas.wire import StreamReader

log = logging.getLogger("precast.fleet.outcomes")

CANDIDATES = 3  # raw heartbeats kept per open (newest first): room for rejected ones
# Columns every dataset has besides the features (a feature of the same name is refused).
FIXED_COLUMNS = (
    "device_id",
    "entity_id",
    "time_ms",
    "heartbeat_time_ms",
    "resolved_ms",
    "label",
    "resolved_by",
)


@dataclass(frozen=True)
class Window:
    """What one build covers (epoch ms): opens in [from_ms, to_ms), resolutions before
    `resolved_until_ms`, context events from `from_ms - context_lookback_ms`, heartbeats from
    `from_ms - heartbeat_lookback_ms`."""

    from_ms: int
    to_ms: int
    resolved_until_ms: int
    context_lookback_ms: int
    heartbeat_lookback_ms: int


@dataclass(frozen=True)
class Label:
    device_id: str
    entity_id: str
    opened_ms: int
    label: str
    resolved_by: str | None
    resolved_ms: int


@dataclass
class _Close:
    time_ms: int
    label: str | None
    by: str | None


@dataclass
class _Open:
    label: Label
    context: tuple[float, ...] | None = None
    # (event time, read order, raw value) of the newest heartbeats at or before the open
    candidates: list[tuple[int, int, bytes]] = field(default_factory=list)


class PartitionRows:
    """The rows of one partition's range; call the passes in order, then `rows()`."""

    def __init__(self, fleet: Fleet, window: Window) -> None:
        o = fleet.spec.outcomes
        if o is None:
            raise ValueError(f"fleet spec {fleet.name!r} declares no [outcomes]")
        self.fleet, self.w, self.o = fleet, window, o
        streams = fleet.spec.streams
        self.outcome_role: str = streams[o.stream].topic
        self.stream_of: dict[str, str] = {s.topic: name for name, s in streams.items()}
        # the topic roles pass 2 reads: what the context reads, and the outcome stream
        self.context_roles: tuple[str, ...] = tuple(
            dict.fromkeys(
                [*(streams[n].topic for n in sorted(fleet.context.streams)), self.outcome_role]
            )
        )
        # what the reducer reads of each stream's events: all a held event keeps
        self._reads: dict[str, tuple[str, ...]] = {}
        for c in fleet.spec.context.values():
            named = (getattr(c, a, None) for a in ("entity", "status", "distinct", "field"))
            keep = [*self._reads.get(c.stream, ()), *c.where, *(n for n in named if n)]
            self._reads[c.stream] = tuple(dict.fromkeys(keep))
        self.rejected: Counter[str] = Counter()  # "role:reason"
        self.dropped: Counter[str] = Counter()
        self._opens: dict[tuple[str, str], int] = {}
        self._closes: dict[tuple[str, str], _Close] = {}
        self._by_device: dict[str, list[_Open]] = {}  # labelled devices, opens by time
        self._keys: set[bytes] = set()
        self._last_open: dict[bytes, int] = {}
        self._events: dict[str, list[tuple[int, int, str, dict[str, Any]]]] = {}
        self._seq = 0
        self.read = Counter[str]()
        self._guard = Guard("dataset", log)

    # -- helpers ---------------------------------------------------------------------------------
    def _judge(self, role: str, m: KafkaMessage, count: bool = True) -> dict[str, Any] | None:
        got = self.fleet.validator.validate(role, m.key(), m.value())
        if got.ok:
            event: dict[str, Any] = got.event
            return event
        if count:
            self.rejected[f"{role}:{got.reason.value}"] += 1
        return None

    @property
    def labels(self) -> list[Label]:
        return [op.label for ops in self._by_device.values() for op in ops]

    # -- pass 1: the outcome stream ----------------------------------------------------------------
    def _unusable(self, role: str, exc: Exception, m: KafkaMessage) -> None:
        """A record that made a pass raise (nothing the validator passes should): counted as a
        rejection of its role, and logged (bounded) by the guard."""
        self.rejected[f"{role}:{self._guard.reject(exc, m).value}"] += 1

    def outcomes(self, msgs: Iterable[KafkaMessage]) -> None:
        for m in msgs:
            self.read[self.outcome_role] += 1
            try:
                self._outcome(m)
            except Exception as exc:  # noqa: BLE001 - the boundary (precast.guard)
                self._unusable(self.outcome_role, exc, m)

    def _outcome(self, m: KafkaMessage) -> None:
        o, w = self.o, self.w
        e = self._judge(self.outcome_role, m)
        if e is None:
            return
        t, status = int(e["event_time_ms"]), e.get(o.status)
        key = (e["device_id"], str(e[o.entity]))
        if status in o.opened:
            if w.from_ms <= t < w.to_ms and t < self._opens.get(key, 1 << 62):
                self._opens[key] = t
        elif status in o.resolved and t < w.resolved_until_ms:
            res = e.get(o.resolution)
            close = _Close(t, res, e.get(o.resolved_by) if o.resolved_by else None)
            prev = self._closes.get(key)
            if (
                prev is None
                or (prev.label is None) > (res is None)
                or ((prev.label is None) == (res is None) and t < prev.time_ms)
            ):
                self._closes[key] = close  # the first close that carries a resolution

    def plan(self) -> list[Label]:
        """Pair opens with resolutions; the labelled devices are what passes 2 and 3 read."""
        for key, t in sorted(self._opens.items(), key=lambda kv: (kv[1], kv[0])):
            c = self._closes.get(key)
            if c is None:
                self.dropped["unresolved"] += 1
            elif c.label is None:
                self.dropped["closed_without_resolution"] += 1
            elif c.time_ms < t:
                self.dropped["resolved_before_opened"] += 1
            else:
                label = Label(key[0], key[1], t, c.label, c.by, c.time_ms)
                self._by_device.setdefault(key[0], []).append(_Open(label))
        outside = sum(1 for k, c in self._closes.items() if k not in self._opens and c.label)
        if outside:
            self.dropped["opened_outside_range"] += outside
        self._keys = {d.encode() for d in self._by_device}
        self._last_open = {
            d.encode(): max(op.label.opened_ms for op in ops) for d, ops in self._by_device.items()
        }
        return self.labels

    # -- pass 2: context ---------------------------------------------------------------------------
    def context(self, role: str, msgs: Iterable[KafkaMessage]) -> None:
        """Records of one context topic role (any order across calls and roles)."""
        keys, stream = self._keys, self.stream_of[role]
        lo = self.w.from_ms - self.w.context_lookback_ms
        count = role != self.outcome_role  # pass 1 counted that topic's rejections
        reader = self.fleet.validator.readers[role]
        for m in msgs:
            self.read[f"context:{role}"] += 1
            key = m.key()
            if key not in keys:
                continue
            # a cheap look at the time first: an event after the device's last open (or before
            # the lookback) can change none of its rows, so it is not worth a full validation
            t = _time_of(reader, m.value())
            if t is not None and not lo <= t <= self._last_open[key]:
                continue
            try:
                e = self._judge(role, m, count)
                if e is None or e["device_id"] not in self._by_device:
                    continue
                t = int(e["event_time_ms"])
                if t < lo or t >= self.w.to_ms:
                    continue
                held = {k: e.get(k) for k in (*_ENVELOPE, *self._reads.get(stream, ()))}
            except Exception as exc:  # noqa: BLE001 - the boundary (precast.guard)
                self._unusable(role, exc, m)
                continue
            self._seq += 1
            self._events.setdefault(e["device_id"], []).append((t, self._seq, stream, held))

    def fold(self) -> None:
        """Each labelled device's context as of each of its opens, events in event-time order."""
        model = self.fleet.context
        for device, opens in self._by_device.items():
            events = sorted(self._events.pop(device, []), key=lambda x: (x[0], x[1]))
            ctx, i = model.new(device), 0
            for op in opens:
                while i < len(events) and events[i][0] <= op.label.opened_ms:
                    model.apply(ctx, events[i][2], events[i][3])
                    i += 1
                # as of the open: the worker's `computed_at` of the prediction the open triggers
                op.context = model.values(ctx, op.label.opened_ms)
        self._events.clear()

    # -- pass 3: heartbeats ------------------------------------------------------------------------
    def heartbeats(self, msgs: Iterable[KafkaMessage]) -> None:
        keys, reader = self._keys, self.fleet.validator.readers["heartbeats"]
        lookback = self.w.heartbeat_lookback_ms
        batch = list(msgs)
        self.read["heartbeats"] += len(batch)
        wanted = [m for m in batch if m.key() in keys]
        for m in wanted:
            value = m.value()
            t = _time_of(reader, value)
            if t is None or value is None:
                continue  # the validator rejects it too; the worker never uses it
            self._seq += 1
            key = m.key()
            assert key is not None
            for op in self._by_device.get(key.decode(errors="replace"), ()):
                if op.label.opened_ms - lookback <= t <= op.label.opened_ms:
                    _offer(op.candidates, (t, self._seq, value))

    # -- rows --------------------------------------------------------------------------------------
    def rows(self) -> dict[str, Any]:
        """Columns of the labelled opens that have a heartbeat: FIXED_COLUMNS, then the
        feature columns (float32, raw: standardization is fitted by the trainer)."""
        fm = self.fleet.features
        picked: list[tuple[Label, int, list[float], tuple[float, ...]]] = []
        for opens in self._by_device.values():
            for op in opens:
                hb = self._pick(op)
                if hb is None:
                    self.dropped["no_heartbeat"] += 1
                    continue
                assert op.context is not None
                picked.append((op.label, hb[0], hb[1], op.context))
        picked.sort(key=lambda r: (r[0].opened_ms, r[0].device_id, r[0].entity_id))
        n = len(picked)
        state = np.asarray([p[2] for p in picked], dtype=np.float64).reshape(n, len(fm.state))
        ctx = np.asarray([p[3] for p in picked], dtype=np.float64).reshape(
            n, len(self.fleet.context.names)
        )
        x = fm.build(state, ctx)
        cols: dict[str, Any] = {
            "device_id": [p[0].device_id for p in picked],
            "entity_id": [p[0].entity_id for p in picked],
            "time_ms": [p[0].opened_ms for p in picked],
            "heartbeat_time_ms": [p[1] for p in picked],
            "resolved_ms": [p[0].resolved_ms for p in picked],
            "label": [p[0].label for p in picked],
            "resolved_by": [p[0].resolved_by for p in picked],
        }
        for j, name in enumerate(fm.names):
            cols[name] = x[:, j]
        return cols

    def _pick(self, op: _Open) -> tuple[int, list[float]] | None:
        """The newest candidate the validator accepts: (its event time, its state columns)."""
        for t, _seq, value in op.candidates:
            got = self.fleet.validator.validate("heartbeats", op.label.device_id.encode(), value)
            if got.ok:
                try:
                    return t, self.fleet.features.state_row(got.event)
                except Exception as exc:  # noqa: BLE001 - the boundary (precast.guard)
                    self.rejected[f"heartbeats:{self._guard.reject(exc).value}"] += 1
                    continue
            self.rejected[f"heartbeats:{got.reason.value}"] += 1
        return None


_ENVELOPE = ("device_id", "event_id", "event_time_ms")


def _time_of(reader: StreamReader, value: bytes | None) -> int | None:
    """The event time of a raw record as the validator would read it; None when it has none
    a reader can find (the validator rejects such a record)."""
    if value is None:
        return None
    try:
        data = orjson.loads(value)
        return reader.event_time(data) if isinstance(data, dict) else None
    except Exception:  # noqa: BLE001 - only a look ahead: the validator judges the record
        return None


def _offer(cands: list[tuple[int, int, bytes]], c: tuple[int, int, bytes]) -> None:
    """Keep the CANDIDATES newest by event time, newest first; on equal times the first read
    stays ahead (a later heartbeat with the same time is stale to the worker)."""
    keys = [(-t, s) for t, s, _ in cands]
    i = bisect.bisect(keys, (-c[0], c[1]))
    if i < CANDIDATES:
        cands.insert(i, c)
        del cands[CANDIDATES:]
