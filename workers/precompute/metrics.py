"""The worker's Prometheus metrics (dead letters are counted by `precast.deadletter`; the
served model's own, `MODEL_*`, live with the model in `workers.model.serving_metrics`)."""

from __future__ import annotations

import time

import numpy as np
from prometheus_client import Counter, Gauge, Histogram
from prometheus_client.samples import Exemplar

EVENTS_IN = Counter("precast_worker_events_total", "records consumed", ["topic"])
COMMITS_DEFERRED = Counter(
    "precast_worker_commits_deferred_total",
    "periodic commits put off because outputs were still in flight after SETTLE_S (2 s)",
)
DECISIONS = Counter("precast_worker_decisions_total", "speculation policy decisions", ["reason"])
COALESCED = Counter(
    "precast_worker_coalesced_total",
    "triggers merged into a prediction already due for the same device",
)
INFERENCES = Counter(
    "precast_worker_inferences_total", "devices scored by the model (speculation's cost)"
)
RENEWALS = Counter(
    "precast_worker_renewals_total",
    "stored answers republished with new validity, certified unchanged without an inference",
)
LEASES = Counter(
    "precast_worker_leases_total",
    "validity leases published (one per partition and interval: quiet answers stay valid)",
)
LEASES_SKIPPED = Counter(
    "precast_worker_leases_skipped_total",
    "lease ticks without a lease: a new generation warming up, or the partition behind",
)
LAPSES = Counter(
    "precast_worker_lease_lapses_total",
    "leased answers published once more without terms: their device stopped sending",
)
UNKNOWN_CATEGORY = Counter(
    "precast_worker_unknown_categories_total",
    "heartbeat values outside a categorical field's vocabulary (read as unknown)",
    ["field"],
)
STATE_FOREIGN = Counter(
    "precast_worker_state_foreign_total",
    "worker-state records written under another fleet spec (skipped; the device starts over)",
)
CONTEXT_FOREIGN = Counter(
    "precast_worker_context_foreign_total",
    "device-context snapshots written under another fleet spec's context (skipped; rebuilt)",
)
LATE = Counter(
    "precast_worker_late_events_total",
    "events older than their device's newest by more than the spec's max_lateness_s",
    ["stream"],
)
PREDICTIONS = Counter("precast_worker_predictions_total", "predictions produced", ["model_version"])
BATCH_SIZE = Histogram(
    "precast_worker_batch_size",
    "devices per inference batch",
    buckets=(1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192),
)
QUEUE_DELAY = Histogram(
    "precast_worker_queue_delay_seconds",
    "wait of a batch's oldest trigger before inference",
    buckets=(0.0005, 0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.25, 0.5, 1, 2.5),
)
INFER_S = Histogram(
    "precast_worker_inference_seconds",
    "model time per batch",
    buckets=(0.0001, 0.0005, 0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.5),
)
LATENCY = Histogram(
    "precast_worker_event_to_prediction_seconds",
    "newest input's event time to the prediction being produced",
    buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30),
)
LAG = Gauge(
    "precast_worker_consumer_lag", "records behind the partition's end", ["topic", "partition"]
)
LINEAGE_TRUNCATED = Counter(
    "precast_worker_lineage_truncated_total",
    "input references left out of a prediction's lineage (cap reached)",
)
TXN = Counter(
    "precast_worker_transactions_total", "exactly-once transactions by outcome", ["outcome"]
)
STAGE_S = Counter(
    "precast_worker_stage_seconds_total",
    "wall time spent per loop stage (where the time goes)",
    ["stage"],
)
STAGES = (
    "consume",
    "decode",
    "policy",
    "features",
    "inference",
    "topk",
    "encode",
    "produce",
    "commit",
)
STAGE = {name: STAGE_S.labels(name) for name in STAGES}  # bound once: one inc() per batch per stage
NO_DATA = Counter(
    "precast_worker_requests_without_data_total",
    "precompute requests for a device the worker had no data for, dropped after waiting for it "
    "(request_wait_s) or to make room (request_wait_max); nothing is published for them",
)
AWAITING = Gauge(
    "precast_worker_requests_awaiting_data",
    "precompute requests held until their device's data arrives (bounded by request_wait_s "
    "and request_wait_max)",
)
RESTORED = Counter(
    "precast_worker_state_restored_devices_total",
    "devices restored from the worker-state changelog on partition assignment",
)
RESTORE_S = Counter(
    "precast_worker_state_restore_seconds_total",
    "time spent restoring worker state on partition assignment",
)
STATE_INVALID = Counter(
    "precast_worker_state_invalid_total",
    "worker-state records skipped on restore (wrong size or version, no key)",
)
PENDING = Gauge(
    "precast_worker_pending_devices", "devices queued or deferred, waiting for a prediction"
)


def observe_many(hist: Histogram, values: np.ndarray, trace_id: str | None = None) -> None:
    """Observe a whole array at once: one bucket count per bucket instead of one Python call
    per value (prometheus_client has no bulk API; this uses its documented bucket layout).
    `trace_id`: the batch's trace, kept as the exemplar of the slowest value's bucket (what an
    SRE clicks on a slow bucket: OpenMetrics, docs/observability.md)."""
    if len(values) == 0:
        return
    bounds = np.asarray(hist._upper_bounds)  # includes +Inf
    where = np.searchsorted(bounds, values, side="left")
    counts = np.bincount(where, minlength=len(bounds))
    for i, c in enumerate(counts.tolist()):
        if c:
            hist._buckets[i].inc(c)
    hist._sum.inc(float(np.sum(values)))
    if trace_id is not None:
        worst = int(np.argmax(values))
        hist._buckets[int(where[worst])].set_exemplar(
            Exemplar({"trace_id": trace_id}, float(values[worst]), time.time())
        )
