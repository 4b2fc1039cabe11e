"""The served model's Prometheus metrics: which version serves since when, and its failures.
The registry sets them on load and swap; the worker loop counts failed inference calls."""

from __future__ import annotations

from prometheus_client import Counter, Gauge, Histogram

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
MODEL_INFERENCE = Histogram(
    "precast_worker_model_inference_seconds",
    "the model's own time per inference batch (the session's run), by model version: its p99 "
    "and p99.9 per version, apart from features and encoding",
    ["model_version"],
    buckets=(
        0.00005,
        0.0001,
        0.00025,
        0.0005,
        0.001,
        0.0025,
        0.005,
        0.01,
        0.025,
        0.05,
        0.1,
        0.25,
        0.5,
        1.0,
        2.5,
    ),
)
MODEL_MEMORY = Gauge(
    "precast_worker_model_memory_bytes",
    "resident memory the model's session added at load (graph, arena, warm-up)",
    ["model_version"],
)
