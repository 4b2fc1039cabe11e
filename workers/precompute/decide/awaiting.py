"""Precompute requests for a device the worker has no data for yet, held until its data comes.

Kafka orders no two topics. After a failover the survivor reads the dead worker's backlog: the
requests topic's few records arrive in the first fetch, the heartbeats behind them over many
batches. A request handled before its device's first heartbeat found no data, and was dropped
(a prediction would be the default features' answer stamped with no real time): the read API's
miss that sent it then waited for some later trigger. Held here, the request is answered by the
prediction its device's data brings, with the request in that prediction's lineage.

Bounded twice: a request waits at most `wait_s`, and at most `max_items` devices wait (the
oldest goes first). What leaves either way is counted as a request without data. Pure: no
Kafka, no clock of its own.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator

from workers.precompute.items import Pending, merge


class AwaitingData:
    def __init__(self, wait_s: float, max_items: int) -> None:
        self.wait_s, self.max_items = wait_s, max_items
        # device -> (first request's monotonic time, the requests merged into one item);
        # insertion order is age order, so expiry and eviction pop from the front
        self._items: dict[str, tuple[float, Pending]] = {}

    def __len__(self) -> int:
        return len(self._items)

    def __iter__(self) -> Iterator[Pending]:
        return (item for _, item in self._items.values())

    def hold(self, item: Pending, mono: float) -> int:
        """Keep `item` until its device has data. Returns how many requests leave unanswered:
        the oldest ones evicted to stay within `max_items`, or `item` itself when waiting is
        off (`wait_s` or `max_items` 0)."""
        if self.wait_s <= 0 or self.max_items <= 0:
            return 1
        held = self._items.get(item.device)
        if held is not None:
            merge(held[1], item)
            return 0
        evicted = 0
        while len(self._items) >= self.max_items:
            del self._items[next(iter(self._items))]
            evicted += 1
        self._items[item.device] = (mono, item)
        return evicted

    def ready(self, has_data: Callable[[str], bool]) -> list[Pending]:
        """The held items whose device now has data, removed from here."""
        if not self._items:
            return []
        out = [item for d, (_, item) in self._items.items() if has_data(d)]
        for item in out:
            del self._items[item.device]
        return out

    def expire(self, mono: float) -> int:
        """Drop the items that have waited `wait_s`; returns how many."""
        n, limit = 0, mono - self.wait_s
        while self._items:
            d, (since, _) = next(iter(self._items.items()))
            if since > limit:
                break
            del self._items[d]
            n += 1
        return n

    def forget(self, partitions: Iterable[int]) -> None:
        parts = set(partitions)
        for d in [d for d, (_, it) in self._items.items() if it.partition in parts]:
            del self._items[d]

    def keep(self, partitions: Iterable[int]) -> None:
        """Drop the items of every partition but these (the assignment after a rebalance)."""
        parts = set(partitions)
        for d in [d for d, (_, it) in self._items.items() if it.partition not in parts]:
            del self._items[d]

    def clear(self) -> None:
        self._items.clear()
