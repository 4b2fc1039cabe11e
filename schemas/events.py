"""Device event contracts: heartbeats, work orders and alarms, each in a common envelope.

Wire format: one JSON object per Kafka record (orjson), key = device ID (UTF-8). Times are
integer milliseconds since the Unix epoch (UTC). These models are the *normalized* form; what
devices may send on the wire (metadata layouts, numbers as strings, unknown fields) and how it
is normalized lives in `schemas.validation`. Compatibility policy: docs/events.md.
"""

from __future__ import annotations

from typing import Annotated, Final, Literal

from pydantic import BaseModel, ConfigDict, Field, StringConstraints, model_validator

SCHEMA_VERSION: Final = 1
# Consumers accept the current and the previous version (docs/events.md); v1 has no predecessor.
SUPPORTED_SCHEMA_VERSIONS = frozenset(v for v in (SCHEMA_VERSION - 1, SCHEMA_VERSION) if v >= 1)

# Largest encoded event a consumer accepts. A heartbeat is ~0.5 KiB; anything near this is a
# bug or an attack, and refusing it early bounds the memory and CPU one record can cost.
MAX_EVENT_BYTES = 32 * 1024

# ASCII only: device IDs end up in Kafka keys, Redis keys, URLs and log lines.
DEVICE_ID_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9._:\-]{0,127}$"
DeviceId = Annotated[str, StringConstraints(pattern=DEVICE_ID_PATTERN)]
EVENT_ID_PATTERN = r"^[A-Za-z0-9._:\-]{1,64}$"
EventId = Annotated[str, StringConstraints(min_length=1, max_length=64, pattern=EVENT_ID_PATTERN)]

# 2015-01-01 .. 2100-01-01: anything outside is a clock or encoding bug, not an event.
MIN_TIME_MS = 1_420_070_400_000
MAX_TIME_MS = 4_102_444_800_000
EpochMs = Annotated[int, Field(ge=MIN_TIME_MS, le=MAX_TIME_MS)]
# A device may not claim an event happened after it was produced by more than this (clock skew).
MAX_CLOCK_SKEW_MS = 5 * 60_000
# How far a device's event time may run ahead of a clock precast trusts (the consuming worker's,
# NTP-synced like the brokers'). Both times above come from the device, so the check above cannot
# catch a device clock running ahead; beyond this, the worker dead-letters the event
# (`future_event_time`) and a serving store refuses a prediction computed that far ahead. It
# bounds how long a wrong clock can freeze a device's answer: at most this long.
MAX_AHEAD_MS = 5_000


# NaN and Infinity are never valid numbers in an event (and not JSON either).
Finite = Annotated[float, Field(allow_inf_nan=False)]


class Envelope(BaseModel):
    """Fields every event carries. `event_id` is unique per event (de-duplication key)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    schema_version: Literal[1] = SCHEMA_VERSION
    event_id: EventId
    device_id: DeviceId
    event_time_ms: EpochMs
    produced_at_ms: EpochMs

    @model_validator(mode="after")
    def _time_is_sane(self) -> Envelope:
        if self.event_time_ms > self.produced_at_ms + MAX_CLOCK_SKEW_MS:
            raise ValueError(
                "event_time_ms is later than produced_at_ms by more than the allowed clock skew"
            )
        return self


# Finite floats within [lo, hi]: one constraint set each, so JSON Schema shows min/max.
Percent = Annotated[float, Field(ge=0, le=100, allow_inf_nan=False)]
Share = Annotated[float, Field(ge=0, le=1, allow_inf_nan=False)]
Celsius = Annotated[float, Field(ge=-80, le=250, allow_inf_nan=False)]
NonNegative = Annotated[float, Field(ge=0, allow_inf_nan=False)]


class HeartbeatMetrics(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    cpu_pct: Percent
    mem_pct: Percent
    temperature_c: Celsius
    error_rate: Share
    signal_quality: Share
    uptime_s: NonNegative


ShortText = Annotated[str, StringConstraints(min_length=1, max_length=64)]


class DeviceInfo(BaseModel):
    """Device metadata, normalized. On the wire it arrives as `meta.info` (canonical), flat
    under `meta`, or under a version key (`meta.info.v2`); see `schemas.validation`."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    site: ShortText | None = None
    hw_model: ShortText | None = None
    hw_rev: Annotated[int, Field(ge=0, le=10_000)] | None = None
    serial: ShortText | None = None


class Heartbeat(Envelope):
    kind: Literal["heartbeat"] = "heartbeat"
    device_type: ShortText
    firmware: ShortText
    metrics: HeartbeatMetrics
    meta: DeviceInfo = DeviceInfo()


WorkOrderStatus = Literal["opened", "updated", "closed"]
Priority = Literal["low", "medium", "high", "critical"]


class WorkOrderEvent(Envelope):
    kind: Literal["work_order"] = "work_order"
    work_order_id: EventId
    status: WorkOrderStatus
    priority: Priority
    category: ShortText


Severity = Literal["info", "warning", "major", "critical"]


class Alarm(Envelope):
    kind: Literal["alarm"] = "alarm"
    alarm_id: EventId
    severity: Severity
    code: ShortText
    cleared: bool = False


DeviceEvent = Heartbeat | WorkOrderEvent | Alarm

# The contract of each event topic, by topic role (schemas.topics).
EVENT_MODELS: dict[str, type[Heartbeat] | type[WorkOrderEvent] | type[Alarm]] = {
    "heartbeats": Heartbeat,
    "work_orders": WorkOrderEvent,
    "alarms": Alarm,
}
