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


_LINEAGE = '{"topic":"%s","partition":%d,"offset":%d,"event_id":%s,"trace_id":%s}'


def _q(text: str | None) -> str:
    # IDs reaching here passed the contracts' patterns ([A-Za-z0-9._:-]), hex trace ids too:
    # nothing to escape. (Labels and the model version come from a manifest: orjson-quoted.)
    return "null" if text is None else f'"{text}"'


def lineage(refs: Sequence[tuple[KafkaMessage, str | None]]) -> str:
    """The lineage list as JSON text."""
    return "[" + ",".join([_LINEAGE % (m.topic(), m.partition(), m.offset(), _q(eid), _q(trace_id(m)))
                           for m, eid in refs]) + "]"


@dataclass
class Encoded:
    keys: list[bytes]
    values: list[bytes]


def _template(labels: Sequence[str], version: str, k: int) -> tuple[str, list[str]]:
    """printf-style PredictionSet template for k candidates (built per batch: cheap, and a
    swapped model brings its own labels and version)."""
    cand = '{"strategy":%s,"score":%r}'
    head = '{"schema_version":1,"device_id":"%s","candidates":[' + ",".join([cand] * k) + "]"
    tail = (',"model_version":' + orjson.dumps(version).decode() + ',"computed_at_ms":%d,"valid_until_ms":%d,'
            '"produced_at_ms":%d,"trigger":"%s","lineage":%s,"backfill":%s,"inference_ms":%d}')
    return head + tail, [orjson.dumps(lab).decode() for lab in labels]


def encode(items: Sequence[Pending], idx: np.ndarray, scores: np.ndarray, labels: Sequence[str], version: str,
           computed_at: np.ndarray, horizon_ms: int, produced_at_ms: int, backfill: bool,
           inference_ms: int = 0) -> Encoded:
    """One PredictionSet per item, as JSON bytes keyed by device ID."""
    if not np.isfinite(scores).all():
        raise ValueError("model returned non-finite scores")
    tmpl, quoted = _template(labels, version, idx.shape[1])
    sc = np.round(scores.astype(np.float64), 6).tolist()
    comp = computed_at.tolist()
    keys, values = [], []
    for j, (it, row, srow) in enumerate(zip(items, idx.tolist(), sc, strict=True)):
        cands = [x for pair in zip([quoted[c] for c in row], srow, strict=True) for x in pair]
        bf = backfill or it.reason == Reason.BACKFILL
        keys.append(it.device.encode())
        values.append((tmpl % (it.device, *cands, comp[j], comp[j] + horizon_ms, produced_at_ms,
                               "backfill" if backfill else TRIGGER[it.reason], lineage(it.refs),
                               "true" if bf else "false", inference_ms)).encode())
    return Encoded(keys, values)
