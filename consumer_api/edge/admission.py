"""Admission for expensive board reads (fleet queries, lineage reads): a bounded number in
flight per client and per replica, refused at once with 503 and Retry-After past the bound.

Nothing queues: a request that cannot start now is told when to come back, so one client's
burst (or a slow Kafka read) never parks other clients' requests behind a lock or fills the
default thread pool. Each kind of work runs on its own small executor, sized to its bound.
Counts are taken and given back on the event loop (no await between check and count)."""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar

from prometheus_client import Counter
from starlette.responses import Response

from consumer_api.edge.client_limits import retry_after
from consumer_api.edge.error_bodies import error

T = TypeVar("T")

REFUSED = Counter(
    "precast_api_busy_refusals",
    "board reads refused with 503 because their bound was reached, by kind and bound",
    ["kind", "bound"],
)


class Busy(Exception):
    """The bound of `kind` was reached; retry after `retry_s`."""

    def __init__(self, kind: str, bound: str, detail: str, retry_s: float) -> None:
        super().__init__(detail)
        self.kind, self.bound, self.detail, self.retry_s = kind, bound, detail, retry_s

    def response(self) -> Response:
        return error(503, "busy", self.detail, headers={"Retry-After": retry_after(self.retry_s)})


class Admission:
    """At most `per_client` calls of one client and `total` calls in all at once."""

    def __init__(self, kind: str, *, per_client: int, total: int, retry_s: float = 1.0) -> None:
        if per_client < 1 or total < 1:
            raise ValueError("bounds must be at least 1")
        self.kind, self.per_client, self.total, self.retry_s = kind, per_client, total, retry_s
        self._clients: dict[str, int] = {}
        self.running = 0
        self._pool: ThreadPoolExecutor | None = None

    def enter(self, keys: list[str]) -> None:
        """Count one call for every key, or raise Busy (nothing counted)."""
        if self.running >= self.total:
            REFUSED.labels(self.kind, "replica").inc()
            raise Busy(
                self.kind,
                "replica",
                f"this replica already runs {self.total} {self.kind} reads; retry shortly",
                self.retry_s,
            )
        if any(self._clients.get(k, 0) >= self.per_client for k in keys):
            REFUSED.labels(self.kind, "client").inc()
            raise Busy(
                self.kind,
                "client",
                f"this client already has {self.per_client} {self.kind} reads running",
                self.retry_s,
            )
        self.running += 1
        for k in keys:
            self._clients[k] = self._clients.get(k, 0) + 1

    def leave(self, keys: list[str]) -> None:
        self.running -= 1
        for k in keys:
            n = self._clients.get(k, 0) - 1
            if n > 0:
                self._clients[k] = n
            else:
                self._clients.pop(k, None)

    async def run(self, keys: list[str], fn: Callable[..., T], *args: Any, **kw: Any) -> T:
        """`fn(*args, **kw)` on this kind's own threads once admitted; raises Busy otherwise."""
        self.enter(keys)
        try:
            if self._pool is None:
                self._pool = ThreadPoolExecutor(self.total, thread_name_prefix=self.kind)
            fut = self._pool.submit(functools.partial(fn, *args, **kw))
        except BaseException:
            self.leave(keys)
            raise
        # The slot is given back when the thread is done, not when the request is: a client
        # that hangs up cannot free a slot its read still holds (so nothing ever queues).
        loop = asyncio.get_running_loop()
        fut.add_done_callback(lambda _: loop.call_soon_threadsafe(self.leave, keys))
        return await asyncio.wrap_future(fut)
