"""Checks before an SRE command writes anything: the topics exist, and a replay does not pour
old records into a topic that live consumers read unless the operator says so. Live readers
are the consumer groups that hold the topic now and the assign-based readers (API
materializer, board feed, auditor) whose presence records are fresh (precast.presence)."""

from __future__ import annotations

import time

from precast.errors import ConfigError
from precast.kafka import Admin
from precast.presence import Reader, live
from precast.settings import TopicSettings


class LiveTargetRefused(ConfigError):
    """Writing into a live input topic needs `--allow-live-target`."""


_NOT_INPUTS = ("dead_letters", "shadow_predictions")


def partitions_of(admin: Admin, topic: str, where: str, hint: str = "") -> int:
    n = admin.topic_partitions().get(topic)
    if n is None:
        raise ConfigError(f"unknown topic {topic!r} on {where}{hint}")
    return n


def input_role(topics: TopicSettings, topic: str) -> str | None:
    """The catalog role of `topic` when a precast component consumes it (dead letters are
    read only by these tools, shadow predictions only by people: neither is an input)."""
    spec = topics.catalog().by_name(topic)
    return None if spec is None or spec.role in _NOT_INPUTS else spec.role


def refuse_live_target(admin: Admin, topics: TopicSettings, topic: str) -> None:
    """Raise `LiveTargetRefused` when `topic` is a pipeline input or a consumer group holds it."""
    reasons = []
    role = input_role(topics, topic)
    if role:
        reasons.append(f"it is the {role} topic of this deployment (prefix {topics.prefix!r})")
    # every group it may see, not only this deployment's: any reader of the topic counts
    groups = [g.group_id for g in admin.consumer_groups(every=True) if g.consumes(topic)]
    if groups:
        reasons.append(f"consumer group(s) {', '.join(groups)} read it now")
    readers = [r for r in present_readers(admin, topics) if topic in r.reads]
    if readers:
        names = ", ".join(sorted(r.instance for r in readers)[:5])
        reasons.append(f"{len(readers)} assign-based reader(s) read it now ({names})")
    if reasons:
        raise LiveTargetRefused(
            f"refusing to write into live input topic {topic!r}: {'; '.join(reasons)} "
            f"(pass --allow-live-target to do it anyway)"
        )


def present_readers(admin: Admin, topics: TopicSettings) -> list[Reader]:
    """The assign-based readers alive now, from the compacted presence topic (none when the
    deployment has no presence topic yet)."""
    from opsctl.toolkit.ranges import OffsetRange
    from opsctl.toolkit.reader import RangeReader, range_consumer

    name = topics.catalog().presence.name
    parts = admin.topic_partitions().get(name)
    if not parts:
        return []
    ends = admin.end_offsets([(name, p) for p in range(parts)])
    c = range_consumer(admin.settings, "presence")
    records: list[tuple[bytes | None, bytes | None]] = []
    try:
        ranges = [OffsetRange(p, 0, ends[(name, p)]) for p in range(parts)]
        for msgs in RangeReader(c, name, ranges):
            records += [(m.key(), m.value()) for m in msgs]
    finally:
        c.close()
    return live(records, int(time.time() * 1000))
