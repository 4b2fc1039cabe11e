"""Fleet simulator: devices in hidden conditions (see `schemas.fleet`) emitting events."""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from typing import Any

import numpy as np

from schemas import fleet
from schemas.events import SCHEMA_VERSION


class Fleet:
    """N devices with a type, firmware and hidden condition. Deterministic under a seed."""

    def __init__(self, devices: int, seed: int) -> None:
        self.rng = np.random.default_rng(seed)
        self.ids = [f"dev-{i:06d}" for i in range(devices)]
        self.types = self.rng.integers(0, len(fleet.DEVICE_TYPES), devices)
        self.conditions = fleet.sample_conditions(self.rng, devices)
        latest = fleet.sample_firmware_is_latest(self.rng, self.conditions)
        self.firmware = [
            fleet.LATEST_FIRMWARE[fleet.DEVICE_TYPES[t]] if is_latest else fleet.FIRMWARE[fleet.DEVICE_TYPES[t]][0]
            for t, is_latest in zip(self.types, latest, strict=True)
        ]
        self._cursor = 0

    def heartbeats(self, n: int, now_ms: int) -> list[dict[str, Any]]:
        """The next n heartbeats, round-robin over the fleet, metrics drawn per condition."""
        idx = (self._cursor + np.arange(n)) % len(self.ids)
        self._cursor = int((self._cursor + n) % len(self.ids))
        m = fleet.sample_metrics(self.rng, self.conditions[idx])
        cols = [m[k].round(3).tolist() for k in ("cpu_pct", "mem_pct", "temperature_c", "error_rate",
                                                 "signal_quality", "uptime_s")]
        out = []
        for j, i in enumerate(idx.tolist()):
            out.append({
                "schema_version": SCHEMA_VERSION,
                "event_id": uuid.uuid4().hex,
                "kind": "heartbeat",
                "device_id": self.ids[i],
                "event_time_ms": now_ms,
                "produced_at_ms": now_ms,
                "device_type": fleet.DEVICE_TYPES[self.types[i]],
                "firmware": self.firmware[i],
                "metrics": {"cpu_pct": cols[0][j], "mem_pct": cols[1][j], "temperature_c": cols[2][j],
                            "error_rate": cols[3][j], "signal_quality": cols[4][j], "uptime_s": cols[5][j]},
                "meta": {},
            })
        return out


def paced(rate: float, tick_s: float = 0.05) -> Iterator[tuple[int, int]]:
    """Yields (events due now, wall-clock ms) so that the long-run rate is `rate` per second."""
    started = time.monotonic()
    sent = 0
    while True:
        now = time.monotonic()
        due = int((now - started) * rate) - sent
        if due <= 0:
            time.sleep(min(tick_s, (sent + 1) / rate - (now - started)))
            continue
        sent += due
        yield due, int(time.time() * 1000)
