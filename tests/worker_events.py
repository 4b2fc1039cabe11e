"""Event dicts and records for worker tests (canonical wire form of schemas.events)."""

from __future__ import annotations

import itertools

import orjson

from precast.kafka import Record
from schemas.predictions import PredictionSet

_ids = itertools.count()
T0 = 1_700_000_000_000  # in the past: a worker dead-letters events from the future


def _envelope(kind: str, device: str, t: int) -> dict:
    return {
        "schema_version": 1,
        "event_id": f"e{next(_ids)}",
        "kind": kind,
        "device_id": device,
        "event_time_ms": t,
        "produced_at_ms": t,
    }


def heartbeat(device: str, t: int = T0, **metrics: float) -> dict:
    m = {
        "cpu_pct": 30.0,
        "mem_pct": 40.0,
        "temperature_c": 45.0,
        "error_rate": 0.01,
        "signal_quality": 0.9,
        "uptime_s": 36_000.0,
    }
    m.update(metrics)
    return {
        **_envelope("heartbeat", device, t),
        "device_type": "gateway",
        "firmware": "2.5.0",
        "metrics": m,
        "meta": {},
    }


def work_order(
    device: str, t: int = T0, wo: str = "wo-1", status: str = "opened", priority: str = "high"
) -> dict:
    return {
        **_envelope("work_order", device, t),
        "work_order_id": wo,
        "status": status,
        "priority": priority,
        "category": "repair",
    }


def alarm(
    device: str,
    t: int = T0,
    alarm_id: str = "al-1",
    severity: str = "critical",
    cleared: bool = False,
) -> dict:
    return {
        **_envelope("alarm", device, t),
        "alarm_id": alarm_id,
        "severity": severity,
        "code": "E42",
        "cleared": cleared,
    }


def request(device: str, t: int = T0, reason: str = "api_miss") -> dict:
    return {
        "schema_version": 1,
        "request_id": f"r{next(_ids)}",
        "device_id": device,
        "reason": reason,
        "requested_at_ms": t,
    }


def record(
    topic: str,
    event: dict,
    offset: int,
    partition: int = 0,
    key: bytes | None = None,
    value: bytes | None = None,
) -> Record:
    return Record(
        topic,
        partition,
        offset,
        event["device_id"].encode() if key is None else key,
        orjson.dumps(event) if value is None else value,
        [("traceparent", b"00-" + b"a" * 32 + b"-" + b"b" * 16 + b"-01")],
    )


def flush(pipeline, model, now_ms: int = T0) -> list[PredictionSet]:
    """Predict everything waiting in a pipeline's batcher, as a forced drain does."""
    out = []
    while True:
        items, _ = pipeline.next_batch(0.0, force=True)
        if not items:
            return out
        r = pipeline.compute(items, model, now_ms)
        pipeline.mark_predicted(r, now_ms)
        out += [PredictionSet.model_validate_json(v) for v in r.out.values]
