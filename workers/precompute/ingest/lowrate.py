"""The worker's low-rate inputs beside heartbeats: precompute requests (the contract validator)
and read hints (schemas.hints.ReadHint), each record judged alone; what no decoder expects ends
at the reader's guard (precast.guard) instead of stopping the loop."""

from __future__ import annotations

from collections.abc import Sequence

from pydantic import ValidationError

from precast.guard import Guard
from precast.hygiene import printable
from precast.kafka import KafkaMessage
from schemas.deadletters import Reason
from schemas.hints import ReadHint
from schemas.predictions import PrecomputeRequest
from schemas.validation import validate_event
from workers.precompute.ingest.decode import Reject


def decode_requests(
    msgs: Sequence[KafkaMessage], reject: Reject, guard: Guard | None = None
) -> list[tuple[KafkaMessage, PrecomputeRequest]]:
    """Valid precompute requests; the rest go to `reject`, or, for what the validator did not
    expect, to `guard` (the reader's boundary; without one, the exception propagates)."""
    out = []
    for m in msgs:
        try:
            result = validate_event("precompute_requests", m.key(), m.value(), m.headers())
        except Exception as exc:
            if guard is None:
                raise
            guard.reject(exc, m)
            continue
        if result.ok:
            out.append((m, result.event))
        else:
            reject(m, result.reason, result.detail)
    return out


def decode_hints(
    msgs: Sequence[KafkaMessage], reject: Reject, guard: Guard | None = None
) -> list[tuple[KafkaMessage, str, int]]:
    """(record, device, hot until ms) of each valid read hint (schemas.hints.ReadHint); the
    others to `reject`, or to `guard` as in `decode_requests`."""
    out = []
    for m in msgs:
        try:
            hint = _hint(m, reject)
        except Exception as exc:
            if guard is None:
                raise
            guard.reject(exc, m)
            continue
        if hint is not None:
            out.append(hint)
    return out


def _hint(m: KafkaMessage, reject: Reject) -> tuple[KafkaMessage, str, int] | None:
    key, value = m.key(), m.value()
    if not key:
        reject(m, Reason.MISSING_KEY, "read hint without a key")
        return None
    try:
        h = ReadHint.model_validate_json(value or b"")
    except ValidationError as exc:
        first = exc.errors()[0]
        reason = Reason.NOT_JSON if first["type"] == "json_invalid" else Reason.INVALID
        where = printable(".".join(str(p) for p in first["loc"]) or "record", 80)
        reject(m, reason, f"read hint: {where}: {printable(first['msg'], 200)}")
        return None
    if key.decode(errors="replace") != h.device_id:
        reject(m, Reason.KEY_MISMATCH, "read hint key differs from its device_id")
        return None
    return m, h.device_id, h.hot_until_ms
