"""Topic contracts: every topic precast reads or writes, with its partitioning and retention.

Names are built from a deployment prefix; the partition count is one number for every
device-keyed topic so that a device's heartbeats, work orders, alarms, context, precompute
requests and predictions all live on the same partition index (co-partitioning).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Literal

HOUR_MS = 3_600_000
DAY_MS = 24 * HOUR_MS


CleanupPolicy = Literal["delete", "compact"]


@dataclass(frozen=True)
class TopicSpec:
    role: str
    name: str
    partitions: int
    replication_factor: int
    cleanup_policy: CleanupPolicy
    keyed_by_device: bool
    description: str
    config: Mapping[str, str] = field(default_factory=lambda: MappingProxyType({}))


# role -> (suffix, cleanup, retention ms or None, keyed by device, description, extra config)
_CATALOG: dict[str, tuple[str, CleanupPolicy, int | None, bool, str, dict[str, str]]] = {
    "heartbeats": (
        "heartbeats",
        "delete",
        DAY_MS,
        True,
        "device heartbeats (metrics), ~1/s per device",
        {},
    ),
    "work_orders": (
        "work-orders",
        "delete",
        7 * DAY_MS,
        True,
        "work-order lifecycle events (opened/updated/closed)",
        {},
    ),
    "alarms": ("alarms", "delete", 7 * DAY_MS, True, "device alarms raised and cleared", {}),
    "device_context": (
        "device-context",
        "compact",
        None,
        True,
        "latest per-device context (open work orders, recent alarms)",
        {},
    ),
    "precompute_requests": (
        "precompute-requests",
        "delete",
        HOUR_MS,
        True,
        "asks the workers to (re)compute a device: API miss, prefetch, backfill",
        {},
    ),
    "predictions": (
        "predictions",
        "compact",
        None,
        True,
        "newest PredictionSet per device; compacted so a rebuild reads one per key",
        # Small segments and a short lag make compaction keep up with a hot topic,
        # which keeps the serving store's rebuild bounded by the device count.
        {
            "segment.ms": str(HOUR_MS),
            "min.cleanable.dirty.ratio": "0.2",
            "delete.retention.ms": str(DAY_MS),
        },
    ),
    "read_hints": (
        "read-hints",
        "delete",
        HOUR_MS,
        True,
        "devices somebody reads or watches, from the read API to the workers (speculation)",
        {},
    ),
    "shadow_predictions": (
        "shadow-predictions",
        "delete",
        7 * DAY_MS,
        True,
        "a candidate model's PredictionSets from `precast shadow`; never served, never materialized",
        {},
    ),
    "worker_state": (
        "worker-state",
        "compact",
        None,
        True,
        "per-device worker state (newest heartbeat, last prediction's order key and validity); "
        "the changelog a worker restores a partition from before it processes it",
        # Restore reads the whole partition on every assignment: compact eagerly so it stays
        # about one record per device.
        {
            "segment.ms": str(HOUR_MS),
            "min.cleanable.dirty.ratio": "0.2",
            "delete.retention.ms": str(DAY_MS),
        },
    ),
    "dead_letters": (
        "dead-letters",
        "delete",
        14 * DAY_MS,
        False,
        "records any component rejected, with original bytes and the reason",
        {},
    ),
    "audit_checkpoints": (
        "audit-checkpoints",
        "compact",
        None,
        False,
        "signed checkpoints of the predictions audit log, keyed by log origin (newest kept)",
        {},
    ),
    "presence": (
        "presence",
        "compact",
        None,
        False,
        "readers that assign partitions instead of joining a group (API materializer and board "
        "feed, auditor) say every few seconds which topics they read; the live-target guard "
        "reads it",
        {"segment.ms": str(HOUR_MS), "min.cleanable.dirty.ratio": "0.2"},
    ),
}

EVENT_ROLES = ("heartbeats", "work_orders", "alarms")


@dataclass(frozen=True)
class Topics:
    """The topic catalog for one deployment. Iterate it to get every `TopicSpec`."""

    heartbeats: TopicSpec
    work_orders: TopicSpec
    alarms: TopicSpec
    device_context: TopicSpec
    precompute_requests: TopicSpec
    predictions: TopicSpec
    read_hints: TopicSpec
    shadow_predictions: TopicSpec
    worker_state: TopicSpec
    dead_letters: TopicSpec
    audit_checkpoints: TopicSpec
    presence: TopicSpec

    def __iter__(self) -> Iterator[TopicSpec]:
        return iter(getattr(self, role) for role in _CATALOG)

    def events(self) -> list[TopicSpec]:
        return [getattr(self, role) for role in EVENT_ROLES]

    def by_name(self, name: str) -> TopicSpec | None:
        return next((t for t in self if t.name == name), None)


def catalog(prefix: str = "precast.", partitions: int = 6, replication_factor: int = 1) -> Topics:
    specs = {}
    for role, (suffix, cleanup, retention, by_device, desc, extra) in _CATALOG.items():
        config = {"cleanup.policy": cleanup, **extra}
        if retention is not None:
            config["retention.ms"] = str(retention)
        if replication_factor > 1:
            config["min.insync.replicas"] = str(min(2, replication_factor))
        specs[role] = TopicSpec(
            role=role,
            name=f"{prefix}{suffix}",
            partitions=partitions,
            replication_factor=replication_factor,
            cleanup_policy=cleanup,
            keyed_by_device=by_device,
            description=desc,
            config=MappingProxyType(config),
        )
    return Topics(**specs)
