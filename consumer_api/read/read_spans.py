"""The API's `read` span: a read of a stored answer continues the answer's trace (issue 39,
docs/observability.md "Traces").

The stored entry keeps its prediction record's `traceparent` (the worker's batch span,
`Entry.trace`). A read of an answer whose trace was sampled (flags 01) records a `read` span,
child of that batch span and linked to it, so it sits in the answer's trace in any tracing UI
and follows the answer's sampling decision (one answer's spans all kept or all dropped); reads
of answers whose trace was not sampled record nothing and pay one byte check. The response then
names the read span in a `traceresponse` header (W3C Trace Context level 2), which the board
echoes in its beacon for the `render` span (consumer_api.beacons.render_spans).

A sampled read is also observed in `precast_api_traced_read_seconds` with its trace ID as the
exemplar: the read API keeps no per-read histogram (a lock per read measured as several percent
of a read), but traced reads are a random share of reads (by the answers' trace IDs), so this
one histogram shows their latency and links each slow bucket to a trace.

Built only when tracing is on (`Service.read_spans` is None otherwise): the read path then pays
one attribute check."""

from __future__ import annotations

import time
from time import perf_counter_ns

from prometheus_client import Histogram

from precast.serving import Entry
from precast.telemetry.tracing import TraceParent, Tracing

TRACERESPONSE = b"traceresponse"
# The flags' low bit (sampled), read from the last hex digit of a version-00 value.
_SAMPLED = frozenset(b"13579bdf")

TRACED_READ_S = Histogram(
    "precast_api_traced_read_seconds",
    "server time of reads that continued a sampled answer's trace (trace-ID exemplars)",
    buckets=(0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 1.0),
)


class ReadSpans:
    def __init__(self, tracing: Tracing) -> None:
        self.tracing = tracing

    def read(
        self,
        device_id: str,
        e: Entry,
        source: str,
        started_ns: int,
        headers: list[tuple[bytes, bytes]],
    ) -> TraceParent | None:
        """A `read` span from `started_ns` (perf_counter) to now when `e`'s trace was sampled;
        its `traceresponse` is appended to `headers`. The span's context, or None."""
        tp = e.trace
        if tp is None or tp[54] not in _SAMPLED:
            return None
        parent = TraceParent(int(tp[3:35], 16), int(tp[36:52], 16), int(tp[53:55], 16))
        took_ns = perf_counter_ns() - started_ns
        end_ns = time.time_ns()
        span = self.tracing.record(
            "read",
            parent,
            end_ns - took_ns,
            end_ns,
            {
                "precast.device_id": device_id,
                "precast.source": source,
                "precast.model_version": e.model_version,
            },
            kind="server",
            links=(parent,),
        )
        if span is None:
            return None
        headers.append((TRACERESPONSE, span.header()))
        TRACED_READ_S.observe(took_ns / 1e9, exemplar={"trace_id": span.trace_hex})
        return span
