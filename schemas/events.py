"""What every device event shares, whatever the fleet: identifiers, times, size limits.

Wire format: one JSON object per Kafka record (orjson), key = device ID (UTF-8); normalized
times are integer milliseconds since the Unix epoch (UTC). Each fleet's streams, fields and wire
paths come from its fleet spec (`schemas.spec`, docs/fleets.md); how a record is read and judged
lives in `schemas.wire` and `schemas.validation`. Compatibility policy: docs/events.md.
"""

from __future__ import annotations

import re
from typing import Annotated, Final

from pydantic import Field, StringConstraints

SCHEMA_VERSION: Final = 1
# Consumers accept the current and the previous version (docs/events.md); v1 has no predecessor.
SUPPORTED_SCHEMA_VERSIONS = frozenset(v for v in (SCHEMA_VERSION - 1, SCHEMA_VERSION) if v >= 1)

# Largest encoded event a consumer accepts. A heartbeat is ~0.5 KiB; anything near this is a
# bug or an attack, and refusing it early bounds the memory and CPU one record can cost.
MAX_EVENT_BYTES = 32 * 1024

# ASCII only: device IDs end up in Kafka keys, Redis keys, URLs and log lines.
DEVICE_ID_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9._:\-]{0,127}$"
DeviceId = Annotated[str, StringConstraints(pattern=DEVICE_ID_PATTERN)]
_DEVICE_ID = re.compile(DEVICE_ID_PATTERN)
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


def is_device_id(value: object) -> bool:
    """Whether `value` is a device ID: the one check every reader and endpoint uses."""
    return isinstance(value, str) and _DEVICE_ID.fullmatch(value) is not None
