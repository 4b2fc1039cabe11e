"""What the board shows of one device besides its row: its work-order/alarm context (from the
compacted device-context topic) and the summary of its stored answer (parsed once per entry)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import orjson

from precast.serving import Entry

HOUR_MS = 3_600_000


@dataclass(frozen=True, slots=True)
class Context:
    """What the board shows of a device-context snapshot (the compacted device-context topic)."""

    open_work_orders: dict[str, str]  # work_order_id -> priority
    alarms: dict[str, tuple[int, str]]  # alarm_id -> (event time, "critical" | "warning")
    last_work_order_ms: int | None
    as_of_ms: int

    def alarm_state(self) -> str:
        """The worst alarm raised in the hour before the newest event folded in."""
        lo = self.as_of_ms - HOUR_MS
        buckets = {b for t, b in self.alarms.values() if t >= lo}
        return "critical" if "critical" in buckets else "warning" if buckets else "none"

    def as_json(self) -> dict[str, Any]:
        return {
            "open_work_orders": [
                {"work_order_id": k, "priority": v} for k, v in self.open_work_orders.items()
            ],
            "alarms": sorted(
                (
                    {"alarm_id": k, "event_time_ms": t, "severity": b}
                    for k, (t, b) in self.alarms.items()
                ),
                key=lambda a: -a["event_time_ms"],
            ),
            "last_work_order_ms": self.last_work_order_ms,
            "as_of_ms": self.as_of_ms,
            "alarm_state": self.alarm_state(),
        }


def parse_context(raw: bytes) -> tuple[str, Context]:
    """(device_id, Context) from one device-context record; ValueError/KeyError/TypeError on a
    malformed one (schema_version 1, written by precast-context; docs/workers.md)."""
    d = orjson.loads(raw)
    if not isinstance(d, dict) or d.get("schema_version") != 1:
        raise ValueError("not a device-context snapshot of schema_version 1")
    last = d.get("last_work_order_ms")
    return str(d["device_id"]), Context(
        {str(k): str(v) for k, v in dict(d["open_work_orders"]).items()},
        {str(k): (int(v[0]), str(v[1])) for k, v in dict(d["alarms"]).items()},
        None if last is None else int(last),
        int(d["as_of_ms"]),
    )


@dataclass(frozen=True, slots=True)
class Summary:
    """The fields of a stored answer that a fleet row shows (parsed once per stored entry)."""

    strategy: str
    score: float
    trigger: str


def summarize(e: Entry, default_strategy: str) -> Summary:
    try:
        doc = orjson.loads(e.body)
        top = doc["candidates"][0] if doc.get("candidates") else None
        return Summary(
            str(top["strategy"]) if top else default_strategy,
            float(top["score"]) if top else 0.0,
            str(doc.get("trigger", "")),
        )
    except (orjson.JSONDecodeError, KeyError, TypeError, ValueError):
        return Summary(default_strategy, 0.0, "")
