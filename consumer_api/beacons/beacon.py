"""UI timing beacons: the UI reports one view's timings, the API splits them into the two
measures of precast.telemetry.objectives and aggregates them per client (consumer_api.beacons.client_signals).

A view's *wait* (input to the answer on screen) by origin:
  network_qoe = network_ms - (wait.read + wait.db_lock + wait.edge)   (the fetch, less the
                server's and the edge cache's time)
  read, db_lock = the answer's `wait.read` / `wait.db_lock` Server-Timing entries, echoed (0 on
                an edge cache's hit: those entries are the fetch that filled the cache)
  edge        = an edge cache's own time (its `edge` Server-Timing entry, less read and db_lock
                on a miss); 0 without an edge
  model       = wait.model: on a miss, the fallback shown until the computed answer replaced it
  front_jank  = input_to_shown_ms - network_ms - wait.model   (the page's own time)
so the origins add up to input_to_shown_ms. The shown answer's *age* by origin is its
`age.queue`, `age.model`, `age.kafka`, `age.cache` entries, echoed (absent for a fallback,
which has no data and so no age).

Metrics: `precast_wait_origin_seconds_total{origin}` and `precast_age_origin_seconds_total{origin}`
(raw volume, clipped: for dashboards, never for alerting: one client can send many), and the
per-client aggregates that alerts use: `precast_wait_origin_share`, `precast_age_origin_share`,
`precast_wait_origin_per_view_seconds`, `precast_wait_p95_seconds`, `precast_age_p95_seconds`
(absent while no client is live), and `precast_beacon_clients`.

Every value above `beacon_max_ms` is clipped (counted in `precast_beacon_values_clipped_total`)."""

from __future__ import annotations

from typing import Annotated

from prometheus_client import REGISTRY, Counter
from prometheus_client.core import GaugeMetricFamily
from pydantic import BaseModel, ConfigDict, Field

from consumer_api.beacons.client_signals import Signals
from precast.telemetry.objectives import AGE_ORIGINS, WAIT_ORIGINS

# Base units (seconds), as Prometheus names want them: beacons report milliseconds.
WAIT_S = Counter(
    "precast_wait_origin_seconds",
    "what UI users waited for between input and the answer shown, by origin (beacons; raw)",
    ["origin"],
)
AGE_S = Counter(
    "precast_age_origin_seconds",
    "age of the answers shown to UI users, by origin of the age (beacons; raw)",
    ["origin"],
)
VIEWS = Counter("precast_beacon_views", "UI views reported by beacons")
CLIPPED = Counter(
    "precast_beacon_values_clipped", "beacon values above PRECAST_API__BEACON_MAX_MS, clipped"
)
for _o in WAIT_ORIGINS:  # every counter series exists from the start: rates see zeros, not gaps
    WAIT_S.labels(_o)
for _o in AGE_ORIGINS:
    AGE_S.labels(_o)

Ms = Annotated[float, Field(ge=0, le=3_600_000, allow_inf_nan=False)]
EpochMs = Annotated[float, Field(ge=0, le=9_999_999_999_999, allow_inf_nan=False)]


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)  # JSON types as the schema says


class Wait(_Strict):
    read: Ms = Field(default=0, description="the answer's wait.read Server-Timing entry")
    db_lock: Ms = Field(default=0, description="the answer's wait.db_lock Server-Timing entry")
    edge: Ms = Field(
        default=0,
        description="an edge cache's own time: its `edge` Server-Timing entry (less read and "
        "db_lock on a miss); 0 without an edge",
    )
    model: Ms = Field(
        default=0,
        description="on a miss: from the fallback shown to the computed answer shown "
        "(measured by the UI)",
    )


class Age(_Strict):
    queue: Ms = 0
    model: Ms = 0
    kafka: Ms = 0
    cache: Ms = 0


class Timing(_Strict):
    input_to_shown_ms: Ms = Field(
        description="from the user's input to the answer on screen (on a miss: the computed one)"
    )
    network_ms: Ms = Field(
        description="the answer's request on the network: request start to response end, "
        "server time included"
    )
    wait: Wait = Field(default_factory=Wait, description="the parts of the wait the UI cannot see")
    age: Age | None = Field(
        default=None,
        description="the shown answer's age.* Server-Timing entries; absent for a fallback",
    )
    server_timing: Age | None = Field(
        default=None,
        description="deprecated (before issue 26): the same as `age`",
        deprecated=True,
    )
    traceparent: str | None = Field(
        default=None,
        max_length=64,
        description="the answer's `traceresponse` header, echoed (W3C version 00: the read "
        "span's context): with tracing on, the API records a `render` span beneath it; a "
        "malformed value is ignored and counted",
    )
    shown_at_ms: EpochMs | None = Field(
        default=None,
        description="when the answer was on screen, epoch milliseconds by the page's clock "
        "(the `render` span ends there)",
    )


class Beacon(_Strict):
    timings: list[Timing] = Field(min_length=1, max_length=100)


def split(t: Timing) -> tuple[dict[str, float], dict[str, float] | None]:
    """One view's wait by origin and, when its answer had data, its age by origin (ms)."""
    w = t.wait
    wait = {
        "network_qoe": max(0.0, t.network_ms - w.read - w.db_lock - w.edge),
        "front_jank": max(0.0, t.input_to_shown_ms - t.network_ms - w.model),
        "read": w.read,
        "db_lock": w.db_lock,
        "edge": w.edge,
        "model": w.model,
    }
    a = t.age if t.age is not None else t.__dict__["server_timing"]  # no deprecation warning
    age = (
        None
        if a is None
        else {"queue": a.queue, "model": a.model, "kafka": a.kafka, "cache": a.cache}
    )
    return wait, age


def clip(parts: dict[str, float], ceiling_ms: float) -> tuple[dict[str, float], int]:
    """The parts with every value at most `ceiling_ms`, and how many were above it."""
    n = sum(v > ceiling_ms for v in parts.values())
    return ({k: min(v, ceiling_ms) for k, v in parts.items()} if n else parts), n


def record(
    beacon: Beacon, signals: Signals, client: str = "-", ceiling_ms: float = 60_000.0
) -> None:
    clipped = 0
    for t in beacon.timings:
        wait, age = split(t)
        wait, n = clip(wait, ceiling_ms)
        clipped += n
        for o, v in wait.items():
            WAIT_S.labels(o).inc(v / 1000.0)
        if age is not None:
            age, n = clip(age, ceiling_ms)
            clipped += n
            for o, v in age.items():
                AGE_S.labels(o).inc(v / 1000.0)
        signals.add(wait, age, client)
    if clipped:
        CLIPPED.inc(clipped)
    VIEWS.inc(len(beacon.timings))


class SignalsCollector:
    """The per-client aggregates of one `Signals`, computed at scrape time (so a figure stops
    being published when its clients go quiet, instead of holding its last value)."""

    signals: Signals | None = None

    def collect(self):
        snap = self.signals.snapshot() if self.signals is not None else None
        fams = {
            "wait_share": GaugeMetricFamily(
                "precast_wait_origin_share",
                "share of what UI users wait for, by origin (median over clients, 60 s half-life)",
                labels=["origin"],
            ),
            "age_share": GaugeMetricFamily(
                "precast_age_origin_share",
                "share of the shown answers' age, by origin (median over clients, 60 s half-life)",
                labels=["origin"],
            ),
            "per_view": GaugeMetricFamily(
                "precast_wait_origin_per_view_seconds",
                "wait per UI view, by origin (median over clients, 60 s half-life)",
                labels=["origin"],
            ),
            "wait_p95": GaugeMetricFamily(
                "precast_wait_p95_seconds",
                "p95 of input to answer shown (one weight per client, 60 s half-life)",
            ),
            "age_p95": GaugeMetricFamily(
                "precast_age_p95_seconds",
                "p95 age of the answers shown (one weight per client, 60 s half-life)",
            ),
            "clients": GaugeMetricFamily(
                "precast_beacon_clients", "UI clients whose beacons count (heard from recently)"
            ),
        }
        if snap is not None:
            for o, v in snap.wait_shares.items():
                fams["wait_share"].add_metric([o], v)
                fams["per_view"].add_metric([o], snap.wait_per_view_s[o])
            for o, v in snap.age_shares.items():
                fams["age_share"].add_metric([o], v)
            fams["wait_p95"].add_metric([], snap.wait_p95_s)
            if snap.age_p95_s is not None:
                fams["age_p95"].add_metric([], snap.age_p95_s)
        fams["clients"].add_metric([], snap.clients if snap is not None else 0)
        yield from fams.values()


COLLECTOR = SignalsCollector()
REGISTRY.register(COLLECTOR)


def export(signals: Signals) -> None:
    """Publish this `Signals` as the process's (one service per process; a test that builds
    another service replaces the earlier one)."""
    COLLECTOR.signals = signals
