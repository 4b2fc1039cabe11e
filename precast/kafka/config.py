"""librdkafka configuration, built once from settings. Each non-obvious default says why."""

from __future__ import annotations

from typing import Any

from precast.settings import KafkaSettings

# Java-client-compatible partitioning. librdkafka's default (`consistent_random`, CRC32) puts
# the same key on a different partition than the Java client, Kafka Streams and aiokafka, which
# silently breaks co-partitioned joins by device ID.
PARTITIONER = "murmur2_random"

PRODUCER_DEFAULTS: dict[str, Any] = {
    "partitioner": PARTITIONER,
    # No duplicates or reordering on retries, and acks from all in-sync replicas.
    "enable.idempotence": True,
    "acks": "all",
    # A few ms of linger lets librdkafka build real batches at 10k+ msg/s without adding
    # visible latency to a ~1 s heartbeat cadence.
    "linger.ms": 5,
    "batch.size": 256 * 1024,
    # lz4: cheap on CPU, good ratio on JSON. Consumers built on aiokafka need cramjam for it.
    "compression.type": "lz4",
    # Bounded memory: when this many records wait, produce() raises BufferError and our
    # wrapper makes the caller wait (backpressure) instead of growing or dropping.
    "queue.buffering.max.messages": 200_000,
    "queue.buffering.max.kbytes": 256 * 1024,
    # Retry for up to two minutes (a broker restart) before a delivery is reported failed.
    "delivery.timeout.ms": 120_000,
    # Only failed deliveries call back into Python: success is known from flush() == 0.
    "delivery.report.only.error": True,
}

CONSUMER_DEFAULTS: dict[str, Any] = {
    "auto.offset.reset": "earliest",
    # Offsets are committed by the application after its outputs are acknowledged.
    "enable.auto.commit": False,
    "enable.auto.offset.store": False,
    # Cooperative rebalancing keeps unaffected partitions flowing while a member joins/leaves.
    "partition.assignment.strategy": "cooperative-sticky",
    # Detect a dead member in ~6 s instead of 45 s, so its partitions move quickly.
    "session.timeout.ms": 6_000,
    "heartbeat.interval.ms": 1_500,
    # Fetch in large chunks; the worker consumes in batches anyway.
    "fetch.min.bytes": 1,
    "fetch.wait.max.ms": 50,
    "queued.max.messages.kbytes": 64 * 1024,
    "enable.partition.eof": False,
}


def producer_config(settings: KafkaSettings, **overrides: Any) -> dict[str, Any]:
    conf = {**PRODUCER_DEFAULTS, **settings.client_config(), **overrides}
    # settings.extra is the user's last word, even over per-component overrides.
    conf.update(settings.extra)
    return conf


def consumer_config(settings: KafkaSettings, group_id: str, **overrides: Any) -> dict[str, Any]:
    conf = {**CONSUMER_DEFAULTS, **settings.client_config(), "group.id": group_id, **overrides}
    conf.update(settings.extra)
    return conf


def admin_config(settings: KafkaSettings, **overrides: Any) -> dict[str, Any]:
    conf = {**settings.client_config(), **overrides}
    conf.update(settings.extra)
    return conf
