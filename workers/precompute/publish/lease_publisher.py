"""Publishing validity leases from the worker loop (`LeasePublisher`, a part of the loop): at
each tick, the answers of devices that stopped sending go out first (through the usual batch
path, no inference), then one lease record per covered partition, produced to that partition
so every store applies it after those answers (workers.precompute.publish.lease_book, schemas.leases)."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

from workers.precompute import metrics
from workers.precompute.items import Pending
from workers.precompute.publish.delivery import AtLeastOnce, ExactlyOnce
from workers.precompute.publish.lease_book import LeaseBook

log = logging.getLogger("precast.workers")

# Publishes a batch of lapsed answers (no inference, kept out of the latency histogram);
# False when they did not go out.
Answer = Callable[[list[Pending]], bool]


class LeasePublisher:
    """Given the pipeline's lease book, the delivery sink and the predictions topic."""

    def __init__(self, book: LeaseBook, sink: AtLeastOnce | ExactlyOnce, topic: str) -> None:
        self.book, self.sink, self.topic = book, sink, topic

    def publish(self, now_ms: int, answer: Answer) -> int:
        """Leases due now; returns how many were produced."""
        t0 = time.perf_counter()
        tick = self.book.lease_tick(now_ms)
        if tick.lapsed and not answer(tick.lapsed):
            # the lapsed answers did not go out: no lease may go out after them (the next tick
            # finds the same devices again)
            log.warning("validity leases held back: %d lapsed answers failed", len(tick.lapsed))
            return 0
        for partition, key, value in tick.records:
            self.sink.produce_to(self.topic, partition, key, value)
        if tick.records:
            metrics.LEASES.inc(len(tick.records))
        metrics.STAGE["produce"].inc(time.perf_counter() - t0)
        return len(tick.records)
