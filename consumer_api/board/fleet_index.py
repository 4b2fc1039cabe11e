"""The board's picture of the fleet: one row per device (top-1 strategy, source, age, delay
origin, then what the fleet spec's `[board]` shows: consumer_api.board.board_layout), each
device's recent answers, its device context, and a change log that lets a board's event stream
resume after a reconnect.

Written by two threads (the materializer hands over what it stored; the board feed hands over
device context and device info) and read by the event loop, all under one short lock. Every
structure is bounded: history by depth and device count (least recently updated devices
forgotten first), the change log by length, each subscriber's pending set by
`queue_max` (past it the subscriber is told to reload instead of queueing more).
"""

from __future__ import annotations

import asyncio
import heapq
import random
import threading
from collections import OrderedDict, deque
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from itertools import islice
from sys import intern
from typing import Any

from consumer_api.board.board_layout import AGE, ALARM, SOURCES, BoardLayout
from consumer_api.board.device_view import ContextView, Summary, summarize
from consumer_api.board.history import Past, history_item, past
from consumer_api.edge.admission import Admission
from consumer_api.read.answer import FALLBACK, PRECOMPUTED, STALE, data_time, origin, segments
from precast.fleet import load_fleet
from precast.serving import Entry, Lease, LeaseBook

__all__ = ["FleetIndex"]


@dataclass(eq=False)  # identity: subscribers live in a set
class Subscriber:
    """One board's event stream: the devices changed since its last frame (a set, so a burst
    of updates to one device is one row in the next frame) and a wake-up event."""

    loop: asyncio.AbstractEventLoop
    queue_max: int
    pending: set[str] = field(default_factory=set)
    leases: dict[int, Lease] = field(default_factory=dict)  # newest per partition, not yet sent
    overflow: bool = False
    wake: asyncio.Event = field(default_factory=asyncio.Event)


class FleetIndex:
    def __init__(
        self,
        *,
        default_strategy: str | None,
        serve_stale: bool,
        grace_ms: int,
        layout: BoardLayout | None = None,
        history_depth: int = 10,
        history_devices: int = 10_000,
        log_size: int = 100_000,
        info_refresh_s: float = 60.0,
        leases: LeaseBook | None = None,
    ) -> None:
        # the built-in fleet's board unless the process's fleet spec says otherwise
        self.layout = layout if layout is not None else BoardLayout(load_fleet())
        # None: the spec's default label (what the read path serves as its fallback)
        self.default_strategy = default_strategy or self.layout.spec.serving.default_label
        self.serve_stale, self.grace_ms = serve_stale, grace_ms
        self.history_depth, self.history_devices = history_depth, history_devices
        self.leases = leases  # the view's: rows show answers as reads serve them
        self._lock = threading.Lock()
        self._latest: dict[str, Entry] = {}
        self._summaries: dict[str, tuple[Entry, Summary]] = {}
        self._history: OrderedDict[str, deque[Past]] = OrderedDict()  # compact (board_history)
        self._context: dict[str, ContextView] = {}
        # device -> (its layout.info_fields from a heartbeat, time.monotonic() when the next
        # read is due)
        self._info: dict[str, tuple[tuple[Any, ...], float]] = {}
        self._rng = random.Random()
        self._tails: dict[str, tuple[Any, ...]] = {}  # the spec's part of each row, kept current
        self.info_refresh_s = info_refresh_s
        self._devices: dict[str, None] = {}  # every device seen anywhere, in arrival order
        # The devices of the last `log_size` changes; the newest is change `seq`. Interned IDs and
        # implied numbers: 8 bytes a change, where (seq, a fresh str) tuples took ~150.
        self._log: deque[str] = deque(maxlen=log_size)
        self.seq = 0
        self._subs: set[Subscriber] = set()
        # queries sort the fleet: bounded per client and per replica, on their own threads
        self.queries = Admission("fleet", per_client=1, total=2)

    # -- writers (materializer and board-feed threads) -------------------------------------------
    def stored(self, items: list[tuple[str, Entry]]) -> None:
        """What the materializer stored (newest-wins already applied). Runs once per record of
        a rebuild too, so it stays a few dict operations per record: a device's history holds
        only the answers it had *before* its newest (kept in `_latest`), and nothing is
        allocated for a device that has had one answer (a rebuild of the compacted topic)."""
        with self._lock:
            latest, keep = self._latest, self.history_depth > 1
            devices = []
            for d, e in items:
                # one object per device, however many records named it (on 3.12 an interned
                # string lives as long as the process: no more than `_devices` keeps anyway)
                d = intern(d)
                old = latest.get(d)
                latest[d] = e
                if keep and old is not None:
                    self._remember(d, old)
                devices.append(d)
            self._changed_many(devices)
        self._wake()

    def _remember(self, d: str, old: Entry) -> None:  # under the lock
        h = self._history.get(d)
        if h is None:
            h = self._history[d] = deque(maxlen=self.history_depth - 1)
            if len(self._history) > self.history_devices:
                self._history.popitem(last=False)
        else:
            self._history.move_to_end(d)
        h.append(past(old))

    def leased(self, leases: list[Lease]) -> None:
        """Validity leases the materializer stored: sent to every board as one small `lease`
        event per partition (a board extends its rows itself), never as a row per device."""
        with self._lock:
            for s in self._subs:
                s.leases.update((x.partition, x) for x in leases)
        self._wake()

    def set_context(self, device_id: str, view: ContextView) -> None:
        """A device's context snapshot, read by `layout.view` (off the lock: it may raise)."""
        with self._lock:
            self._context[device_id] = view
            self._retail(device_id)
            self._changed(device_id)
        self._wake()

    def wants_info(self, device_id: str, mono: float) -> bool:
        """Whether a heartbeat of this device is worth reading: none read yet, or its next read
        is due (about `info_refresh_s` after the last: a site or firmware changes rarely, a
        metric column moves; between two reads the row shows the older heartbeat)."""
        got = self._info.get(device_id)
        return got is None or mono >= got[1]

    def set_info(self, device_id: str, event: Mapping[str, Any], mono: float) -> None:
        """What the board shows of a device's heartbeat (a validated, flat event)."""
        values = self.layout.info(event)
        with self._lock:
            old = self._info.get(device_id)
            # The next read is due after 0.75-1.25 refresh intervals, drawn per read: devices
            # first seen together (a replica's start, a fleet coming online) would otherwise be
            # due together forever, and each refresh would be a burst of full validations
            # (10,000 devices at 2k heartbeats/s: every heartbeat for 5 s of each minute).
            due = mono + self.info_refresh_s * (0.75 + 0.5 * self._rng.random())
            self._info[device_id] = (values, due)
            if old is None or old[0] != values:  # a refresh that changes nothing sends nothing
                self._retail(device_id)
                self._changed(device_id)
        self._wake()

    def _retail(self, d: str) -> None:  # under the lock
        info = self._info.get(d)
        view = self._context.get(d)
        self._tails[d] = self.layout.tail(
            self.layout.no_info if info is None else info[0],
            self.layout.empty if view is None else view,
        )

    def _changed(self, d: str) -> None:  # under the lock
        self._changed_many([d])

    def _changed_many(self, ds: list[str]) -> None:  # under the lock
        ds = list(map(intern, ds))
        self._devices.update(dict.fromkeys(ds))
        self.seq += len(ds)
        self._log.extend(ds)
        for s in self._subs:
            if not s.overflow:
                s.pending.update(ds)
                if len(s.pending) > s.queue_max:
                    s.overflow, s.pending = True, set()

    def _wake(self) -> None:
        for s in list(self._subs):
            s.loop.call_soon_threadsafe(s.wake.set)

    # -- subscribers (event loop) --------------------------------------------------------------
    def subscribe(self, queue_max: int, last_seq: int | None) -> tuple[Subscriber, int]:
        """A subscriber and the sequence number it starts from. With `last_seq` (a reconnect's
        Last-Event-ID) the devices changed since then are pending at once; when the log no
        longer reaches back that far the subscriber starts in overflow (it must reload)."""
        sub = Subscriber(asyncio.get_running_loop(), queue_max)
        with self._lock:
            if last_seq is not None:
                changed = self._since(last_seq)
                if changed is None or len(changed) > queue_max:
                    sub.overflow = True
                else:
                    sub.pending = changed
            self._subs.add(sub)
            seq = self.seq
        if sub.pending or sub.overflow:
            sub.wake.set()
        return sub, seq

    def unsubscribe(self, sub: Subscriber) -> None:
        with self._lock:
            self._subs.discard(sub)

    @property
    def subscribers(self) -> int:
        return len(self._subs)

    def take(self, sub: Subscriber) -> tuple[set[str], bool, int, list[Lease]]:
        """(pending devices, overflow, seq of the newest change included, leases) and reset
        them."""
        with self._lock:
            sub.wake.clear()
            pending, overflow, leases = sub.pending, sub.overflow, list(sub.leases.values())
            sub.pending, sub.overflow, sub.leases = set(), False, {}
            return pending, overflow, self.seq, leases

    def _since(self, seq: int) -> set[str] | None:
        if seq > self.seq:
            return None  # a sequence from another process (restarted replica): reload
        if seq == self.seq:
            return set()
        first = self.seq - len(self._log) + 1  # the oldest change the log still holds
        if not self._log or first > seq + 1:
            return None
        return set(islice(self._log, seq + 1 - first, None))

    # -- readers (event loop) --------------------------------------------------------------------
    def __len__(self) -> int:
        return len(self._devices)

    def _summary(self, d: str, e: Entry) -> Summary:
        cached = self._summaries.get(d)
        if cached is not None and cached[0] is e:
            return cached[1]
        s = summarize(e, self.default_strategy)
        self._summaries[d] = (e, s)
        return s

    def latest(self, d: str) -> Entry | None:
        """The newest stored answer of a device (None when it has none, or only a purge)."""
        e = self._latest.get(d)
        return None if e is None or e.purge else e

    def _served(self, d: str, e: Entry | None) -> Entry | None:
        if e is None or e.terms is None or self.leases is None:
            return e
        return self.leases.resolve(d, e)

    def row(self, d: str, now_ms: int) -> list[Any]:
        """One row in `layout.columns` order."""
        base = self._latest.get(d)  # the stored answer: its summary is cached per answer
        e = self._served(d, base)
        # an answer a lease may still extend stays in the store until its terms end
        if e is not None and (e.purge or e.expires_at_ms(self.grace_ms) <= now_ms):
            e = None
        tail = self._tails.get(d, self.layout.no_tail)
        s = None if e is None or base is None else self._summary(d, base)
        lease = None if e is None or s is None else _lease_cell(e, s)
        if e is None or s is None or (now_ms >= e.valid_until_ms and not self.serve_stale):
            return [d, self.default_strategy, 1.0, FALLBACK, None, None, "fallback", None, None,
                    lease, *tail]  # fmt: skip
        source = PRECOMPUTED if now_ms < e.valid_until_ms else STALE
        return [d, s.strategy, s.score, source, e.computed_at_ms, e.valid_until_ms,
                origin(segments(e, now_ms)), e.model_version, s.trigger, lease,
                *tail]  # fmt: skip

    def rows(self, devices: Iterable[str], now_ms: int) -> list[list[Any]]:
        with self._lock:
            return [self.row(d, now_ms) for d in devices if d in self._devices]

    def query(
        self,
        now_ms: int,
        *,
        filters: dict[str, str] | None = None,
        sort: str = "device_id",
        descending: bool = False,
        offset: int = 0,
        limit: int = 1000,
    ) -> tuple[int, list[list[Any]]]:
        """(matching rows, one page of them) filtered by exact column values (as text: an
        integer attribute's 3 matches "3"), sorted."""
        with self._lock:
            devices = list(self._devices)
        rows = [self.row(d, now_ms) for d in devices]
        for col, want in (filters or {}).items():
            i = self.layout.index[col]
            rows = [r for r in rows if str(r[i]) == want]
        # One page needs only its first offset+limit rows sorted (keys end in the unique ID)
        pick = heapq.nlargest if descending else heapq.nsmallest
        return len(rows), pick(offset + limit, rows, key=self._sort_key(sort))[offset:]

    def facets(self) -> dict[str, list[Any]]:
        """The values the board offers in its filters: those seen of the spec's filter fields,
        the strategies answered, every alarm state and source."""
        layout = self.layout
        with self._lock:
            info = [v for v, _ in self._info.values()]
            # list() copies in one C call: _summary() may add entries from another thread
            summaries = [s for _, s in list(self._summaries.values())]
        out: dict[str, list[Any]] = {}
        for name in layout.field_filters:
            i = layout.info_fields.index(name)
            seen = {v[i] for v in info if v[i] is not None and v[i] != ""}
            out[name] = sorted(seen, key=lambda v: (isinstance(v, str), v))
        out["strategy"] = sorted({s.strategy for s in summaries} | {self.default_strategy})
        if ALARM in layout.filters:
            out[ALARM] = list(layout.states)
        out["source"] = list(SOURCES)
        return out

    def detail(self, d: str) -> dict[str, Any] | None:
        """History, context and device fields of one device; None when the board never saw it."""
        with self._lock:
            if d not in self._devices:
                return None
            e = self._served(d, self._latest.get(d))
            history = [*self._history.get(d, ()), *(() if e is None else (e,))]
            view = self._context.get(d)
            info = self._info.get(d)
        shown = self.layout.detail(self.layout.no_info if info is None else info[0], view)
        return {
            "device_id": d,
            **shown,
            "history": [history_item(e, self.default_strategy) for e in reversed(history)],
        }

    def _sort_key(self, column: str) -> Callable[[list[Any]], Any]:
        """Rows with no value in the column sort last (ascending); the alarm state sorts by its
        rule's rank (the first rule first, "none" last)."""
        index = self.layout.index
        if column == AGE:
            i = index["computed_at_ms"]
            return lambda r: (r[i] is None, -(r[i] or 0), r[0])
        i = index[column]
        if column == ALARM:
            rank = self.layout.rank
            return lambda r: (rank[r[i]], r[0])
        return lambda r: (r[i] is None, r[i] if r[i] is not None else 0, r[0])

    def freshness(self, now_ms: int, sample: int = 20_000) -> dict[str, Any]:
        """How many devices have a precomputed / stale / no answer, and the median age. Past
        `sample` devices, from a random sample (scaled to the fleet): the panel is computed on
        the event loop every second, and a full pass over 1M devices would hold it ~0.5 s."""
        devices = list(self._devices)  # one C-level copy; no lock needed to read the dicts
        n = len(devices)
        sampled = n > sample
        if sampled:
            devices = random.sample(devices, sample)
        latest, grace = self._latest, self.grace_ms
        counts = dict.fromkeys(SOURCES, 0)
        ages = []
        models: dict[str, list[int]] = {}  # version -> [answers, oldest produced_at_ms]
        for d in devices:
            e = self._served(d, latest.get(d))
            if e is None or e.purge or e.valid_until_ms + grace <= now_ms:
                counts[FALLBACK] += 1
                continue
            if now_ms < e.valid_until_ms:
                counts[PRECOMPUTED] += 1
            else:
                counts[STALE if self.serve_stale else FALLBACK] += 1
            ages.append(now_ms - data_time(e))
            m = models.setdefault(e.model_version, [0, e.produced_at_ms])
            m[0] += 1
            m[1] = min(m[1], e.produced_at_ms)
        scale = n / len(devices) if sampled else 1.0
        if sampled:
            counts = {k: round(v * scale) for k, v in counts.items()}
        ages.sort()
        return {
            "devices": n,
            "by_source": counts,
            "median_age_ms": ages[len(ages) // 2] if ages else None,
            "sampled": sampled,
            # which model versions the served answers come from, and the oldest answer of each
            # (since when it serves, as far as the answers held here tell)
            "models": [
                {"version": v, "devices": round(k * scale), "since_ms": since}
                for v, (k, since) in sorted(models.items(), key=lambda kv: -kv[1][0])
            ],
        }


def _lease_cell(e: Entry, s: Summary) -> list[Any] | None:
    """The `lease` column: what a board needs to apply a `lease` event to the row itself, an
    expired row shown as the fallback included (the answer's top strategy, score, data time)."""
    if e.terms is None or e.purge:
        return None
    t, x = e.terms, e.extension
    own = e.valid_until_ms if x is None else x.own_valid_until_ms
    certified = None if x is None else x.certified_at_ms
    return [t.partition, t.generation, e.until_ms, own, certified, s.strategy, s.score,
            e.computed_at_ms]  # fmt: skip
