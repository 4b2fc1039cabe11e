"""GET /v1/devices/{device_id}/prediction as a plain ASGI callable in front of Starlette.

This is the endpoint the UI polls; Starlette's routing, request and response objects cost
more than the lookup itself (measured: a Starlette path-parameter route ran at ~6k req/s where
a plain ASGI callable ran at ~17k on the same uvicorn), so this one path skips them. Every
other path goes to the Starlette app.

The common case (GET, no query, authorized, a fresh entry in the in-process view) is one
function with no further calls but the rendering (`answer.fresh`); anything else takes
`checked`, which runs every check in the documented order (method, auth, query, device ID).
A view hit needs no device-ID check: the store refuses IDs outside the pattern.

Every answer's Server-Timing carries the read's own wait (`wait.read`, `wait.db_lock`, from
two clock reads around the store lookup; consumer_api.read.answer)."""

from __future__ import annotations

import time
from time import perf_counter_ns

from starlette.types import ASGIApp, Receive, Scope, Send

from consumer_api.edge.error_bodies import auth_refusal, error_body
from consumer_api.read.answer import PRECOMPUTED, etag_matches, fresh
from consumer_api.read.service import Service, count_read, now_ms
from schemas.events import is_device_id

PREFIX, SUFFIX = "/v1/devices/", "/prediction"
_CUT, _SUFFIX_LEN = len(PREFIX), len(SUFFIX)
_MIN_LEN = _CUT + _SUFFIX_LEN
_JSON = (b"content-type", b"application/json")
_START, _BODY = "http.response.start", "http.response.body"


class FastPath:
    def __init__(self, service: Service, app: ASGIApp) -> None:
        self.service, self.app = service, app
        view = service.view
        self._peek = view.peek if view is not None else None
        self._resolve = view.resolve if view is not None else None
        self._open = not service.auth_enabled
        self._edge = service.renderer.edge
        self._note = service.hints.note if service.hints is not None else None
        self._spans = service.read_spans

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            path: str = scope["path"]
            if path.startswith(PREFIX) and path.endswith(SUFFIX) and len(path) > _MIN_LEN:
                t0 = perf_counter_ns()
                inm = auth = None
                for k, v in scope["headers"]:
                    if k == b"if-none-match":
                        inm = v
                    elif k == b"authorization":
                        auth = v
                peek = self._peek
                if (
                    peek is None
                    or scope["method"] != "GET"
                    or scope["query_string"]
                    or not (self._open or self.service.check(auth, "read") == 0)
                ):
                    return await self.checked(scope, send, path[_CUT:-_SUFFIX_LEN], auth, inm, t0)
                now = time.time_ns() // 1_000_000
                device = path[_CUT:-_SUFFIX_LEN]
                t1 = perf_counter_ns()
                e = peek(device)
                if e is not None and e.terms is not None and now >= e.valid_until_ms:
                    e = self._resolve(device, e)  # type: ignore[misc]  # set with _peek
                t2 = perf_counter_ns()
                if e is None or e.purge or now >= e.valid_until_ms:
                    return await self.checked(scope, send, device, auth, inm, t0)
                body, headers, etag, _ = fresh(device, e, now, t1 - t0, t2 - t1, self._edge)
                count_read(PRECOMPUTED)
                if self._spans is not None:  # tracing on (consumer_api.read.read_spans)
                    self._spans.read(device, e, PRECOMPUTED, t0, headers)
                if self._note is not None:
                    self._note(device)
                if inm is not None and etag_matches(inm, etag):
                    await send({"type": _START, "status": 304, "headers": headers[1:]})
                    await send({"type": _BODY, "body": b""})
                    return
                headers.append((b"content-length", b"%d" % len(body)))
                await send({"type": _START, "status": 200, "headers": headers})
                await send({"type": _BODY, "body": body})
                return
        await self.app(scope, receive, send)

    async def checked(
        self,
        scope: Scope,
        send: Send,
        device_id: str,
        auth: bytes | None,
        inm: bytes | None,
        started_ns: int | None = None,
    ) -> None:
        svc = self.service
        if scope["method"] not in ("GET", "HEAD"):
            return await _send(
                send,
                405,
                error_body("method_not_allowed", "use GET"),
                [_JSON, (b"allow", b"GET, HEAD")],
            )
        if status := svc.check(auth, "read"):
            body, extra = auth_refusal(status, "read")
            return await _send(
                send, status, body, [_JSON, *((k.encode(), v.encode()) for k, v in extra.items())]
            )
        if scope["query_string"]:
            name = (
                scope["query_string"]
                .split(b"&", 1)[0]
                .split(b"=", 1)[0]
                .decode(errors="replace")[:64]
            )
            return await _send(
                send,
                400,
                error_body("unknown_parameter", "this endpoint takes no query parameters", name),
                [_JSON],
            )
        if not is_device_id(device_id):
            return await _send(
                send,
                400,
                error_body(
                    "invalid_device_id",
                    "device_id must match ^[A-Za-z0-9][A-Za-z0-9._:-]{0,127}$",
                    "device_id",
                ),
                [_JSON],
            )
        a = await svc.answer(device_id, now_ms(), started_ns)
        if inm is not None and a.etag is not None and etag_matches(inm, a.etag):
            return await _send(send, 304, b"", [h for h in a.headers if h[0] != b"content-type"])
        await _send(send, 200, b"" if scope["method"] == "HEAD" else a.body, a.headers, len(a.body))


async def _send(
    send: Send, status: int, body: bytes, headers: list, length: int | None = None
) -> None:
    n = len(body) if length is None else length
    await send(
        {
            "type": _START,
            "status": status,
            "headers": [*headers, (b"content-length", b"%d" % n)] if status != 304 else headers,
        }
    )
    await send({"type": _BODY, "body": body})
