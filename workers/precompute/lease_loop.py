"""Publishing validity leases from the worker loop (`LeasePublishing`, mixed into `Worker`):
at each tick, the answers of devices that stopped sending go out first (through the usual batch
path, no inference), then one lease record per covered partition, produced to that partition
so every store applies it after those answers (workers.precompute.leases, schemas.leases)."""

from __future__ import annotations

import logging
import time

from schemas.topics import Topics
from workers.precompute import metrics
from workers.precompute.delivery import AtLeastOnce, ExactlyOnce
from workers.precompute.items import Pending
from workers.precompute.pipeline import Pipeline

log = logging.getLogger("precast.workers")


class LeasePublishing:
    """The lease half of `Worker`'s loop."""

    topics: Topics
    pipeline: Pipeline
    sink: AtLeastOnce | ExactlyOnce

    def _run_batch(self, items: list[Pending], delay: float, latency: bool = True) -> bool:
        raise NotImplementedError

    def publish_leases(self, now_ms: int) -> int:
        """Leases due now; returns how many were produced."""
        t0 = time.perf_counter()
        tick = self.pipeline.lease_tick(now_ms)
        if tick.lapsed and not self._run_batch(tick.lapsed, 0.0, latency=False):
            # the lapsed answers did not go out: no lease may go out after them (the next tick
            # finds the same devices again)
            log.warning("validity leases held back: %d lapsed answers failed", len(tick.lapsed))
            return 0
        topic = self.topics.predictions.name
        for partition, key, value in tick.records:
            self.sink.produce_to(topic, partition, key, value)
        if tick.records:
            metrics.LEASES.inc(len(tick.records))
        metrics.STAGE["produce"].inc(time.perf_counter() - t0)
        return len(tick.records)
