"""Heartbeats into the pipeline (`HeartbeatIngest`, a part of `Pipeline`): decode a batch, drop
clocks running ahead, one vectorized policy decision per device's newest heartbeat, and route
the predicting ones into the micro-batcher (or the throttle queue) in bulk."""

from __future__ import annotations

import time
from collections import defaultdict
from collections.abc import Sequence
from operator import methodcaller
from typing import Any

import numpy as np

from precast.guard import Guard
from precast.kafka import KafkaMessage
from schemas import deadletters
from workers.precompute import metrics
from workers.precompute.decide import policy
from workers.precompute.decide.routing import WorkQueue
from workers.precompute.ingest.decode import Decoder, Heartbeats, Reject
from workers.precompute.items import Pending, Reason
from workers.precompute.state.shared import PipelineState

_OFFSET = methodcaller("offset")
_REASON = {int(r): r for r in Reason}  # int code -> member, without Enum.__call__ per device
_FIRST_PREDICTING, _LAST_SKIP = int(Reason.FIRST_SEEN), int(Reason.STALE)
_RENEWED = int(Reason.RENEWED)


class HeartbeatIngest:
    """Heartbeats into the pipeline: the part of ingest that decides in bulk. Given the shared
    state (config, fleet, device table, the model's sensitivities), the queue it routes into,
    the decoder, and where bad records go."""

    def __init__(
        self,
        state: PipelineState,
        queue: WorkQueue,
        decoder: Decoder,
        guard: Guard,
        reject: Reject,
    ) -> None:
        self.state, self.queue, self.decoder, self.guard, self.reject = (
            state,
            queue,
            decoder,
            guard,
            reject,
        )

    def ingest(self, msgs: list[KafkaMessage], now_ms: int, mono: float) -> None:
        t0 = time.perf_counter()
        hb = self._decode_heartbeats(msgs)
        limit = now_ms + self.state.cfg.max_ahead_ms
        if len(hb) and int(hb.event_time_ms.max()) > limit:
            hb = self._drop_future(hb, limit, now_ms)
        t1 = time.perf_counter()
        metrics.STAGE["decode"].inc(t1 - t0)
        if len(hb):
            self._decide_heartbeats(hb, now_ms, mono)
        metrics.STAGE["policy"].inc(time.perf_counter() - t1)

    def _decode_heartbeats(self, msgs: list[KafkaMessage]) -> Heartbeats:
        return guarded_heartbeats(self.decoder, self.guard, msgs, self.reject)

    def _drop_future(self, hb: Heartbeats, limit: int, now_ms: int) -> Heartbeats:
        """A device clock running ahead: its heartbeat would win newest-wins over every real one
        until the wall clock caught up, so it is dead-lettered instead."""
        ahead = hb.event_time_ms > limit
        for i in np.flatnonzero(ahead).tolist():
            reject_future(
                self.reject,
                hb.msgs[i],
                int(hb.event_time_ms[i]),
                now_ms,
                self.state.cfg.max_ahead_ms,
            )
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
        state = self.state
        tab, cfg = state.table, state.cfg
        slots = tab.slots(devices, parts)
        ctxs = list(map(tab.contexts.get, devices)) if tab.contexts else [None] * len(devices)
        fleet = state.fleet
        new_x = fleet.features.build(hb_cols, fleet.context.columns(ctxs, new_t), state.stats)
        decisions = policy.decide_heartbeats(
            cfg.policy,
            has_prediction=tab.valid_until[slots] >= 0,
            last_x=tab.last_x[slots],
            new_x=new_x,
            event_time_ms=new_t,
            newest_seen_ms=tab.hb_time[slots],
            valid_until_ms=tab.valid_until[slots],
            horizon_ms=cfg.horizon_ms,
            sensitivity=state.sensitivity,
            change_scale=fleet.features.change_scale,
            rank=tab.rank_idx[slots],
            margin_top1=tab.margin_top1[slots],
            margin_topk=tab.margin_topk[slots],
            hot=tab.hot_until[slots] >= now_ms,
        )
        wanted = decisions  # the trigger's own reason, kept on a deferred item for its release
        predicted_at = tab.predicted_at[slots]
        decisions = policy.throttle(cfg.policy, decisions, predicted_at, now_ms)
        fresh = decisions != Reason.STALE
        # the record the state now comes from: a later answer's lineage names it (a request
        # answered from this state, after a restart too, names the heartbeat it was computed from)
        offsets = np.fromiter(map(_OFFSET, hb.msgs), dtype=np.int64, count=n)
        if order is not None:
            offsets = offsets[ui]
        # the device's cadence, which says whether validity leases can keep its answer
        prev = tab.hb_time[slots]
        gap = np.where((prev >= 0) & (tab.hb_gap[slots] != -2), new_t - prev, -1)
        if fresh.all():
            tab.hb[slots] = hb_cols
            tab.hb_gap[slots] = gap
            tab.hb_time[slots] = new_t
            tab.hb_offset[slots] = offsets
        else:
            tab.hb[slots[fresh]] = hb_cols[fresh]
            tab.hb_gap[slots[fresh]] = gap[fresh]
            tab.hb_time[slots[fresh]] = new_t[fresh]
            tab.hb_offset[slots[fresh]] = offsets[fresh]
        for code, k in enumerate(np.bincount(decisions.astype(np.int64)).tolist()):
            if k:
                state.decisions(_REASON[code], k)
        groups: dict[str, list[int]] = defaultdict(list)
        if order is not None:
            metrics.COALESCED.inc(n - len(devices))
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
        queue = self.queue
        msgs, eids, reason, batcher = hb.msgs, hb.event_ids, _REASON, queue.batcher

        def refs(j: int, i: int) -> list[tuple[KafkaMessage, str | None]]:
            return (
                [(msgs[k], eids[k]) for k in groups[devices[j]]] if groups else [(msgs[i], eids[i])]
            )

        go = (decisions >= _FIRST_PREDICTING) | (decisions == _RENEWED)
        if not queue.deferred and batcher.isdisjoint(devices):
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
            rest = np.flatnonzero(decisions == Reason.THROTTLED).tolist()
        else:
            rest = np.flatnonzero(go | (decisions == Reason.THROTTLED)).tolist()
            rest += [
                j
                for j in np.flatnonzero(decisions <= _LAST_SKIP).tolist()
                if devices[j] in batcher or devices[j] in queue.deferred
            ]
            rest.sort()  # in device order, as the batch came
        for j in rest:
            i = int(ui[j])
            queue.route(
                Pending(devices[j], parts[j], reason[int(wanted[j])], refs(j, i)),
                reason[int(decisions[j])],
                int(predicted_at[j]),
                mono,
            )


def reject_future(
    reject: Reject, m: KafkaMessage, event_time_ms: int, now_ms: int, max_ahead_ms: int
) -> None:
    """A record whose event time runs ahead of the worker's clock past the tolerance."""
    reject(
        m,
        deadletters.Reason.FUTURE_EVENT_TIME,
        f"event time {event_time_ms} is {event_time_ms - now_ms} ms ahead of the worker's "
        f"clock (tolerance {max_ahead_ms} ms)",
    )


def guarded_heartbeats(
    decoder: Decoder, guard: Guard, msgs: Sequence[KafkaMessage], reject: Reject
) -> Heartbeats:
    """The batch decode behind a reader's guard: should a record make it raise (nothing the
    decoder expects does), the batch again record by record through the guard, so that record
    alone is rejected. Rejections are held until the batch's outcome is known: none is sent
    twice. The batch path costs one closure per batch."""
    held: list[tuple[KafkaMessage, Any, str]] = []
    hold = _holder(held)
    try:
        hb = decoder.heartbeats(msgs, hold)
    except Exception:  # noqa: BLE001 - judged again below, one record at a time
        held.clear()
        one = decoder.heartbeats
        parts = [guard.decode(lambda m: one([m], hold), m) for m in msgs]
        hb = concat([x for x in parts if x is not None], len(decoder.state))
    for m, reason, detail in held:
        reject(m, reason, detail)
    return hb


def _holder(held: list[tuple[KafkaMessage, Any, str]]) -> Reject:
    def hold(m: KafkaMessage, reason: Any, detail: str) -> None:
        held.append((m, reason, detail))

    return hold


def concat(parts: list[Heartbeats], width: int) -> Heartbeats:
    """Decoded heartbeats of several runs as one, in order."""
    out = Heartbeats(cols=np.zeros((0, width)))
    for p in parts:
        out.msgs += p.msgs
        out.device_ids += p.device_ids
        out.event_ids += p.event_ids
        out.partitions += p.partitions
    if parts:
        out.cols = np.vstack([out.cols, *(p.cols.reshape(-1, width) for p in parts)])
        out.event_time_ms = np.concatenate(
            [out.event_time_ms, *(p.event_time_ms for p in parts)]
        ).astype(np.int64)
    return out
