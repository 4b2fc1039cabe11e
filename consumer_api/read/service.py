"""What the endpoints share: where answers come from, how they are rendered, who is asked to
precompute requests, and the live-update hub. Built once per process (consumer_api.cli) or by tests."""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from time import perf_counter_ns

import redis
from prometheus_client import REGISTRY
from prometheus_client.core import CounterMetricFamily

from consumer_api.beacons import beacon
from consumer_api.beacons.client_signals import Signals
from consumer_api.beacons.render_spans import RenderSpans
from consumer_api.edge.client_limits import ClientLimits
from consumer_api.read.answer import (
    FALLBACK,
    FALLBACK_REASONS,
    PRECOMPUTED,
    STALE,
    Answer,
    Renderer,
)
from consumer_api.read.hub import Hub
from consumer_api.read.read_spans import ReadSpans
from consumer_api.settings import ApiOptions
from consumer_api.speculation.precompute_requests import PrecomputeAsker
from consumer_api.speculation.read_hints import ReadHints
from precast.fleet import load_fleet
from precast.serving import AsyncReader, Entry, LocalView
from precast.supervise import Supervised
from precast.telemetry.tracing import Tracing
from precast.tokens import TokenTable

# Results of `Service.check`: a status code to answer with, or 0 to go on.
ALLOWED, UNAUTHORIZED, FORBIDDEN = 0, 401, 403

# Reads are counted in a plain dict on the event loop (the only thread that serves) and
# exported by a collector: a prometheus_client Counter takes a lock per increment, which
# measured as several percent of a whole read.
_READS = dict.fromkeys((PRECOMPUTED, STALE, FALLBACK), 0)
# Fallbacks by reason, every reason present from the start: the hit-ratio SLO leaves out reads
# of devices that have no answer yet (`unknown_device`: a device before its first prediction,
# the whole fleet while a new deployment starts), and its PromQL needs the series to exist.
_FALLBACKS = dict.fromkeys(FALLBACK_REASONS, 0)


def count_read(source: str) -> None:
    _READS[source] += 1


def read_counts() -> dict[str, int]:
    """Answers served so far, by source (a copy; the board's hit ratio)."""
    return dict(_READS)


class _ReadsCollector:
    def collect(self):
        c = CounterMetricFamily("precast_api_reads", "answers served, by source", labels=["source"])
        for source, n in _READS.items():
            c.add_metric([source], n)
        yield c
        f = CounterMetricFamily(
            "precast_api_fallbacks", "fallback answers served, by reason", labels=["reason"]
        )
        for reason, n in _FALLBACKS.items():
            f.add_metric([reason], n)
        yield f


REGISTRY.register(_ReadsCollector())


def _ready_always() -> tuple[bool, dict]:
    return True, {}


@dataclass
class Service:
    options: ApiOptions
    view: LocalView | None
    reader: AsyncReader | None
    asker: PrecomputeAsker
    readiness: Callable[[], tuple[bool, dict]] = _ready_always
    health: Callable[[], tuple[bool, dict]] = _ready_always
    hub: Hub = field(default_factory=Hub)
    signals: Signals = field(default_factory=Signals)
    hints: ReadHints | None = None
    tokens: TokenTable | None = None  # built from the options when not given
    # background parts (precast.supervise) whose failure turns readiness false
    parts: list[Supervised] = field(default_factory=list)
    tracing: Tracing = field(default_factory=Tracing.off)

    def __post_init__(self) -> None:
        if (self.view is None) == (self.reader is None):
            raise ValueError("exactly one of view / reader")
        # unset: the built-in fleet's (the API's entry point sets it from its fleet spec)
        fallback = self.options.default_strategy or load_fleet().spec.serving.default_label
        self.renderer = Renderer(fallback, self.options.expired)
        self.hub.max_streams = self.options.sse_max_streams
        if self.tokens is None:
            tok = self.options.auth_token
            self.tokens = TokenTable(
                self.options.tokens_file, tok.get_secret_value() if tok else None
            )
        # buckets keyed by the token the lookup finds, not by how its header is spelled
        self.limits = ClientLimits(self.options, tokens=self.tokens)
        beacon.export(self.signals)
        # None when tracing is off: a read then pays one attribute check for traces
        self.read_spans = ReadSpans(self.tracing) if self.tracing.enabled else None
        self.render_spans = (
            RenderSpans(self.tracing, self.options.beacon_max_ms) if self.tracing.enabled else None
        )

    def check(self, header: bytes | None, scope: str) -> int:
        """ALLOWED, UNAUTHORIZED (no or unknown token) or FORBIDDEN (a token without `scope`)."""
        tokens = self.tokens
        assert tokens is not None  # set in __post_init__
        if not tokens.enabled:
            return ALLOWED
        token = tokens.lookup(header)
        if token is None:
            return UNAUTHORIZED
        return ALLOWED if token.allows(scope) else FORBIDDEN

    @property
    def auth_enabled(self) -> bool:
        return self.tokens is not None and self.tokens.enabled

    async def answer(self, device_id: str, now_ms: int, started_ns: int | None = None) -> Answer:
        """One device's answer; also asks the workers for a precompute when the answer needs one.
        Its Server-Timing says how long the read waited for the store (`db_lock`: the view's
        lookup or the Redis GET, a failed one included) and for the rest of the server's work
        since `started_ns` (`read`)."""
        t0 = perf_counter_ns()
        if self.view is not None:
            e = self.view.get(device_id, now_ms)
        else:
            assert self.reader is not None  # exactly one of the two (__post_init__)
            try:
                e = await self.reader.get(device_id)
            except redis.RedisError:
                wait = _wait(started_ns, t0)
                return self.served(
                    device_id, self.renderer.fallback(device_id, "store_unavailable", wait), now_ms
                )
        wait = _wait(started_ns, t0)
        a = self.served(device_id, self.renderer.render(device_id, e, now_ms, wait), now_ms)
        if self.read_spans is not None and e is not None:
            self.read_spans.read(device_id, e, a.source, started_ns or t0, a.headers)
        return a

    async def answers(self, device_ids: Sequence[str], now_ms: int) -> list[Answer]:
        return (await self.answers_timed(device_ids, now_ms))[0]

    async def answers_timed(
        self, device_ids: Sequence[str], now_ms: int, started_ns: int | None = None
    ) -> tuple[list[Answer], tuple[int, int]]:
        """The answers, and (read, db_lock) in ns as for `answer`, for the whole list."""
        entries: list[Entry | None]
        t0 = perf_counter_ns()
        if self.view is not None:
            entries = self.view.get_many(device_ids, now_ms)
        else:
            assert self.reader is not None  # exactly one of the two (__post_init__)
            try:
                entries = await self.reader.get_many(device_ids)
            except redis.RedisError:
                answers = [
                    self.served(d, self.renderer.fallback(d, "store_unavailable"), now_ms)
                    for d in device_ids
                ]
                return answers, _wait(started_ns, t0)
        wait = _wait(started_ns, t0)
        return [
            self.served(d, self.renderer.render(d, e, now_ms), now_ms)
            for d, e in zip(device_ids, entries, strict=True)
        ], wait

    def resolve(self, device_id: str, e: Entry | None) -> Entry | None:
        """A stored entry (from the hub) as a read serves it: extended under a validity lease."""
        if e is None or e.terms is None or self.view is None:
            return e
        return self.view.resolve(device_id, e)

    def served(self, device_id: str, a: Answer, now_ms: int) -> Answer:
        _READS[a.source] += 1
        if a.reason is not None:
            _FALLBACKS[a.reason] = _FALLBACKS.get(a.reason, 0) + 1
        if self.hints is not None and a.source != FALLBACK:
            self.hints.note(device_id)
        if a.ask_reason is not None:
            self.asker.request(device_id, a.ask_reason, now_ms)
        return a


def _wait(started_ns: int | None, store_ns: int) -> tuple[int, int]:
    """(read, db_lock) in ns: before the store call since `started_ns`, and the store call."""
    now = perf_counter_ns()
    return (store_ns - started_ns if started_ns is not None else 0, now - store_ns)


def now_ms() -> int:
    return int(time.time() * 1000)
