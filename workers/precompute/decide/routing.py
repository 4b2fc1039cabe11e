"""The work that waits for a prediction (`WorkQueue`): the micro-batcher, the throttled devices
waiting out their window (released in window order), and the requests waiting for their
device's data. Ingest routes each decided item here; the loop takes batches from here."""

from __future__ import annotations

import heapq
from collections.abc import Callable, Iterator

from workers.precompute import metrics
from workers.precompute.decide import policy
from workers.precompute.decide.awaiting import AwaitingData
from workers.precompute.decide.batching import MicroBatcher
from workers.precompute.items import Pending, Reason, merge
from workers.precompute.state.shared import PipelineState


class WorkQueue:
    def __init__(self, state: PipelineState) -> None:
        self.state = state
        self.batcher = self._new_batcher()
        self.deferred: dict[str, Pending] = {}
        # requests for devices without data yet, until their data comes (workers.precompute.decide.awaiting)
        self.awaiting = AwaitingData(state.cfg.request_wait_s, state.cfg.request_wait_max)
        self._due: list[tuple[int, int, str]] = []  # heap of (release ms, seq, device)
        self._seq = 0
        # Called with each item as it is deferred (throttled) or grows while deferred: such an
        # item outlives many batches, holding its input records. A shadow run slims them
        # (workers.shadow.run); the worker keeps whole records (it dead-letters them on failure).
        self.on_defer: Callable[[Pending], None] | None = None

    def _new_batcher(self) -> MicroBatcher[Pending]:
        cfg = self.state.cfg
        return MicroBatcher(cfg.max_batch, cfg.max_queue_delay_s, cfg.preferred_batch_sizes)

    def route(self, item: Pending, decision: Reason, predicted_at: int, mono: float) -> None:
        """One decided item: into the batch a device already waits in, onto its deferred item,
        deferred itself (throttled), or into the batcher when the decision publishes."""
        d = item.device
        if d in self.batcher:
            self.batcher.add(d, item, mono, merge)
            metrics.COALESCED.inc()
        elif d in self.deferred:
            merge(self.deferred[d], item)
            metrics.COALESCED.inc()
            if self.on_defer is not None:
                self.on_defer(self.deferred[d])
        elif decision == Reason.THROTTLED:
            self.deferred[d] = item
            if self.on_defer is not None:
                self.on_defer(item)
            self._seq += 1
            release = policy.release_at(self.state.cfg.policy, predicted_at)
            heapq.heappush(self._due, (release, self._seq, d))
        elif decision.emits:
            self.batcher.add(d, item, mono, merge)

    def release_deferred(self, now_ms: int, mono: float, everything: bool = False) -> int:
        """Move throttled devices whose window ended (or all of them) into the batcher."""
        n = 0
        if self.awaiting:
            metrics.NO_DATA.inc(self.awaiting.expire(mono))
            metrics.AWAITING.set(len(self.awaiting))
        while self._due and (everything or self._due[0][0] <= now_ms):
            _, _, d = heapq.heappop(self._due)
            item = self.deferred.pop(d, None)
            if item is not None:
                self.batcher.add(d, item, mono, merge)
                n += 1
        return n

    def next_release_ms(self) -> int | None:
        """When the earliest throttled device's window ends (None when nothing is throttled)."""
        return self._due[0][0] if self._due else None

    def next_batch(self, mono: float, force: bool = False) -> tuple[list[Pending], float]:
        return self.batcher.take(mono, force)

    @property
    def pending(self) -> int:
        return len(self.batcher) + len(self.deferred)

    def __iter__(self) -> Iterator[Pending]:
        """Every item waiting: queued, throttled, or a request waiting for its device's data."""
        yield from self.batcher
        yield from self.deferred.values()
        yield from self.awaiting

    def forget(self, parts: set[int], keep_awaiting: bool = False) -> None:
        """Drop the waiting work of these partition indexes (see `Pipeline.forget`)."""
        if not keep_awaiting:
            self.awaiting.forget(parts)
        for d in [d for d, it in self.deferred.items() if it.partition in parts]:
            del self.deferred[d]
        keep = [it for it in self.batcher if it.partition not in parts]
        if len(keep) != len(self.batcher):
            self.batcher = self._new_batcher()
            for it in keep:
                self.batcher.add(it.device, it, 0.0)

    def reset(self) -> None:
        self.deferred.clear()
        self.awaiting.clear()
        self._due.clear()
        self.batcher = self._new_batcher()
