"""Where Kafka places a consumer group: its coordinator, found the way the broker finds it (Java's
String.hashCode of the group ID over __consumer_offsets' partitions), so a fault benchmark can
pick a group whose coordinator is the broker it kills."""

from __future__ import annotations

import time


def java_hash(s: str) -> int:
    """Java's String.hashCode (UTF-16 code units), as a signed 32-bit int."""
    h = 0
    data = s.encode("utf-16-be")
    for i in range(0, len(data), 2):
        h = (31 * h + int.from_bytes(data[i : i + 2], "big")) & 0xFFFFFFFF
    return h - (1 << 32) if h & 0x80000000 else h


def _offsets_partitions(settings, admin) -> list:
    """__consumer_offsets' partitions once each has a leader. A fresh cluster creates the topic
    on the first FindCoordinator, here a consumer's committed() (not the admin client's
    DescribeConsumerGroups: librdkafka 2.x aborts the process when a connection under such a
    coordinator request drops, confluentinc/librdkafka#4605)."""
    from precast.kafka import Consumer, TopicPartitionOffset

    deadline = time.monotonic() + 60
    while True:
        try:
            parts = admin.partition_replicas("__consumer_offsets")
        except KeyError:
            parts = []
        if parts and all(p.leader >= 0 for p in parts):
            return parts
        if not parts:
            c = Consumer(settings, f"bench-coord-{time.monotonic_ns()}")
            try:
                c.committed([TopicPartitionOffset("__consumer_offsets", 0, 0)], timeout=5)
            except Exception:  # noqa: BLE001 - only to make the broker create the topic
                pass
            finally:
                c.close()
        if time.monotonic() > deadline:
            raise TimeoutError("__consumer_offsets has no leaders after 60 s")
        time.sleep(0.5)


def group_coordinator(settings, admin, group: str) -> int:
    """The node coordinating `group`: Kafka places a group on the __consumer_offsets partition
    `abs(hashCode) % partitions` (Utils.abs masks the sign bit), led by its coordinator."""
    return _coordinator(_offsets_partitions(settings, admin), group)


def _coordinator(parts: list, group: str) -> int:
    return parts[(java_hash(group) & 0x7FFFFFFF) % len(parts)].leader


def group_led_by(settings, admin, stem: str, node: int) -> str:
    """A group ID whose coordinator is `node`, to make a leader kill take the workers' group
    coordinator down with it."""
    parts = _offsets_partitions(settings, admin)
    for i in range(10_000):
        if _coordinator(parts, f"{stem}.{i}") == node:
            return f"{stem}.{i}"
    raise RuntimeError(f"no group led by node {node} among 10,000 names")
