"""The auditor's HTTP API: the latest signed checkpoint, inclusion and consistency proofs,
and the probes. Reads use their own read-only SQLite connection (WAL: they never block the
appender); a bad query is a 400 with a reason, an unknown leaf or checkpoint a 404."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, PlainTextResponse, Response
from starlette.routing import Route

from precast.audit.answers import (
    NotFound,
    checkpoint_doc,
    consistency_doc,
    find_leaf,
    inclusion_doc,
)
from precast.audit.proofs import ProofError
from precast.audit.store import LogStore

Probe = Callable[[], tuple[bool, dict[str, Any]]]


def _int(request: Request, name: str, required: bool = False) -> int | None:
    raw = request.query_params.get(name)
    if raw is None or raw == "":
        if required:
            raise ValueError(f"query parameter {name!r} is required")
        return None
    try:
        value = int(raw)
    except ValueError:
        raise ValueError(f"query parameter {name!r} must be an integer, got {raw!r}") from None
    if value < 0:
        raise ValueError(f"query parameter {name!r} must not be negative")
    return value


def _error(status: int, reason: str) -> JSONResponse:
    return JSONResponse({"error": reason}, status_code=status)


class _Endpoints:
    def __init__(self, store: LogStore) -> None:
        self.store = store
        self.lock = threading.Lock()  # one read connection, shared by the worker threads

    def answer(self, build: Callable[[], Any]) -> Response:
        try:
            with self.lock:
                return JSONResponse(build())
        except NotFound as exc:
            return _error(404, str(exc))
        except (ValueError, ProofError) as exc:
            return _error(400, str(exc))

    def checkpoint(self, request: Request) -> Response:
        try:
            size = _int(request, "size")
        except ValueError as exc:
            return _error(400, str(exc))
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
            idx = find_leaf(
                self.store,
                partition=_int(request, "partition"),
                offset=_int(request, "offset"),
                device=request.query_params.get("device"),
                computed_at_ms=_int(request, "computed_at_ms"),
            )
            return inclusion_doc(self.store, idx, _int(request, "tree_size"))

        return self.answer(build)

    def consistency(self, request: Request) -> Response:
        def build() -> Any:
            first = _int(request, "first", required=True)
            return consistency_doc(self.store, first, _int(request, "second"))  # type: ignore[arg-type]

        return self.answer(build)


def _probe(check: Probe) -> Callable[[Request], Response]:
    def endpoint(_: Request) -> Response:
        ok, details = check()
        body = {"status": "ok" if ok else "unavailable", **details}
        return JSONResponse(body, 200 if ok else 503)

    return endpoint


def _metrics(_: Request) -> Response:
    return Response(generate_latest(), media_type=CONTENT_TYPE_LATEST)


def create_app(store: LogStore, health: Probe, ready: Probe) -> Starlette:
    ep = _Endpoints(store)
    return Starlette(
        routes=[
            Route("/v1/checkpoint", ep.checkpoint, methods=["GET"]),
            Route("/v1/proof/inclusion", ep.inclusion, methods=["GET"]),
            Route("/v1/proof/consistency", ep.consistency, methods=["GET"]),
            Route("/healthz", _probe(health), methods=["GET"]),
            Route("/readyz", _probe(ready), methods=["GET"]),
            Route("/metrics", _metrics, methods=["GET"]),
        ]
    )
