"""The served model's Prometheus metrics: which version serves since when, and its failures.
The registry sets them on load and swap; the worker loop counts failed inference calls."""

from __future__ import annotations

from prometheus_client import Counter, Gauge

MODEL_FAILURES = Counter(
    "precast_worker_model_failures_total", "inference calls that raised", ["model_version"]
)
MODEL_VERSION = Gauge(
    "precast_worker_model_info", "the model version in use (value 1)", ["model_version"]
)
MODEL_SINCE = Gauge(
    "precast_worker_model_since_timestamp_seconds",
    "when this worker started serving the model version in use (load or hot swap)",
    ["model_version"],
)
