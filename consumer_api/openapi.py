"""The OpenAPI document served at /openapi.json (hand-maintained; tests/unit/test_api_app.py
checks that every route is documented and every documented path exists)."""

from __future__ import annotations

from consumer_api import board_openapi
from consumer_api.beacon import Beacon
from consumer_api.requests_in import Prefetch

_DEVICE_ID = {"type": "string", "pattern": "^[A-Za-z0-9][A-Za-z0-9._:\\-]{0,127}$"}
_ERROR = {
    "description": "bad request (JSON error naming the problem)",
    "content": {"application/json": {"schema": {"$ref": "#/components/schemas/Error"}}},
}
_AUTH = {
    "description": "bearer token missing or wrong (only when auth is enabled)",
    "content": {"application/json": {"schema": {"$ref": "#/components/schemas/Error"}}},
}
_LIMITED = {
    "description": "past this client's allowance (PRECAST_API__CLIENT_*); Retry-After says when",
    "headers": {"Retry-After": {"schema": {"type": "integer"}, "description": "seconds"}},
    "content": {"application/json": {"schema": {"$ref": "#/components/schemas/Error"}}},
}
_IDS = {
    "name": "ids",
    "in": "query",
    "required": True,
    "description": "comma-separated device IDs (at most PRECAST_API__BATCH_MAX)",
    "schema": {"type": "string"},
}
_TIMING_HEADERS = {
    "Server-Timing": {
        "description": "queue, model, kafka, cache segments of the answer's age (ms)",
        "schema": {"type": "string"},
    },
    "X-Model-Version": {
        "description": "model version of a precomputed or stale answer",
        "schema": {"type": "string"},
    },
    "Cache-Control": {
        "description": "max-age until valid_until (precomputed), no-cache (stale), no-store (fallback)",
        "schema": {"type": "string"},
    },
    "ETag": {
        "description": "weak; identifies the prediction (send as If-None-Match for 304)",
        "schema": {"type": "string"},
    },
}


def _json(ref: str, description: str) -> dict:
    return {
        "description": description,
        "content": {"application/json": {"schema": {"$ref": f"#/components/schemas/{ref}"}}},
    }


def _probe(summary: str) -> dict:
    return {
        "get": {
            "summary": summary,
            "security": [],
            "responses": {
                "200": {"description": "ok"},
                "503": {"description": "not ok (details in the body)"},
            },
        }
    }


SPEC: dict = {
    "openapi": "3.1.0",
    "info": {
        "title": "precast read API",
        "version": "1",
        "description": "The newest precomputed prediction per device, with where its delay came from. See docs/api.md.",
    },
    "security": [{"bearer": []}],
    "paths": {
        "/v1/devices/{device_id}/prediction": {
            "get": {
                "summary": "The newest answer for one device (precomputed, stale or fallback)",
                "parameters": [
                    {"name": "device_id", "in": "path", "required": True, "schema": _DEVICE_ID},
                    {
                        "name": "If-None-Match",
                        "in": "header",
                        "required": False,
                        "schema": {"type": "string"},
                    },
                ],
                "responses": {
                    "200": {**_json("Answer", "the answer"), "headers": _TIMING_HEADERS},
                    "304": {"description": "unchanged since the given ETag"},
                    "400": _ERROR,
                    "401": _AUTH,
                },
            }
        },
        "/v1/predictions": {
            "get": {
                "summary": "Answers for a list of devices (list views), in request order, duplicates removed",
                "parameters": [_IDS],
                "responses": {
                    "200": _json("Batch", "one answer per device"),
                    "304": {"description": "unchanged"},
                    "400": _ERROR,
                    "401": _AUTH,
                },
            }
        },
        "/v1/stream": {
            "get": {
                "summary": "Server-Sent Events: the current answer for each device, then every newer one "
                "(event: prediction, id: device ID, data: Answer)",
                "parameters": [
                    {
                        **_IDS,
                        "description": "comma-separated device IDs (at most PRECAST_API__SSE_MAX_DEVICES)",
                    }
                ],
                "responses": {
                    "200": {
                        "description": "text/event-stream",
                        "content": {"text/event-stream": {"schema": {"type": "string"}}},
                    },
                    "400": _ERROR,
                    "401": _AUTH,
                    "429": _LIMITED,
                    "503": {
                        **_ERROR,
                        "description": "too many open streams on this replica "
                        "(PRECAST_API__SSE_MAX_STREAMS); see Retry-After",
                    },
                },
            }
        },
        "/v1/prefetch": {
            "post": {
                "summary": "The UI names devices it is about to show; those without a fresh answer "
                "get one deduplicated precompute request each",
                "requestBody": {
                    "required": True,
                    "content": {
                        "application/json": {"schema": {"$ref": "#/components/schemas/Prefetch"}}
                    },
                },
                "responses": {
                    "202": _json("PrefetchResult", "what was asked"),
                    "400": _ERROR,
                    "401": _AUTH,
                    "408": _ERROR,
                    "413": _ERROR,
                    "415": _ERROR,
                    "422": _ERROR,
                    "429": _LIMITED,
                },
            }
        },
        "/v1/beacon": {
            "post": {
                "summary": "UI timings (input to shown, network): aggregated into delay "
                "origins front_jank and network_qoe",
                "requestBody": {
                    "required": True,
                    "content": {
                        "application/json": {"schema": {"$ref": "#/components/schemas/Beacon"}}
                    },
                },
                "responses": {
                    "204": {"description": "recorded"},
                    "400": _ERROR,
                    "401": _AUTH,
                    "408": _ERROR,
                    "413": _ERROR,
                    "415": _ERROR,
                    "422": _ERROR,
                    "429": _LIMITED,
                },
            }
        },
        "/healthz": _probe("Liveness: the process and its materializer run"),
        "/readyz": _probe("Readiness: the view has caught up with the predictions topic"),
        "/metrics": {
            "get": {
                "summary": "Prometheus metrics",
                "security": [],
                "responses": {"200": {"description": "text exposition format"}},
            }
        },
        "/openapi.json": {
            "get": {
                "summary": "This document",
                "security": [],
                "responses": {"200": {"description": "OpenAPI 3.1"}},
            }
        },
    },
    "components": {
        "securitySchemes": {
            "bearer": {
                "type": "http",
                "scheme": "bearer",
                "description": "only when PRECAST_API__AUTH_TOKEN is set",
            }
        },
        "schemas": {
            "Error": {
                "type": "object",
                "required": ["error", "detail"],
                "properties": {
                    "error": {"type": "string"},
                    "detail": {"type": "string"},
                    "parameter": {"type": "string"},
                },
            },
            "Candidate": {
                "type": "object",
                "properties": {"strategy": {"type": "string"}, "score": {"type": "number"}},
            },
            "Answer": {
                "type": "object",
                "required": ["device_id", "candidates", "source", "delay_origin", "age_ms"],
                "properties": {
                    "device_id": _DEVICE_ID,
                    "candidates": {
                        "type": "array",
                        "items": {"$ref": "#/components/schemas/Candidate"},
                    },
                    "model_version": {"type": ["string", "null"]},
                    "computed_at_ms": {
                        "type": ["integer", "null"],
                        "description": "event time of the newest input",
                    },
                    "valid_until_ms": {"type": ["integer", "null"]},
                    "produced_at_ms": {"type": "integer"},
                    "trigger": {"type": "string"},
                    "lineage": {"type": "array"},
                    "age_ms": {"type": ["integer", "null"], "description": "now - computed_at_ms"},
                    "source": {"enum": ["precomputed", "stale", "fallback"]},
                    "delay_origin": {"enum": ["queue", "model", "kafka", "cache", "fallback"]},
                    "reason": {
                        "enum": ["miss", "expired", "purged", "store_unavailable"],
                        "description": "fallback only",
                    },
                },
            },
            "Batch": {
                "type": "object",
                "properties": {
                    "count": {"type": "integer"},
                    "predictions": {
                        "type": "array",
                        "items": {"$ref": "#/components/schemas/Answer"},
                    },
                },
            },
            "Prefetch": Prefetch.model_json_schema(),
            "PrefetchResult": {
                "type": "object",
                "properties": {
                    k: {"type": "integer"}
                    for k in ("sent", "deduplicated", "dropped", "over_budget", "fresh")
                },
            },
            "Beacon": Beacon.model_json_schema(
                ref_template="#/components/schemas/Beacon/$defs/{model}"
            ),
        },
    },
}
# The board's paths (consumer_api.board) are documented in their own module.
SPEC["paths"].update(board_openapi.PATHS)
SPEC["components"]["schemas"].update(board_openapi.SCHEMAS)
