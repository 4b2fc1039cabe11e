"""UI timing beacons: the UI reports what the user waited for, the API turns it into delay
origins. End-to-end delay of one view = the shown answer's age split by pipeline segment
(queue, model, kafka, cache; echoed from its Server-Timing header) + network time
(`network_qoe`) + the rest of input-to-shown (`front_jank`). Each origin's milliseconds are
counted (`precast_delay_origin_seconds_total`, base unit) and its share of the recent delay is a gauge
(`precast_delay_origin_share`, 60 s half-life) on which an alert fires when one origin passes
30 % (deploy/alerts/precast-api.rules.yml).

Trust model: a beacon is a claim by one client, authenticated at most by the shared bearer
token, so any client can lie. Its influence is bounded three ways: every value is clipped at
`beacon_max_ms` (counted in `precast_beacon_values_clipped_total`); each client (its token and
address, as for the per-client limits) keeps its own decayed sums, so sending more beacons only
refines that client's own shares and never weighs more; and the published share of an origin is
the median over clients of their shares (renormalized to sum to 1), so a minority of clients
cannot move it past what honest clients report. The seconds counter is raw volume (clipped, rate-
limited per client), not for alerting."""

from __future__ import annotations

import math
import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from typing import Annotated

import numpy as np
from prometheus_client import Counter, Gauge
from pydantic import BaseModel, ConfigDict, Field

ORIGINS = ("queue", "model", "kafka", "cache", "network_qoe", "front_jank")
# Base units (seconds), as Prometheus names want them: beacons report milliseconds.
ORIGIN_S = Counter(
    "precast_delay_origin_seconds",
    "end-to-end delay reported by UI beacons, by origin",
    ["origin"],
)
SHARE = Gauge(
    "precast_delay_origin_share",
    "share of recent end-to-end delay, by origin (60 s half-life)",
    ["origin"],
)
VIEWS = Counter("precast_beacon_views", "UI views reported by beacons")
CLIPPED = Counter(
    "precast_beacon_values_clipped", "beacon values above PRECAST_API__BEACON_MAX_MS, clipped"
)
for _o in ORIGINS:  # every series exists from the start, so shares and alerts see zeros, not gaps
    ORIGIN_S.labels(_o)
    SHARE.labels(_o)

Ms = Annotated[float, Field(ge=0, le=3_600_000, allow_inf_nan=False)]


class ServerTiming(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)  # JSON types as the schema says
    queue: Ms = 0
    model: Ms = 0
    kafka: Ms = 0
    cache: Ms = 0


class Timing(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)  # JSON types as the schema says
    input_to_shown_ms: Ms = Field(description="from the user's input to the data on screen")
    network_ms: Ms = Field(
        description="time on the network (request start to response end, less server time)"
    )
    server_timing: ServerTiming = Field(
        default_factory=ServerTiming, description="the answer's Server-Timing entries"
    )


class Beacon(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)  # JSON types as the schema says
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


def clip(t: Timing, ceiling_ms: float) -> tuple[Timing, int]:
    """The timing with every value at most `ceiling_ms`, and how many were above it."""
    st = t.server_timing
    vals = [t.input_to_shown_ms, t.network_ms, st.queue, st.model, st.kafka, st.cache]
    n = sum(v > ceiling_ms for v in vals)
    if not n:
        return t, 0
    c = [min(v, ceiling_ms) for v in vals]
    return Timing(
        input_to_shown_ms=c[0],
        network_ms=c[1],
        server_timing=ServerTiming(queue=c[2], model=c[3], kafka=c[4], cache=c[5]),
    ), n


class _Client:
    __slots__ = ("at", "sums")

    def __init__(self, at: float) -> None:
        self.sums = np.zeros(len(ORIGINS))
        self.at = at


class DelayShares:
    """Decayed sums per origin per client; the published shares are the per-origin median of
    the clients' shares. A client whose sums decayed below 1/1024 of what it sent (ten half-
    lives) no longer counts; at most `max_clients` are kept (least recent forgotten)."""

    def __init__(
        self,
        half_life_s: float = 60.0,
        clock: Callable[[], float] = time.monotonic,
        max_clients: int = 100_000,
    ) -> None:
        self._k = math.log(2) / half_life_s
        self._horizon = 10 * half_life_s
        self._clock = clock
        self._max = max_clients
        self._clients: OrderedDict[str, _Client] = OrderedDict()
        self._lock = threading.Lock()

    def add(self, parts: dict[str, float], client: str = "-") -> None:
        with self._lock:
            now = self._clock()
            c = self._clients.get(client)
            if c is None:
                c = self._clients[client] = _Client(now)
                if len(self._clients) > self._max:
                    self._clients.popitem(last=False)
            else:
                self._clients.move_to_end(client)
            c.sums = c.sums * math.exp(-self._k * (now - c.at)) + [
                parts.get(o, 0.0) for o in ORIGINS
            ]
            c.at = now

    def shares(self) -> dict[str, float]:
        with self._lock:
            now = self._clock()
            while self._clients:  # oldest first: drop those past the horizon
                oldest = next(iter(self._clients.values()))
                if now - oldest.at <= self._horizon:
                    break
                self._clients.popitem(last=False)
            rows = [c.sums / t for c in self._clients.values() if (t := c.sums.sum()) > 0]
        if not rows:
            return dict.fromkeys(ORIGINS, 0.0)
        med = np.median(np.vstack(rows), axis=0)
        total = med.sum()
        return {
            o: float(v / total) if total > 0 else 0.0 for o, v in zip(ORIGINS, med, strict=True)
        }


def record(
    beacon: Beacon, shares: DelayShares, client: str = "-", ceiling_ms: float = 60_000.0
) -> None:
    clipped = 0
    for t in beacon.timings:
        t, n = clip(t, ceiling_ms)
        clipped += n
        parts = split(t)
        for o, v in parts.items():
            ORIGIN_S.labels(o).inc(v / 1000.0)
        shares.add(parts, client)
    if clipped:
        CLIPPED.inc(clipped)
    VIEWS.inc(len(beacon.timings))
    for o, v in shares.shares().items():
        SHARE.labels(o).set(v)
