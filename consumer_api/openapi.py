"""The OpenAPI 3.2 document served at /openapi.json, generated from the pydantic models the
handlers validate with (`requests_in.Prefetch`, `beacon.Beacon`) and the response models
(`consumer_api.read.contract`), with limits taken from the running options. It declares exactly what
the server enforces: with tokens configured, each operation's bearer scope (read, prefetch,
board) and its 401/403 answers; without, no security at all. Event streams declare each frame
(`itemSchema`, new in 3.2: event name, id, and the JSON their `data` carries). schemathesis
fuzzes a live API against it with every token setting (tests/integration/test_api_contract.py);
tests/unit/test_api_app.py checks that every route is documented and every documented path
exists."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel

from consumer_api.beacons.beacon import Beacon
from consumer_api.board import openapi_paths
from consumer_api.board.board_layout import BoardLayout
from consumer_api.edge.requests_in import Prefetch
from consumer_api.read import contract
from consumer_api.settings import ApiOptions
from precast.fleet import load_fleet
from schemas.events import DEVICE_ID_PATTERN

_REF = "#/components/schemas/{model}"
_DEVICE_ID = DEVICE_ID_PATTERN.removeprefix("^").removesuffix("$")
_MODELS: tuple[type[BaseModel], ...] = (
    contract.Error,
    contract.Answer,
    contract.Batch,
    contract.PrefetchResult,
    Prefetch,
    Beacon,
)


def _schemas(batch_max: int) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for model in _MODELS:
        schema = model.model_json_schema(ref_template=_REF)
        out.update(schema.pop("$defs", {}))
        out[model.__name__] = schema
    # The model bounds a hint generously; the running replica's limit is what it enforces.
    out["Prefetch"]["properties"]["device_ids"]["maxItems"] = batch_max
    return out


def _ref(name: str) -> dict[str, Any]:
    return {"$ref": _REF.format(model=name)}


def _json(name: str, description: str) -> dict[str, Any]:
    return {"description": description, "content": {"application/json": {"schema": _ref(name)}}}


def _errors(*codes: int, auth: bool) -> dict[str, Any]:
    why = {
        400: "bad parameter (the body names it)",
        401: "bearer token missing or unknown",
        403: "the token lacks this operation's scope",
        404: "no such path (e.g. an empty device ID)",
        405: "method not allowed",
        408: "body not received in time (PRECAST_API__BODY_TIMEOUT_S)",
        413: "body too large",
        415: "not application/json",
        422: "body breaks the schema",
        429: "past this client's allowance (PRECAST_API__CLIENT_*); Retry-After says when",
        503: "unavailable (see Retry-After)",
    }
    listed = [*codes, 405] + ([401, 403] if auth else [])
    out = {str(c): _json("Error", why[c]) for c in sorted(set(listed))}
    if "429" in out:
        out["429"]["headers"] = {
            "Retry-After": {"description": "seconds", "schema": {"type": "integer"}}
        }
    return out


def _ids(limit: int, what: str) -> dict[str, Any]:
    return {
        "name": "ids",
        "in": "query",
        "required": True,
        "description": f"comma-separated device IDs, at most {limit} ({what})",
        "schema": {"type": "string", "pattern": f"^{_DEVICE_ID}(,{_DEVICE_ID}){{0,{limit - 1}}}$"},
    }


def _plain(summary: str, ok: str, *extra: int) -> dict[str, Any]:
    responses: dict[str, Any] = {"200": {"description": ok}}
    for code in extra:
        responses[str(code)] = {"description": "not ok (details in the body)"}
    responses["405"] = _json("Error", "method not allowed")
    return {"get": {"summary": summary, "security": [], "responses": responses}}


_TIMING_HEADERS = {
    "Server-Timing": "two measures kept apart (ms): age.queue, age.model, age.kafka, "
    "age.cache (the answer's age by segment; none for a fallback) and wait.read, wait.db_lock "
    "(what this read waited for on the server and for the store)",
    "X-Model-Version": "model version of a precomputed or stale answer",
    "Cache-Control": "max-age until valid_until (precomputed), no-cache (stale), no-store "
    "(fallback)",
    "ETag": "weak; identifies the prediction (send as If-None-Match for 304)",
}


def _frame(event: str, data: dict[str, Any], id_schema: dict[str, Any] | None) -> dict[str, Any]:
    """One kind of event-stream frame as OpenAPI 3.2 describes an item: `event`, `data` (JSON
    text of `data`'s schema) and, where frames carry one, `id`."""
    props: dict[str, Any] = {
        "event": {"const": event},
        "data": {
            "type": "string",
            "contentMediaType": "application/json",
            "contentSchema": data,
        },
        "retry": {"type": "integer", "minimum": 0},
    }
    if id_schema is not None:
        props["id"] = id_schema
    return {
        "type": "object",
        "required": ["event", "data"],
        "properties": props,
        "additionalProperties": False,
    }


def event_stream(*frames: dict[str, Any]) -> dict[str, Any]:
    item = frames[0] if len(frames) == 1 else {"oneOf": list(frames)}
    return {
        "description": "text/event-stream; comment lines (`: keepalive`) between frames",
        "content": {"text/event-stream": {"itemSchema": item}},
    }


SCOPE_OF = {
    "/v1/devices/{device_id}/prediction": "read",
    "/v1/predictions": "read",
    "/v1/stream": "read",
    "/v1/prefetch": "prefetch",
    "/v1/beacon": "prefetch",
}


def build_spec(opts: ApiOptions, *, board: bool | BoardLayout = False) -> dict[str, Any]:
    """The document for a replica with these options (`board`: it serves the board of this
    layout, or of the built-in fleet for True; `consumer_api.board.openapi_paths`)."""
    auth = opts.auth_token is not None or opts.tokens_file is not None
    one = {
        "summary": "The newest answer for one device (precomputed, stale or fallback)",
        "parameters": [
            {
                "name": "device_id",
                "in": "path",
                "required": True,
                "schema": {"type": "string", "pattern": DEVICE_ID_PATTERN},
            },
            {
                "name": "If-None-Match",
                "in": "header",
                "required": False,
                "schema": {"type": "string"},
            },
        ],
        "responses": {
            "200": {
                **_json("Answer", "the answer"),
                "headers": {
                    k: {"description": v, "schema": {"type": "string"}}
                    for k, v in _TIMING_HEADERS.items()
                },
            },
            "304": {"description": "unchanged since the given ETag"},
            **_errors(400, 404, auth=auth),
        },
    }
    spec: dict[str, Any] = {
        "openapi": "3.2.0",
        "info": {
            "title": "precast read API",
            "version": "1",
            "description": "The newest precomputed prediction per device, with where its "
            "delay came from. See docs/api.md.",
        },
        "paths": {
            "/v1/devices/{device_id}/prediction": {"get": one},
            "/v1/predictions": {
                "get": {
                    "summary": "Answers for a list of devices (list views), in request order, "
                    "duplicates removed",
                    "parameters": [_ids(opts.batch_max, "PRECAST_API__BATCH_MAX")],
                    "responses": {
                        "200": _json("Batch", "one answer per device"),
                        "304": {"description": "unchanged"},
                        **_errors(400, auth=auth),
                    },
                }
            },
            "/v1/stream": {
                "get": {
                    "summary": "Server-Sent Events: the current answer for each device, then every "
                    "newer one (event: prediction, id: device ID, data: Answer)",
                    "parameters": [_ids(opts.sse_max_devices, "PRECAST_API__SSE_MAX_DEVICES")],
                    "responses": {
                        "200": event_stream(
                            _frame(
                                "prediction",
                                _ref("Answer"),
                                {"type": "string", "pattern": DEVICE_ID_PATTERN},
                            )
                        ),
                        **_errors(400, 429, 503, auth=auth),
                    },
                }
            },
            "/v1/prefetch": {
                "post": {
                    "summary": "The UI names devices it is about to show; those the store knows "
                    "without a fresh answer get one deduplicated precompute request each",
                    "requestBody": _body("Prefetch"),
                    "responses": {
                        "202": _json("PrefetchResult", "what was asked"),
                        **_errors(400, 408, 413, 415, 422, 429, auth=auth),
                    },
                }
            },
            "/v1/beacon": {
                "post": {
                    "summary": "UI timings of views (input to shown, network, the answer's "
                    "Server-Timing): aggregated per client into the wait and the age by origin",
                    "requestBody": _body("Beacon"),
                    "responses": {
                        "204": {"description": "recorded"},
                        **_errors(400, 408, 413, 415, 422, 429, auth=auth),
                    },
                }
            },
            "/healthz": _plain("Liveness: the process and its materializer run", "ok", 503),
            "/readyz": _plain(
                "Readiness: the view has caught up with the predictions topic", "ok", 503
            ),
            "/metrics": _plain("Prometheus metrics", "text exposition format"),
            "/openapi.json": _plain("This document", "OpenAPI 3.2"),
        },
        "components": {"schemas": _schemas(opts.batch_max)},
    }
    if board:
        layout = board if isinstance(board, BoardLayout) else BoardLayout(load_fleet())
        paths, schemas = openapi_paths.document(layout, opts.board_max_rows)
        spec["paths"].update(paths)
        spec["components"]["schemas"].update(schemas)
    if auth:  # declared exactly when the server checks it, with each operation's scope
        scopes = {**SCOPE_OF, **dict.fromkeys(openapi_paths.DATA_PATHS, "board")}
        for path, scope in scopes.items():
            for op in spec["paths"].get(path, {}).values():
                op["security"] = [{"bearer": [scope]}]
                for code, text in ((401, "bearer token missing or unknown"),
                                   (403, f"the token lacks the scope {scope!r}")):  # fmt: skip
                    op["responses"].setdefault(str(code), _json("Error", text))
        spec["components"]["securitySchemes"] = {
            "bearer": {
                "type": "http",
                "scheme": "bearer",
                "description": "a token of PRECAST_API__TOKENS_FILE or PRECAST_API__AUTH_TOKEN; "
                "each operation names the scope it needs (read, prefetch, board)",
            }
        }
    else:  # nothing asks for a token: say so, operation by operation
        for path in (*SCOPE_OF, *(openapi_paths.DATA_PATHS if board else ())):
            for op in spec["paths"].get(path, {}).values():
                op["security"] = []
                op["responses"].pop("401", None)
    for path, ops in spec[
        "paths"
    ].items():  # consumer_api.edge.host_allowlist: probes answer any Host
        if path not in ("/healthz", "/readyz"):
            for op in ops.values():
                op["responses"].setdefault(
                    "421", _json("Error", "the Host is not one the API answers (ALLOWED_HOSTS)")
                )
    return spec


def _body(name: str) -> dict[str, Any]:
    return {"required": True, "content": {"application/json": {"schema": _ref(name)}}}
