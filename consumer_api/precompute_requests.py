"""Precompute requests from the read path (miss, expiry, purge marker, prefetch hint):
`PrecomputeRequest`s keyed by device on the precompute-requests topic, at most one per device
per window, never blocking the event loop."""

from __future__ import annotations

import uuid

import orjson
from prometheus_client import Counter

from precast.kafka import KafkaFailure, Producer

REQUESTS = Counter(
    "precast_api_precompute_requests_total",
    "precompute requests asked by the read API",
    ["reason", "result"],
)
# Past this many records waiting in librdkafka, requests are dropped (counted) instead of making
# the event loop wait for the broker: the next read after the window asks again.
MAX_PENDING = 50_000


class PrecomputeAsker:
    def __init__(
        self, producer: Producer | None, topic: str, window_ms: int, max_tracked: int = 500_000
    ) -> None:
        self._producer, self.topic, self.window_ms, self.max_tracked = (
            producer,
            topic,
            window_ms,
            max_tracked,
        )
        self._until: dict[str, int] = {}

    def request(self, device_id: str, reason: str, now_ms: int) -> str:
        """Publish one request unless one for this device went out within the window.
        Returns "sent", "deduplicated" or "dropped" (no producer, or librdkafka's queue full)."""
        until = self._until.get(device_id)
        if until is not None and until > now_ms:
            return _count(reason, "deduplicated")
        if self._producer is None or not self._room(now_ms):
            return _count(reason, "dropped")
        value = orjson.dumps(
            {
                "schema_version": 1,
                "request_id": uuid.uuid4().hex,
                "device_id": device_id,
                "reason": reason,
                "requested_at_ms": now_ms,
                "model_version": None,
            }
        )
        try:
            self._producer.produce(self.topic, device_id.encode(), value)
        except KafkaFailure:
            return _count(reason, "dropped")
        self._until[device_id] = now_ms + self.window_ms
        return _count(reason, "sent")

    def _room(self, now_ms: int) -> bool:
        if self._producer is not None and self._producer.pending() >= MAX_PENDING:
            return False
        if len(self._until) >= self.max_tracked:  # bounded: forget windows that have ended
            self._until = {d: u for d, u in self._until.items() if u > now_ms}
        return len(self._until) < self.max_tracked

    def poll(self) -> None:
        if self._producer is not None:
            self._producer.poll(0)

    def flush(self, timeout: float = 5.0) -> None:
        if self._producer is not None:
            self._producer.flush(timeout)


def _count(reason: str, result: str) -> str:
    REQUESTS.labels(reason, result).inc()
    return result
