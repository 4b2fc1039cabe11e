"""A batch of waiting devices -> features, one inference call, top-K, encoded PredictionSets,
and what the device table remembers of them (`Scorer`, a part of `Pipeline`). Kafka-free, like
the rest of the pipeline: the loop produces `BatchResult.out` and then calls `mark_predicted`."""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence
from dataclasses import dataclass
from operator import attrgetter
from typing import Protocol

import numpy as np

from precast.kafka.types import RecordRef
from workers.model.predictor import Predictor
from workers.model.sensitivity import Sensitivity, ranking
from workers.model.topk import top_k
from workers.precompute import metrics
from workers.precompute.items import Pending, Reason
from workers.precompute.score.encode import Encoded, encode
from workers.precompute.state import changelog
from workers.precompute.state.shared import PipelineState

log = logging.getLogger("precast.workers.precompute.score.scorer")


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
    leased: np.ndarray | None = None  # per item: published with lease terms (schemas.leases)


class LeaseTerms(Protocol):
    """What the scorer asks the lease book (workers.precompute.publish.lease_book.LeaseBook): per item, the
    `"lease"` member of its PredictionSet (b"" for none)."""

    def lease_terms(self, slots: np.ndarray, computed: np.ndarray) -> list[bytes]: ...


class Scorer:
    """A batch of waiting devices -> one BatchResult, and the device table updated once it is
    published. Given the shared state, the lease book (the lease terms of each answer) and the
    heartbeats topic (what a state-derived answer's lineage names)."""

    def __init__(self, state: PipelineState, leases: LeaseTerms, heartbeat_topic: str) -> None:
        self.state, self.leases, self.heartbeat_topic = state, leases, heartbeat_topic
        self.layout = changelog.Layout(state.fleet.features)  # the worker-state record layout

    def compute(self, items: list[Pending], model: Predictor, produced_at_ms: int) -> BatchResult:
        """Features, one inference call, top-K and the encoded records. Raises what the model
        raises; state changes only in `mark_predicted`, so a failed batch can be retried."""
        t0 = time.perf_counter()
        state = self.state
        tab, cfg = state.table, state.cfg
        devices = list(map(_DEVICE, items))
        slots = np.fromiter(map(tab.slot.__getitem__, devices), dtype=np.int64, count=len(devices))
        data = np.fromiter(map(tab.has_data, devices), dtype=bool, count=len(devices))
        if not data.all():  # no device data (requests are filtered at ingest): no answer
            keep = np.flatnonzero(data)
            metrics.NO_DATA.inc(len(items) - len(keep))
            items = [items[j] for j in keep.tolist()]
            devices, slots = [devices[j] for j in keep.tolist()], slots[keep]
        self._name_the_state(items, slots)
        x, computed = self.features_of(devices, slots)
        k = cfg.top_k
        # Renewals republish the stored answer (no inference); everything else is scored.
        renew = np.fromiter(map(_is_renewal, items), dtype=bool, count=len(items))
        renew &= tab.valid_until[slots] >= 0
        infer = ~renew
        # Lease terms: none for a lapse (its device stopped sending: see leases.py)
        terms = self.leases.lease_terms(slots, computed)
        for j in (j for j, it in enumerate(items) if it.reason == Reason.LAPSED):
            terms[j] = b""
            metrics.LAPSES.inc()
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
            terms = [terms[j] for j in order.tolist()]
            n_inf = int(infer.sum())
            a = self._encode(
                items[:n_inf],
                idx[:n_inf],
                scores[:n_inf],
                model,
                computed[:n_inf],
                produced_at_ms,
                inferred_ms,
                terms[:n_inf],
            )
            b = self._encode(
                items[n_inf:],
                idx[n_inf:],
                scores[n_inf:],
                model,
                computed[n_inf:],
                produced_at_ms,
                0,
                terms[n_inf:],
            )
            out = Encoded(a.keys + b.keys, a.values + b.values)
        else:
            out = self._encode(
                items, idx, scores, model, computed, produced_at_ms, inferred_ms, terms
            )
        t4 = time.perf_counter()
        for stage, dt in (
            ("features", t1 - t0),
            ("inference", t2 - t1),
            ("topk", t3 - t2),
            ("encode", t4 - t3),
        ):
            metrics.STAGE[stage].inc(dt)
        leased = np.fromiter(map(bool, terms), dtype=bool, count=len(terms))
        return BatchResult(
            items, out, model.version, x, computed, slots, infer, idx, scores, margin, rank, leased
        )

    def _name_the_state(self, items: list[Pending], slots: np.ndarray) -> None:
        """An answer to a work order, an alarm or a request is computed from the device's
        newest heartbeat too (restored from the changelog after a restart, or from an earlier
        batch): its lineage names that record as well. Idempotent, so a retried batch adds it
        once."""
        tab, hb = self.state.table, self.heartbeat_topic
        for j, it in enumerate(items):
            if it.reason < _FIRST_EVENT and it.reason != Reason.LAPSED:
                continue  # a heartbeat's own trigger: its records are in the lineage already
            s = int(slots[j])
            off = int(tab.hb_offset[s])
            if it.stated or off < 0 or any(m.topic() == hb for m, _ in it.refs):
                continue
            it.refs.append((StateRef(hb, int(tab.partition[s]), off), None))
            it.stated = True

    def prime(self, model: Predictor) -> None:
        """Measure the model's sensitivities now (once per version) rather than at the first
        batch: the first heartbeats after a restore then already get the answer-aware check."""
        state = self.state
        if model.version != state.model_version:
            state.sensitivity = _sensitivity_of(model, state.cfg.top_k)
            state.model_version = model.version
            state.stats = getattr(model, "standardization", None)
            state.table.n_labels = len(model.labels)

    def features_of(
        self, devices: Sequence[str], slots: np.ndarray, no_data_ms: int = -1
    ) -> tuple[np.ndarray, np.ndarray]:
        """(features, as-of time) of each device from its newest heartbeat and context: the
        input an inference made now would see (also what the speculation benchmark's fresh
        on-demand reference uses). `no_data_ms` is the as-of time of a device with neither
        (compute never sees one: it drops them first)."""
        tab = self.state.table
        hb = tab.heartbeat_cols(slots)
        computed = tab.hb_time[slots].copy()
        ctxs = list(map(tab.contexts.get, devices)) if tab.contexts else [None] * len(devices)
        if tab.contexts:
            for j, c in enumerate(ctxs):
                if c is not None and c.as_of_ms > computed[j]:
                    computed[j] = c.as_of_ms
        computed[computed < 0] = no_data_ms
        fleet, stats = self.state.fleet, self.state.stats
        return fleet.features.build(hb, fleet.context.columns(ctxs, computed), stats), computed

    def _encode(
        self,
        items: list[Pending],
        idx: np.ndarray,
        scores: np.ndarray,
        model: Predictor,
        computed: np.ndarray,
        produced_at_ms: int,
        inference_ms: int,
        leases: list[bytes] | None = None,
    ) -> Encoded:
        return encode(
            items,
            idx,
            scores,
            model.labels,
            model.version,
            computed,
            self.state.cfg.horizon_ms,
            produced_at_ms,
            self.state.cfg.backfill,
            inference_ms,
            leases,
        )

    def mark_predicted(self, r: BatchResult, now_ms: int) -> None:
        tab, cfg, slots = self.state.table, self.state.cfg, r.slots
        # A leased answer stays valid (through leases) until its terms end: the policy's
        # refresh rule counts from there, so it is renewed once per max extension, not horizon.
        tab.valid_until[slots] = r.computed_at + cfg.horizon_ms
        if r.leased is not None and r.leased.any():
            tab.valid_until[slots[r.leased]] = r.computed_at[r.leased] + cfg.lease.max_extension_ms
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
        metrics.INFERENCES.inc(n_inferred)
        if n_inferred < len(slots):
            metrics.RENEWALS.inc(len(slots) - n_inferred)
        truncated = sum(map(_TRUNCATED, r.items))
        if truncated:
            metrics.LINEAGE_TRUNCATED.inc(truncated)

    def state_records(self, r: BatchResult) -> list[bytes]:
        """Worker-state changelog values for a batch marked predicted (keys: `r.out.keys`)."""
        tab, s = self.state.table, r.slots
        return self.layout.encode(
            tab.hb_time[s],
            tab.computed_at[s],
            tab.predicted_at[s],
            tab.valid_until[s],
            tab.hb[s],
            tab.last_x[s],
            tab.rank_idx[s],
            tab.top_scores[s],
            np.stack([tab.margin_top1[s], tab.margin_topk[s]], axis=1),
            tab.hb_offset[s],
        )


_DEVICE, _TRUNCATED = attrgetter("device"), attrgetter("truncated")
_FIRST_EVENT = int(Reason.WORK_ORDER)  # work orders, alarms and requests have no heartbeat ref


class StateRef(RecordRef):
    """The heartbeat record a device's state comes from, as a lineage reference (topic,
    partition, offset; the event ID and trace ID are in that record, read back on request)."""

    __slots__ = ()


def _is_renewal(item: Pending) -> bool:
    return item.reason.republishes


def _sensitivity_of(model: Predictor, k: int) -> Sensitivity | None:
    """The model's sensitivities when it can measure them (workers.model.inference.ModelSession
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
