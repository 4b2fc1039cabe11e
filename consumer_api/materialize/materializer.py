"""Reads the predictions topic into the serving stores: the in-process view (the read path)
and, when configured, the shared Redis store. Newest `computed_at` wins in both (never the
last arrival), so replays, duplicates and two workers during a rebalance are harmless.

Each replica reads every partition from the beginning (the topic is compacted: about one
record per device) in a consumer group of its own, read_committed, and is ready once it has
read up to the end offsets it saw at start (minus `ready_max_lag`). When Redis fails or comes
back without the load marker (a restart lost its data), the materializer keeps feeding the
view and replays the topic into Redis once Redis answers again.

Validity leases (`#lease:<partition>` records, schemas.leases) go to the stores after the
answers of the same batch, so a store's lease is never ahead of its entries (a device that
stopped sending has its last, lease-free record stored before the lease that leaves it out).

Whatever a record holds ends as a counted rejection (`precast.guard`: metric, bounded log line,
dead letter), never a stopped thread; the loop runs under `precast.supervise` (a failure that
is not a record's restarts it from the last batch it finished, counted; one that keeps failing
turns readiness false and ends the process).

The loop and its Kafka clients run below the reads' CPU priority (`nice`, `precast.priority`):
on a busy core, a read that wakes gets the core before them (docs/api.md, "Reads first").
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Callable

import redis
from prometheus_client import Counter, Gauge

from consumer_api.materialize.source import DirectSource, Source, replica_group, topic_consumer
from precast.deadletter import DeadLetters
from precast.guard import Guard
from precast.kafka import OFFSET_BEGINNING, KafkaMessage, Producer
from precast.priority import built_below, lower_this_thread
from precast.serving import (
    FUTURE,
    STORED,
    Entry,
    Lease,
    LocalView,
    SharedStore,
    lease_from_record,
    prediction_item,
)
from precast.settings import KafkaSettings
from precast.supervise import Supervised
from precast.telemetry.tracing import TRACEPARENT, Tracing, checked
from schemas import deadletters as dl
from schemas.leases import is_lease_key

log = logging.getLogger("precast.api.materializer")

APPLIED = Counter("precast_api_materialized_total", "prediction records read", ["result"])
_INVALID = APPLIED.labels("invalid")  # bound once: a burst of poison is counted per record
DEVICES = Gauge("precast_api_devices", "devices in this replica's view")
LAG = Gauge(
    "precast_api_materializer_lag",
    "records behind the end offsets seen at start or at the last replay",
)
REDIS_OK = Gauge("precast_api_redis_up", "1 while the shared store accepts writes")
REPLAYS = Counter(
    "precast_api_replays_total", "replays of the predictions topic into Redis", ["why"]
)

# Dead letters never hold up the read path (`letters`): batches only serve their delivery
# reports, and only `stop` waits for them, at most STOP_FLUSH_S.
SWEEP_EVERY_MS = 250  # the view drops expired entries at most this often
YIELD_EVERY_S = 0.0002  # the longest run of rejections a read may wait behind (see _not_prediction)
STOP_FLUSH_S = 5.0


OnStored = Callable[[list[tuple[str, Entry]]], None]
OnLeased = Callable[[list[Lease]], None]


class Materializer:
    def __init__(
        self,
        kafka: KafkaSettings,
        topic: str,
        partitions: int,
        *,
        view: LocalView | None,
        shared: SharedStore | None = None,
        group_prefix: str = "precast-api",
        producer: Producer | None = None,
        dead_letter_topic: str | None = None,
        on_stored: OnStored | None = None,
        on_leased: OnLeased | None = None,
        batch: int = 5_000,
        ready_max_lag: int = 0,
        wait_s: float = 0.2,
        supervised: Supervised | None = None,  # its restart policy (tests pass their own)
        tracing: Tracing | None = None,
        nice: int = 0,  # below the reads on a shared core (precast.priority)
        source: Source | None = None,  # where it reads from the start
        live_source: Source | None = None,  # and once caught up (a gate process)
    ) -> None:
        # By default a consumer of its own, built on a lowered thread, so librdkafka's threads
        # of this consumer run lowered too.
        self._source = source or DirectSource(
            built_below(
                nice,
                lambda: topic_consumer(kafka, replica_group(group_prefix)),
                "materializer-build",
            ),
            topic,
            partitions,
        )
        self._live_source = live_source
        self.nice = nice
        self.topic, self.partitions, self.view, self.shared = topic, partitions, view, shared
        self._producer = producer
        # Bounded letters (schemas.deadletters): the record stays at its offset, so a letter of
        # a megabyte value need not copy it through this replica's producer and the broker.
        self._dead = (
            DeadLetters(
                producer, dead_letter_topic, "api-materializer", preview_bytes=dl.PREVIEW_BYTES
            )
            if producer and dead_letter_topic
            else None
        )
        self._on_stored, self._batch, self._max_lag = on_stored, batch, ready_max_lag
        self._on_leased = on_leased
        # A poll returns when `batch` records arrived or after `wait_s`: at a low rate the wait,
        # not Kafka, is what a live view (event stream, board) sees as delay.
        self._wait_s = wait_s
        self._targets: dict[int, int] = {}
        self._positions: dict[int, int] = {}
        self._live_from: dict[int, int] = {}  # offsets below these were seen before (replays)
        self._caught_up = threading.Event()
        self._stop = threading.Event()
        self._redis_dirty = False  # a write failed or the data was lost: replay when it answers
        self._redis_loading = shared is not None
        self._last_check = 0.0
        self._swept_at = 0
        self._held_since = 0.0
        self.guard = Guard("api-materializer", log, self._dead)
        self.tracing = tracing or Tracing.off()
        self.supervised = supervised or Supervised("api-materializer")
        self._runs = 0
        self._thread = self.supervised.thread(self._run, self._stop)

    # -- lifecycle --------------------------------------------------------------------------------
    def start(self) -> None:
        if self._live_source is not None:
            self._live_source.start()  # warm when the hand-over comes
        self._assign_from_beginning()
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=10)
        self._source.close()
        if self._live_source is not None:
            self._live_source.close()
        if self._producer is not None and self._producer.pending():
            try:
                self._producer.flush(STOP_FLUSH_S)
            except Exception as exc:  # noqa: BLE001 - stopping: say what was not confirmed, go on
                log.warning("dead letters not confirmed at stop: %s", exc)

    @property
    def ready(self) -> bool:
        return self._caught_up.is_set() and self.supervised.healthy

    @property
    def error(self) -> BaseException | None:
        """Set once the loop failed too often and gave up (health and readiness turn false)."""
        return self.supervised.failure

    @property
    def lag(self) -> int:
        return sum(max(0, h - self._positions.get(p, 0)) for p, h in self._targets.items())

    @property
    def redis_up(self) -> bool:
        return self.shared is not None and not self._redis_dirty

    def _assign_from_beginning(self) -> None:
        for p, pos in self._positions.items():
            self._live_from[p] = max(self._live_from.get(p, 0), pos)
        self._targets = self._source.high_watermarks()
        self._positions = {}
        self._source.assign(
            dict.fromkeys(range(self.partitions), OFFSET_BEGINNING), self._live_from
        )

    def _resume_at(self) -> dict[int, int]:
        """Where reading goes on: after what the view has, each partition's start if nothing."""
        return {p: self._positions.get(p, OFFSET_BEGINNING) for p in range(self.partitions)}

    # -- loop -------------------------------------------------------------------------------------------
    def _run(self) -> None:
        """The supervised loop; a restart resumes after the last batch it finished (what the
        failed batch had applied is applied again: newest-wins makes that harmless)."""
        self._runs += 1
        lower_this_thread(self.nice)
        if self._runs > 1:
            self._source.assign(self._resume_at(), self._live_from)
        while not self._stop.is_set():
            self.run_once(self._wait_s)

    def run_once(self, timeout: float = 0.2) -> int:
        # Returns as soon as a prediction is there (a full-batch wait would add up to `timeout`
        # to every answer's freshness at low rates).
        msgs, ends = self._source.take(self._batch, timeout)
        self._held_since = time.perf_counter()  # consume let go of the GIL
        now = int(time.time() * 1000)
        items: list[tuple[str, Entry]] = []
        leases: list[Lease] = []
        append = items.append  # the loop runs once per record: a rebuild is 1M of them
        rejected = tombstones = 0
        # with tracing on, an entry keeps its record's traceparent for the reads' spans
        traced: dict[bytes, bytes] | None = {} if self.tracing.enabled else None
        for m in msgs:
            value = m.value()
            if not value:
                tombstones += 1  # no timestamps: cannot take part in newest-wins
                continue
            try:
                trace = None if traced is None else _sampled_trace(m, traced)
                append(prediction_item(value, now, m.key(), trace))
            except Exception as not_prediction:  # noqa: BLE001 - whatever a record causes
                rejected += self._not_prediction(m, value, now, not_prediction, leases)
        if ends:  # a gate's: it passed on only what the view can use
            self._positions.update(ends)
        elif msgs:
            self._advance(msgs)
        if tombstones:
            APPLIED.labels("tombstone").inc(tombstones)
        if items:
            started_ns = time.time_ns() if self.tracing.enabled else 0
            self._apply(items, now)
            if started_ns:
                self._trace_stored(msgs, started_ns)
        if leases:
            self._apply_leases(leases, now)
        if self._producer is not None and (rejected or self._producer.pending()):
            self._producer.poll(0)  # delivery reports only: never a wait (see `letters`)
        self._housekeeping(now)
        return len(msgs)

    def _trace_stored(self, msgs: list[KafkaMessage], started_ns: int) -> None:
        """A `store` span per stored prediction whose record continues a sampled trace (the
        worker's batch), over the time the batch took to store."""
        ended_ns = time.time_ns()
        for m in msgs:
            parent = checked(record_traceparent(m), "api-materializer")
            if parent is not None:
                self.tracing.record(
                    "store",
                    parent,
                    started_ns,
                    ended_ns,
                    {"precast.partition": m.partition(), "precast.offset": m.offset()},
                )

    def _advance(self, msgs: list[KafkaMessage]) -> None:
        """Positions after a batch: the last record of each partition in it, found from the end
        (offsets only grow within a partition) instead of once per record."""
        left = set(range(self.partitions))
        positions = self._positions
        for m in reversed(msgs):
            p = m.partition()
            if p in left:
                positions[p] = m.offset() + 1
                left.discard(p)
                if not left:
                    return

    def _not_prediction(
        self, m: KafkaMessage, value: bytes, now: int, why: Exception, leases: list[Lease]
    ) -> int:
        """A record that is not a valid prediction: a validity lease (rare: one per partition
        and interval, so off the hot path) or a rejection; 1 when it was dead-lettered."""
        try:
            key = m.key()
            if is_lease_key(key):
                leases.append(lease_from_record(value, key, now, m.offset()))
                return 0
        except Exception as not_lease:  # noqa: BLE001 - whatever a record causes
            why = not_lease
        done = self._reject(m, why, m.offset() >= self._live_from.get(m.partition(), 0))
        # A read waiting for the GIL behind a run of rejections would wait out the switch
        # interval (1 ms): let it in every YIELD_EVERY_S of them. sched_yield releases the GIL
        # for 0.3 us of CPU (sleep(0) arms a timer: 27 us on this VM, two thirds of a
        # rejection); not after each one, since a yield also hands the core to any other
        # runnable process: on a saturated core that took a full time slice per record.
        if time.perf_counter() - self._held_since >= YIELD_EVERY_S:
            os.sched_yield()
            self._held_since = time.perf_counter()
        return done

    def _reject(self, m: KafkaMessage, bad: BaseException, live: bool) -> int:
        _INVALID.inc()
        # Records met again in a Redis replay were dead-lettered when this process first read
        # them; each replica and each restart does dead-letter them once (duplicates, not loss:
        # no owner replica to elect or misconfigure, and a bounded letter costs at most a few
        # KB). They are counted again (the metric counts reads), not dead-lettered again.
        self.guard.reject(bad, m, dead_letter=live)
        return 1 if live and self._dead is not None else 0

    def _apply(self, items: list[tuple[str, Entry]], now: int) -> None:
        stored: list[tuple[str, Entry]] = []
        if self.view is not None:
            results = self.view.put_many_if_newer(items, now, ids_checked=True)
            stored = [it for it, r in zip(items, results, strict=True) if r == STORED]
        if self.shared is not None and not self._redis_dirty:
            try:
                results = self.shared.put_many_if_newer(items, now, ids_checked=True)
                if self.view is None:
                    stored = [it for it, r in zip(items, results, strict=True) if r == STORED]
            except redis.RedisError as exc:
                self._lose_redis(f"write failed: {type(exc).__name__}")
        if self.view is not None and FUTURE in results:
            APPLIED.labels("future").inc(results.count(FUTURE))
        APPLIED.labels("stored").inc(len(stored))
        APPLIED.labels("older_or_expired").inc(len(items) - len(stored))
        if stored and self._on_stored is not None:
            self._on_stored(stored)

    def _apply_leases(self, leases: list[Lease], now: int) -> None:
        """After the batch's answers (see the module docstring)."""
        stored = leases
        if self.view is not None:
            results = self.view.put_leases(leases, now)
            stored = [x for x, r in zip(leases, results, strict=True) if r == STORED]
        if self.shared is not None and not self._redis_dirty:
            try:
                self.shared.put_leases(leases, now)
            except redis.RedisError as exc:
                self._lose_redis(f"write failed: {type(exc).__name__}")
        APPLIED.labels("lease").inc(len(leases))
        if len(stored) < len(leases):  # older, fenced (a past generation) or already ended
            APPLIED.labels("lease_not_newer").inc(len(leases) - len(stored))
        if stored and self._on_leased is not None:
            self._on_leased(stored)

    def _lose_redis(self, why: str) -> None:
        if not self._redis_dirty:
            log.warning(
                "shared store unavailable (%s): serving continues, Redis will be replayed", why
            )
        self._redis_dirty = True
        REDIS_OK.set(0)

    def _housekeeping(self, now: int) -> None:
        if self.view is not None and now - self._swept_at >= SWEEP_EVERY_MS:
            # not per batch: a burst brings hundreds of small batches a second, and reads
            # already check validity; a sweep only returns memory
            self._swept_at = now
            self.view.sweep(now)
            DEVICES.set(len(self.view))
        LAG.set(self.lag)
        if not self._caught_up.is_set() and self.lag <= self._max_lag:
            log.info(
                "materializer caught up (%d devices in view)",
                len(self.view) if self.view is not None else -1,
            )
            self._caught_up.set()
            if self._live_source is not None:
                self._hand_over(self._live_source)
        if self.shared is None:
            return
        if self._redis_loading and self.lag == 0 and not self._redis_dirty:
            self._mark_loaded()
        mono = time.monotonic()
        if mono - self._last_check < 1.0:
            return
        self._last_check = mono
        try:
            loaded = self.shared.loaded()
        except redis.RedisError as exc:
            self._lose_redis(f"unreachable: {type(exc).__name__}")
            return
        if self._redis_dirty or (not loaded and not self._redis_loading):
            why = "write_failure" if self._redis_dirty else "data_lost"
            log.warning("replaying the predictions topic into Redis (%s)", why)
            REPLAYS.labels(why).inc()
            self._redis_dirty, self._redis_loading = False, True
            REDIS_OK.set(1)
            self._assign_from_beginning()

    def _hand_over(self, live: Source) -> None:
        """Caught up: read on through the live source (the gate) from where the view stands.
        Catching up runs in this process, at full speed and before any read is served; from
        here on, reads are, and a burst of poison would cost them (docs/api.md, The gate)."""
        live.assign(self._resume_at(), self._live_from)
        caught_up, self._source, self._live_source = self._source, live, None
        caught_up.close()
        log.info("reading on through the gate process")

    def _mark_loaded(self) -> None:
        assert self.shared is not None  # only called while loading into the shared store
        try:
            self.shared.mark_loaded()
            self._redis_loading = False
            REDIS_OK.set(1)
        except redis.RedisError as exc:
            self._lose_redis(f"unreachable: {type(exc).__name__}")


def record_traceparent(m: KafkaMessage) -> bytes | None:
    """The record's first `traceparent` header (the worker's batch span), as written."""
    return next((v for k, v in m.headers() or () if k == TRACEPARENT), None)


def _sampled_trace(m: KafkaMessage, seen: dict[bytes, bytes]) -> bytes | None:
    """The record's `traceparent` when its trace was sampled (flags' low bit, from the last hex
    digit): an unsampled answer's reads make no span, so keeping it would buy nothing. The
    answers of one worker batch share one value, and so one object (`seen`), in the view."""
    v = record_traceparent(m)
    if v is None or len(v) != 55 or v[54] not in b"13579bdf":
        return None
    return seen.setdefault(v, v)
