"""The worker's pure core: records in -> decisions -> micro-batches -> PredictionSet records out.
No Kafka client here (records are anything satisfying `KafkaMessage`), so it is unit-testable
and reusable by a backfill that feeds it a bounded offset range (docs/workers.md)."""

from __future__ import annotations

import heapq
from collections import defaultdict
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from precast.kafka import KafkaMessage, TopicPartitionOffset
from schemas.topics import Topics
from workers import metrics as M
from workers import policy as P
from workers.batching import MicroBatcher
from workers.context import SEVERITY_BUCKET, DeviceContext, context_columns
from workers.decode import Reject, decode_events, decode_heartbeats, decode_requests
from workers.features import HEARTBEAT_COLUMNS, build_features
from workers.output import Encoded, Pending, encode, merge
from workers.state import DeviceTable
from workers.topk import top_k


class Predictor:
    """What the pipeline needs of a model (workers.inference.ModelSession satisfies it)."""

    version: str
    labels: tuple[str, ...]

    def predict(self, features: np.ndarray) -> np.ndarray: ...


@dataclass(frozen=True)
class PipelineConfig:
    policy: P.PolicyConfig = P.PolicyConfig()
    max_batch: int = 2_000
    max_queue_delay_s: float = 0.005
    preferred_batch_sizes: tuple[int, ...] = ()
    horizon_ms: int = 5_000
    top_k: int = 3
    backfill: bool = False


@dataclass
class BatchResult:
    items: list[Pending]
    out: Encoded
    version: str
    features: np.ndarray
    computed_at: np.ndarray


class Pipeline:
    def __init__(self, topics: Topics, cfg: PipelineConfig, reject: Reject) -> None:
        self.cfg, self.reject = cfg, reject
        self.roles = {topics.heartbeats.name: "heartbeats", topics.work_orders.name: "work_orders",
                      topics.alarms.name: "alarms", topics.precompute_requests.name: "requests",
                      topics.device_context.name: "context"}
        self.context_topic = topics.device_context.name
        self.table = DeviceTable()
        self.batcher: MicroBatcher[Pending] = MicroBatcher(cfg.max_batch, cfg.max_queue_delay_s,
                                                           cfg.preferred_batch_sizes)
        self.deferred: dict[str, Pending] = {}
        self._due: list[tuple[int, int, str]] = []  # heap of (release ms, seq, device)
        self._seq = 0
        self.positions: dict[tuple[str, int], int] = {}  # next offset consumed, per partition
        self.decisions: Callable[[P.Reason, int], None] = _count_decision

    # -- ingest -------------------------------------------------------------------------------------
    def ingest(self, msgs: Sequence[KafkaMessage], now_ms: int, mono: float) -> None:
        by_role: dict[str, list[KafkaMessage]] = defaultdict(list)
        pos = self.positions
        for m in msgs:
            t, p, o = m.topic(), m.partition(), m.offset()
            by_role[self.roles.get(t, "unknown")].append(m)
            if o + 1 > pos.get((t, p), -1):
                pos[(t, p)] = o + 1
        for batch in by_role.values():
            M.EVENTS_IN.labels(batch[0].topic()).inc(len(batch))
        # Context first, so triggers of the same poll already see it.
        if "context" in by_role:
            self._ingest_context(by_role["context"])
        for role in ("work_orders", "alarms"):
            if role in by_role:
                self._ingest_context_events(role, by_role[role], now_ms, mono)
        if "heartbeats" in by_role:
            self._ingest_heartbeats(by_role["heartbeats"], now_ms, mono)
        if "requests" in by_role:
            self._ingest_requests(by_role["requests"], now_ms, mono)
        for m in by_role.get("unknown", ()):
            self.reject(m, "unknown", f"worker does not read topic {m.topic()!r}")

    def _ingest_context(self, msgs: list[KafkaMessage]) -> None:
        for m in msgs:
            key, value = m.key(), m.value()
            if not key:
                self.reject(m, "missing_key", "device-context record without a key")
                continue
            device = key.decode(errors="replace")
            if value is None:  # tombstone: the device's context was purged
                self.table.contexts.pop(device, None)
                continue
            try:
                snap = DeviceContext.from_json(value)
            except (ValueError, KeyError, TypeError) as exc:
                self.reject(m, "invalid", f"device-context snapshot: {exc}")
                continue
            self.table.slots([device], [m.partition()])
            self.table.context(device).merge_snapshot(snap)

    def _ingest_context_events(self, role: str, msgs: list[KafkaMessage], now_ms: int, mono: float) -> None:
        for m, e in decode_events(role, msgs, self.reject):
            device = e["device_id"]
            self.table.slots([device], [m.partition()])
            ctx = self.table.context(device)
            if role == "work_orders":
                ctx.apply_work_order(e)
                reason = P.Reason.WORK_ORDER
            else:
                ctx.apply_alarm(e)
                # A redelivered alarm (already folded in) still triggers: its prediction may never
                # have been made by the worker that saw it first.
                fired = not e.get("cleared") and e["severity"] in SEVERITY_BUCKET
                reason = P.Reason.ALARM if fired else P.Reason.CONTEXT_ONLY
            self._trigger(Pending(device, m.partition(), reason, [(m, e["event_id"])]), now_ms, mono)

    def _ingest_requests(self, msgs: list[KafkaMessage], now_ms: int, mono: float) -> None:
        for m, r in decode_requests(msgs, self.reject):
            self.table.slots([r.device_id], [m.partition()])
            reason = P.REQUEST_REASON[r.reason]
            self._trigger(Pending(r.device_id, m.partition(), reason, [(m, r.request_id)],
                                  requested_at_ms=r.requested_at_ms), now_ms, mono)

    def _trigger(self, item: Pending, now_ms: int, mono: float) -> None:
        """One decision for a low-rate trigger (work order, alarm, request)."""
        s = self.table.slot[item.device]
        reason = item.reason
        if reason.predicts:
            reason = P.throttle_one(self.cfg.policy, reason, int(self.table.predicted_at[s]), now_ms)
        self.decisions(reason, 1)
        self._route(item, reason, int(self.table.predicted_at[s]), mono)

    def _route(self, item: Pending, decision: P.Reason, predicted_at: int, mono: float) -> None:
        d = item.device
        if d in self.batcher:
            self.batcher.add(d, item, mono, merge)
            M.COALESCED.inc()
        elif d in self.deferred:
            merge(self.deferred[d], item)
            M.COALESCED.inc()
        elif decision == P.Reason.THROTTLED:
            self.deferred[d] = item
            self._seq += 1
            heapq.heappush(self._due, (P.release_at(self.cfg.policy, predicted_at), self._seq, d))
        elif decision.predicts:
            self.batcher.add(d, item, mono, merge)

    def _ingest_heartbeats(self, msgs: list[KafkaMessage], now_ms: int, mono: float) -> None:
        hb = decode_heartbeats(msgs, self.reject, self.table.slot)
        if not len(hb):
            return
        ids, t = hb.device_ids, hb.event_time_ms
        # Newest heartbeat per device (event time, then consumption order) stands for the batch.
        order = np.argsort(t, kind="stable").tolist()
        newest = {ids[i]: i for i in order}
        devices = list(newest)
        ui = np.fromiter(newest.values(), dtype=np.int64, count=len(newest))
        parts = [hb.msgs[i].partition() for i in ui.tolist()]
        tab = self.table
        slots = tab.slots(devices, parts)
        new_t = t[ui]
        cols = {k: hb.cols[ui, j] for j, k in enumerate(HEARTBEAT_COLUMNS)}
        ctxs = [tab.contexts.get(d) for d in devices] if tab.contexts else [None] * len(devices)
        cols.update(context_columns(ctxs, new_t))
        new_x = build_features(cols)
        has_pred = tab.valid_until[slots] >= 0
        decisions = P.decide_heartbeats(self.cfg.policy, has_prediction=has_pred, last_x=tab.last_x[slots],
                                        new_x=new_x, event_time_ms=new_t, newest_seen_ms=tab.hb_time[slots],
                                        valid_until_ms=tab.valid_until[slots])
        wanted = decisions  # the trigger's own reason, kept on a deferred item for its release
        decisions = P.throttle(self.cfg.policy, decisions, tab.predicted_at[slots], now_ms)
        fresh = decisions != P.Reason.STALE
        tab.hb[slots[fresh]] = hb.cols[ui[fresh]]
        tab.hb_time[slots[fresh]] = new_t[fresh]
        for code, n in enumerate(np.bincount(decisions.astype(np.int64)).tolist()):
            if n:
                self.decisions(P.Reason(code), n)
        if len(devices) < len(hb):
            M.COALESCED.inc(len(hb) - len(devices))
            groups: dict[str, list[int]] = defaultdict(list)
            for i in order:
                groups[ids[i]].append(i)
        else:
            groups = {}
        msgs_, eids = hb.msgs, hb.event_ids
        predicted_at = tab.predicted_at[slots].tolist()
        batcher, deferred = self.batcher, self.deferred
        for j, (code, want) in enumerate(zip(decisions.tolist(), wanted.tolist(), strict=True)):
            d = devices[j]
            if code <= P.Reason.STALE and d not in batcher and d not in deferred:
                continue  # unchanged/stale and nothing waiting for the device: done with it
            idx = groups.get(d) or (int(ui[j]),)
            item = Pending(d, parts[j], P.Reason(want), [(msgs_[i], eids[i]) for i in idx])
            self._route(item, P.Reason(code), predicted_at[j], mono)

    # -- batches ------------------------------------------------------------------------------------
    def release_deferred(self, now_ms: int, mono: float, everything: bool = False) -> int:
        """Move throttled devices whose window ended (or all of them) into the batcher."""
        n = 0
        while self._due and (everything or self._due[0][0] <= now_ms):
            _, _, d = heapq.heappop(self._due)
            item = self.deferred.pop(d, None)
            if item is not None:
                self.batcher.add(d, item, mono, merge)
                n += 1
        return n

    def next_batch(self, mono: float, force: bool = False) -> tuple[list[Pending], float]:
        return self.batcher.take(mono, force)

    @property
    def pending(self) -> int:
        return len(self.batcher) + len(self.deferred)

    def compute(self, items: list[Pending], model: Predictor, produced_at_ms: int) -> BatchResult:
        """Features, one inference call, top-K and the encoded records. Raises what the model
        raises; state changes only in `mark_predicted`, so a failed batch can be retried."""
        tab = self.table
        devices = [it.device for it in items]
        slots = np.fromiter((tab.slot[d] for d in devices), dtype=np.int64, count=len(devices))
        hb = tab.heartbeat_cols(slots)
        computed = tab.hb_time[slots].copy()
        ctxs = [tab.contexts.get(d) for d in devices]
        for j, c in enumerate(ctxs):
            if c is not None and c.as_of_ms > computed[j]:
                computed[j] = c.as_of_ms
            if computed[j] < 0:  # no data at all: a request for a silent device
                computed[j] = items[j].requested_at_ms or produced_at_ms
        cols = {k: hb[:, j] for j, k in enumerate(HEARTBEAT_COLUMNS)}
        cols.update(context_columns(ctxs, computed))
        x = build_features(cols)
        probs = model.predict(x)
        idx, scores = top_k(probs, self.cfg.top_k)
        out = encode(items, idx, scores, model.labels, model.version, computed, self.cfg.horizon_ms,
                     produced_at_ms, self.cfg.backfill)
        return BatchResult(items, out, model.version, x, computed)

    def mark_predicted(self, r: BatchResult, now_ms: int) -> None:
        tab = self.table
        slots = np.fromiter((tab.slot[it.device] for it in r.items), dtype=np.int64, count=len(r.items))
        tab.last_x[slots] = r.features
        tab.valid_until[slots] = r.computed_at + self.cfg.horizon_ms
        tab.predicted_at[slots] = now_ms
        truncated = sum(it.truncated for it in r.items)
        if truncated:
            M.LINEAGE_TRUNCATED.inc(truncated)

    # -- offsets and partitions -----------------------------------------------------------------------
    def commit_offsets(self, include_pending: bool = False) -> list[TopicPartitionOffset]:
        """Next offsets safe to commit: everything consumed, except that a partition stops at
        the oldest record still waiting for its prediction (queued or throttled)."""
        safe = {tp: o for tp, o in self.positions.items() if tp[0] != self.context_topic}
        if not include_pending:
            for it in (*self.batcher, *self.deferred.values()):
                for m, _ in it.refs:
                    tp = (m.topic(), m.partition())
                    if tp in safe and m.offset() < safe[tp]:
                        safe[tp] = m.offset()
        return [TopicPartitionOffset(t, p, o) for (t, p), o in sorted(safe.items())]

    def forget(self, partitions: Sequence[int]) -> None:
        """Drop state, positions and waiting work of these partition indexes (revoked/lost)."""
        parts = set(partitions)
        self.table.forget_partitions(parts)
        self.positions = {tp: o for tp, o in self.positions.items() if tp[1] not in parts}
        for d in [d for d, it in self.deferred.items() if it.partition in parts]:
            del self.deferred[d]
        keep = [it for it in self.batcher if it.partition not in parts]
        if len(keep) != len(self.batcher):
            self.batcher = MicroBatcher(self.cfg.max_batch, self.cfg.max_queue_delay_s, self.cfg.preferred_batch_sizes)
            for it in keep:
                self.batcher.add(it.device, it, 0.0)

    def reset(self) -> None:
        """Forget everything (after an aborted transaction the consumer rewinds to committed)."""
        self.table.clear()
        self.deferred.clear()
        self._due.clear()
        self.positions.clear()
        self.batcher = MicroBatcher(self.cfg.max_batch, self.cfg.max_queue_delay_s, self.cfg.preferred_batch_sizes)


def _count_decision(reason: P.Reason, n: int) -> None:
    M.DECISIONS.labels(reason.label).inc(n)
