"""`precast shadow --truth outcomes`: the range's resolved work orders as the truth both models
are scored against. A work order opened in the range and resolved before now says which
strategy was right for its device between its open and its resolution; predictions of that
device in that window are scored against it (the pairing is `precast dataset build`'s first
pass, precast.fleet.outcomes)."""

from __future__ import annotations

import json
from pathlib import Path

from opsctl.toolkit.ranges import TimeRange, resolve_times
from opsctl.toolkit.reader import RangeReader, range_consumer
from precast.errors import ConfigError
from precast.fleet import Fleet
from precast.fleet.outcomes import PartitionRows, Window
from precast.kafka import Admin
from precast.settings import KafkaSettings
from schemas.topics import Topics


def write_truth(
    kafka: KafkaSettings,
    admin: Admin,
    fleet: Fleet,
    topics: Topics,
    tr: TimeRange,
    until_ms: int,
    path: Path,
) -> int:
    """Write the truth file for opens in `tr` resolved before `until_ms`; returns how many
    resolved work orders it holds."""
    if fleet.spec.outcomes is None:
        raise ConfigError(
            f"--truth outcomes: fleet spec {fleet.name!r} declares no [outcomes] "
            "(docs/fleets.md, Outcomes)"
        )
    rows = PartitionRows(fleet, Window(tr.start_ms, tr.end_ms, until_ms, 0, 0))
    topic = getattr(topics, rows.outcome_role).name
    n = admin.topic_partitions().get(topic)
    if n is None:
        raise ConfigError(f"unknown topic {topic!r} (PRECAST_TOPICS__PREFIX)")
    c = range_consumer(kafka, "shadow-outcomes")
    try:
        ranges = resolve_times(c, topic, n, TimeRange(tr.start_ms, until_ms))
        for batch in RangeReader(c, topic, [r for r in ranges if r.size]):
            rows.outcomes(batch)
    finally:
        c.close()
    labels = rows.plan()
    windows: dict[str, list[list[object]]] = {}
    for lab in labels:
        windows.setdefault(lab.device_id, []).append([lab.label, lab.opened_ms, lab.resolved_ms])
    path.parent.mkdir(parents=True, exist_ok=True)
    doc = {"windows": windows, "dropped": dict(rows.dropped), "rejected": dict(rows.rejected)}
    path.write_text(json.dumps(doc))
    return len(labels)
