"""What the applications need of a serving store, as structural types.

`MemoryStore` and `RedisStore` satisfy `ServingStore` as they are; the read API and its
materializer name these protocols rather than a concrete class, so which store backs a role is
decided once, at the entry point (`consumer_api.cli`), and a test can pass any object that has
the same methods. Protocols cost nothing at run time: the read path calls the store directly.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Protocol

from precast.serving.entry import Entry
from precast.serving.leases import Lease, LeaseBook


class ServingStore(Protocol):
    """Newest prediction per device; writes keep the newer of two (`supersedes`), and entries
    past `valid_until_ms` plus the grace period read as absent."""

    def get(self, device_id: str, now_ms: int | None = None) -> Entry | None: ...

    def get_many(
        self, device_ids: Sequence[str], now_ms: int | None = None
    ) -> list[Entry | None]: ...

    def iterate(self) -> Iterator[tuple[str, Entry]]: ...

    def put_if_newer(self, device_id: str, entry: Entry, now_ms: int | None = None) -> int: ...

    def put_many_if_newer(
        self,
        items: Iterable[tuple[str, Entry]],
        now_ms: int | None = None,
        *,
        ids_checked: bool = False,
    ) -> list[int]:
        """One of STORED / OLDER / EXPIRED per item, in order."""
        ...

    def put_leases(self, leases: list[Lease], now_ms: int | None = None) -> list[int]:
        """Validity leases (precast.serving.leases): the newest per partition is kept."""
        ...

    def delete(self, device_ids: Iterable[str]) -> int: ...

    def purge(self, predicate: Callable[[str, Entry], bool]) -> int: ...


class LocalView(ServingStore, Protocol):
    """An in-process store that the read path reads without a round trip (`MemoryStore`)."""

    # The stored entry without the expiry check: the read path's one dict lookup.
    peek: Callable[[str], Entry | None]
    # (device_id, stored entry) -> the entry as a read serves it (extended under a lease)
    resolve: Callable[[str, Entry], Entry]
    leases: LeaseBook

    def sweep(self, now_ms: int | None = None, budget: int = 20_000) -> int:
        """Drop expired entries, checking at most `budget` of them."""
        ...

    def __len__(self) -> int: ...


class SharedStore(ServingStore, Protocol):
    """A store outside the process that may lose its data (`RedisStore`): the load marker says
    a full load from the predictions topic finished since it last started empty."""

    def loaded(self) -> bool: ...

    def mark_loaded(self) -> None: ...


class AsyncReader(Protocol):
    """The read path of a replica that keeps no local view (`AsyncRedisReader`)."""

    async def get(self, device_id: str) -> Entry | None: ...

    async def get_many(self, device_ids: Sequence[str]) -> list[Entry | None]: ...

    async def close(self) -> None: ...
