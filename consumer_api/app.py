"""The read API: the hot single-device GET (consumer_api.read.fastpath) in front of a Starlette app
for the batch GET, the event stream, prefetch hints, UI beacons, probes, metrics and OpenAPI."""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import logging
import signal
from time import perf_counter_ns
from typing import Any

import orjson
from prometheus_client import REGISTRY, Counter, Gauge
from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from consumer_api.beacons import beacon as beacons
from consumer_api.board import routes as board_routes
from consumer_api.board.board_layout import BoardLayout
from consumer_api.edge.client_limits import retry_after
from consumer_api.edge.error_bodies import auth_error, error
from consumer_api.edge.error_hygiene import ErrorHygiene
from consumer_api.edge.host_allowlist import HostAllowList
from consumer_api.edge.requests_in import Prefetch, device_list, read_json, unknown_params
from consumer_api.openapi import build_spec
from consumer_api.read.answer import PRECOMPUTED, etag_matches, wait_timing
from consumer_api.read.fastpath import FastPath
from consumer_api.read.service import Service, now_ms
from consumer_api.read.stream_slots import open_stream
from precast.errors import PrecastError
from precast.http.parts import down as parts_down
from precast.supervise import Supervised, terminate_process
from precast.telemetry.endpoints import exposition

log = logging.getLogger("precast.api")


class Endpoints:
    """The Starlette endpoints; each checks auth and parameters first."""

    def __init__(self, svc: Service, board: bool | BoardLayout = False) -> None:
        self.svc, self.opts = svc, svc.options
        self._spec = orjson.dumps(build_spec(svc.options, board=board))

    def guard(
        self, request: Request, allowed: tuple[str, ...], scope: str = "read"
    ) -> Response | None:
        status = self.svc.check(request.headers.get("authorization", "").encode() or None, scope)
        if status:
            return auth_error(status, scope)
        return unknown_params(request, allowed)

    async def batch(self, request: Request) -> Response:
        started = perf_counter_ns()
        if (bad := self.guard(request, ("ids",))) is not None:
            return bad
        ids = device_list(request.query_params.get("ids"), self.opts.batch_max)
        if isinstance(ids, Response):
            return ids
        answers, wait = await self.svc.answers_timed(ids, now_ms(), started)
        body = b'{"count":%d,"predictions":[%s]}' % (
            len(answers),
            b",".join(a.body for a in answers),
        )
        digest = hashlib.blake2b(
            b"|".join(a.etag or b"-" for a in answers), digest_size=12
        ).hexdigest()
        fresh = all(a.source == PRECOMPUTED for a in answers)
        headers = {
            "cache-control": f"max-age={min(a.max_age or 0 for a in answers)}"
            if fresh
            else "no-cache",
            "etag": f'W/"{digest}"',
            "server-timing": wait_timing(wait).decode(),  # the items' ages are in their bodies
        }
        if (inm := request.headers.get("if-none-match")) and etag_matches(
            inm.encode(), headers["etag"].encode()
        ):
            return Response(status_code=304, headers=headers)
        return Response(body, headers=headers, media_type="application/json")

    async def stream(self, request: Request) -> Response:
        if (bad := self.guard(request, ("ids",))) is not None:
            return bad
        ids = device_list(request.query_params.get("ids"), self.opts.sse_max_devices)
        if isinstance(ids, Response):
            return ids
        # Each stream holds a connection and a subscription: bound per client and per replica
        # so a reconnect storm sheds load with a clear answer instead of exhausting the replica.
        return open_stream(self.svc, request, self._events(ids))

    async def _events(self, ids: list[str]):
        svc = self.svc
        sub = svc.hub.subscribe(ids)  # the stream's slot was reserved by `stream`
        try:
            for d, a in zip(ids, await svc.answers(ids, now_ms()), strict=True):
                yield _event(d, a.body)
            while True:
                try:
                    await asyncio.wait_for(sub.wake.wait(), self.opts.sse_keepalive_s)
                except TimeoutError:
                    yield b": keepalive\n\n"
                    continue
                now = now_ms()
                for d, e in sub.take().items():
                    a = svc.renderer.render(d, svc.resolve(d, e), now)
                    yield _event(d, svc.served(d, a, now).body)
        finally:
            svc.hub.unsubscribe(sub)

    async def prefetch(self, request: Request) -> Response:
        if (bad := self.guard(request, (), "prefetch")) is not None:
            return bad
        hint = await read_json(
            request, Prefetch, self.opts.max_body_bytes, self.opts.body_timeout_s
        )
        if isinstance(hint, Response):
            return hint
        if len(hint.device_ids) > self.opts.batch_max:
            return error(
                400,
                "too_many_devices",
                f"at most {self.opts.batch_max} devices per hint",
                "device_ids",
            )
        svc = self.svc
        ids = list(dict.fromkeys(hint.device_ids))
        # Each named device may cost a precompute: the allowance counts devices, not requests.
        if wait := svc.limits.take("prefetch", svc.limits.keys(request), len(ids)):
            return error(
                429,
                "rate_limited",
                f"at most {self.opts.client_prefetch_per_s:g} prefetched devices a second per client",
                headers={"Retry-After": retry_after(wait)},
            )
        now = now_ms()
        entries = svc.view.get_many(ids, now) if svc.view is not None else await _get_many(svc, ids)
        for d, e in zip(ids, entries, strict=True):
            if e is not None and svc.hints is not None:
                svc.hints.prefetched(d)  # a device with an answer, about to be shown
        ask = [
            d
            for d, e in zip(ids, entries, strict=True)
            # unknown devices never ask (see answer.Renderer.fallback)
            if e is not None and svc.renderer.classify(e, now)[0] != PRECOMPUTED
        ]
        unknown = sum(e is None for e in entries)
        counts = await svc.asker.request_many(ask, "prefetch", now)
        counts["fresh"] = len(ids) - len(ask) - unknown
        counts["unknown"] = unknown
        return Response(orjson.dumps(counts), 202, media_type="application/json")

    async def beacon(self, request: Request) -> Response:
        if (bad := self.guard(request, (), "prefetch")) is not None:
            return bad
        keys = self.svc.limits.keys(request)
        if wait := self.svc.limits.take("beacon", keys):
            return error(
                429,
                "rate_limited",
                f"at most {self.opts.client_beacons_per_s:g} beacons a second per client",
                headers={"Retry-After": retry_after(wait)},
            )
        b = await read_json(
            request, beacons.Beacon, self.opts.max_body_bytes, self.opts.body_timeout_s
        )
        if isinstance(b, Response):
            return b
        # One client's weight in the shares: its address where known (the token is often
        # shared by every UI), see consumer_api.beacons.beacon.
        beacons.record(b, self.svc.signals, keys[-1], self.opts.beacon_max_ms)
        if self.svc.render_spans is not None:  # tracing on: the views' render spans
            self.svc.render_spans.record(b)
        return Response(status_code=204)

    async def healthz(self, _: Request) -> Response:
        ok, details = self.svc.health()
        # which tokens file this replica serves from (`precast api-token revoke` waits for it)
        tokens = self.svc.tokens
        details = {**details, "tokens": tokens.generation if tokens is not None else "none"}
        return _status(ok, details)

    async def readyz(self, _: Request) -> Response:
        ok, details = self.svc.readiness()
        if down := parts_down(self.svc.parts):
            ok, details = False, {**details, "down": [*details.get("down", []), *down]}
        return _status(ok, details)

    async def metrics(self, request: Request) -> Response:
        body, content_type = exposition(REGISTRY, request.headers.get("accept"))
        return Response(body, media_type=content_type)

    async def openapi(self, _: Request) -> Response:
        return Response(self._spec, media_type="application/json")


def create_app(svc: Service, board: board_routes.Board | None = None):
    """The ASGI app; with `board`, also the operations-center board (consumer_api.board.routes)."""
    ep = Endpoints(svc, board=board.index.layout if board is not None else False)

    @contextlib.asynccontextmanager
    async def lifespan(_app):
        svc.hub.bind(asyncio.get_running_loop())

        async def poll():  # budget decisions for noted requests, delivery reports
            while True:
                try:
                    await svc.asker.drain()
                except Exception:  # a failed round is retried by the next: not a restart
                    log.exception("precompute requests: drain failed")
                svc.asker.poll()
                await asyncio.sleep(0.05)

        async def hint():  # read hints to the workers (speculation)
            while True:
                await asyncio.sleep(svc.options.hint_interval_s)
                if svc.hints is not None:
                    svc.hints.flush(now_ms(), svc.hub.watched())

        async def tokens():  # rotation without a restart: the file is re-read when it changes
            while True:
                await asyncio.sleep(TOKENS_RELOAD_S)
                reload_tokens(svc)

        # Each under precast.supervise: one that raises restarts (counted); one that keeps
        # raising turns /readyz false and ends the process.
        tasks = [
            _supervised(svc, name).task(fn)
            for name, fn in (("api-poll", poll), ("api-hints", hint), ("api-tokens", tokens))
        ]
        with contextlib.suppress(RuntimeError, ValueError, NotImplementedError):
            # SIGHUP re-reads it at once (only where this loop runs on the main thread)
            asyncio.get_running_loop().add_signal_handler(signal.SIGHUP, reload_tokens, svc)
        try:
            yield
        finally:
            for t in tasks:
                t.cancel()
            with contextlib.suppress(Exception):
                await svc.asker.drain()
            svc.asker.flush()
            if svc.reader is not None:
                await svc.reader.close()

    app = Starlette(
        routes=[
            Route("/v1/predictions", ep.batch, methods=["GET"]),
            Route("/v1/stream", ep.stream, methods=["GET"]),
            Route("/v1/prefetch", ep.prefetch, methods=["POST"]),
            Route("/v1/beacon", ep.beacon, methods=["POST"]),
            Route("/healthz", ep.healthz, methods=["GET"]),
            Route("/readyz", ep.readyz, methods=["GET"]),
            Route("/metrics", ep.metrics, methods=["GET"]),
            Route("/openapi.json", ep.openapi, methods=["GET"]),
            *(board_routes.routes(svc, board) if board is not None else ()),
        ],
        middleware=[Middleware(ErrorHygiene)],
        exception_handlers={HTTPException: _http_error},
        lifespan=lifespan,
    )
    # A trailing-slash redirect would build its Location from the client's Host header.
    app.router.redirect_slashes = False
    return HostAllowList(FastPath(svc, app), svc.options.allowed_hosts)


TOKENS_RELOAD_S = 1.0
TOKEN_RELOAD_ERRORS = Counter(
    "precast_api_token_reload_errors",
    "re-reads of the tokens file that failed (the previous tokens stay; a gone file: none)",
)
TOKENS_LOADED = Gauge("precast_api_tokens", "bearer tokens this replica accepts")


# The restart policy of the app's tasks (precast.supervise's defaults; tests shorten them).
SUPERVISE: dict[str, Any] = {}


def _give_up(part: str, exc: BaseException) -> None:
    terminate_process(part, exc)


def _supervised(svc: Service, name: str) -> Supervised:
    part = Supervised(name, on_give_up=_give_up, **SUPERVISE)
    svc.parts.append(part)
    return part


def reload_tokens(svc: Service) -> None:
    """Re-read the tokens file if it changed; log only what changed. A file that cannot be
    used (unreadable, not UTF-8, a folder, a bad line: anything) keeps the previous tokens, a
    file that is gone leaves none of its tokens valid; either is logged once per distinct
    error (the message names a line, never its content) and counted."""
    table = svc.tokens
    if table is None:
        return
    before = table.names()
    try:
        changed = table.reload()
    except Exception as exc:  # noqa: BLE001 - whatever the file holds, the reload goes on
        TOKEN_RELOAD_ERRORS.inc()
        TOKENS_LOADED.set(len(table))
        text = str(exc) if isinstance(exc, PrecastError) else f"{type(exc).__name__}: {exc}"
        if table.error != text:
            log.error("tokens file not re-read (%s tokens valid): %s", len(table), text[:300])
            table.error = text
        return
    TOKENS_LOADED.set(len(table))
    if table.error is not None:
        log.info("tokens file read again after an error: %d tokens", len(table))
        table.error = None
    if changed:
        after = table.names()
        log.info(
            "tokens file re-read: %d tokens (generation %s; added %s, removed %s)",
            len(table),
            table.generation,
            ", ".join(sorted(after - before)) or "none",
            ", ".join(sorted(before - after)) or "none",
        )


async def _http_error(_: Request, exc: Exception) -> Response:
    assert isinstance(exc, HTTPException)
    code = {404: "not_found", 405: "method_not_allowed"}.get(exc.status_code, "http_error")
    return error(exc.status_code, code, str(exc.detail), headers=exc.headers)


async def _get_many(svc: Service, ids: list[str]):
    import redis

    assert svc.reader is not None  # the service has a reader when it has no view
    try:
        return await svc.reader.get_many(ids)
    except redis.RedisError:
        return [None] * len(ids)


def _event(device_id: str, body: bytes) -> bytes:
    return b"event: prediction\nid: %s\ndata: %s\n\n" % (device_id.encode(), body)


def _status(ok: bool, details: dict) -> Response:
    return Response(
        orjson.dumps({"status": "ok" if ok else "unavailable", **details}),
        200 if ok else 503,
        media_type="application/json",
    )
