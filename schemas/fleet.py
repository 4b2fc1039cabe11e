"""The synthetic fleet's ground truth, shared by the simulator and the model's training script.

A device is in one hidden *condition*; each condition has a right service strategy and
characteristic heartbeat metrics, alarm and work-order rates. The simulator draws events from
these distributions and training draws labelled samples from the same ones, so the model has
real (learnable, imperfect) signal. Pure numpy; no I/O.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

STRATEGIES: tuple[str, ...] = (
    "monitor_only",
    "remote_restart",
    "firmware_rollback",
    "recalibrate_sensor",
    "replace_part",
    "dispatch_technician",
)
# Served when nothing precomputed is available: it never sends anyone anywhere.
DEFAULT_STRATEGY = "monitor_only"

DEVICE_TYPES: tuple[str, ...] = ("gateway", "camera", "meter", "pump_controller")
# Released firmware per device type, oldest first; the last one is "latest".
FIRMWARE: dict[str, tuple[str, ...]] = {
    "gateway": ("2.3.1", "2.4.0", "2.5.0"),
    "camera": ("5.0.2", "5.1.0", "6.0.0"),
    "meter": ("1.8.0", "1.9.3"),
    "pump_controller": ("3.0.0", "3.1.4", "3.2.0"),
}
LATEST_FIRMWARE = {t: versions[-1] for t, versions in FIRMWARE.items()}


@dataclass(frozen=True)
class Condition:
    name: str
    strategy: str
    prevalence: float
    # (mean, sd) of heartbeat metrics
    cpu: tuple[float, float]
    mem: tuple[float, float]
    temp: tuple[float, float]
    error_rate: tuple[float, float]
    signal: tuple[float, float]
    uptime_h: tuple[float, float]  # lognormal (mu, sigma) of hours
    p_latest_firmware: float
    # Poisson rates: open work orders, of which high/critical; alarms per hour by severity
    open_wo: float
    high_share: float
    critical_alarms_h: float
    warning_alarms_h: float
    hours_since_wo: tuple[float, float]  # lognormal (mu, sigma)


CONDITIONS: tuple[Condition, ...] = (
    Condition(
        "healthy",
        "monitor_only",
        0.55,
        (30, 12),
        (45, 12),
        (45, 7),
        (0.01, 0.01),
        (0.9, 0.06),
        (5.0, 1.0),
        0.35,
        0.05,
        0.2,
        0.03,
        0.15,
        (6.5, 0.6),
    ),
    Condition(
        "memory_leak",
        "remote_restart",
        0.10,
        (62, 15),
        (87, 7),
        (50, 7),
        (0.05, 0.03),
        (0.86, 0.08),
        (6.3, 0.5),
        0.35,
        0.2,
        0.2,
        0.15,
        1.2,
        (5.5, 1.0),
    ),
    Condition(
        "bad_firmware",
        "firmware_rollback",
        0.08,
        (55, 15),
        (58, 12),
        (51, 8),
        (0.18, 0.07),
        (0.8, 0.1),
        (1.0, 0.8),
        0.9,
        0.35,
        0.3,
        0.5,
        1.4,
        (4.0, 1.2),
    ),
    Condition(
        "sensor_drift",
        "recalibrate_sensor",
        0.08,
        (31, 12),
        (46, 12),
        (45, 30),
        (0.03, 0.02),
        (0.88, 0.07),
        (5.0, 1.0),
        0.35,
        0.4,
        0.3,
        0.3,
        1.8,
        (5.0, 1.0),
    ),
    Condition(
        "worn_part",
        "replace_part",
        0.09,
        (46, 13),
        (50, 11),
        (71, 7),
        (0.08, 0.04),
        (0.85, 0.08),
        (5.5, 1.0),
        0.35,
        1.2,
        0.6,
        0.8,
        1.0,
        (3.0, 1.0),
    ),
    Condition(
        "hardware_fault",
        "dispatch_technician",
        0.10,
        (40, 15),
        (50, 12),
        (60, 11),
        (0.14, 0.06),
        (0.45, 0.15),
        (4.0, 1.5),
        0.35,
        1.0,
        0.7,
        1.5,
        1.0,
        (3.5, 1.2),
    ),
)
CONDITION_NAMES = tuple(c.name for c in CONDITIONS)
PREVALENCE = np.array([c.prevalence for c in CONDITIONS]) / sum(c.prevalence for c in CONDITIONS)
STRATEGY_OF_CONDITION = np.array([STRATEGIES.index(c.strategy) for c in CONDITIONS])


def _param(attr: str, conditions: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    table = np.array([getattr(c, attr) for c in CONDITIONS], dtype=np.float64)
    return table[conditions, 0], table[conditions, 1]


def _rate(attr: str, conditions: np.ndarray) -> np.ndarray:
    rates = np.array([getattr(c, attr) for c in CONDITIONS], dtype=np.float64)
    picked: np.ndarray = rates[conditions]
    return picked


def sample_conditions(rng: np.random.Generator, n: int) -> np.ndarray:
    return rng.choice(len(CONDITIONS), size=n, p=PREVALENCE)


METRIC_NAMES = ("cpu_pct", "mem_pct", "temperature_c", "error_rate", "signal_quality", "uptime_s")


def sample_metrics(rng: np.random.Generator, conditions: np.ndarray) -> dict[str, np.ndarray]:
    """Heartbeat metrics for devices in the given conditions, clipped to physical ranges: one
    independent draw per device from its condition's distribution."""
    n = len(conditions)
    return metrics_from_normals(conditions, {k: rng.standard_normal(n) for k in METRIC_NAMES})


def metrics_from_normals(conditions: np.ndarray, z: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """Heartbeat metrics from standard-normal scores `z` per metric (so a caller can correlate
    them over time): mean + sd * z of each device's condition, clipped to physical ranges."""

    def normal(attr: str, key: str, lo: float, hi: float) -> np.ndarray:
        mean, sd = _param(attr, conditions)
        out: np.ndarray = np.clip(mean + sd * z[key], lo, hi)
        return out

    mu, sigma = _param("uptime_h", conditions)
    return {
        "cpu_pct": normal("cpu", "cpu_pct", 0, 100),
        "mem_pct": normal("mem", "mem_pct", 0, 100),
        "temperature_c": normal("temp", "temperature_c", -40, 150),
        "error_rate": normal("error_rate", "error_rate", 0, 1),
        "signal_quality": normal("signal", "signal_quality", 0, 1),
        "uptime_s": np.exp(mu + sigma * z["uptime_s"]) * 3600.0,
    }


def sample_firmware_is_latest(rng: np.random.Generator, conditions: np.ndarray) -> np.ndarray:
    return rng.random(len(conditions)) < _rate("p_latest_firmware", conditions)


def sample_context(rng: np.random.Generator, conditions: np.ndarray) -> dict[str, np.ndarray]:
    """Per-device context as the context aggregator would see it at a random moment."""
    open_wo = rng.poisson(_rate("open_wo", conditions))
    high = rng.binomial(open_wo, _rate("high_share", conditions))
    mu, sigma = _param("hours_since_wo", conditions)
    return {
        "open_work_orders": open_wo.astype(np.float64),
        "open_high_priority": high.astype(np.float64),
        "alarms_critical_1h": rng.poisson(_rate("critical_alarms_h", conditions)).astype(
            np.float64
        ),
        "alarms_warning_1h": rng.poisson(_rate("warning_alarms_h", conditions)).astype(np.float64),
        "hours_since_last_wo": np.minimum(np.exp(rng.normal(mu, sigma, len(conditions))), 24 * 90),
    }


def alarm_rate_per_s(conditions: np.ndarray, severity: str) -> np.ndarray:
    attr = "critical_alarms_h" if severity == "critical" else "warning_alarms_h"
    return _rate(attr, conditions) / 3600.0


def work_order_rate_per_s(conditions: np.ndarray) -> np.ndarray:
    # Devices open roughly `open_wo` orders per day while in a condition.
    return _rate("open_wo", conditions) / 86_400.0


HEALTHY = CONDITION_NAMES.index("healthy")
_FAULTY = np.array([c for c in range(len(CONDITIONS)) if c != HEALTHY])


@dataclass(frozen=True)
class FleetDraw:
    """Everything a simulated fleet draws at start, in the order the simulator draws it: so the
    fleet's hidden ground truth can be rebuilt from (devices, seed) alone, e.g. by `precast
    shadow` to score models against it. Device i is `device_id(i)`."""

    types: np.ndarray
    conditions: np.ndarray  # at simulated time 0
    latest: np.ndarray  # runs the latest firmware of its type
    pick_older: np.ndarray  # which older firmware otherwise
    drifting: np.ndarray  # slides into `drift_target` over simulated time
    drift_target: np.ndarray
    drift_start_s: np.ndarray


def device_id(i: int) -> str:
    return f"dev-{i:06d}"


def draw_fleet(rng: np.random.Generator, n: int, drift_share: float, drift_s: float) -> FleetDraw:
    types = rng.integers(0, len(DEVICE_TYPES), n)
    conditions = sample_conditions(rng, n)
    latest = sample_firmware_is_latest(rng, conditions)
    pick_older = rng.random(n)
    drifting = rng.random(n) < drift_share
    target = _FAULTY[rng.integers(0, len(_FAULTY), n)]
    drift_target = np.where(
        target == conditions,
        _FAULTY[(np.searchsorted(_FAULTY, target) + 1) % len(_FAULTY)],
        target,
    )
    drift_start_s = rng.uniform(0, drift_s, n)
    return FleetDraw(types, conditions, latest, pick_older, drifting, drift_target, drift_start_s)


def true_strategies(
    devices: int, seed: int, drift_share: float = 0.05, drift_s: float = 1800.0
) -> dict[str, str | None]:
    """Device ID -> the right strategy of its hidden condition, for a fleet the simulator built
    with these arguments; None for a drifting device (its truth depends on simulated time)."""
    d = draw_fleet(np.random.default_rng(seed), devices, drift_share, drift_s)
    right = STRATEGY_OF_CONDITION[d.conditions].tolist()
    drifting = d.drifting.tolist()
    return {device_id(i): None if drifting[i] else STRATEGIES[right[i]] for i in range(devices)}
