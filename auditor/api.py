"""The auditor's HTTP API: the latest signed checkpoint, inclusion and consistency proofs,
and the probes. Reads use their own read-only SQLite connection (WAL: they never block the
appender); an unknown leaf or checkpoint is a 404.

Hostile clients get what the read API gives them (docs/api.md): the server's connection and
head limits (precast.http, from PRECAST_AUDIT__*), no request bodies (every endpoint is a GET:
a body is refused before it is read), and every bad query a 400 naming the parameter: unknown
or repeated parameters, integers that are not plain ASCII digits or do not fit 63 bits, device
IDs outside the pattern, and half or double selectors. Unknown paths and methods are JSON too."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import JSONResponse, PlainTextResponse, Response
from starlette.routing import Route
from starlette.types import ASGIApp, Receive, Scope, Send

from precast.audit.answers import (
    NotFound,
    checkpoint_doc,
    consistency_doc,
    find_leaf,
    inclusion_doc,
)
from precast.audit.proofs import ProofError
from precast.audit.store import LogStore
from schemas.events import DEVICE_ID_PATTERN, is_device_id

Probe = Callable[[], tuple[bool, dict[str, Any]]]


_MAX_INT = 2**63 - 1  # SQLite's integers; a larger one would fail inside the query
_PARAMETERS_BY_PATH = {
    "/v1/checkpoint": ("size",),
    "/v1/proof/inclusion": ("partition", "offset", "device", "computed_at_ms", "tree_size"),
    "/v1/proof/consistency": ("first", "second"),
}


class BadQuery(ValueError):
    def __init__(self, parameter: str, detail: str) -> None:
        super().__init__(detail)
        self.parameter = parameter


def _check_params(request: Request) -> None:
    allowed = _PARAMETERS_BY_PATH.get(request.url.path, ())
    seen: set[str] = set()
    for name, _value in request.query_params.multi_items():
        shown = name[:64]
        if name not in allowed:
            raise BadQuery(shown, f"unknown query parameter {shown!r} (this endpoint takes "
                           f"{', '.join(allowed) or 'none'})")  # fmt: skip
        if name in seen:
            raise BadQuery(shown, f"query parameter {shown!r} given more than once")
        seen.add(name)


def _int_parameter(request: Request, name: str, required: bool = False) -> int | None:
    raw = request.query_params.get(name)
    if raw is None:
        if required:
            raise BadQuery(name, f"query parameter {name!r} is required")
        return None
    # int() would also take " 5", "+5", "5_0" and non-ASCII digits; the proofs want one form.
    if not (raw.isascii() and raw.isdigit()) or len(raw) > 19 or int(raw) > _MAX_INT:
        raise BadQuery(name, f"query parameter {name!r} must be an integer 0..{_MAX_INT}")
    return int(raw)


def _device_parameter(request: Request) -> str | None:
    raw = request.query_params.get("device")
    if raw is not None and not is_device_id(raw):
        raise BadQuery("device", f"device must match {DEVICE_ID_PATTERN}")
    return raw


def _error(status: int, reason: str, parameter: str | None = None) -> JSONResponse:
    body: dict[str, Any] = {"error": reason}
    if parameter is not None:
        body["parameter"] = parameter
    return JSONResponse(body, status_code=status)


class _Endpoints:
    def __init__(self, store: LogStore) -> None:
        self.store = store
        self.lock = threading.Lock()  # one read connection, shared by the worker threads

    def answer(self, build: Callable[[], Any]) -> Response:
        try:
            with self.lock:
                return JSONResponse(build())
        except BadQuery as exc:
            return _error(400, str(exc), exc.parameter)
        except NotFound as exc:
            return _error(404, str(exc))
        except (ValueError, ProofError) as exc:
            return _error(400, str(exc))

    def checkpoint(self, request: Request) -> Response:
        try:
            _check_params(request)
            size = _int_parameter(request, "size")
        except BadQuery as exc:
            return _error(400, str(exc), exc.parameter)
        with self.lock:
            sc = self.store.latest_checkpoint() if size is None else self.store.checkpoint(size)
        if sc is None:
            missing = (
                "no signed checkpoint yet" if size is None else f"no checkpoint of size {size}"
            )
            return _error(404, missing)
        if "application/json" in request.headers.get("accept", ""):
            return JSONResponse(checkpoint_doc(sc))
        return PlainTextResponse(sc.note)

    def inclusion(self, request: Request) -> Response:
        def build() -> Any:
            _check_params(request)
            by_offset = (_int_parameter(request, "partition"), _int_parameter(request, "offset"))
            by_device = (_device_parameter(request), _int_parameter(request, "computed_at_ms"))
            tree_size = _int_parameter(request, "tree_size")
            given = [p for pair in (by_offset, by_device) for p in pair if p is not None]
            whole = [pair for pair in (by_offset, by_device) if None not in pair]
            if len(whole) != 1 or len(given) != 2:
                raise BadQuery(
                    "partition",
                    "give partition and offset, or device and computed_at_ms (one pair)",
                )
            idx = find_leaf(
                self.store,
                partition=by_offset[0],
                offset=by_offset[1],
                device=by_device[0],
                computed_at_ms=by_device[1],
            )
            return inclusion_doc(self.store, idx, tree_size)

        return self.answer(build)

    def consistency(self, request: Request) -> Response:
        def build() -> Any:
            _check_params(request)
            first = _int_parameter(request, "first", required=True)
            second = _int_parameter(request, "second")
            return consistency_doc(self.store, first, second)  # type: ignore[arg-type]

        return self.answer(build)


def _probe(check: Probe) -> Callable[[Request], Response]:
    def endpoint(_: Request) -> Response:
        ok, details = check()
        body = {"status": "ok" if ok else "unavailable", **details}
        return JSONResponse(body, 200 if ok else 503)

    return endpoint


def _metrics(_: Request) -> Response:
    return Response(generate_latest(), media_type=CONTENT_TYPE_LATEST)


async def _http_error(_: Request, exc: Exception) -> Response:
    assert isinstance(exc, HTTPException)
    code = {404: "not_found", 405: "method_not_allowed"}.get(exc.status_code, "http_error")
    return JSONResponse({"error": code}, exc.status_code, headers=exc.headers)


class NoBodies:
    """Every endpoint is a GET: a request that announces a body is answered 413 before any of
    it is read (the connection closes), so a client cannot hold a worker with a slow body."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            headers = dict(scope["headers"])
            length = headers.get(b"content-length", b"0").strip()
            if b"transfer-encoding" in headers or length not in (b"", b"0"):
                body = b'{"error":"body_not_allowed","detail":"this API takes no request bodies"}'
                await send(
                    {
                        "type": "http.response.start",
                        "status": 413,
                        "headers": [
                            (b"content-type", b"application/json"),
                            (b"content-length", b"%d" % len(body)),
                            (b"connection", b"close"),
                        ],
                    }
                )
                await send({"type": "http.response.body", "body": body})
                return
        await self.app(scope, receive, send)


def create_app(store: LogStore, health: Probe, ready: Probe) -> Starlette:
    ep = _Endpoints(store)
    app = Starlette(
        routes=[
            Route("/v1/checkpoint", ep.checkpoint, methods=["GET"]),
            Route("/v1/proof/inclusion", ep.inclusion, methods=["GET"]),
            Route("/v1/proof/consistency", ep.consistency, methods=["GET"]),
            Route("/healthz", _probe(health), methods=["GET"]),
            Route("/readyz", _probe(ready), methods=["GET"]),
            Route("/metrics", _metrics, methods=["GET"]),
        ],
        middleware=[Middleware(NoBodies)],
        exception_handlers={HTTPException: _http_error},
    )
    # A trailing-slash redirect would build its Location from the client's Host header.
    app.router.redirect_slashes = False
    return app
