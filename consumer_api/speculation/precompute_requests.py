"""Precompute requests from the read path (miss, expiry, purge marker, prefetch hint):
`PrecomputeRequest`s keyed by device on the precompute-requests topic, never blocking the event
loop, within a budget (consumer_api.speculation.precompute_budget): at most one per device per window across all
replicas, and at most `precompute_budget_per_s` a second from all of them together.

Reads (`request`) only note the device; the event loop's drain task (`drain`, every 50 ms)
takes the budget's decision for everything noted, in one Redis round trip per batch, and
produces what it admits. Prefetch hints (`request_many`) wait for the decision, so the answer
says what happened to each device."""

from __future__ import annotations

import uuid
from collections.abc import Sequence

import orjson
from prometheus_client import Counter

from consumer_api.speculation.precompute_budget import Budget, LocalBudget
from precast.kafka import KafkaFailure, Producer

REQUESTS = Counter(
    "precast_api_precompute_requests_total",
    "precompute requests asked by the read API",
    ["reason", "result"],
)
# Past this many records waiting in librdkafka, requests are dropped (counted) instead of making
# the event loop wait for the broker: the next read after the window asks again.
MAX_PENDING = 50_000
RESULTS = ("sent", "deduplicated", "dropped", "over_budget")


class PrecomputeAsker:
    def __init__(
        self,
        producer: Producer | None,
        topic: str,
        window_ms: int,
        max_tracked: int = 500_000,
        budget: Budget | None = None,
    ) -> None:
        self._producer, self.topic, self.window_ms, self.max_tracked = (
            producer,
            topic,
            window_ms,
            max_tracked,
        )
        # Without a configured budget there is still a ceiling: the settings' default one.
        self.budget: Budget = budget if budget is not None else LocalBudget(500.0, 1_000)
        self._until: dict[str, int] = {}
        self._noted: dict[str, tuple[str, int]] = {}
        self._sweep_at = 0  # ended windows are dropped once per window: memory follows load

    @property
    def tracked(self) -> int:
        """Devices whose request window this replica remembers."""
        return len(self._until)

    def _sweep(self, now_ms: int) -> None:
        if now_ms >= self._sweep_at:
            self._sweep_at = now_ms + self.window_ms
            self._until = {d: u for d, u in self._until.items() if u > now_ms}

    def request(self, device_id: str, reason: str, now_ms: int) -> str:
        """Note one request for the drain unless this replica asked within the window.
        Returns "queued", "deduplicated" or "dropped" (no producer, or too much waiting)."""
        self._sweep(now_ms)
        until = self._until.get(device_id)
        if until is not None and until > now_ms:
            return _count(reason, "deduplicated")
        if self._producer is None or not self._room(now_ms):
            return _count(reason, "dropped")
        self._until[device_id] = now_ms + self.window_ms
        self._noted[device_id] = (reason, now_ms)
        return "queued"

    async def request_many(self, device_ids: Sequence[str], reason: str, now_ms: int) -> dict:
        """Ask for each device now, within the budget: counts by result."""
        counts = dict.fromkeys(RESULTS, 0)
        ask = []
        self._sweep(now_ms)
        for d in device_ids:
            until = self._until.get(d)
            if until is not None and until > now_ms:
                counts[_count(reason, "deduplicated")] += 1
            elif self._producer is None or not self._room(now_ms):
                counts[_count(reason, "dropped")] += 1
            else:
                self._until[d] = now_ms + self.window_ms
                ask.append(d)
        decided = await self._decide({d: (reason, now_ms) for d in ask})
        for _, result in decided.values():
            counts[result] += 1
        return counts

    async def drain(self) -> int:
        """Decide and produce what reads noted since the last drain; returns how many."""
        if not self._noted:
            return 0
        noted, self._noted = self._noted, {}
        await self._decide(noted)
        return len(noted)

    async def _decide(self, asks: dict[str, tuple[str, int]]) -> dict[str, tuple[str, str]]:
        if not asks:
            return {}
        decision = await self.budget.admit(list(asks), self.window_ms)
        out: dict[str, tuple[str, str]] = {}
        for d in decision.deduplicated:
            out[d] = (asks[d][0], _count(asks[d][0], "deduplicated"))
        for d in decision.over_budget:
            self._until.pop(d, None)  # not asked: the next read may ask again
            out[d] = (asks[d][0], _count(asks[d][0], "over_budget"))
        for d in decision.admitted:
            reason, at = asks[d]
            out[d] = (reason, _count(reason, self._produce(d, reason, at)))
        return out

    def _produce(self, device_id: str, reason: str, now_ms: int) -> str:
        if self._producer is None:
            return "dropped"
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
            self._until.pop(device_id, None)
            return "dropped"
        return "sent"

    def _room(self, now_ms: int) -> bool:
        if self._producer is not None and self._producer.pending() >= MAX_PENDING:
            return False
        if len(self._noted) >= MAX_PENDING:
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
