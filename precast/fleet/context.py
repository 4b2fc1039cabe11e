"""Per-device context from the fleet's low-rate streams: one pure, idempotent reducer compiled
from the spec's `[context]` (schemas.spec.context).

The context aggregator (`workers.context`, faust) folds events into one `DeviceContext` per
device and publishes snapshots to the compacted device-context topic; the worker restores from
that topic and folds the events it consumes itself with the same reducer, so a trigger sees its
own work order or alarm without waiting for the aggregator; the board reads the snapshots.
Applying an event twice changes nothing (entities and window entries are keyed by ID), which is
what makes the two paths and at-least-once redelivery safe to combine.

State per device, shared by the context values that read the same thing:
- open groups (stream, entity, status, open/closed values): entity ID -> the latest values of
  the fields their filters read; `open_count` values count the entities that pass;
- window groups (stream, distinct field): ID -> (event time, bit mask of the `window_count`
  values whose filter the event passed); pruned past the group's longest window;
- the newest matching event time per `time_since_last`, and (time, value) per `last`.
"""

from __future__ import annotations

import bisect
import heapq
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from schemas.spec import FleetSpec, context_hash
from schemas.spec.context import UNIT_MS, Last, OpenCount, TimeSinceLast, WindowCount

Where = Mapping[str, tuple[Any, ...]]


@dataclass
class DeviceContext:
    device_id: str
    open: list[dict[str, tuple[Any, ...]]] = field(default_factory=list)
    windows: list[dict[str, tuple[int, int]]] = field(default_factory=list)
    since: dict[str, int] = field(default_factory=dict)
    last: dict[str, tuple[int, float]] = field(default_factory=dict)
    as_of_ms: int = 0  # newest event time folded in
    # per window group, its entries ordered by event time (`_Order`): derived from `windows`
    # on first use, neither state nor part of a snapshot
    order: list[_Order | None] = field(default_factory=list, compare=False, repr=False)

    def state(self) -> tuple[Any, ...]:
        """Everything a context value reads (to tell whether an event changed anything)."""
        return (
            [dict(g) for g in self.open],
            [dict(g) for g in self.windows],
            dict(self.since),
            dict(self.last),
        )


class _Order:
    """A window group's entries by event time: a heap of (event time, insertion number, ID),
    so pruning and eviction take the oldest in O(log n), and per bit (per `window_count`) the
    sorted event times, so a count over [lo, hi] is two bisections. Scanning every entry made
    folding an event, and reading a count, O(limit): with 1,024 entries in a window, ~300 µs
    an event for a fold and a read, ~13 µs now (`python -m bench fleets`, context fold), in
    the worker and the aggregator alike. Ties go to the earliest inserted, as `min` over the
    dict's order did."""

    __slots__ = ("entries", "heap", "seq", "times")

    def __init__(self, entries: dict[str, tuple[int, int]]) -> None:
        self.entries = entries  # the dict this orders (rebuilt when it is replaced)
        self.heap = [(t, i, k) for i, (k, (t, _)) in enumerate(entries.items())]
        heapq.heapify(self.heap)
        self.seq = len(self.heap)
        self.times: dict[int, list[int]] = {}
        for t, m in entries.values():
            for b in _bits(m):
                self.times.setdefault(b, []).append(t)
        for ts in self.times.values():
            ts.sort()

    def push(self, key: str, t: int, mask: int) -> None:
        heapq.heappush(self.heap, (t, self.seq, key))
        self.seq += 1
        for b in _bits(mask):
            bisect.insort(self.times.setdefault(b, []), t)

    def pop_oldest(self) -> None:
        """Remove the oldest entry (the heap holds exactly the dict's entries: only this
        class removes any)."""
        t, _, key = heapq.heappop(self.heap)
        if self.entries.get(key, (None,))[0] == t:
            for b in _bits(self.entries.pop(key)[1]):
                ts = self.times[b]
                del ts[bisect.bisect_left(ts, t)]

    def count(self, bit: int, lo: int, hi: int) -> int:
        ts = self.times.get(bit)
        return bisect.bisect_right(ts, hi) - bisect.bisect_left(ts, lo) if ts else 0


def _bits(mask: int) -> list[int]:
    out = []
    while mask:
        b = mask & -mask
        out.append(b)
        mask ^= b
    return out


def _order_of(ctx: DeviceContext, g: int) -> _Order:
    entries = ctx.windows[g]
    if len(ctx.order) != len(ctx.windows):
        ctx.order = [None] * len(ctx.windows)
    o = ctx.order[g]
    if o is None or o.entries is not entries:  # first use, or a snapshot merged in
        o = ctx.order[g] = _Order(entries)
    return o


def _passes(where: Where, event: Mapping[str, Any]) -> bool:
    return all(event.get(k) in allowed for k, allowed in where.items())


@dataclass(frozen=True)
class OpenGroup:
    stream: str
    entity: str
    status: str
    open: frozenset[str]
    closed: frozenset[str]
    fields: tuple[str, ...]  # what the members' filters read, kept per entity
    limit: int


@dataclass(frozen=True)
class WindowGroup:
    stream: str
    distinct: str | None  # None: the event ID
    window_ms: int  # the longest of its members (pruning)
    limit: int
    members: tuple[tuple[int, Where], ...]  # (bit, filter) per window count


@dataclass(frozen=True)
class _Reader:
    kind: str  # open | window | since | last
    group: int
    where: tuple[tuple[int, frozenset[Any]], ...] = ()  # open: (field position, allowed)
    bit: int = 0
    window_ms: int = 0
    unit_ms: int = 1
    cap: float = 0.0
    default: float = 0.0


class ContextModel:
    """The spec's context values, compiled: fold events in, read values as of a time."""

    def __init__(self, spec: FleetSpec) -> None:
        self.spec = spec
        self.names: tuple[str, ...] = tuple(spec.context)
        self.hash = context_hash(spec)[:16]
        self.open_groups: list[OpenGroup] = []
        self.window_groups: list[WindowGroup] = []
        self._compile(spec)
        self._since = {n: c for n, c in spec.context.items() if isinstance(c, TimeSinceLast)}
        self._last = {n: c for n, c in spec.context.items() if isinstance(c, Last)}
        # stream -> does any context value read it
        self.streams = frozenset(c.stream for c in spec.context.values())

    def _compile(self, spec: FleetSpec) -> None:
        opens: dict[tuple[Any, ...], list[OpenCount]] = {}
        windows: dict[tuple[Any, ...], list[WindowCount]] = {}
        for c in spec.context.values():
            if isinstance(c, OpenCount):
                key = (c.stream, c.entity, c.status, frozenset(c.open), frozenset(c.closed))
                opens.setdefault(key, []).append(c)
            elif isinstance(c, WindowCount):
                windows.setdefault((c.stream, c.distinct), []).append(c)
        for key, members in opens.items():
            fields = tuple(dict.fromkeys(k for m in members for k in m.where))
            self.open_groups.append(OpenGroup(*key, fields, max(m.limit for m in members)))
        for (stream, distinct), wmembers in windows.items():
            self.window_groups.append(
                WindowGroup(
                    stream,
                    distinct,
                    max(round(m.window_s * 1000) for m in wmembers),
                    max(m.limit for m in wmembers),
                    tuple((1 << i, m.where) for i, m in enumerate(wmembers)),
                )
            )
        self._readers: list[_Reader] = []
        for c in spec.context.values():
            if isinstance(c, OpenCount):
                g = list(opens).index(
                    (c.stream, c.entity, c.status, frozenset(c.open), frozenset(c.closed))
                )
                pos = self.open_groups[g].fields
                where = tuple((pos.index(k), frozenset(v)) for k, v in c.where.items())
                self._readers.append(_Reader("open", g, where))
            elif isinstance(c, WindowCount):
                g = list(windows).index((c.stream, c.distinct))
                bit = 1 << windows[(c.stream, c.distinct)].index(c)
                self._readers.append(
                    _Reader("window", g, bit=bit, window_ms=round(c.window_s * 1000))
                )
            elif isinstance(c, TimeSinceLast):
                self._readers.append(_Reader("since", -1, unit_ms=UNIT_MS[c.unit], cap=c.cap))
            else:
                self._readers.append(_Reader("last", -1, default=c.default))

    def readers_of(self, kind: str, group: int) -> tuple[str, ...]:
        """Names of the context values that read open group (`kind="open"`) or window group
        (`"window"`) `group`, in spec order: a window group's i-th name is the one whose bit
        (1 << i) its entries' masks carry (what the board shows per entity and entry)."""
        return tuple(
            n
            for n, r in zip(self.names, self._readers, strict=True)
            if r.kind == kind and r.group == group
        )

    def new(self, device_id: str) -> DeviceContext:
        return DeviceContext(
            device_id, [{} for _ in self.open_groups], [{} for _ in self.window_groups]
        )

    # -- the reducer ------------------------------------------------------------------------------
    def counts(self, stream: str, event: Mapping[str, Any]) -> bool:
        """Whether some context value counts this event (the `trigger = "counted"` rule): it
        passes the filter of a context value of its stream (redelivered or not)."""
        return any(
            c.stream == stream and _passes(c.where, event) for c in self.spec.context.values()
        )

    def apply(self, ctx: DeviceContext, stream: str, event: Mapping[str, Any]) -> bool:
        """Fold a normalized event of `stream` in; True when it changed a context value's state."""
        t = int(event["event_time_ms"])
        ctx.as_of_ms = max(ctx.as_of_ms, t)
        changed = False
        for g, group in enumerate(self.open_groups):
            if group.stream == stream:
                changed |= self._apply_open(ctx.open[g], group, event)
        for g, wgroup in enumerate(self.window_groups):
            if wgroup.stream == stream:
                changed |= self._apply_window(ctx, g, wgroup, event, t)
        for name, c in self._since.items():
            if c.stream == stream and _passes(c.where, event):
                before = ctx.since.get(name)
                ctx.since[name] = max(before or 0, t)
                changed |= ctx.since[name] != before
        for name, lc in self._last.items():
            v = event.get(lc.field)
            if lc.stream == stream and v is not None and _passes(lc.where, event):
                old = ctx.last.get(name)
                if old is None or t >= old[0]:
                    ctx.last[name] = (t, float(v))
                    changed |= ctx.last[name] != old
        return changed

    @staticmethod
    def _apply_open(
        members: dict[str, tuple[Any, ...]], g: OpenGroup, event: Mapping[str, Any]
    ) -> bool:
        entity, status = str(event[g.entity]), event[g.status]
        if status in g.closed:
            return members.pop(entity, None) is not None
        if status not in g.open:
            return False
        values = tuple(event.get(f) for f in g.fields)
        old = members.get(entity)
        members[entity] = values
        if len(members) > g.limit:
            members.pop(next(iter(members)))
        return old != values

    @staticmethod
    def _apply_window(
        ctx: DeviceContext, g: int, group: WindowGroup, event: Mapping[str, Any], t: int
    ) -> bool:
        order = _order_of(ctx, g)
        entries, heap = order.entries, order.heap
        cutoff = ctx.as_of_ms - group.window_ms
        while heap and heap[0][0] < cutoff:
            order.pop_oldest()
        mask = 0
        for bit, where in group.members:
            if _passes(where, event):
                mask |= bit
        key = event.get(group.distinct) if group.distinct else event.get("event_id")
        if not mask or key is None or str(key) in entries or t < cutoff:
            return False
        entries[str(key)] = (t, mask)
        order.push(str(key), t, mask)
        while len(entries) > group.limit and heap:
            order.pop_oldest()
        return True

    # -- values -----------------------------------------------------------------------------------
    def empty(self) -> tuple[float, ...]:
        """The values of a device nobody reported anything about."""
        return tuple(self._value(None, r, 0) for r in self._readers)

    def values(self, ctx: DeviceContext | None, at_ms: int) -> tuple[float, ...]:
        """Every context value of the device as of event time `at_ms`, in spec order."""
        return tuple(
            self._value(ctx, r, at_ms, n) for r, n in zip(self._readers, self.names, strict=True)
        )

    def _value(self, ctx: DeviceContext | None, r: _Reader, at_ms: int, name: str = "") -> float:
        if r.kind == "open":
            if ctx is None:
                return 0.0
            members = ctx.open[r.group]
            if not r.where:
                return float(len(members))
            return float(
                sum(1 for vals in members.values() if all(vals[i] in ok for i, ok in r.where))
            )
        if r.kind == "window":
            if ctx is None:
                return 0.0
            lo, entries = at_ms - r.window_ms, ctx.windows[r.group]
            order = ctx.order[r.group] if len(ctx.order) > r.group else None
            if order is not None and order.entries is entries:  # what the folds keep up
                return float(order.count(r.bit, lo, at_ms))
            # (a context read once, as a snapshot on the board: one pass beats an index)
            return float(sum(1 for t, m in entries.values() if m & r.bit and lo <= t <= at_ms))
        if r.kind == "since":
            last = None if ctx is None else ctx.since.get(name)
            if last is None:
                return r.cap
            return min(max(at_ms - last, 0) / r.unit_ms, r.cap)
        got = None if ctx is None else ctx.last.get(name)
        return r.default if got is None else got[1]

    def columns(self, contexts: Sequence[DeviceContext | None], at_ms: np.ndarray) -> np.ndarray:
        """(n, len(names)) float64 context values of a batch; devices without context get
        `empty()`."""
        n = len(contexts)
        out = np.empty((n, len(self.names)), dtype=np.float64)
        out[:] = self.empty()
        for i, c in enumerate(contexts):
            if c is not None:
                out[i] = self.values(c, int(at_ms[i]))
        return out

    def merge_snapshot(self, mine: DeviceContext, snap: DeviceContext) -> None:
        """Adopt a snapshot from the aggregator unless this copy has already seen newer events."""
        if snap.as_of_ms >= mine.as_of_ms:
            mine.open = [dict(g) for g in snap.open]
            mine.windows = [dict(g) for g in snap.windows]
            mine.since, mine.last = dict(snap.since), dict(snap.last)
            mine.as_of_ms = snap.as_of_ms
