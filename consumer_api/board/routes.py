"""The operations-center board: its page (static files shipped with this package) and its API.

- `GET /board/` and its assets: public, like any page without data; every data request of the
  page carries the same bearer token as any other `/v1/*` call (entered once per tab).
  A Content-Security-Policy of `'self'` keeps the page from fetching anything from elsewhere.
- `GET /v1/board/fleet`: rows of the fleet (filter, sort, page) with the change sequence the
  snapshot is at, and the board's `layout` (columns, filters, detail: what the fleet spec's
  `[board]` shows, consumer_api.board.board_layout); `GET /v1/board/devices/{id}`: history, fields
  and context of one device; `GET /v1/board/devices/{id}/events`: the input records its
  current answer's lineage names, read back from Kafka and read through the spec's validator;
  `GET /v1/board/panel`: the fleet panel's figures.
- `GET /v1/board/stream`: one Server-Sent Events stream per board. `event: rows` carries the
  current rows of the devices changed since the previous frame (`id:` = change sequence);
  a reconnect with `Last-Event-ID` (or a fresh stream started at a snapshot's `seq`) resumes
  from there; `event: reset` tells the board to reload its snapshot (its pending set passed
  the bound, or the change log no longer reaches back); `event: panel` every second;
  `event: lease` the validity leases that arrived (one per partition: a board extends the rows
  whose `lease` column they cover itself, so quiet devices cost no row frames).
  Frames are at least `board_frame_ms` apart, so a burst becomes a few larger frames.
See docs/board.md.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from importlib import resources
from typing import Any

import orjson
from prometheus_client import Gauge
from starlette.requests import Request
from starlette.responses import RedirectResponse, Response
from starlette.routing import Route

from consumer_api.beacons.client_signals import measures
from consumer_api.board.board_layout import ALARM, SOURCES
from consumer_api.board.endpoint_guard import ANSWERED, SEEN, guarded
from consumer_api.board.feed import BoardFeed
from consumer_api.board.fleet_index import FleetIndex
from consumer_api.board.lineage import LineageReader
from consumer_api.edge.admission import Busy
from consumer_api.edge.error_bodies import error
from consumer_api.read.service import Service, now_ms, read_counts
from consumer_api.read.stream_slots import open_stream
from precast.serving import Entry, Lease

BOARD_STREAMS = Gauge("precast_api_board_streams", "open board event streams in this replica")
ASSETS = {
    "index.html": "text/html; charset=utf-8",
    "board.js": "text/javascript; charset=utf-8",
    "layout.js": "text/javascript; charset=utf-8",
    "board.css": "text/css; charset=utf-8",
}
# The page loads nothing from elsewhere, and nothing may frame it.
_CSP = (
    "default-src 'self'; img-src 'self' data:; style-src 'self'; script-src 'self'; "
    "connect-src 'self'; frame-ancestors 'none'; base-uri 'none'; form-action 'self'"
)


@dataclass
class Board:
    index: FleetIndex
    feed: BoardFeed | None = None
    lineage: LineageReader | None = None
    max_rows: int = 50_000
    queue_max: int = 10_000
    frame_s: float = 0.025
    panel_s: float = 1.0
    # event topic name -> its role, to read a lineage record through the spec's validator
    event_roles: dict[str, str] = field(default_factory=dict)
    # where the page links a trace ID (PRECAST_TRACING__UI_URL); "" shows the bare ID
    trace_url: str = ""
    _reads: collections.deque[tuple[float, dict[str, int]]] = field(
        default_factory=lambda: collections.deque(maxlen=120)
    )
    _panel: tuple[float, bytes] = (0.0, b"")


def _asset(name: str) -> bytes:
    return resources.files("consumer_api.board").joinpath("static", name).read_bytes()


class BoardEndpoints:
    def __init__(self, svc: Service, board: Board) -> None:
        self.svc, self.board, self.index = svc, board, board.index
        self.layout = board.index.layout
        self._assets = {name: _asset(name) for name in ASSETS}
        self.fleet_params = (*self.layout.filters, "sort", "order", "offset", "limit")
        self._config = {**self.layout.config(), "trace_url": board.trace_url}

    # -- the page --------------------------------------------------------------------------------
    async def redirect(self, _: Request) -> Response:
        return RedirectResponse("/board/", 308)

    async def page(self, request: Request) -> Response:
        name = request.path_params.get("asset", "index.html")
        if name not in ASSETS:
            return error(404, "not_found", f"no board file {name[:64]!r}")
        return Response(
            self._assets[name],
            media_type=ASSETS[name],
            headers={
                "content-security-policy": _CSP,
                "x-content-type-options": "nosniff",
                "cache-control": "no-cache",
            },
        )

    # -- data --------------------------------------------------------------------------------------
    @guarded(lambda ep: ep.fleet_params)
    async def fleet(self, request: Request) -> Response:
        q, layout = request.query_params, self.layout
        filters = {k: q[k] for k in layout.filters if q.get(k)}
        if (a := filters.get(ALARM)) is not None and a not in layout.states:
            return error(
                400, "invalid_parameter", f"alarm must be one of {', '.join(layout.states)}", ALARM
            )
        if (s := filters.get("source")) is not None and s not in SOURCES:
            return error(
                400, "invalid_parameter", f"source must be one of {', '.join(SOURCES)}", "source"
            )
        sort = q.get("sort", "device_id")
        if sort not in layout.sortable:
            return error(
                400,
                "invalid_parameter",
                f"sort must be one of {', '.join(sorted(layout.sortable))}",
                "sort",
            )
        order = q.get("order", "asc")
        if order not in ("asc", "desc"):
            return error(400, "invalid_parameter", "order must be asc or desc", "order")
        offset = _int(q.get("offset"), 0, 0, 10**9)
        limit = _int(q.get("limit"), 1000, 1, self.board.max_rows)
        if offset is None:
            return error(400, "invalid_parameter", "offset must be an integer >= 0", "offset")
        if limit is None:
            return error(
                400,
                "invalid_parameter",
                f"limit must be an integer in 1..{self.board.max_rows}",
                "limit",
            )
        seq = self.index.seq  # read before the rows: a change racing the query is sent again
        now = now_ms()
        # On the fleet's own threads, bounded per client and replica (503 past it): a large
        # fleet takes a while to sort, and the event loop keeps serving reads meanwhile.
        try:
            total, rows = await self.index.queries.run(
                self.svc.limits.keys(request),
                self.index.query,
                now,
                filters=filters,
                sort=sort,
                descending=order == "desc",
                offset=offset,
                limit=limit,
            )
        except Busy as exc:
            return exc.response()
        body = {
            "seq": seq,
            "now_ms": now,
            "total": total,
            "offset": offset,
            "columns": layout.columns,
            "rows": rows,
            "facets": self.index.facets(),
            "layout": self._config,
        }
        return Response(
            orjson.dumps(body), media_type="application/json", headers={"cache-control": "no-store"}
        )

    @guarded(device=SEEN)
    async def device(self, request: Request, d: str, detail: dict[str, Any]) -> Response:
        return Response(
            orjson.dumps(detail),
            media_type="application/json",
            headers={"cache-control": "no-store"},
        )

    @guarded(device=ANSWERED)
    async def events(self, request: Request, d: str, e: Entry) -> Response:
        reader, events = self.board.lineage, []
        if reader is not None:  # any stored lineage: unusable entries say why (never a 500)
            try:
                events = await reader.events(self.svc.limits.keys(request), e.body)
            except Busy as exc:
                return exc.response()
        for item in events:
            self._read_through_spec(d, item)
        body = {"device_id": d, "computed_at_ms": e.computed_at_ms, "events": events}
        return Response(
            orjson.dumps(body), media_type="application/json", headers={"cache-control": "no-store"}
        )

    def _read_through_spec(self, device: str, item: dict[str, Any]) -> None:
        """A lineage record as the spec reads it: its stream and declared fields by name
        (`fields`), whatever wire variant the device sent; or why the spec refuses it."""
        role = self.board.event_roles.get(str(item.get("topic")))
        if role is None or "event" not in item:
            return
        got = self.layout.fleet.validator.validate(
            role, device.encode(), orjson.dumps(item["event"])
        )
        if not got.ok:
            item["invalid"] = f"{got.reason.value}: {got.detail}"
            return
        name, stream = self.layout.spec.by_topic[role]
        ev = got.event
        item["stream"] = name
        item["event_id"] = ev.get("event_id")
        item["event_time_ms"] = ev.get("event_time_ms")
        item["fields"] = {k: ev[k] for k in stream.fields if ev.get(k) is not None}

    @guarded()
    async def panel(self, request: Request) -> Response:
        return Response(
            self.panel_bytes(), media_type="application/json", headers={"cache-control": "no-store"}
        )

    def panel_bytes(self) -> bytes:
        """The fleet panel, computed at most once per `panel_s` for every board together."""
        b, mono = self.board, time.monotonic()
        if b._panel[1] and mono - b._panel[0] < b.panel_s:
            return b._panel[1]
        reads = read_counts()
        b._reads.append((mono, reads))
        old = next((c for t, c in b._reads if mono - t <= 60.0), reads)
        window = {k: reads[k] - old.get(k, 0) for k in reads}
        total = sum(window.values())
        signals = self.svc.signals
        snap = signals.snapshot()
        rates = b.feed.rates if b.feed is not None else None
        doc: dict[str, Any] = {
            "at_ms": now_ms(),
            "reads_last_min": window,
            "hit_ratio": window.get("precomputed", 0) / total if total else None,
            "freshness": self.index.freshness(now_ms()),
            "events_per_s": rates.events_per_s if rates else None,
            "inferences_per_s": rates.inferences_per_s if rates else None,
            "dead_letters_per_s": rates.dead_letters_per_s if rates else None,
            "dead_letters_total": rates.dead_letters_total if rates else None,
            # Two measures kept apart (precast.telemetry.objectives); the banner only from the wait's rule.
            **measures(snap),
            "banner": signals.banner(snap),
            "board_streams": self.index.subscribers,
        }
        body = orjson.dumps(doc)
        b._panel = (mono, body)
        return body

    @guarded(("last_event_id",))
    async def stream(self, request: Request) -> Response:
        # Both are checked when both are given (the header wins): a bad value is never ignored.
        last: int | None = None
        for where, raw in (
            ("last_event_id", request.query_params.get("last_event_id")),
            ("Last-Event-ID", request.headers.get("last-event-id")),
        ):
            if raw is None:
                continue
            value = _int(raw, 0, 0, 10**19 - 1)
            if value is None:
                return error(
                    400,
                    "invalid_parameter",
                    f"{where} must be a change sequence number (up to 19 digits)",
                    where,
                )
            last = value
        # One slot of the replica's stream cap and of the client's, as for /v1/stream.
        return open_stream(self.svc, request, self._events(last))

    async def _events(self, last: int | None) -> AsyncIterator[bytes]:
        b, index = self.board, self.index
        sub, seq = index.subscribe(b.queue_max, last)
        BOARD_STREAMS.inc()
        try:
            yield b'retry: 1000\nevent: hello\nid: %d\ndata: {"seq":%d}\n\n' % (
                last if last is not None else seq,
                seq,
            )
            yield _frame(b"panel", None, self.panel_bytes())
            next_panel = time.monotonic() + b.panel_s
            keepalive = self.svc.options.sse_keepalive_s
            last_frame = 0.0
            while True:
                mono = time.monotonic()
                wait = min(next_panel - mono, keepalive)
                if wait > 0:
                    with contextlib.suppress(TimeoutError):
                        await asyncio.wait_for(sub.wake.wait(), wait)
                mono = time.monotonic()
                if mono >= next_panel:
                    next_panel = mono + b.panel_s
                    yield _frame(b"panel", None, self.panel_bytes())
                if not sub.wake.is_set():
                    if mono - last_frame >= keepalive:
                        last_frame = mono
                        yield b": keepalive\n\n"
                    continue
                # Coalesce: frames at least frame_s apart; what arrives meanwhile joins the next.
                if (gap := b.frame_s - (mono - last_frame)) > 0:
                    await asyncio.sleep(gap)
                pending, overflow, seq, leases = index.take(sub)
                last_frame = time.monotonic()
                if overflow:
                    yield _frame(b"reset", seq, b'{"reason":"too_many_changes"}')
                elif pending:
                    rows = index.rows(sorted(pending), now_ms())
                    yield _frame(b"rows", seq, b'{"rows":%s}' % orjson.dumps(rows))
                if leases and not overflow:  # after the rows: they may be the ones it extends
                    yield _frame(b"lease", None, _leases_json(leases))
        finally:
            index.unsubscribe(sub)
            BOARD_STREAMS.dec()


def _leases_json(leases: list[Lease]) -> bytes:
    return b'{"leases":%s}' % orjson.dumps(
        [
            {
                "partition": x.partition,
                "generation": x.generation,
                "certified_at_ms": x.certified_at_ms,
                "valid_until_ms": x.valid_until_ms,
            }
            for x in leases
        ]
    )


def _frame(event: bytes, seq: int | None, data: bytes) -> bytes:
    if seq is None:
        return b"event: %s\ndata: %s\n\n" % (event, data)
    return b"event: %s\nid: %d\ndata: %s\n\n" % (event, seq, data)


def _int(raw: str | None, default: int, lo: int, hi: int) -> int | None:
    if raw is None:
        return default
    if not (raw.isascii() and raw.isdigit()):  # as the OpenAPI integer says: no "", no "²"
        return None
    v = int(raw)
    return v if lo <= v <= hi else None


def routes(svc: Service, board: Board) -> list[Route]:
    ep = BoardEndpoints(svc, board)
    return [
        Route("/board", ep.redirect, methods=["GET"]),
        Route("/board/", ep.page, methods=["GET"]),
        Route("/board/{asset}", ep.page, methods=["GET"]),
        Route("/v1/board/fleet", ep.fleet, methods=["GET"]),
        Route("/v1/board/devices/{device_id}", ep.device, methods=["GET"]),
        Route("/v1/board/devices/{device_id}/events", ep.events, methods=["GET"]),
        Route("/v1/board/panel", ep.panel, methods=["GET"]),
        Route("/v1/board/stream", ep.stream, methods=["GET"]),
    ]
