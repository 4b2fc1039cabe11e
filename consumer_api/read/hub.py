"""Live updates for Server-Sent Events: the materializer thread hands over what it stored, the
event loop wakes the streams watching those devices. A slow stream never grows a queue: each
keeps only the newest pending entry per device (coalescing), bounded by the devices it watches.

The stream cap is a reservation taken in the same step as its check (`reserve`, on the event
loop, no await in between) and released when the response ends however it ends, so concurrent
opens can never overrun it."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from prometheus_client import Gauge

from precast.serving import Entry

STREAMS = Gauge("precast_api_event_streams", "open event streams (/v1/stream) in this replica")


class Subscription:
    __slots__ = ("devices", "pending", "wake")

    def __init__(self, devices: list[str]) -> None:
        self.devices = devices
        self.pending: dict[str, Entry] = {}
        self.wake = asyncio.Event()

    def take(self) -> dict[str, Entry]:
        self.wake.clear()
        pending, self.pending = self.pending, {}
        return pending


class Hub:
    def __init__(self, max_streams: int = 1_000) -> None:
        self._subs: dict[str, set[Subscription]] = {}
        self._loop: asyncio.AbstractEventLoop | None = None
        self._open = 0
        self.max_streams = max_streams

    def bind(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop

    @property
    def streams(self) -> int:
        return self._open

    def watched(self) -> set[str]:
        """Devices at least one open event stream watches."""
        return set(self._subs)

    def reserve(self) -> bool:
        """Take one of the replica's stream slots, or say there is none."""
        if self._open >= self.max_streams:
            return False
        self._open += 1
        STREAMS.set(self._open)
        return True

    def release(self) -> None:
        self._open -= 1
        STREAMS.set(self._open)

    def subscribe(self, devices: list[str]) -> Subscription:
        sub = Subscription(devices)
        for d in devices:
            self._subs.setdefault(d, set()).add(sub)
        return sub

    def unsubscribe(self, sub: Subscription) -> None:
        for d in sub.devices:
            subs = self._subs.get(d)
            if subs is not None:
                subs.discard(sub)
                if not subs:
                    del self._subs[d]

    def publish_threadsafe(self, items: list[tuple[str, Entry]]) -> None:
        """Called from the materializer thread after each batch."""
        if not self._subs or self._loop is None:
            return
        watched = [(d, e) for d, e in items if d in self._subs]
        if watched:
            self._loop.call_soon_threadsafe(self.publish, watched)

    def publish_leased_threadsafe(
        self, partitions: set[int], peek: Callable[[str], Entry | None]
    ) -> None:
        """Called from the materializer thread when validity leases of these partitions
        arrived: the watched devices they extend get their answer again (new validity), so a
        stream's cost follows what is watched, not the fleet."""
        if not self._subs or self._loop is None:
            return
        watched = []
        for d in list(self._subs):
            e = peek(d)
            if e is not None and e.terms is not None and e.terms.partition in partitions:
                watched.append((d, e))
        if watched:
            self._loop.call_soon_threadsafe(self.publish, watched)

    def publish(self, items: list[tuple[str, Entry]]) -> None:
        for d, e in items:
            for sub in self._subs.get(d, ()):
                sub.pending[d] = e
                sub.wake.set()
