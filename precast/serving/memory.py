"""The embedded serving store: a dict per process, newest-wins under a write lock.

Reads take no lock (one dict lookup is atomic under the GIL) so the read path stays at a few
hundred nanoseconds; writers serialize on the lock so compare-and-set is atomic among threads.
Validity leases (precast.serving.leases) live beside the entries: `get` and `get_many` return
an entry as a read serves it (extended when its partition's lease allows), `peek` the stored one.
An entry a lease may still extend is kept (and keeps blocking older answers) until its terms'
`until_ms`, not only until its own validity.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterable, Iterator, Sequence

from precast.serving.entry import Entry
from precast.serving.leases import Lease, LeaseBook
from precast.serving.result import EXPIRED, FUTURE, OLDER, STORED
from schemas.events import MAX_AHEAD_MS, is_device_id
from schemas.predictions import supersedes


def _now_ms() -> int:
    return int(time.time() * 1000)


class MemoryStore:
    def __init__(self, grace_ms: int = 0) -> None:
        self.grace_ms = grace_ms
        self._data: dict[str, Entry] = {}
        self._lock = threading.Lock()
        # peek(device_id): the stored entry without the expiry check (the caller compares
        # valid_until_ms): the read path's one dict lookup, bound here to skip a Python frame.
        # Any ID is safe to look up; only IDs matching the pattern are ever stored.
        self.peek: Callable[[str], Entry | None] = self._data.get
        # Expiry buckets (second -> device IDs) so sweeping never walks the whole dict while
        # holding the GIL for long: each sweep call checks a bounded number of candidates.
        self._buckets: dict[int, list[str]] = {}
        self.leases = LeaseBook(grace_ms)
        # resolve(device_id, entry): the entry as a read serves it (extended under a lease)
        self.resolve: Callable[[str, Entry], Entry] = self.leases.resolve

    # -- reads ------------------------------------------------------------------------------------
    def get(self, device_id: str, now_ms: int | None = None) -> Entry | None:
        e = self._data.get(device_id)
        if e is None:
            return None
        if e.terms is not None:
            e = self.leases.resolve(device_id, e)
        if e.expires_at_ms(self.grace_ms) <= (now_ms or _now_ms()):
            return None
        return e

    def get_many(self, device_ids: Sequence[str], now_ms: int | None = None) -> list[Entry | None]:
        now = now_ms or _now_ms()
        return [self.get(d, now) for d in device_ids]

    def iterate(self) -> Iterator[tuple[str, Entry]]:
        """A snapshot of every live entry (taken under the lock, then yielded without it)."""
        with self._lock:
            items = list(self._data.items())
        now = _now_ms()
        return ((d, e) for d, e in items if e.expires_at_ms(self.grace_ms) > now)

    def __len__(self) -> int:
        return len(self._data)

    # -- writes -----------------------------------------------------------------------------------
    def put_if_newer(self, device_id: str, entry: Entry, now_ms: int | None = None) -> int:
        return self.put_many_if_newer(((device_id, entry),), now_ms)[0]

    def put_many_if_newer(
        self,
        items: Iterable[tuple[str, Entry]],
        now_ms: int | None = None,
        *,
        ids_checked: bool = False,
    ) -> list[int]:
        """One result per item: STORED, OLDER (not strictly newer: kept the current one) or
        EXPIRED (already past valid_until + grace: not stored) or FUTURE (computed ahead of
        this clock by more than `MAX_AHEAD_MS`: not stored). `ids_checked=True` skips the
        device-ID pattern check for items from `prediction_item`, which did it already."""
        now = now_ms or _now_ms()
        ahead = now + MAX_AHEAD_MS
        grace, data, buckets = self.grace_ms, self._data, self._buckets
        out = []
        with self._lock:
            for device_id, e in items:
                if not ids_checked and not is_device_id(device_id):
                    raise ValueError(f"invalid device ID {device_id[:64]!r}")
                expires = (e.valid_until_ms if e.terms is None else e.keep_until_ms) + grace
                if expires <= now:
                    out.append(EXPIRED)
                    continue
                if e.computed_at_ms > ahead:
                    out.append(FUTURE)
                    continue
                cur = data.get(device_id)
                if cur is not None and cur.expires_at_ms(grace) <= now:
                    cur = None  # expired entries do not block anything
                if cur is not None and not supersedes(e.key, cur.key):
                    out.append(OLDER)
                    continue
                data[device_id] = e
                sec = expires // 1000
                b = buckets.get(sec)
                if b is None:
                    buckets[sec] = [device_id]
                else:
                    b.append(device_id)
                out.append(STORED)
        return out

    def put_leases(self, leases: list[Lease], now_ms: int | None = None) -> list[int]:
        """Validity leases, newest per partition (STORED / OLDER / EXPIRED each)."""
        return self.leases.put_many(leases, now_ms or _now_ms())

    def delete(self, device_ids: Iterable[str]) -> int:
        with self._lock:
            return sum(self._data.pop(d, None) is not None for d in device_ids)

    def purge(self, predicate: Callable[[str, Entry], bool]) -> int:
        """Delete every entry for which `predicate(device_id, entry)` is true; returns how many.
        An entry replaced while the predicate ran is kept (compare-and-delete)."""
        victims = [(d, e) for d, e in self.iterate() if predicate(d, e)]
        n = 0
        with self._lock:
            for d, e in victims:
                if self._data.get(d) is e:
                    del self._data[d]
                    n += 1
        return n

    def sweep(self, now_ms: int | None = None, budget: int = 20_000) -> int:
        """Drop entries past valid_until + grace, checking at most `budget` candidates."""
        now = now_ms or _now_ms()
        dropped = 0
        with self._lock:
            for sec in sorted(s for s in self._buckets if s * 1000 + 1000 <= now):
                ids = self._buckets[sec]
                while ids and budget > 0:
                    d = ids.pop()
                    budget -= 1
                    e = self._data.get(d)
                    if e is not None and e.expires_at_ms(self.grace_ms) <= now:
                        del self._data[d]
                        dropped += 1
                if ids:
                    break
                del self._buckets[sec]
        return dropped
