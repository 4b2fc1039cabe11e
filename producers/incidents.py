"""Alarms and work orders: rarer events whose rates follow each device's hidden condition.

Rates come from `schemas.fleet` (the ground truth the model is trained on), so a device's
alarm and work-order history carries real signal about its right service strategy. Each device
keeps its open work orders and alarms; later heartbeat slots update, close or clear them, so the
context aggregation sees whole lifecycles (opened -> updated -> closed, raised -> cleared).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from schemas import fleet

ALARM_CODES: dict[str, tuple[str, ...]] = {
    "healthy": ("HB_JITTER", "CONFIG_DRIFT"),
    "memory_leak": ("MEM_HIGH", "OOM_KILL", "SWAP_STORM"),
    "bad_firmware": ("CRASH_LOOP", "WATCHDOG_RESET", "FW_ASSERT"),
    "sensor_drift": ("SENSOR_RANGE", "CALIBRATION_STALE"),
    "worn_part": ("VIBRATION_HIGH", "TEMP_HIGH", "MOTOR_STALL"),
    "hardware_fault": ("LINK_DOWN", "PSU_FAULT", "DISK_FAIL"),
}
WO_CATEGORY: dict[str, str] = {
    "healthy": "inspection",
    "memory_leak": "software",
    "bad_firmware": "software",
    "sensor_drift": "calibration",
    "worn_part": "mechanical",
    "hardware_fault": "hardware",
}
# Mean simulated time an alarm stays raised / a work order stays open.
MEAN_ALARM_OPEN_S = 30 * 60
MEAN_WO_OPEN_S = 8 * 3600
MAX_OPEN = 8  # per device and kind; the oldest is closed first to make room (bounded memory)


@dataclass(frozen=True, slots=True)
class Rates:
    """Per-slot inputs, one entry per heartbeat slot of the batch."""

    devices: np.ndarray  # device index
    condition: np.ndarray  # current hidden condition index (for codes and categories)
    critical_per_s: np.ndarray
    warning_per_s: np.ndarray
    wo_per_s: np.ndarray
    high_share: np.ndarray


class Incidents:
    """Open work orders and alarms per device (bounded: MAX_OPEN of each)."""

    def __init__(self, devices: int, run_id: str = "0") -> None:
        self.run_id = run_id
        self.open_wo: dict[int, list[list[str]]] = {}  # device -> [[id, priority, category]]
        self.open_alarms: dict[int, list[list[str]]] = {}  # device -> [[id, severity, code]]
        self.n_open = np.zeros(devices, dtype=np.int64)  # both kinds, to find busy slots fast
        self.seq = 0

    def _next_id(self, prefix: str) -> str:
        self.seq += 1
        return f"{prefix}-{self.run_id}-{self.seq:x}"

    def step(
        self, rng: np.random.Generator, r: Rates, dt_s: float
    ) -> list[tuple[int, dict[str, Any]]]:
        """(device index, event fields without envelope) for the slots of one batch."""
        n_crit = rng.poisson(r.critical_per_s * dt_s)
        n_warn = rng.poisson(r.warning_per_s * dt_s)
        n_wo = rng.poisson(r.wo_per_s * dt_s)
        u = rng.random((len(r.devices), 3))
        p_clear = 1.0 - np.exp(-dt_s / MEAN_ALARM_OPEN_S)
        p_close = 1.0 - np.exp(-dt_s / MEAN_WO_OPEN_S)
        out: list[tuple[int, dict[str, Any]]] = []
        busy = np.flatnonzero((n_crit + n_warn + n_wo > 0) | (self.n_open[r.devices] > 0))
        for j in busy.tolist():
            d = int(r.devices[j])
            cond = fleet.CONDITION_NAMES[int(r.condition[j])]
            out += self._lifecycle(d, u[j], p_clear, p_close)
            for severity, count in (("critical", n_crit[j]), ("warning", n_warn[j])):
                for _ in range(int(count)):
                    out += self._raise(rng, d, cond, severity)
            for _ in range(int(n_wo[j])):
                out += self._open(rng, d, cond, float(r.high_share[j]))
        return out

    def _lifecycle(
        self, d: int, u: np.ndarray, p_clear: float, p_close: float
    ) -> list[tuple[int, dict[str, Any]]]:
        out = []
        alarms, orders = self.open_alarms.get(d), self.open_wo.get(d)
        if alarms and u[0] < p_clear:
            out.append((d, self._clear(d, alarms)))
        if orders and u[1] < p_close:
            out.append((d, self._close(d, orders)))
        elif orders and u[2] < p_close:  # an update, e.g. a technician note or an escalation
            wo = orders[0]
            if wo[1] in ("low", "medium") and u[2] < p_close / 4:
                wo[1] = "high"
            out.append((d, _wo(wo[0], "updated", wo[1], wo[2])))
        return out

    def _clear(self, d: int, alarms: list[list[str]]) -> dict[str, Any]:
        a_id, severity, code = alarms.pop(0)
        self.n_open[d] -= 1
        return _alarm(a_id, severity, code, True)

    def _close(self, d: int, orders: list[list[str]]) -> dict[str, Any]:
        wo_id, priority, category = orders.pop(0)
        self.n_open[d] -= 1
        return _wo(wo_id, "closed", priority, category)

    def _raise(
        self, rng: np.random.Generator, d: int, cond: str, severity: str
    ) -> list[tuple[int, dict[str, Any]]]:
        codes = ALARM_CODES[cond]
        alarms = self.open_alarms.setdefault(d, [])
        out = [(d, self._clear(d, alarms))] if len(alarms) >= MAX_OPEN else []
        alarm = [self._next_id("alm"), severity, codes[int(rng.integers(len(codes)))]]
        alarms.append(alarm)
        self.n_open[d] += 1
        return [*out, (d, _alarm(alarm[0], severity, alarm[2], False))]

    def _open(
        self, rng: np.random.Generator, d: int, cond: str, high_share: float
    ) -> list[tuple[int, dict[str, Any]]]:
        orders = self.open_wo.setdefault(d, [])
        out = [(d, self._close(d, orders))] if len(orders) >= MAX_OPEN else []
        high = rng.random() < high_share
        priority = (
            ("critical" if rng.random() < 0.3 else "high")
            if high
            else ("medium" if rng.random() < 0.5 else "low")
        )
        wo = [self._next_id("wo"), priority, WO_CATEGORY[cond]]
        orders.append(wo)
        self.n_open[d] += 1
        return [*out, (d, _wo(wo[0], "opened", priority, wo[2]))]


def _alarm(alarm_id: str, severity: str, code: str, cleared: bool) -> dict[str, Any]:
    return {
        "kind": "alarm",
        "alarm_id": alarm_id,
        "severity": severity,
        "code": code,
        "cleared": cleared,
    }


def _wo(wo_id: str, status: str, priority: str, category: str) -> dict[str, Any]:
    return {
        "kind": "work_order",
        "work_order_id": wo_id,
        "status": status,
        "priority": priority,
        "category": category,
    }
