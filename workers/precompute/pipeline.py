"""The worker's pure core: records in -> decisions -> micro-batches -> PredictionSet records out.
No Kafka client here (records are anything satisfying `KafkaMessage`), so it is unit-testable
and reusable by a backfill that feeds it a bounded offset range (docs/workers.md)."""

from __future__ import annotations

import heapq
import logging
from collections import defaultdict
from collections.abc import Callable, Sequence
from operator import methodcaller

from precast.deadletter import RejectLetters
from precast.fleet import Fleet, load_fleet, snapshot
from precast.fleet.features import Standardization
from precast.guard import Guard
from precast.kafka import KafkaMessage, TopicPartitionOffset
from schemas import deadletters as dl
from schemas.topics import Topics
from workers.model.sensitivity import Sensitivity
from workers.precompute import changelog, metrics, policy
from workers.precompute.awaiting import AwaitingData
from workers.precompute.batching import MicroBatcher
from workers.precompute.compute import BatchResult, Scoring, StateRef
from workers.precompute.config import PipelineConfig
from workers.precompute.decode import Decoder, Reject
from workers.precompute.heartbeats import HeartbeatIngest
from workers.precompute.items import REQUEST_REASON, Pending, Reason, merge
from workers.precompute.leases import Leasing
from workers.precompute.lowrate import decode_hints, decode_requests
from workers.precompute.state import DeviceTable

log = logging.getLogger("precast.workers.precompute.pipeline")

__all__ = ["BatchResult", "Pipeline", "PipelineConfig"]


class Pipeline(HeartbeatIngest, Leasing, Scoring):
    def __init__(
        self,
        topics: Topics,
        cfg: PipelineConfig,
        reject: Reject,
        fleet: Fleet | None = None,
        reader: str = "worker",
    ) -> None:
        self.cfg, self.reject = cfg, reject
        # The boundary for what no decoder expects (precast.guard): the record is counted,
        # logged (bounded) and dead-lettered through `reject`, and the loop goes on.
        self.guard = Guard(reader, log, RejectLetters(reject))
        # The fleet spec, compiled: decoders, context reducer, features (the built-in fleet
        # unless the worker's settings name another).
        self.fleet = fleet or load_fleet()
        self.decoder = Decoder(self.fleet, _count_unknown)
        self.layout = changelog.Layout(self.fleet.features)
        self.stats: Standardization | None = None
        spec = self.fleet.spec
        # what an event of each context stream asks for: "any", "counted" or "none"
        self.trigger_rule: dict[str, str] = {s.topic: s.trigger for s in spec.streams.values()}
        self.stream_of: dict[str, str] = {s.topic: name for name, s in spec.streams.items()}
        self.lateness_ms = round(spec.time.max_lateness_s * 1000)
        self.roles = {
            topics.heartbeats.name: "heartbeats",
            topics.work_orders.name: "work_orders",
            topics.alarms.name: "alarms",
            topics.precompute_requests.name: "requests",
            topics.device_context.name: "context",
            topics.read_hints.name: "hints",
        }
        self.context_topic = topics.device_context.name
        self.heartbeat_topic = topics.heartbeats.name
        self.table = DeviceTable(top_k=cfg.top_k, fleet=self.fleet)
        # The current model's score sensitivities (workers.model.sensitivity), estimated once per
        # version on first use; None until a model has been used (the policy then falls back to
        # the material-change rule).
        self.sensitivity: Sensitivity | None = None
        self._sensitivity_of: str | None = None
        self.batcher: MicroBatcher[Pending] = MicroBatcher(
            cfg.max_batch, cfg.max_queue_delay_s, cfg.preferred_batch_sizes
        )
        self.deferred: dict[str, Pending] = {}
        # requests for devices without data yet, until their data comes (workers.precompute.awaiting)
        self.awaiting = AwaitingData(cfg.request_wait_s, cfg.request_wait_max)
        self._due: list[tuple[int, int, str]] = []  # heap of (release ms, seq, device)
        self._seq = 0
        self.positions: dict[tuple[str, int], int] = {}  # next offset consumed, per partition
        self.decisions: Callable[[Reason, int], None] = _count_decision
        # Called with each item as it is deferred (throttled) or grows while deferred: such an
        # item outlives many batches, holding its input records. A shadow run slims them
        # (workers.shadow.run); the worker keeps whole records (it dead-letters them on failure).
        self.on_defer: Callable[[Pending], None] | None = None
        self._init_leases()  # validity leases per assigned partition (workers.precompute.leases)

    # -- ingest -------------------------------------------------------------------------------------
    def ingest(self, msgs: Sequence[KafkaMessage], now_ms: int, mono: float) -> None:
        topics = list(map(_TOPIC, msgs))
        one_topic = len(set(topics)) == 1  # the common case: no per-record grouping
        # Offsets only grow within a partition of one consume() call: the last one is the max.
        parts, offsets = map(_PARTITION, msgs), map(_OFFSET, msgs)
        last = (
            dict(zip(zip(topics, parts, strict=True), offsets, strict=True))
            if not one_topic
            else {(topics[0], p): o for p, o in dict(zip(parts, offsets, strict=True)).items()}
        )
        pos = self.positions
        for tp, o in last.items():
            if o + 1 > pos.get(tp, -1):
                pos[tp] = o + 1
        by_role: dict[str, list[KafkaMessage]] = defaultdict(list)
        if one_topic:
            by_role[self.roles.get(topics[0], "unknown")] = list(msgs)
        else:
            for t, m in zip(topics, msgs, strict=True):
                by_role[self.roles.get(t, "unknown")].append(m)
        for batch in by_role.values():
            metrics.EVENTS_IN.labels(batch[0].topic()).inc(len(batch))
        # Context first, so triggers of the same poll already see it.
        if "context" in by_role:
            self._ingest_context(by_role["context"], now_ms)
        for role in ("work_orders", "alarms"):
            if role in by_role:
                self._ingest_context_events(role, by_role[role], now_ms, mono)
        if "heartbeats" in by_role:
            self._ingest_heartbeats(by_role["heartbeats"], now_ms, mono)
        self._ingest_rest(by_role, now_ms, mono)
        if self.awaiting:
            for item in self.awaiting.ready(self.table.has_data):
                self.table.slots([item.device], [item.partition])
                self._trigger(item, now_ms, mono)
            metrics.AWAITING.set(len(self.awaiting))

    def _ingest_rest(
        self, by_role: dict[str, list[KafkaMessage]], now_ms: int, mono: float
    ) -> None:
        if "requests" in by_role:
            self._ingest_requests(by_role["requests"], now_ms, mono)
        if "hints" in by_role:
            self._ingest_hints(by_role["hints"])
        for m in by_role.get("unknown", ()):
            self.reject(m, dl.Reason.UNKNOWN, f"worker does not read topic {m.topic()!r}")

    def _ingest_context(self, msgs: list[KafkaMessage], now_ms: int) -> None:
        for m in msgs:
            try:
                self._context_one(m, now_ms)
            except Exception as exc:  # noqa: BLE001 - the boundary (precast.guard)
                self.guard.reject(exc, m)

    def _context_one(self, m: KafkaMessage, now_ms: int) -> None:
        model = self.fleet.context
        key, value = m.key(), m.value()
        if not key:
            self.reject(m, dl.Reason.MISSING_KEY, "device-context record without a key")
            return
        device = key.decode(errors="replace")
        if value is None:  # tombstone: the device's context was purged
            self.table.contexts.pop(device, None)
            return
        try:
            snap = snapshot.from_json(model, value)
        except snapshot.ForeignSnapshot:
            # written under another spec: the aggregator of this one rebuilds it
            metrics.CONTEXT_FOREIGN.inc()
            return
        if snap.as_of_ms > now_ms + self.cfg.max_ahead_ms:
            self._future(m, snap.as_of_ms, now_ms)
            return
        self.table.slots([device], [m.partition()])
        model.merge_snapshot(self.table.context(device), snap)

    def _ingest_context_events(
        self, role: str, msgs: list[KafkaMessage], now_ms: int, mono: float
    ) -> None:
        model, stream, rule = self.fleet.context, self.stream_of[role], self.trigger_rule[role]
        event_reason = Reason.WORK_ORDER if role == "work_orders" else Reason.ALARM
        for m, e in self.decoder.events(role, msgs, self.reject):
            try:
                t = e["event_time_ms"]
                if t > now_ms + self.cfg.max_ahead_ms:
                    self._future(m, t, now_ms)
                    continue
                device = e["device_id"]
                self.table.slots([device], [m.partition()])
                ctx = self.table.context(device)
                if ctx.as_of_ms - t > self.lateness_ms:
                    metrics.LATE.labels(stream).inc()  # folded in all the same; windows ignore it
                model.apply(ctx, stream, e)
                # A redelivered event (already folded in) still triggers: its prediction may
                # never have been made by the worker that saw it first.
                fires = rule == "any" or (rule == "counted" and model.counts(stream, e))
                reason = event_reason if fires else Reason.CONTEXT_ONLY
                item = Pending(device, m.partition(), reason, [(m, e["event_id"])])
            except Exception as exc:  # noqa: BLE001 - the boundary (precast.guard)
                self.guard.reject(exc, m)
                continue
            self._trigger(item, now_ms, mono)

    def _ingest_requests(self, msgs: list[KafkaMessage], now_ms: int, mono: float) -> None:
        for m, r in decode_requests(msgs, self.reject, self.guard):
            item = Pending(
                r.device_id,
                m.partition(),
                REQUEST_REASON[r.reason],
                [(m, r.request_id)],
                requested_at_ms=r.requested_at_ms,
            )
            if not self.table.has_data(r.device_id):
                # Nothing from the device itself: a prediction now would be the default
                # features' answer stamped with no real time. It waits for the device's data
                # (a failover's backlog, another topic's lag), within bounds.
                metrics.NO_DATA.inc(self.awaiting.hold(item, mono))
                continue
            self.table.slots([r.device_id], [m.partition()])
            self._trigger(item, now_ms, mono)

    def _ingest_hints(self, msgs: list[KafkaMessage]) -> None:
        """Read hints (schemas.hints): advice, never a trigger; a bad one is dead-lettered."""
        for _, device, until in decode_hints(msgs, self.reject, self.guard):
            self.mark_hot([device], until)

    def _trigger(self, item: Pending, now_ms: int, mono: float) -> None:
        """One decision for a low-rate trigger (work order, alarm, request)."""
        s = self.table.slot[item.device]
        reason = item.reason
        if reason.predicts:
            reason = policy.throttle_one(
                self.cfg.policy, reason, int(self.table.predicted_at[s]), now_ms
            )
        self.decisions(reason, 1)
        self._route(item, reason, int(self.table.predicted_at[s]), mono)

    def _route(self, item: Pending, decision: Reason, predicted_at: int, mono: float) -> None:
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
            heapq.heappush(
                self._due, (policy.release_at(self.cfg.policy, predicted_at), self._seq, d)
            )
        elif decision.emits:
            self.batcher.add(d, item, mono, merge)

    def _future(self, m: KafkaMessage, event_time_ms: int, now_ms: int) -> None:
        self.reject(
            m,
            dl.Reason.FUTURE_EVENT_TIME,
            f"event time {event_time_ms} is {event_time_ms - now_ms} ms ahead of the worker's "
            f"clock (tolerance {self.cfg.max_ahead_ms} ms)",
        )

    def mark_hot(self, devices: Sequence[str], until_ms: int) -> int:
        """Devices somebody reads or watches, until `until_ms` (read hints from the API); only
        those this worker holds state for. Returns how many were marked."""
        tab, n = self.table, 0
        for d in devices:
            s = tab.slot.get(d)
            if s is not None:
                if until_ms > tab.hot_until[s]:
                    tab.hot_until[s] = until_ms
                n += 1
        return n

    # -- batches ------------------------------------------------------------------------------------
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

    def with_data(self, items: list[Pending]) -> list[Pending]:
        """The items whose device has data of its own (a request may have waited in a batch while
        its partition was revoked and restored; anything else is counted and dropped)."""
        has = self.table.has_data
        keep = [it for it in items if has(it.device)]
        if len(keep) != len(items):
            metrics.NO_DATA.inc(len(items) - len(keep))
        return keep

    # -- offsets and partitions -----------------------------------------------------------------------
    def commit_offsets(self, include_pending: bool = False) -> list[TopicPartitionOffset]:
        """Next offsets safe to commit: everything consumed, except that a partition stops at
        the oldest record still waiting for its prediction (queued, throttled, or a request
        waiting for its device's data)."""
        safe = {tp: o for tp, o in self.positions.items() if tp[0] != self.context_topic}
        if not include_pending:
            for it in (*self.batcher, *self.deferred.values(), *self.awaiting):
                for m, _ in it.refs:
                    if type(m) is StateRef:  # a record consumed long ago, not one that waits
                        continue
                    tp = (m.topic(), m.partition())
                    if tp in safe and m.offset() < safe[tp]:
                        safe[tp] = m.offset()
        return [TopicPartitionOffset(t, p, o) for (t, p), o in sorted(safe.items())]

    def forget(self, partitions: Sequence[int], keep_awaiting: bool = False) -> None:
        """Drop state, positions and waiting work of these partition indexes (revoked/lost).
        `keep_awaiting`: requests waiting for data stay until the next assignment says whose
        partitions they are (exactly-once: their offsets are committed, so nobody reads them
        again; a worker given the partition back still answers them)."""
        parts = set(partitions)
        self.table.forget_partitions(parts)
        self.forget_leases(parts)
        if not keep_awaiting:
            self.awaiting.forget(parts)
        self.positions = {tp: o for tp, o in self.positions.items() if tp[1] not in parts}
        for d in [d for d, it in self.deferred.items() if it.partition in parts]:
            del self.deferred[d]
        keep = [it for it in self.batcher if it.partition not in parts]
        if len(keep) != len(self.batcher):
            self.batcher = MicroBatcher(
                self.cfg.max_batch, self.cfg.max_queue_delay_s, self.cfg.preferred_batch_sizes
            )
            for it in keep:
                self.batcher.add(it.device, it, 0.0)

    def reset(self) -> None:
        """Forget everything (after an aborted transaction the consumer rewinds to committed)."""
        self.table.clear()
        self.deferred.clear()
        self.awaiting.clear()
        self._due.clear()
        self.positions.clear()
        self.batcher = MicroBatcher(
            self.cfg.max_batch, self.cfg.max_queue_delay_s, self.cfg.preferred_batch_sizes
        )


_TOPIC, _PARTITION, _OFFSET = (
    methodcaller("topic"),
    methodcaller("partition"),
    methodcaller("offset"),
)


def _count_unknown(field: str, n: int) -> None:
    metrics.UNKNOWN_CATEGORY.labels(field).inc(n)


def _count_decision(reason: Reason, n: int) -> None:
    metrics.DECISIONS.labels(reason.label).inc(n)
