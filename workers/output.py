"""PredictionSet records (schemas.predictions) for one batch, with lineage back to the inputs."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np
import orjson

from precast.kafka import KafkaMessage
from workers.decode import trace_id
from workers.policy import TRIGGER, Reason

# Longest lineage list kept per prediction (newest inputs win); a device that sent more
# triggers than this while waiting is counted in precast_worker_lineage_truncated_total.
LINEAGE_MAX = 64


@dataclass(slots=True)
class Pending:
    """A device waiting for a prediction: why, and every input record it answers."""

    device: str
    partition: int
    reason: Reason
    refs: list[tuple[KafkaMessage, str | None]] = field(default_factory=list)  # (record, event_id)
    requested_at_ms: int = 0  # newest precompute request, for a device with no data at all
    truncated: int = 0


def merge(old: Pending, new: Pending) -> Pending:
    """Two triggers for one device become one prediction that answers both."""
    if new.reason > old.reason:  # requests > work orders/alarms > heartbeats
        old.reason = new.reason
    old.refs.extend(new.refs)
    if len(old.refs) > LINEAGE_MAX:
        old.truncated += len(old.refs) - LINEAGE_MAX
        del old.refs[: len(old.refs) - LINEAGE_MAX]
    old.requested_at_ms = max(old.requested_at_ms, new.requested_at_ms)
    old.truncated += new.truncated
    return old


def lineage(refs: Sequence[tuple[KafkaMessage, str | None]]) -> list[dict]:
    return [{"topic": m.topic(), "partition": m.partition(), "offset": m.offset(), "event_id": eid,
             "trace_id": trace_id(m)} for m, eid in refs]


@dataclass
class Encoded:
    keys: list[bytes]
    values: list[bytes]


def encode(items: Sequence[Pending], idx: np.ndarray, scores: np.ndarray, labels: Sequence[str], version: str,
           computed_at: np.ndarray, horizon_ms: int, produced_at_ms: int, backfill: bool) -> Encoded:
    """One PredictionSet per item, as JSON bytes keyed by device ID."""
    names = [[labels[c] for c in row] for row in idx.tolist()]
    sc = np.round(scores.astype(np.float64), 6).tolist()
    comp = computed_at.tolist()
    keys, values = [], []
    dumps = orjson.dumps
    for j, it in enumerate(items):
        keys.append(it.device.encode())
        values.append(dumps({
            "schema_version": 1,
            "device_id": it.device,
            "candidates": [{"strategy": s, "score": v} for s, v in zip(names[j], sc[j], strict=True)],
            "model_version": version,
            "computed_at_ms": comp[j],
            "valid_until_ms": comp[j] + horizon_ms,
            "produced_at_ms": produced_at_ms,
            "trigger": "backfill" if backfill else TRIGGER[it.reason],
            "lineage": lineage(it.refs),
            "backfill": backfill or it.reason == Reason.BACKFILL,
        }))
    return Encoded(keys, values)
