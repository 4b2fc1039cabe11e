"""Dynamic micro-batching, pure: a batch closes at `max_batch` items, at a preferred size, or
when its oldest item has waited `max_queue_delay_s` (Triton's `max_queue_delay_microseconds`),
whichever comes first.

Items are keyed (by device): a second trigger for a device already waiting merges into its
entry and keeps the entry's place and age, so one batch never predicts a device twice and
the queue is bounded by the number of distinct devices, never by the event rate.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Iterable, Iterator, Sequence
from itertools import islice
from typing import Generic, TypeVar

T = TypeVar("T")


class MicroBatcher(Generic[T]):
    def __init__(
        self, max_batch: int, max_queue_delay_s: float, preferred_sizes: tuple[int, ...] = ()
    ) -> None:
        if max_batch < 1:
            raise ValueError("max_batch must be >= 1")
        if max_queue_delay_s < 0:
            raise ValueError("max_queue_delay_s must be >= 0")
        bad = [s for s in preferred_sizes if not 1 <= s <= max_batch]
        if bad:
            raise ValueError(f"preferred batch sizes must lie in 1..{max_batch}: {bad}")
        self.max_batch = max_batch
        self.max_delay = max_queue_delay_s
        self.preferred = tuple(sorted(set(preferred_sizes)))
        self._items: dict[Hashable, T] = {}
        self._since: dict[Hashable, float] = {}

    def __len__(self) -> int:
        return len(self._items)

    def __contains__(self, key: Hashable) -> bool:
        return key in self._items

    def __iter__(self) -> Iterator[T]:
        return iter(self._items.values())

    def get(self, key: Hashable) -> T | None:
        return self._items.get(key)

    def add(
        self, key: Hashable, item: T, now: float, merge: Callable[[T, T], T] | None = None
    ) -> bool:
        """Queue `item`; True when new. An existing entry is replaced by `merge(old, item)`
        (or by `item`) and keeps its position and enqueue time."""
        old = self._items.get(key)
        if old is None:
            self._items[key] = item
            self._since[key] = now
            return True
        self._items[key] = merge(old, item) if merge else item
        return False

    def isdisjoint(self, keys: Iterable[Hashable]) -> bool:
        """True when none of `keys` is waiting."""
        return self._items.keys().isdisjoint(keys)

    def add_new(self, keys: Sequence[Hashable], items: Sequence[T], now: float) -> None:
        """Queue items for keys none of which is waiting (see `isdisjoint`): the bulk form of
        `add`, one dict update per batch instead of a call per item."""
        since = dict.fromkeys(keys, now)
        if len(since) != len(keys) or not self._items.keys().isdisjoint(since):
            raise ValueError("add_new: a key is already waiting (or repeated); use add() to merge")
        self._items.update(zip(keys, items, strict=True))
        self._since.update(since)

    def oldest_wait(self, now: float) -> float:
        if not self._since:
            return 0.0
        return now - next(iter(self._since.values()))

    def ready(self, now: float) -> bool:
        n = len(self._items)
        if n == 0:
            return False
        if n >= self.max_batch or self.oldest_wait(now) >= self.max_delay:
            return True
        return bool(self.preferred) and n >= self.preferred[0]

    def wait_s(self, now: float) -> float:
        """Seconds until the oldest item's delay runs out (0 when ready, inf when empty)."""
        if not self._items:
            return float("inf")
        if self.ready(now):
            return 0.0
        return max(0.0, self.max_delay - self.oldest_wait(now))

    def take(self, now: float, force: bool = False) -> tuple[list[T], float]:
        """The next batch and the queue delay of its oldest item; ([], 0) when none is due.
        `force` closes a batch now (drain on revoke/shutdown)."""
        n = len(self._items)
        if n == 0 or not (force or self.ready(now)):
            return [], 0.0
        if n >= self.max_batch:
            size = self.max_batch
        elif force or self.oldest_wait(now) >= self.max_delay:
            size = n
        else:
            size = max(s for s in self.preferred if s <= n)
        delay = self.oldest_wait(now)
        if size == n:
            batch = list(self._items.values())
            self._items, self._since = {}, {}
            return batch, delay
        keys = list(islice(self._items, size))
        batch = [self._items.pop(k) for k in keys]
        for k in keys:
            del self._since[k]
        return batch, delay
