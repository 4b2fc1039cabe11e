"""OpenAPI paths and schemas of the board (consumer_api.board), merged into consumer_api.openapi."""

from __future__ import annotations

from typing import Any

from consumer_api.fleet import ALARM_STATES, COLUMNS, SORTABLE, SOURCES

_ERR = {"$ref": "#/components/schemas/Error"}
_ERROR = {"description": "bad request", "content": {"application/json": {"schema": _ERR}}}
_AUTH = {
    "description": "bearer token missing or unknown",
    "content": {"application/json": {"schema": _ERR}},
}
_ID = {"type": "string", "pattern": "^[0-9]+$"}
# The board's data operations: they need the `board` scope (consumer_api.openapi adds it).
DATA_PATHS = (
    "/v1/board/fleet",
    "/v1/board/devices/{device_id}",
    "/v1/board/devices/{device_id}/events",
    "/v1/board/panel",
    "/v1/board/stream",
)


def _frame(event: str, data: dict[str, Any]) -> dict[str, Any]:
    """A board stream frame (as consumer_api.openapi._frame; every frame may carry an id: SSE
    gives a frame without one the last id seen)."""
    return {
        "type": "object",
        "required": ["event", "data"],
        "properties": {
            "event": {"const": event},
            "id": _ID,
            "retry": {"type": "integer", "minimum": 0},
            "data": {
                "type": "string",
                "contentMediaType": "application/json",
                "contentSchema": data,
            },
        },
        "additionalProperties": False,
    }


def _q(name: str, description: str, schema: dict[str, Any]) -> dict[str, Any]:
    return {
        "name": name,
        "in": "query",
        "required": False,
        "description": description,
        "schema": schema,
    }


def _page(summary: str) -> dict[str, Any]:
    return {
        "get": {
            "summary": summary,
            "security": [],
            "responses": {"200": {"description": "the board's page or asset"}, "404": _ERROR},
        }
    }


def _json(ref: str, description: str) -> dict[str, Any]:
    return {
        "description": description,
        "content": {"application/json": {"schema": {"$ref": f"#/components/schemas/{ref}"}}},
    }


PATHS: dict[str, Any] = {
    "/board": {
        "get": {
            "summary": "Redirects to /board/",
            "security": [],
            "responses": {"308": {"description": "to /board/"}},
        }
    },
    "/board/": _page("The operations-center board (HTML; its data calls use the bearer token)"),
    "/board/{asset}": {
        "get": {
            **_page("A file of the board: board.js, board.css, index.html")["get"],
            "parameters": [
                {"name": "asset", "in": "path", "required": True, "schema": {"type": "string"}}
            ],
        }
    },
    "/v1/board/fleet": {
        "get": {
            "summary": "Fleet rows (one per device): filter by exact value, sort, page; `seq` is the "
            "change sequence the rows are at (start /v1/board/stream from it)",
            "parameters": [
                _q("site", "only this site", {"type": "string"}),
                _q("device_type", "only this device type", {"type": "string"}),
                _q("strategy", "only this top-1 strategy", {"type": "string"}),
                _q("alarm", "only this alarm state", {"enum": list(ALARM_STATES)}),
                _q("source", "only this answer source", {"enum": list(SOURCES)}),
                _q("sort", "column to sort by", {"enum": sorted(SORTABLE), "default": "device_id"}),
                _q("order", "sort order", {"enum": ["asc", "desc"], "default": "asc"}),
                _q("offset", "rows to skip", {"type": "integer", "minimum": 0, "default": 0}),
                _q(
                    "limit",
                    "rows to return (at most PRECAST_API__BOARD_MAX_ROWS)",
                    {"type": "integer", "minimum": 1, "default": 1000},
                ),  # fmt: skip
            ],
            "responses": {"200": _json("Fleet", "rows"), "400": _ERROR, "401": _AUTH},
        }
    },
    "/v1/board/devices/{device_id}": {
        "get": {
            "summary": "One device's recent answers (newest first), open work orders and alarms "
            "(device context), site and device type",
            "parameters": [
                {
                    "name": "device_id",
                    "in": "path",
                    "required": True,
                    "schema": {
                        "type": "string",
                        "pattern": "^[A-Za-z0-9][A-Za-z0-9._:\\-]{0,127}$",
                    },
                }
            ],
            "responses": {
                "200": _json("DeviceDetail", "the device"),
                "400": _ERROR,
                "401": _AUTH,
                "404": {**_ERROR, "description": "the board has seen nothing of this device"},
            },
        }
    },
    "/v1/board/devices/{device_id}/events": {
        "get": {
            "summary": "The input records named by the lineage of the device's current answer, read "
            "back from the event topics (at most 16; each with `event` or why it is `missing`)",
            "parameters": [
                {
                    "name": "device_id",
                    "in": "path",
                    "required": True,
                    "schema": {
                        "type": "string",
                        "pattern": "^[A-Za-z0-9][A-Za-z0-9._:\\-]{0,127}$",
                    },
                }
            ],
            "responses": {
                "200": _json("LineageEvents", "the events"),
                "400": _ERROR,
                "401": _AUTH,
                "404": {**_ERROR, "description": "no stored answer for this device"},
            },
        }
    },
    "/v1/board/panel": {
        "get": {
            "summary": "Fleet panel: hit ratio, freshness, events vs inferences, dead letters, "
            "delay-origin shares and a banner when one passes 30 %",
            "responses": {"200": _json("Panel", "figures"), "401": _AUTH},
        }
    },
    "/v1/board/stream": {
        "get": {
            "summary": "Server-Sent Events for one board: `rows` (changed rows, id = change "
            "sequence), `reset` (reload the snapshot), `panel` (every second). Resume with the "
            "Last-Event-ID header (or last_event_id)",
            "parameters": [
                _q(
                    "last_event_id",
                    "resume after this change sequence",
                    {"type": "integer", "minimum": 0, "maximum": 10**19 - 1},
                ),
                {
                    "name": "Last-Event-ID",
                    "in": "header",
                    "required": False,
                    "description": "what EventSource sends on a reconnect; wins over the query",
                    "schema": {"type": "string", "pattern": "^[0-9]{1,19}$"},
                },
            ],
            "responses": {
                "200": {
                    "description": "text/event-stream: hello (retry, id = the sequence it starts "
                    "at), panel, rows (id = change sequence), reset",
                    "content": {
                        "text/event-stream": {
                            "itemSchema": {
                                "oneOf": [
                                    _frame(
                                        "hello",
                                        {
                                            "type": "object",
                                            "required": ["seq"],
                                            "properties": {
                                                "seq": {"type": "integer", "minimum": 0}
                                            },
                                        },
                                    ),
                                    _frame("panel", {"$ref": "#/components/schemas/Panel"}),
                                    _frame(
                                        "rows",
                                        {
                                            "type": "object",
                                            "required": ["rows"],
                                            "properties": {
                                                "rows": {
                                                    "type": "array",
                                                    "items": {"type": "array"},
                                                }
                                            },
                                        },
                                    ),
                                    _frame(
                                        "reset",
                                        {
                                            "type": "object",
                                            "required": ["reason"],
                                            "properties": {"reason": {"type": "string"}},
                                        },
                                    ),
                                ]
                            }
                        }
                    },
                },
                "400": _ERROR,
                "401": _AUTH,
                "429": {
                    **_ERROR,
                    "description": "this client's open streams are at "
                    "PRECAST_API__CLIENT_MAX_STREAMS; see Retry-After",
                },
                "503": {**_ERROR, "description": "too many open streams; see Retry-After"},
            },
        }
    },
}

SCHEMAS: dict[str, Any] = {
    "Fleet": {
        "type": "object",
        "properties": {
            "seq": {"type": "integer"},
            "now_ms": {"type": "integer"},
            "total": {"type": "integer", "description": "rows matching the filters"},
            "offset": {"type": "integer"},
            "columns": {"type": "array", "items": {"enum": list(COLUMNS)}},
            "rows": {
                "type": "array",
                "items": {"type": "array"},
                "description": "one array per device, in `columns` order",
            },
            "facets": {"type": "object", "description": "values offered by the filters"},
        },
    },
    "DeviceDetail": {
        "type": "object",
        "properties": {
            "device_id": {"type": "string"},
            "site": {"type": ["string", "null"]},
            "device_type": {"type": ["string", "null"]},
            "context": {"type": ["object", "null"]},
            "history": {"type": "array", "items": {"type": "object"}},
        },
    },
    "Panel": {"type": "object"},
    "LineageEvents": {
        "type": "object",
        "properties": {
            "device_id": {"type": "string"},
            "computed_at_ms": {"type": "integer"},
            "events": {"type": "array", "items": {"type": "object"}},
        },
    },
}
