"""Per-device context from the low-rate work-order and alarm streams: a pure, idempotent reducer.

The context aggregator (`workers.context.aggregator`, faust) folds events into one `DeviceContext` per
device and publishes snapshots to the compacted device-context topic; the worker restores from
that topic and applies the same reducer to the events it consumes itself, so a trigger sees its
own work order or alarm without waiting for the aggregator. Applying an event twice changes
nothing (work orders and alarms are keyed by their IDs), which is what makes the two paths and
at-least-once redelivery safe to combine.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import orjson

from workers.features import CONTEXT_COLUMNS, EMPTY_CONTEXT

HOUR_MS = 3_600_000
# Alarms counted by the *_1h features: raised (not cleared) in the hour before the prediction.
ALARM_WINDOW_MS = HOUR_MS
# Bounds: a misbehaving device must not grow a context without limit.
MAX_OPEN_WORK_ORDERS = 256
MAX_ALARMS = 1024
HIGH_PRIORITIES = frozenset({"high", "critical"})
# Severity -> feature bucket. "major" counts with critical (both page someone); "info" is ignored.
SEVERITY_BUCKET = {"critical": "critical", "major": "critical", "warning": "warning"}
CONTEXT_SCHEMA_VERSION = 1


@dataclass
class DeviceContext:
    device_id: str
    open_work_orders: dict[str, str] = field(default_factory=dict)  # work_order_id -> priority
    alarms: dict[str, tuple[int, str]] = field(default_factory=dict)  # alarm_id -> (time, bucket)
    last_work_order_ms: int | None = None
    as_of_ms: int = 0  # newest event time folded in

    # -- the reducer -----------------------------------------------------------------------------
    def apply_work_order(self, e: Mapping[str, Any]) -> bool:
        """Fold a work-order event in; True when it changed the context."""
        wo, status, t = e["work_order_id"], e["status"], int(e["event_time_ms"])
        before = (dict(self.open_work_orders), self.last_work_order_ms)
        if status == "closed":
            self.open_work_orders.pop(wo, None)
        else:
            self.open_work_orders[wo] = e["priority"]
            if len(self.open_work_orders) > MAX_OPEN_WORK_ORDERS:
                self.open_work_orders.pop(next(iter(self.open_work_orders)))
        if status == "opened":
            self.last_work_order_ms = max(self.last_work_order_ms or 0, t)
        self.as_of_ms = max(self.as_of_ms, t)
        return (self.open_work_orders, self.last_work_order_ms) != before

    def apply_alarm(self, e: Mapping[str, Any]) -> bool:
        """Fold an alarm in; True when it fired one that the features count."""
        t = int(e["event_time_ms"])
        self.as_of_ms = max(self.as_of_ms, t)
        self._prune(self.as_of_ms)
        bucket = SEVERITY_BUCKET.get(e["severity"])
        if e.get("cleared") or bucket is None or e["alarm_id"] in self.alarms:
            return False
        if t < self.as_of_ms - ALARM_WINDOW_MS:
            return False  # too old to count
        self.alarms[e["alarm_id"]] = (t, bucket)
        if len(self.alarms) > MAX_ALARMS:
            self.alarms.pop(min(self.alarms, key=lambda k: self.alarms[k][0]))
        return True

    def _prune(self, now_ms: int) -> None:
        cutoff = now_ms - ALARM_WINDOW_MS
        if any(t < cutoff for t, _ in self.alarms.values()):
            self.alarms = {k: v for k, v in self.alarms.items() if v[0] >= cutoff}

    # -- features ------------------------------------------------------------------------------------
    def columns(self, at_ms: int) -> tuple[float, float, float, float, float]:
        """The context columns of `build_features` as of event time `at_ms`."""
        high = sum(1 for p in self.open_work_orders.values() if p in HIGH_PRIORITIES)
        lo = at_ms - ALARM_WINDOW_MS
        crit = sum(1 for t, b in self.alarms.values() if b == "critical" and lo <= t <= at_ms)
        warn = sum(1 for t, b in self.alarms.values() if b == "warning" and lo <= t <= at_ms)
        if self.last_work_order_ms is None:
            hours = EMPTY_CONTEXT["hours_since_last_wo"]
        else:
            hours = min(
                max(at_ms - self.last_work_order_ms, 0) / HOUR_MS,
                EMPTY_CONTEXT["hours_since_last_wo"],
            )
        return (float(len(self.open_work_orders)), float(high), float(crit), float(warn), hours)

    # -- wire form (the compacted device-context topic; docs/workers.md) --------------------------
    def to_json(self, updated_at_ms: int) -> bytes:
        return orjson.dumps(
            {
                "schema_version": CONTEXT_SCHEMA_VERSION,
                "device_id": self.device_id,
                "open_work_orders": self.open_work_orders,
                "alarms": {k: [t, b] for k, (t, b) in self.alarms.items()},
                "last_work_order_ms": self.last_work_order_ms,
                "as_of_ms": self.as_of_ms,
                "updated_at_ms": updated_at_ms,
            }
        )

    @classmethod
    def from_json(cls, raw: bytes) -> DeviceContext:
        """Parse a snapshot; raises ValueError/KeyError/TypeError on a malformed one."""
        d = orjson.loads(raw)
        if d.get("schema_version") != CONTEXT_SCHEMA_VERSION:
            raise ValueError(f"unknown context schema_version {d.get('schema_version')!r}")
        last = d.get("last_work_order_ms")
        return cls(
            str(d["device_id"]),
            {str(k): str(v) for k, v in dict(d["open_work_orders"]).items()},
            {str(k): (int(v[0]), str(v[1])) for k, v in dict(d["alarms"]).items()},
            None if last is None else int(last),
            int(d["as_of_ms"]),
        )

    def merge_snapshot(self, snap: DeviceContext) -> None:
        """Adopt a snapshot from the aggregator unless this copy has already seen newer events."""
        if snap.as_of_ms >= self.as_of_ms:
            self.open_work_orders, self.alarms = dict(snap.open_work_orders), dict(snap.alarms)
            self.last_work_order_ms, self.as_of_ms = snap.last_work_order_ms, snap.as_of_ms


def context_columns(
    contexts: Sequence[DeviceContext | None], at_ms: np.ndarray
) -> dict[str, np.ndarray]:
    """Context columns for a batch; devices without context get `EMPTY_CONTEXT`."""
    n = len(contexts)
    cols = {k: np.full(n, EMPTY_CONTEXT[k], dtype=np.float64) for k in CONTEXT_COLUMNS}
    for i, c in enumerate(contexts):
        if c is not None:
            for k, v in zip(CONTEXT_COLUMNS, c.columns(int(at_ms[i])), strict=True):
                cols[k][i] = v
    return cols
