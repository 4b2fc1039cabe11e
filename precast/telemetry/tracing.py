"""Traces across processes: OpenTelemetry spans exported over OTLP/HTTP, their context carried
from record to record in W3C `traceparent` Kafka headers (docs/observability.md, "Traces").

Off by default, and free when off: `Tracing.off()` imports no OpenTelemetry module, `span()`
hands back one shared do-nothing context manager and `header()` is None, so a hot loop pays an
attribute check. On with `PRECAST_TRACING__ENABLED=true`; the head sampler keeps a ratio of new
traces and follows the parent's decision for continued ones (ParentBased), so one answer's
spans are all kept or all dropped.

A `traceparent` from outside is checked here, not trusted: a malformed one (wrong length,
non-hex, an all-zero ID, version ff) starts a fresh trace and is counted in
`precast_traceparent_malformed_total{reader}`; the record itself is never rejected for it.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Sequence
from contextlib import AbstractContextManager, contextmanager, nullcontext
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from prometheus_client import Counter

if TYPE_CHECKING:
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SpanExporter

    from precast.settings import TracingSettings

TRACEPARENT = "traceparent"
_W3C = re.compile(rb"^([0-9a-f]{2})-([0-9a-f]{32})-([0-9a-f]{16})-([0-9a-f]{2})(-.*)?$")
_NULL: AbstractContextManager[None] = nullcontext()

MALFORMED = Counter(
    "precast_traceparent_malformed_total",
    "records whose traceparent header was present but malformed: traced afresh, never rejected",
    ["reader"],
)


@dataclass(frozen=True)
class TraceParent:
    trace_id: int  # 16 bytes
    span_id: int  # 8 bytes
    flags: int

    @property
    def trace_hex(self) -> str:
        return f"{self.trace_id:032x}"

    @property
    def sampled(self) -> bool:
        return bool(self.flags & 1)

    def header(self) -> bytes:
        return b"00-%032x-%016x-%02x" % (self.trace_id, self.span_id, self.flags)


def parse_traceparent(value: bytes | str | None) -> TraceParent | None:
    """The W3C trace context of a header value, or None when absent or malformed (version 00
    is exactly 55 characters; a later version may append fields; ff is invalid)."""
    if value is None:
        return None
    raw = value.encode("ascii", "replace") if isinstance(value, str) else bytes(value)
    m = _W3C.match(raw.strip())
    if m is None:
        return None
    version, trace, span, flags, rest = m.groups()
    if version == b"ff" or (version == b"00" and rest is not None):
        return None
    trace_id, span_id = int(trace, 16), int(span, 16)
    if trace_id == 0 or span_id == 0:
        return None
    return TraceParent(trace_id, span_id, int(flags, 16))


def checked(value: bytes | str | None, reader: str) -> TraceParent | None:
    """`parse_traceparent`, counting a present but malformed value against `reader`."""
    parent = parse_traceparent(value)
    if parent is None and value is not None:
        MALFORMED.labels(reader).inc()
    return parent


class Tracing:
    """A process's tracer. Build it once at the entry point (`start_tracing`) and pass it down."""

    def __init__(self, provider: TracerProvider | None = None) -> None:
        self._provider = provider
        self.enabled = provider is not None
        self._tracer = provider.get_tracer("precast") if provider is not None else None

    @classmethod
    def off(cls) -> Tracing:
        return cls(None)

    def span(
        self,
        name: str,
        *,
        parent: TraceParent | None = None,
        links: Sequence[TraceParent] = (),
        attributes: dict[str, Any] | None = None,
        kind: str = "internal",
    ) -> AbstractContextManager[Any]:
        """A span, current inside the `with`; its parent is `parent` (a remote context from a
        record) or the current span. `links` name other traces it continues (a batch has many
        inputs, one parent at most)."""
        if self._tracer is None:
            return _NULL
        return self._span(name, parent, links, attributes, kind)

    @contextmanager
    def _span(
        self,
        name: str,
        parent: TraceParent | None,
        links: Sequence[TraceParent],
        attributes: dict[str, Any] | None,
        kind: str,
    ) -> Iterator[Any]:
        from opentelemetry import trace
        from opentelemetry.trace import Link, NonRecordingSpan, SpanKind

        assert self._tracer is not None
        ctx = None
        if parent is not None:
            ctx = trace.set_span_in_context(NonRecordingSpan(_remote(parent)))
        with self._tracer.start_as_current_span(
            name,
            context=ctx,
            kind=getattr(SpanKind, kind.upper()),
            links=[Link(_remote(p)) for p in links],
            attributes=attributes,
        ) as span:
            yield span

    def record(
        self,
        name: str,
        parent: TraceParent,
        start_ns: int,
        end_ns: int,
        attributes: dict[str, Any] | None = None,
        *,
        kind: str = "internal",
        links: Sequence[TraceParent] = (),
    ) -> TraceParent | None:
        """A finished span with its own times, child of a record's context: for work done for
        many records at once (the materializer stores a batch), one span per sampled record;
        for a read of a stored answer (the API's `read`) and a page's report (`render`). The
        span's own context when it was sampled (a response names it), else None."""
        if self._tracer is None or not parent.sampled:
            return None
        from opentelemetry import trace
        from opentelemetry.trace import Link, NonRecordingSpan, SpanKind

        ctx = trace.set_span_in_context(NonRecordingSpan(_remote(parent)))
        span = self._tracer.start_span(
            name,
            context=ctx,
            kind=getattr(SpanKind, kind.upper()),
            links=[Link(_remote(p)) for p in links],
            start_time=start_ns,
            attributes=attributes,
        )
        span.end(end_time=end_ns)
        sc = span.get_span_context()
        if not sc.trace_flags.sampled:
            return None
        return TraceParent(sc.trace_id, sc.span_id, int(sc.trace_flags))

    def header(self) -> bytes | None:
        """The current span's context as a `traceparent` value (None when off or outside a
        span): what a record produced inside the span carries."""
        if self._tracer is None:
            return None
        from opentelemetry import trace

        sc = trace.get_current_span().get_span_context()
        if not sc.is_valid:
            return None
        return b"00-%032x-%016x-%02x" % (sc.trace_id, sc.span_id, int(sc.trace_flags))

    def flush(self, timeout_s: float = 5.0) -> None:
        if self._provider is not None:
            self._provider.force_flush(int(timeout_s * 1000))

    def shutdown(self) -> None:
        if self._provider is not None:
            self._provider.shutdown()


def _remote(p: TraceParent) -> Any:
    from opentelemetry.trace import SpanContext, TraceFlags

    return SpanContext(p.trace_id, p.span_id, is_remote=True, trace_flags=TraceFlags(p.flags))


def start_tracing(
    settings: TracingSettings, service: str, exporter: SpanExporter | None = None
) -> Tracing:
    """The process's tracer from its settings: off unless enabled. `exporter` replaces the
    OTLP/HTTP one (tests pass an in-memory exporter and get spans exported one by one)."""
    if not settings.enabled and exporter is None:
        return Tracing.off()
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor, SimpleSpanProcessor
    from opentelemetry.sdk.trace.sampling import ParentBased, TraceIdRatioBased

    provider = TracerProvider(
        resource=Resource.create({"service.name": settings.service_name or service}),
        sampler=ParentBased(TraceIdRatioBased(settings.sample_ratio)),
    )
    if exporter is not None:
        provider.add_span_processor(SimpleSpanProcessor(exporter))
    else:
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

        otlp = OTLPSpanExporter(endpoint=settings.endpoint, timeout=settings.export_timeout_s)
        # A batch, exported off the hot path; a full queue drops spans (counted by the SDK's
        # log), never blocks a worker.
        provider.add_span_processor(BatchSpanProcessor(otlp, max_queue_size=8192))
    return Tracing(provider)
