"""The board's `render` span, from its beacon (issue 39, docs/observability.md "Traces").

A read that continued a sampled answer's trace names its span in the `traceresponse` header
(consumer_api.read.read_spans); the board echoes that value in the view's beacon timing
(`traceparent`) with when the answer was on screen (`shown_at_ms`, the page's clock). With
tracing on, the API records a `render` span for it, a child of the read span: the page's own
part of the view, from the response's end to the answer on screen (`front_jank` of
consumer_api.beacons.beacon), ending at `shown_at_ms`.

A beacon is a client's claim, so nothing in it is trusted: the value must be a W3C version-00
`traceparent` (lower-case hex, IDs not all zeros) and `shown_at_ms` within the last
`PAST_MS` or at most `AHEAD_MS` ahead of this server's clock (page clocks drift); the span's
length is clipped like every beacon value. A timing that fails is still counted in the signals
and only its span is dropped, counted in `precast_render_spans_dropped_total{reason}`. Spans
are recorded only for sampled contexts (the flags say so), at most one per timing and 100 per
beacon (its schema)."""

from __future__ import annotations

import time

from prometheus_client import Counter

from consumer_api.beacons.beacon import Beacon, Timing
from precast.serving.entry import is_trace
from precast.telemetry.tracing import Tracing, parse_traceparent

PAST_MS = 15 * 60_000  # a beacon waits for 20 views or the page's hiding: minutes at most
AHEAD_MS = 60_000

DROPPED = Counter(
    "precast_render_spans_dropped",
    "beacon timings whose render span was not recorded (malformed traceparent, shown_at_ms "
    "missing or outside the accepted window)",
    ["reason"],
)
_BAD_CONTEXT, _BAD_TIME = DROPPED.labels("traceparent"), DROPPED.labels("shown_at")


class RenderSpans:
    def __init__(self, tracing: Tracing, ceiling_ms: float = 60_000.0) -> None:
        self.tracing, self.ceiling_ms = tracing, ceiling_ms

    def record(self, beacon: Beacon, now_ms: float | None = None) -> int:
        """A `render` span for each timing that names a sampled read; how many were recorded."""
        now = time.time() * 1000 if now_ms is None else now_ms
        done = 0
        for t in beacon.timings:
            if t.traceparent is not None and self._one(t, now):
                done += 1
        return done

    def _one(self, t: Timing, now: float) -> bool:
        assert t.traceparent is not None  # only timings that name a read get here
        raw = t.traceparent.encode("ascii", "replace")
        parent = parse_traceparent(raw) if is_trace(raw) else None
        if parent is None:
            _BAD_CONTEXT.inc()
            return False
        shown = t.shown_at_ms
        if shown is None or not now - PAST_MS <= shown <= now + AHEAD_MS:
            _BAD_TIME.inc()
            return False
        front = min(max(0.0, t.input_to_shown_ms - t.network_ms - t.wait.model), self.ceiling_ms)
        end_ns = round(shown * 1000) * 1000  # to the microsecond (a float's ns are noise)
        span = self.tracing.record(
            "render",
            parent,
            end_ns - round(front * 1000) * 1000,
            end_ns,
            {
                "precast.client_reported": True,
                "precast.input_to_shown_ms": t.input_to_shown_ms,
                "precast.network_ms": t.network_ms,
                "precast.front_ms": front,
            },
            kind="client",
        )
        return span is not None
