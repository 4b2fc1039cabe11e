"""Device event contracts: heartbeats, work orders and alarms, each in a common envelope.

Wire format: one JSON object per Kafka record (orjson), key = device ID (UTF-8). Times are
integer milliseconds since the Unix epoch (UTC).
"""

from __future__ import annotations

import math
from typing import Annotated, Any, Literal

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, StringConstraints

SCHEMA_VERSION = 1
SUPPORTED_SCHEMA_VERSIONS = frozenset({SCHEMA_VERSION})

# ASCII only: device IDs end up in Kafka keys, Redis keys, URLs and log lines.
DEVICE_ID_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9._:\-]{0,127}$"
DeviceId = Annotated[str, StringConstraints(pattern=DEVICE_ID_PATTERN)]
EventId = Annotated[str, StringConstraints(min_length=1, max_length=64, pattern=r"^[A-Za-z0-9._:\-]+$")]

# 2015-01-01 .. 2100-01-01: anything outside is a clock or encoding bug, not an event.
MIN_TIME_MS = 1_420_070_400_000
MAX_TIME_MS = 4_102_444_800_000
EpochMs = Annotated[int, Field(ge=MIN_TIME_MS, le=MAX_TIME_MS)]


def _finite(v: float) -> float:
    if not math.isfinite(v):
        raise ValueError("must be a finite number")
    return v


Finite = Annotated[float, AfterValidator(_finite)]


class Envelope(BaseModel):
    """Fields every event carries. `event_id` is unique per event (de-duplication key)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    schema_version: Literal[1] = SCHEMA_VERSION
    event_id: EventId
    device_id: DeviceId
    event_time_ms: EpochMs
    produced_at_ms: EpochMs


class HeartbeatMetrics(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    cpu_pct: Annotated[Finite, Field(ge=0, le=100)]
    mem_pct: Annotated[Finite, Field(ge=0, le=100)]
    temperature_c: Annotated[Finite, Field(ge=-80, le=250)]
    error_rate: Annotated[Finite, Field(ge=0, le=1)]
    signal_quality: Annotated[Finite, Field(ge=0, le=1)]
    uptime_s: Annotated[Finite, Field(ge=0)]


class Heartbeat(Envelope):
    kind: Literal["heartbeat"] = "heartbeat"
    device_type: Annotated[str, StringConstraints(min_length=1, max_length=64)]
    firmware: Annotated[str, StringConstraints(min_length=1, max_length=64)]
    metrics: HeartbeatMetrics
    meta: dict[str, Any] = Field(default_factory=dict)


WorkOrderStatus = Literal["opened", "updated", "closed"]
Priority = Literal["low", "medium", "high", "critical"]


class WorkOrderEvent(Envelope):
    kind: Literal["work_order"] = "work_order"
    work_order_id: EventId
    status: WorkOrderStatus
    priority: Priority
    category: Annotated[str, StringConstraints(min_length=1, max_length=64)]


Severity = Literal["info", "warning", "major", "critical"]


class Alarm(Envelope):
    kind: Literal["alarm"] = "alarm"
    alarm_id: EventId
    severity: Severity
    code: Annotated[str, StringConstraints(min_length=1, max_length=64)]
    cleared: bool = False


DeviceEvent = Heartbeat | WorkOrderEvent | Alarm
