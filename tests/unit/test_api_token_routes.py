"""Every route of the app's own route table (and the fast path in front of it), each sent no
token, a token of every scope but the one it needs, and one with it: the list of calls is
read from the app, so a route added later is covered without anyone remembering to list it.
The scope a route needs is the one its OpenAPI operation declares, and every /v1/ route
needs one."""

from __future__ import annotations

import asyncio
import json

import pytest
from starlette.routing import Route

from consumer_api.openapi import build_spec
from consumer_api.read.fastpath import PREFIX, SUFFIX
from precast.tokens import SCOPES, line_for, new_token
from tests.api_fixtures import make_app, make_board, make_service, now_ms, prediction

TOKENS = {scope: new_token() for scope in SCOPES}
FILLS = {"{device_id}": "dev-1", "{asset}": "index.html"}
BODIES = {
    "/v1/prefetch": {"device_ids": ["dev-1"]},
    "/v1/beacon": {"timings": [{"input_to_shown_ms": 1, "network_ms": 1}]},
}


@pytest.fixture(scope="module")
def app_and_spec(tmp_path_factory):
    f = tmp_path_factory.mktemp("tokens") / "tokens"
    f.write_text("".join(line_for(f"t-{s}", frozenset({s}), t) + "\n" for s, t in TOKENS.items()))
    svc = make_service(tokens_file=f)
    svc.view.put_if_newer("dev-1", prediction("dev-1", now_ms()))
    board = make_board(svc)
    board.index.stored([("dev-1", prediction("dev-1", now_ms()))])
    app = make_app(svc, board)
    return app, build_spec(svc.options, board=board.index.layout)


def calls(app) -> list[tuple[str, str]]:
    """(method, path template) of every route the app serves."""
    starlette = app.app.app  # Host allow-list -> fast path -> Starlette
    out = [(m, r.path) for r in starlette.routes if isinstance(r, Route) for m in r.methods
           if m != "HEAD"]  # fmt: skip
    return [("GET", PREFIX + "{device_id}" + SUFFIX), *sorted(out)]


def status(app, method: str, template: str, token: str | None) -> int:
    """The status the app starts its answer with (streams are not read further)."""
    path = template
    for k, v in FILLS.items():
        path = path.replace(k, v)
    body = json.dumps(BODIES.get(template, {})).encode() if method == "POST" else b""
    headers = [(b"host", b"localhost"), (b"content-type", b"application/json"),
               (b"content-length", b"%d" % len(body))]  # fmt: skip
    if token is not None:
        headers.append((b"authorization", f"Bearer {token}".encode()))
    scope = {"type": "http", "http_version": "1.1", "method": method, "path": path,
             "raw_path": path.encode(), "root_path": "", "scheme": "http", "query_string": b"",
             "headers": headers, "client": ("127.0.0.1", 5000), "server": ("localhost", 8000)}  # fmt: skip
    sent = [{"type": "http.request", "body": body, "more_body": False}]

    async def run() -> int:
        started: asyncio.Future[int] = asyncio.get_running_loop().create_future()

        async def receive():
            if sent:
                return sent.pop()
            await asyncio.sleep(3600)  # the client stays: an accepted stream keeps going

        async def send(msg):
            if msg["type"] == "http.response.start" and not started.done():
                started.set_result(msg["status"])

        task = asyncio.ensure_future(app(scope, receive, send))
        done, _ = await asyncio.wait([started, task], return_when=asyncio.FIRST_COMPLETED)
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        return started.result()

    return asyncio.run(run())


def test_the_route_table_includes_what_the_issue_found_untested(app_and_spec):
    app, _ = app_and_spec
    paths = {p for _, p in calls(app)}
    assert {"/v1/board/devices/{device_id}", "/v1/board/devices/{device_id}/events"} <= paths


def test_every_route_refuses_no_token_and_the_wrong_scope_and_serves_the_right_one(app_and_spec):
    app, spec = app_and_spec
    checked = 0
    for method, template in calls(app):
        op = spec["paths"][template][method.lower()]
        needed = [s for req in op.get("security", []) for s in req.get("bearer", [])]
        if template.startswith("/v1/"):
            assert len(needed) == 1, f"{method} {template} declares no scope"
        if not needed:  # public: the page, probes, metrics, this document
            assert status(app, method, template, None) < 400, template
            continue
        [scope] = needed
        assert status(app, method, template, None) == 401, template
        for other in SCOPES:
            got = status(app, method, template, TOKENS[other])
            if other == scope:
                assert got not in (401, 403) and got < 500, (template, other, got)
            else:
                assert got == 403, (template, other, got)
        checked += 1
    assert checked >= 10  # the read, prefetch and board routes all took part
