"""Read hints (schemas.hints): which devices this replica's clients read, prefetch or watch,
published to the workers once per interval so the speculation policy holds them to its stricter
check. Noting a read is one set insert on the hot path; the set is bounded (past `max_devices`
per interval further devices are counted and left out), only devices that have an answer are
noted (an unknown ID read by a client never reaches the workers), and publishing never blocks the
event loop (librdkafka's queue full: the interval's hints are dropped and counted)."""

from __future__ import annotations

import orjson
from prometheus_client import Counter

from precast.kafka import KafkaFailure, Producer

HINTS = Counter(
    "precast_api_read_hints_total", "read hints sent to the workers, by result", ["result"]
)
_MAX_PENDING = 50_000


class ReadHints:
    def __init__(
        self,
        producer: Producer | None,
        topic: str,
        hot_for_ms: int,
        max_devices: int = 100_000,
    ) -> None:
        self._producer, self.topic = producer, topic
        self.hot_for_ms, self.max_devices = hot_for_ms, max_devices
        self._read: set[str] = set()
        self._prefetched: set[str] = set()
        self.note = self._read.add  # the hot path's call: one bound method, no checks
        # (bounded by the read path itself: only devices with an answer are noted)

    @property
    def pending(self) -> int:
        """Devices noted since the last flush."""
        return len(self._read) + len(self._prefetched)

    def prefetched(self, device_id: str) -> None:
        if len(self._prefetched) < self.max_devices:
            self._prefetched.add(device_id)

    def flush(self, now_ms: int, watched: set[str] | None = None) -> int:
        """Publish one hint per device noted since the last flush, plus every device an open
        event stream watches. Returns how many were sent."""
        read = set(self._read)
        self._read.clear()  # the same set: `note` stays bound to it
        prefetched, self._prefetched = self._prefetched, set()
        sources = dict.fromkeys(prefetched, "prefetch")
        sources.update(dict.fromkeys(watched or (), "stream"))
        sources.update(dict.fromkeys(read, "read"))
        if len(sources) > self.max_devices:
            HINTS.labels("over_cap").inc(len(sources) - self.max_devices)
            sources = dict(list(sources.items())[: self.max_devices])
        if not sources:
            return 0
        if self._producer is None or self._producer.pending() >= _MAX_PENDING:
            HINTS.labels("dropped").inc(len(sources))
            return 0
        until = now_ms + self.hot_for_ms
        sent = 0
        for device, source in sources.items():
            value = orjson.dumps(
                {
                    "schema_version": 1,
                    "device_id": device,
                    "source": source,
                    "hinted_at_ms": now_ms,
                    "hot_until_ms": until,
                }
            )
            try:
                self._producer.produce(self.topic, device.encode(), value)
            except KafkaFailure:
                HINTS.labels("dropped").inc(len(sources) - sent)
                return sent
            sent += 1
        HINTS.labels("sent").inc(sent)
        return sent
