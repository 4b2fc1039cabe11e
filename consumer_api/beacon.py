"""UI timing beacons: the UI reports what the user waited for, the API turns it into delay
origins. End-to-end delay of one view = the shown answer's age split by pipeline segment
(queue, model, kafka, cache; echoed from its Server-Timing header) + network time
(`network_qoe`) + the rest of input-to-shown (`front_jank`). Each origin's milliseconds are
counted (`precast_delay_origin_ms_total`, for PromQL shares over any window) and its share of
the recent total is a gauge (`precast_delay_origin_share`, decayed with a 60 s half-life), so
an alert can fire when one origin passes 30 % (deploy/alerts/precast-api.rules.yml)."""

from __future__ import annotations

import math
import threading
import time
from typing import Annotated

from prometheus_client import Counter, Gauge
from pydantic import BaseModel, ConfigDict, Field

ORIGINS = ("queue", "model", "kafka", "cache", "network_qoe", "front_jank")
ORIGIN_MS = Counter(
    "precast_delay_origin_ms", "end-to-end delay reported by UI beacons, by origin (ms)", ["origin"]
)
SHARE = Gauge(
    "precast_delay_origin_share",
    "share of recent end-to-end delay, by origin (60 s half-life)",
    ["origin"],
)
VIEWS = Counter("precast_beacon_views", "UI views reported by beacons")
for _o in ORIGINS:  # every series exists from the start, so shares and alerts see zeros, not gaps
    ORIGIN_MS.labels(_o)
    SHARE.labels(_o)

Ms = Annotated[float, Field(ge=0, le=3_600_000, allow_inf_nan=False)]


class ServerTiming(BaseModel):
    model_config = ConfigDict(extra="forbid")
    queue: Ms = 0
    model: Ms = 0
    kafka: Ms = 0
    cache: Ms = 0


class Timing(BaseModel):
    model_config = ConfigDict(extra="forbid")
    input_to_shown_ms: Ms = Field(description="from the user's input to the data on screen")
    network_ms: Ms = Field(
        description="time on the network (request start to response end, less server time)"
    )
    server_timing: ServerTiming = Field(
        default_factory=ServerTiming, description="the answer's Server-Timing entries"
    )


class Beacon(BaseModel):
    model_config = ConfigDict(extra="forbid")
    timings: list[Timing] = Field(min_length=1, max_length=100)


def split(t: Timing) -> dict[str, float]:
    """One view's delay by origin."""
    st = t.server_timing
    return {
        "queue": st.queue,
        "model": st.model,
        "kafka": st.kafka,
        "cache": st.cache,
        "network_qoe": t.network_ms,
        "front_jank": max(0.0, t.input_to_shown_ms - t.network_ms),
    }


class DelayShares:
    """Exponentially decayed sum per origin; shares of the decayed total."""

    def __init__(self, half_life_s: float = 60.0, clock=time.monotonic) -> None:
        self._k = math.log(2) / half_life_s
        self._clock = clock
        self._sums = dict.fromkeys(ORIGINS, 0.0)
        self._at = clock()
        self._lock = threading.Lock()

    def add(self, parts: dict[str, float]) -> None:
        with self._lock:
            now = self._clock()
            decay = math.exp(-self._k * (now - self._at))
            self._at = now
            for o in ORIGINS:
                self._sums[o] = self._sums[o] * decay + parts.get(o, 0.0)

    def shares(self) -> dict[str, float]:
        with self._lock:
            total = sum(self._sums.values())
            return {o: (v / total if total > 0 else 0.0) for o, v in self._sums.items()}


def record(beacon: Beacon, shares: DelayShares) -> None:
    for t in beacon.timings:
        parts = split(t)
        for o, v in parts.items():
            ORIGIN_MS.labels(o).inc(v)
        shares.add(parts)
    VIEWS.inc(len(beacon.timings))
    for o, v in shares.shares().items():
        SHARE.labels(o).set(v)
