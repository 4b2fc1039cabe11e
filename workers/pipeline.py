"""The worker's pure core: records in -> decisions -> micro-batches -> PredictionSet records out.
No Kafka client here (records are anything satisfying `KafkaMessage`), so it is unit-testable
and reusable by a backfill that feeds it a bounded offset range (docs/workers.md)."""

from __future__ import annotations

import heapq
import logging
import time
from collections import defaultdict
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from operator import attrgetter, methodcaller

import numpy as np

from precast.kafka import KafkaMessage, TopicPartitionOffset
from schemas import deadletters as dl
from schemas.events import MAX_AHEAD_MS
from schemas.topics import Topics
from workers import changelog
from workers import metrics as M
from workers import policy as P
from workers.batching import MicroBatcher
from workers.context import SEVERITY_BUCKET, DeviceContext, context_columns
from workers.decode import (
    Heartbeats,
    Reject,
    decode_events,
    decode_heartbeats,
    decode_hints,
    decode_requests,
)
from workers.encode import Encoded, Pending, encode, merge
from workers.features import HEARTBEAT_COLUMNS, build_features
from workers.predictor import Predictor
from workers.sensitivity import Sensitivity, ranking
from workers.state import DeviceTable
from workers.topk import top_k

log = logging.getLogger("precast.workers.pipeline")


@dataclass(frozen=True)
class PipelineConfig:
    policy: P.PolicyConfig = P.PolicyConfig()
    max_batch: int = 2_000
    max_queue_delay_s: float = 0.0
    preferred_batch_sizes: tuple[int, ...] = ()
    horizon_ms: int = 5_000
    top_k: int = 3
    backfill: bool = False
    # event times ahead of the worker's clock by more than this are dead-lettered
    max_ahead_ms: int = MAX_AHEAD_MS


@dataclass
class BatchResult:
    items: list[Pending]
    out: Encoded
    version: str
    features: np.ndarray
    computed_at: np.ndarray
    slots: np.ndarray  # device table slots of `items` (nothing changes them before mark_predicted)
    inferred: np.ndarray | None = None  # per item: scored by the model (else renewed)
    idx: np.ndarray | None = None  # top-K class indexes and scores of each item
    scores: np.ndarray | None = None
    margins: np.ndarray | None = None  # (n, 2) top-1 and top-K log margins of inferred items
    rank: np.ndarray | None = None  # (n, K+1) ranked classes of inferred items


class Pipeline:
    def __init__(self, topics: Topics, cfg: PipelineConfig, reject: Reject) -> None:
        self.cfg, self.reject = cfg, reject
        self.roles = {
            topics.heartbeats.name: "heartbeats",
            topics.work_orders.name: "work_orders",
            topics.alarms.name: "alarms",
            topics.precompute_requests.name: "requests",
            topics.device_context.name: "context",
            topics.read_hints.name: "hints",
        }
        self.context_topic = topics.device_context.name
        self.table = DeviceTable(top_k=cfg.top_k)
        # The current model's score sensitivities (workers.sensitivity), estimated once per
        # version on first use; None until a model has been used (the policy then falls back to
        # the material-change rule).
        self.sensitivity: Sensitivity | None = None
        self._sensitivity_of: str | None = None
        self.batcher: MicroBatcher[Pending] = MicroBatcher(
            cfg.max_batch, cfg.max_queue_delay_s, cfg.preferred_batch_sizes
        )
        self.deferred: dict[str, Pending] = {}
        self._due: list[tuple[int, int, str]] = []  # heap of (release ms, seq, device)
        self._seq = 0
        self.positions: dict[tuple[str, int], int] = {}  # next offset consumed, per partition
        self.decisions: Callable[[P.Reason, int], None] = _count_decision
        # Called with each item as it is deferred (throttled) or grows while deferred: such an
        # item outlives many batches, holding its input records. A shadow run slims them
        # (workers.shadow); the worker keeps whole records (it dead-letters them on failure).
        self.on_defer: Callable[[Pending], None] | None = None

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
            M.EVENTS_IN.labels(batch[0].topic()).inc(len(batch))
        # Context first, so triggers of the same poll already see it.
        if "context" in by_role:
            self._ingest_context(by_role["context"], now_ms)
        for role in ("work_orders", "alarms"):
            if role in by_role:
                self._ingest_context_events(role, by_role[role], now_ms, mono)
        if "heartbeats" in by_role:
            self._ingest_heartbeats(by_role["heartbeats"], now_ms, mono)
        self._ingest_rest(by_role, now_ms, mono)

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
            key, value = m.key(), m.value()
            if not key:
                self.reject(m, dl.Reason.MISSING_KEY, "device-context record without a key")
                continue
            device = key.decode(errors="replace")
            if value is None:  # tombstone: the device's context was purged
                self.table.contexts.pop(device, None)
                continue
            try:
                snap = DeviceContext.from_json(value)
            except (ValueError, KeyError, TypeError) as exc:
                self.reject(m, dl.Reason.INVALID, f"device-context snapshot: {exc}")
                continue
            if snap.as_of_ms > now_ms + self.cfg.max_ahead_ms:
                self._future(m, snap.as_of_ms, now_ms)
                continue
            self.table.slots([device], [m.partition()])
            self.table.context(device).merge_snapshot(snap)

    def _ingest_context_events(
        self, role: str, msgs: list[KafkaMessage], now_ms: int, mono: float
    ) -> None:
        for m, e in decode_events(role, msgs, self.reject):
            if e["event_time_ms"] > now_ms + self.cfg.max_ahead_ms:
                self._future(m, e["event_time_ms"], now_ms)
                continue
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
            self._trigger(
                Pending(device, m.partition(), reason, [(m, e["event_id"])]), now_ms, mono
            )

    def _ingest_requests(self, msgs: list[KafkaMessage], now_ms: int, mono: float) -> None:
        for m, r in decode_requests(msgs, self.reject):
            if not self.table.has_data(r.device_id):
                # Nothing from the device itself: a prediction would be the default features'
                # answer stamped with no real time, so nothing is published (and no slot kept).
                M.NO_DATA.inc()
                continue
            self.table.slots([r.device_id], [m.partition()])
            reason = P.REQUEST_REASON[r.reason]
            self._trigger(
                Pending(
                    r.device_id,
                    m.partition(),
                    reason,
                    [(m, r.request_id)],
                    requested_at_ms=r.requested_at_ms,
                ),
                now_ms,
                mono,
            )

    def _ingest_hints(self, msgs: list[KafkaMessage]) -> None:
        """Read hints (schemas.hints): advice, never a trigger; a bad one is dead-lettered."""
        for _, device, until in decode_hints(msgs, self.reject):
            self.mark_hot([device], until)

    def _trigger(self, item: Pending, now_ms: int, mono: float) -> None:
        """One decision for a low-rate trigger (work order, alarm, request)."""
        s = self.table.slot[item.device]
        reason = item.reason
        if reason.predicts:
            reason = P.throttle_one(
                self.cfg.policy, reason, int(self.table.predicted_at[s]), now_ms
            )
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
            if self.on_defer is not None:
                self.on_defer(self.deferred[d])
        elif decision == P.Reason.THROTTLED:
            self.deferred[d] = item
            if self.on_defer is not None:
                self.on_defer(item)
            self._seq += 1
            heapq.heappush(self._due, (P.release_at(self.cfg.policy, predicted_at), self._seq, d))
        elif decision.emits:
            self.batcher.add(d, item, mono, merge)

    def _future(self, m: KafkaMessage, event_time_ms: int, now_ms: int) -> None:
        self.reject(
            m,
            dl.Reason.FUTURE_EVENT_TIME,
            f"event time {event_time_ms} is {event_time_ms - now_ms} ms ahead of the worker's "
            f"clock (tolerance {self.cfg.max_ahead_ms} ms)",
        )

    def _ingest_heartbeats(self, msgs: list[KafkaMessage], now_ms: int, mono: float) -> None:
        t0 = time.perf_counter()
        hb = decode_heartbeats(msgs, self.reject)
        limit = now_ms + self.cfg.max_ahead_ms
        if len(hb) and int(hb.event_time_ms.max()) > limit:
            hb = self._drop_future(hb, limit, now_ms)
        t1 = time.perf_counter()
        M.STAGE["decode"].inc(t1 - t0)
        if len(hb):
            self._decide_heartbeats(hb, now_ms, mono)
        M.STAGE["policy"].inc(time.perf_counter() - t1)

    def _drop_future(self, hb: Heartbeats, limit: int, now_ms: int) -> Heartbeats:
        """A device clock running ahead: its heartbeat would win newest-wins over every real one
        until the wall clock caught up, so it is dead-lettered instead."""
        ahead = hb.event_time_ms > limit
        for i in np.flatnonzero(ahead).tolist():
            self._future(hb.msgs[i], int(hb.event_time_ms[i]), now_ms)
        keep = np.flatnonzero(~ahead)
        idx = keep.tolist()
        return Heartbeats(
            [hb.msgs[i] for i in idx],
            [hb.device_ids[i] for i in idx],
            [hb.event_ids[i] for i in idx],
            [hb.partitions[i] for i in idx],
            hb.event_time_ms[keep],
            hb.cols[keep],
        )

    def _decide_heartbeats(self, hb: Heartbeats, now_ms: int, mono: float) -> None:
        ids, t, n = hb.device_ids, hb.event_time_ms, len(hb)
        if len(set(ids)) == n:  # one heartbeat per device (the common case): no coalescing
            order, devices, parts, ui = None, ids, hb.partitions, np.arange(n)
            new_t, hb_cols = t, hb.cols
        else:  # the newest heartbeat per device (event time, then consumption order) stands for it
            order = np.argsort(t, kind="stable").tolist()
            newest = {ids[i]: i for i in order}
            devices = list(newest)
            ui = np.fromiter(newest.values(), dtype=np.int64, count=len(newest))
            parts = [hb.partitions[i] for i in ui.tolist()]
            new_t, hb_cols = t[ui], hb.cols[ui]
        tab = self.table
        slots = tab.slots(devices, parts)
        cols = {k: hb_cols[:, j] for j, k in enumerate(HEARTBEAT_COLUMNS)}
        ctxs = list(map(tab.contexts.get, devices)) if tab.contexts else [None] * len(devices)
        cols.update(context_columns(ctxs, new_t))
        new_x = build_features(cols)
        decisions = P.decide_heartbeats(
            self.cfg.policy,
            has_prediction=tab.valid_until[slots] >= 0,
            last_x=tab.last_x[slots],
            new_x=new_x,
            event_time_ms=new_t,
            newest_seen_ms=tab.hb_time[slots],
            valid_until_ms=tab.valid_until[slots],
            horizon_ms=self.cfg.horizon_ms,
            sensitivity=self.sensitivity,
            rank=tab.rank_idx[slots],
            margin_top1=tab.margin_top1[slots],
            margin_topk=tab.margin_topk[slots],
            hot=tab.hot_until[slots] >= now_ms,
        )
        wanted = decisions  # the trigger's own reason, kept on a deferred item for its release
        predicted_at = tab.predicted_at[slots]
        decisions = P.throttle(self.cfg.policy, decisions, predicted_at, now_ms)
        fresh = decisions != P.Reason.STALE
        if fresh.all():
            tab.hb[slots] = hb_cols
            tab.hb_time[slots] = new_t
        else:
            tab.hb[slots[fresh]] = hb_cols[fresh]
            tab.hb_time[slots[fresh]] = new_t[fresh]
        for code, k in enumerate(np.bincount(decisions.astype(np.int64)).tolist()):
            if k:
                self.decisions(_REASON[code], k)
        groups: dict[str, list[int]] = defaultdict(list)
        if order is not None:
            M.COALESCED.inc(n - len(devices))
            for i in order:
                groups[ids[i]].append(i)
        self._route_heartbeats(
            hb, devices, parts, ui, decisions, wanted, predicted_at, groups, mono
        )

    def _route_heartbeats(
        self,
        hb: Heartbeats,
        devices: list[str],
        parts: list[int],
        ui: np.ndarray,
        decisions: np.ndarray,
        wanted: np.ndarray,
        predicted_at: np.ndarray,
        groups: dict[str, list[int]],
        mono: float,
    ) -> None:
        msgs, eids, reason, batcher = hb.msgs, hb.event_ids, _REASON, self.batcher

        def refs(j: int, i: int) -> list[tuple[KafkaMessage, str | None]]:
            return (
                [(msgs[k], eids[k]) for k in groups[devices[j]]] if groups else [(msgs[i], eids[i])]
            )

        go = (decisions >= _FIRST_PREDICTING) | (decisions == _RENEWED)
        if not self.deferred and batcher.isdisjoint(devices):
            # hot path: nobody waits for these devices; the predicting ones get fresh entries
            sel = np.flatnonzero(go).tolist()
            want = wanted.tolist()
            if groups:
                new = [Pending(devices[j], parts[j], reason[want[j]], refs(j, 0)) for j in sel]
            else:  # one heartbeat per device: ui is the identity
                new = [
                    Pending(devices[j], parts[j], reason[want[j]], [(msgs[j], eids[j])])
                    for j in sel
                ]
            batcher.add_new([devices[j] for j in sel], new, mono)
            rest = np.flatnonzero(decisions == P.Reason.THROTTLED).tolist()
        else:
            rest = np.flatnonzero(go | (decisions == P.Reason.THROTTLED)).tolist()
            rest += [
                j
                for j in np.flatnonzero(decisions <= _LAST_SKIP).tolist()
                if devices[j] in batcher or devices[j] in self.deferred
            ]
            rest.sort()  # in device order, as the batch came
        for j in rest:
            i = int(ui[j])
            self._route(
                Pending(devices[j], parts[j], reason[int(wanted[j])], refs(j, i)),
                reason[int(decisions[j])],
                int(predicted_at[j]),
                mono,
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
            M.NO_DATA.inc(len(items) - len(keep))
        return keep

    def compute(self, items: list[Pending], model: Predictor, produced_at_ms: int) -> BatchResult:
        """Features, one inference call, top-K and the encoded records. Raises what the model
        raises; state changes only in `mark_predicted`, so a failed batch can be retried."""
        t0 = time.perf_counter()
        tab = self.table
        devices = list(map(_DEVICE, items))
        slots = np.fromiter(map(tab.slot.__getitem__, devices), dtype=np.int64, count=len(devices))
        data = np.fromiter(map(tab.has_data, devices), dtype=bool, count=len(devices))
        if not data.all():  # no device data (requests are filtered at ingest): no answer
            keep = np.flatnonzero(data)
            M.NO_DATA.inc(len(items) - len(keep))
            items = [items[j] for j in keep.tolist()]
            devices, slots = [devices[j] for j in keep.tolist()], slots[keep]
        x, computed = self.features_of(devices, slots)
        k = self.cfg.top_k
        # Renewals republish the stored answer (no inference); everything else is scored.
        renew = np.fromiter(map(_is_renewal, items), dtype=bool, count=len(items))
        renew &= tab.valid_until[slots] >= 0
        infer = ~renew
        idx = np.empty((len(items), k), dtype=np.int64)
        scores = np.empty((len(items), k), dtype=np.float32)
        margin = np.zeros((len(items), 2), dtype=np.float32)
        rank = np.zeros((len(items), k + 1), dtype=np.int64)
        t1 = time.perf_counter()
        self.prime(model)
        t1b = time.perf_counter()
        inferred_ms = 0
        if infer.any():
            rows = np.flatnonzero(infer) if renew.any() else slice(None)
            probs = model.predict(x[rows])
            t2 = time.perf_counter()
            inferred_ms = round((t2 - t1b) * 1000)
            idx[rows], scores[rows] = top_k(probs, k)
            rank[rows], margin[rows, 0], margin[rows, 1] = ranking(probs, k)
        else:
            t2 = time.perf_counter()
        if renew.any():
            idx[renew] = tab.rank_idx[slots[renew], :k]
            scores[renew] = tab.top_scores[slots[renew]]
        t3 = time.perf_counter()
        if renew.any() and infer.any():
            # Renewals report no model time: encode the two groups apart, inferred ones first.
            order = np.concatenate([np.flatnonzero(infer), np.flatnonzero(renew)])
            items = [items[j] for j in order.tolist()]
            idx, scores, margin, x = idx[order], scores[order], margin[order], x[order]
            rank = rank[order]
            computed, slots, infer = computed[order], slots[order], infer[order]
            n_inf = int(infer.sum())
            a = self._encode(
                items[:n_inf],
                idx[:n_inf],
                scores[:n_inf],
                model,
                computed[:n_inf],
                produced_at_ms,
                inferred_ms,
            )
            b = self._encode(
                items[n_inf:],
                idx[n_inf:],
                scores[n_inf:],
                model,
                computed[n_inf:],
                produced_at_ms,
                0,
            )
            out = Encoded(a.keys + b.keys, a.values + b.values)
        else:
            out = self._encode(items, idx, scores, model, computed, produced_at_ms, inferred_ms)
        t4 = time.perf_counter()
        for stage, dt in (
            ("features", t1 - t0),
            ("inference", t2 - t1),
            ("topk", t3 - t2),
            ("encode", t4 - t3),
        ):
            M.STAGE[stage].inc(dt)
        return BatchResult(
            items, out, model.version, x, computed, slots, infer, idx, scores, margin, rank
        )

    def prime(self, model: Predictor) -> None:
        """Measure the model's sensitivities now (once per version) rather than at the first
        batch: the first heartbeats after a restore then already get the answer-aware check."""
        if model.version != self._sensitivity_of:
            self.sensitivity = _sensitivity_of(model, self.cfg.top_k)
            self._sensitivity_of = model.version

    def features_of(
        self, devices: Sequence[str], slots: np.ndarray, no_data_ms: int = -1
    ) -> tuple[np.ndarray, np.ndarray]:
        """(features, as-of time) of each device from its newest heartbeat and context: the
        input an inference made now would see (also what the speculation benchmark's fresh
        on-demand reference uses). `no_data_ms` is the as-of time of a device with neither
        (compute never sees one: it drops them first)."""
        tab = self.table
        hb = tab.heartbeat_cols(slots)
        computed = tab.hb_time[slots].copy()
        ctxs = list(map(tab.contexts.get, devices)) if tab.contexts else [None] * len(devices)
        if tab.contexts:
            for j, c in enumerate(ctxs):
                if c is not None and c.as_of_ms > computed[j]:
                    computed[j] = c.as_of_ms
        computed[computed < 0] = no_data_ms
        cols = {k: hb[:, j] for j, k in enumerate(HEARTBEAT_COLUMNS)}
        cols.update(context_columns(ctxs, computed))
        return build_features(cols), computed

    def _encode(
        self,
        items: list[Pending],
        idx: np.ndarray,
        scores: np.ndarray,
        model: Predictor,
        computed: np.ndarray,
        produced_at_ms: int,
        inference_ms: int,
    ) -> Encoded:
        return encode(
            items,
            idx,
            scores,
            model.labels,
            model.version,
            computed,
            self.cfg.horizon_ms,
            produced_at_ms,
            self.cfg.backfill,
            inference_ms,
        )

    def mark_predicted(self, r: BatchResult, now_ms: int) -> None:
        tab, slots = self.table, r.slots
        tab.valid_until[slots] = r.computed_at + self.cfg.horizon_ms
        tab.computed_at[slots] = r.computed_at
        inferred = r.inferred if r.inferred is not None else np.ones(len(slots), dtype=bool)
        s = slots[inferred]
        # Only an inference moves the reference point of the policy's check; a renewal keeps it,
        # so small moves add up until they could change the answer.
        tab.last_x[s] = r.features[inferred]
        tab.predicted_at[s] = now_ms
        if r.idx is not None and r.scores is not None and r.margins is not None:
            tab.top_scores[s] = r.scores[inferred]
            if r.rank is not None:
                tab.rank_idx[s] = r.rank[inferred]
            tab.margin_top1[s] = r.margins[inferred, 0]
            tab.margin_topk[s] = r.margins[inferred, 1]
        n_inferred = int(inferred.sum())
        M.INFERENCES.inc(n_inferred)
        if n_inferred < len(slots):
            M.RENEWALS.inc(len(slots) - n_inferred)
        truncated = sum(map(_TRUNCATED, r.items))
        if truncated:
            M.LINEAGE_TRUNCATED.inc(truncated)

    def state_records(self, r: BatchResult) -> list[bytes]:
        """Worker-state changelog values for a batch marked predicted (keys: `r.out.keys`)."""
        tab, s = self.table, r.slots
        return changelog.encode(
            tab.hb_time[s],
            tab.computed_at[s],
            tab.predicted_at[s],
            tab.valid_until[s],
            tab.hb[s],
            tab.last_x[s],
            tab.rank_idx[s],
            tab.top_scores[s],
            np.stack([tab.margin_top1[s], tab.margin_topk[s]], axis=1),
        )

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
            self.batcher = MicroBatcher(
                self.cfg.max_batch, self.cfg.max_queue_delay_s, self.cfg.preferred_batch_sizes
            )
            for it in keep:
                self.batcher.add(it.device, it, 0.0)

    def reset(self) -> None:
        """Forget everything (after an aborted transaction the consumer rewinds to committed)."""
        self.table.clear()
        self.deferred.clear()
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
_DEVICE, _TRUNCATED = attrgetter("device"), attrgetter("truncated")
_REASON = {int(r): r for r in P.Reason}  # int code -> member, without Enum.__call__ per device
_FIRST_PREDICTING, _LAST_SKIP = int(P.Reason.FIRST_SEEN), int(P.Reason.STALE)
_RENEWED = int(P.Reason.RENEWED)


def _is_renewal(item: Pending) -> bool:
    return item.reason == P.Reason.RENEWED


def _sensitivity_of(model: Predictor, k: int) -> Sensitivity | None:
    """The model's sensitivities when it can measure them (workers.inference.ModelSession
    can); otherwise None, and the policy uses the material-change rule."""
    measure = getattr(model, "sensitivity_for", None)
    if measure is None:
        return None
    try:
        return measure(k)
    except Exception as exc:  # noqa: BLE001 - a model that cannot be probed still serves
        log.warning(
            "model %s: sensitivities not measured (%s); material-change rule", model.version, exc
        )
        return None


def _count_decision(reason: P.Reason, n: int) -> None:
    M.DECISIONS.labels(reason.label).inc(n)
