"""The one feature function. Training (`workers.training.train`) and serving (the worker loop) both call
`build_features`, so a model never sees features computed two different ways."""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from schemas.fleet import DEVICE_TYPES

FEATURE_NAMES: tuple[str, ...] = (
    "cpu_pct",
    "mem_pct",
    "temperature_c",
    "error_rate",
    "signal_quality",
    "log_uptime_h",
    "firmware_is_latest",
    *(f"type_{t}" for t in DEVICE_TYPES),
    "open_work_orders",
    "open_high_priority",
    "alarms_critical_1h",
    "alarms_warning_1h",
    "log_hours_since_last_wo",
)
N_FEATURES = len(FEATURE_NAMES)

# Raw columns the caller provides (one array each, same length).
HEARTBEAT_COLUMNS = (
    "cpu_pct",
    "mem_pct",
    "temperature_c",
    "error_rate",
    "signal_quality",
    "uptime_s",
    "firmware_is_latest",
    "device_type_idx",
)
CONTEXT_COLUMNS = (
    "open_work_orders",
    "open_high_priority",
    "alarms_critical_1h",
    "alarms_warning_1h",
    "hours_since_last_wo",
)
# Context of a device nobody has reported anything about: nothing open, nothing recent, and
# the last work order long ago (90 days, the cap used in training).
EMPTY_CONTEXT = {
    "open_work_orders": 0.0,
    "open_high_priority": 0.0,
    "alarms_critical_1h": 0.0,
    "alarms_warning_1h": 0.0,
    "hours_since_last_wo": 24.0 * 90,
}


def device_type_index(device_type: str) -> int:
    """Index into DEVICE_TYPES; unknown types get -1 (all one-hot columns zero)."""
    try:
        return DEVICE_TYPES.index(device_type)
    except ValueError:
        return -1


def build_features(cols: Mapping[str, np.ndarray]) -> np.ndarray:
    """(n, N_FEATURES) float32 matrix from raw heartbeat and context columns, vectorized."""
    n = len(cols["cpu_pct"])
    x = np.empty((n, N_FEATURES), dtype=np.float32)
    x[:, 0] = cols["cpu_pct"]
    x[:, 1] = cols["mem_pct"]
    x[:, 2] = cols["temperature_c"]
    x[:, 3] = cols["error_rate"]
    x[:, 4] = cols["signal_quality"]
    x[:, 5] = np.log1p(np.asarray(cols["uptime_s"], dtype=np.float64) / 3600.0)
    x[:, 6] = cols["firmware_is_latest"]
    t = np.asarray(cols["device_type_idx"])
    x[:, 7 : 7 + len(DEVICE_TYPES)] = t[:, None] == np.arange(len(DEVICE_TYPES))[None, :]
    base = 7 + len(DEVICE_TYPES)
    x[:, base + 0] = cols["open_work_orders"]
    x[:, base + 1] = cols["open_high_priority"]
    x[:, base + 2] = cols["alarms_critical_1h"]
    x[:, base + 3] = cols["alarms_warning_1h"]
    x[:, base + 4] = np.log1p(np.asarray(cols["hours_since_last_wo"], dtype=np.float64))
    return x


# How much each feature must move, in its own units, to count as one unit of change for the
# speculation policy ("material change" = max over features of |delta| / scale >= threshold).
CHANGE_SCALE: tuple[float, ...] = (
    100.0,
    100.0,
    100.0,
    1.0,
    1.0,  # cpu, mem, temperature, error rate, signal quality
    5.0,  # log uptime: only a restart moves it much
    1.0,
    *(1.0 for _ in DEVICE_TYPES),
    1.0,
    1.0,
    1.0,
    1.0,  # counts: any new work order or alarm is material
    1.0,  # log hours since the last work order
)
assert len(CHANGE_SCALE) == N_FEATURES

# Heartbeat columns used for a device the worker has no heartbeat for (a precompute request
# for a silent device): the healthy condition's means in `schemas.fleet`, type unknown. The
# prediction then rests on the device's context alone (open work orders, alarms).
DEFAULT_HEARTBEAT: dict[str, float] = {
    "cpu_pct": 30.0,
    "mem_pct": 45.0,
    "temperature_c": 45.0,
    "error_rate": 0.01,
    "signal_quality": 0.9,
    "uptime_s": 148.0 * 3600.0,
    "firmware_is_latest": 1.0,
    "device_type_idx": -1.0,
}
assert tuple(DEFAULT_HEARTBEAT) == HEARTBEAT_COLUMNS
