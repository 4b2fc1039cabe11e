"""The auditor's Prometheus metrics."""

from __future__ import annotations

from prometheus_client import Counter, Gauge, Histogram

LEAVES = Counter("precast_audit_leaves_total", "leaves appended to the audit log", ["kind"])
TREE_SIZE = Gauge("precast_audit_tree_size", "leaves in the audit log")
CHECKPOINTS = Counter("precast_audit_checkpoints_total", "signed checkpoints published")
LAST_CHECKPOINT = Gauge(
    "precast_audit_last_checkpoint_timestamp_seconds", "when the newest checkpoint was published"
)
CHECKPOINT_LAG = Histogram(
    "precast_audit_checkpoint_lag_seconds",
    "from a record's Kafka timestamp to the first signed checkpoint that covers it "
    "(oldest record of each batch)",
    buckets=(0.1, 0.25, 0.5, 1, 1.5, 2, 3, 5, 10, 30, 60),
)
APPEND_SECONDS = Histogram(
    "precast_audit_append_seconds",
    "time to encode, hash and store one batch of leaves",
    buckets=(0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1),
)
