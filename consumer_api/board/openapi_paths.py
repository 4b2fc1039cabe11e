"""OpenAPI paths and schemas of the board (consumer_api.board.routes), merged into consumer_api.openapi.

What the board returns depends on the fleet spec (consumer_api.board.board_layout): the fleet query
takes the spec's filters as parameters, `columns` names a row's items in order, the facets and a
device's fields are named by the spec. A row is an array of exactly that many items; what each
holds is declared by name in `x-row-items` (the JSON Schema a tuple of them would carry as
`prefixItems`: schemathesis 4.32 turns `prefixItems` in a response into the draft-4 array form
of `items` and then refuses its own result, so the document keeps it as an annotation).
`document(layout, max_rows)` writes the board's part of the document for one layout.
"""

from __future__ import annotations

import copy
from typing import Any

from consumer_api.board.board_layout import ALARM, SOURCES, BoardLayout, Column
from consumer_api.board.device_view import label

_ERR = {"$ref": "#/components/schemas/Error"}
_ERROR = {"description": "bad request", "content": {"application/json": {"schema": _ERR}}}
# fleet queries and lineage reads: bounded per client and per replica, never queued
_BUSY = {
    "description": "this client's or this replica's reads of this kind are all running; "
    "retry after Retry-After seconds",
    "headers": {"Retry-After": {"description": "seconds", "schema": {"type": "integer"}}},
    "content": {"application/json": {"schema": _ERR}},
}
_AUTH = {
    "description": "bearer token missing or unknown",
    "content": {"application/json": {"schema": _ERR}},
}
# A frame's SSE `id:`: the change sequence, digits only (Last-Event-ID echoes it back).
_CHANGE_SEQ_ID = {"type": "string", "pattern": "^[0-9]+$"}
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
            "id": _CHANGE_SEQ_ID,
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


_PATHS: dict[str, Any] = {
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
                # the spec's filters, then strategy, alarm (with alert rules) and source
                _q("sort", "column to sort by", {"default": "device_id"}),
                _q("order", "sort order", {"enum": ["asc", "desc"], "default": "asc"}),
                _q("offset", "rows to skip", {"type": "integer", "minimum": 0, "default": 0}),
                _q(
                    "limit",
                    "rows to return (at most PRECAST_API__BOARD_MAX_ROWS)",
                    {"type": "integer", "minimum": 1, "default": 1000},
                ),  # fmt: skip
            ],
            "responses": {
                "200": _json("Fleet", "rows"),
                "400": _ERROR,
                "401": _AUTH,
                "503": _BUSY,
            },
        }
    },
    "/v1/board/devices/{device_id}": {
        "get": {
            "summary": "One device's recent answers (newest first), the heartbeat fields the "
            "board shows (`fields`) and its device context: every context value, the open "
            "entities and window entries (`context`; null when there is no snapshot)",
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
                "503": _BUSY,
            },
        }
    },
    "/v1/board/panel": {
        "get": {
            "summary": "Fleet panel: hit ratio, freshness, events vs inferences, dead letters, "
            "the wait and the age of shown answers (p95, objective, shares by origin) and a "
            "banner when a wait origin rose past 30 % while the wait is past its objective",
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

_ARRAY_OF_OBJECTS = {"type": "array", "items": {"type": "object"}}
_SCHEMAS: dict[str, Any] = {
    "DeviceContext": {
        "type": "object",
        "required": ["as_of_ms", "values", "open", "windows"],
        "properties": {
            "as_of_ms": {"type": "integer", "description": "newest event folded in"},
            "alarm": {"type": "string"},
            "values": {"type": "object", "description": "every context value, by name"},
            "open": {
                **_ARRAY_OF_OBJECTS,
                "description": "per open group: its open `entities` (id, the field `values` "
                "kept, the context values that count it)",
            },
            "windows": {
                **_ARRAY_OF_OBJECTS,
                "description": "per window group: its `entries` (id, event time, the context "
                "values that count it now, the alert states those raise), newest first",
            },
        },
    },
    "Panel": {"type": "object"},
    "LineageEvents": {
        "type": "object",
        "properties": {
            "device_id": {"type": "string"},
            "computed_at_ms": {"type": "integer"},
            "events": {
                **_ARRAY_OF_OBJECTS,
                "description": "per lineage entry: the record (`event`, as sent) and, read "
                "through the fleet spec, its `stream`, `event_id`, `event_time_ms` and "
                "declared `fields`; or why not (`missing`, `invalid`). A lineage that is not a "
                "list of {topic, partition, offset} objects is reported entry by entry, with "
                "unusable values shown by type",
            },
        },
    },
}


def _json_types(cols: tuple[Column, ...]) -> set[str]:
    out: set[str] = set()
    for c in cols:
        t = c.json.get("type", "string")  # an enum of states or sources: strings
        out.update([t] if isinstance(t, str) else t)
    return out


def document(layout: BoardLayout, max_rows: int) -> tuple[dict[str, Any], dict[str, Any]]:
    """(paths, component schemas) of the board for this layout."""
    paths = copy.deepcopy(_PATHS)
    fleet = paths["/v1/board/fleet"]["get"]
    # Empty means no filter, as the handler reads it.
    params = [_q(n, f"only rows whose {label(n).lower()} is this", {"type": "string"})
              for n in layout.field_filters]  # fmt: skip
    params.append(_q("strategy", "only this top-1 strategy", {"type": "string"}))
    if ALARM in layout.filters:
        params.append(_q(ALARM, "only this alarm state", {"enum": [*layout.states, ""]}))
    params.append(_q("source", "only this answer source", {"enum": [*SOURCES, ""]}))
    for p in fleet["parameters"]:
        if p["name"] == "sort":
            p["schema"]["enum"] = sorted(layout.sortable)
        limits = {"limit": max_rows, "offset": 10**9}  # what the handler enforces
        if p["name"] in limits:
            p["schema"]["maximum"] = limits[p["name"]]
    fleet["parameters"] = params + fleet["parameters"]
    schemas = copy.deepcopy(_SCHEMAS)
    cols = layout.row_columns
    schemas["Fleet"] = {
        "type": "object",
        "required": ["seq", "now_ms", "total", "offset", "columns", "rows", "facets", "layout"],
        "properties": {
            "seq": {"type": "integer"},
            "now_ms": {"type": "integer"},
            "total": {"type": "integer", "description": "rows matching the filters"},
            "offset": {"type": "integer"},
            "columns": {
                "type": "array",
                "items": {"enum": list(layout.columns)},
                "minItems": len(cols),
                "maxItems": len(cols),
                "description": "what each item of a row holds, in order: "
                + ", ".join(layout.columns),
            },
            "rows": {
                "type": "array",
                "items": {
                    "type": "array",
                    "minItems": len(cols),
                    "maxItems": len(cols),
                    "items": {"type": sorted(_json_types(cols))},
                    "x-row-items": [{"name": c.name, "schema": c.json} for c in cols],
                },
                "description": "one array per device, in `columns` order (`x-row-items`: "
                "what each item holds)",
            },
            "facets": {
                "type": "object",
                "properties": {n: {"type": "array"} for n in layout.filters},
                "required": list(layout.filters),
                "description": "values offered by each filter",
            },
            "layout": {
                "type": "object",
                "required": ["columns", "display", "filters", "alarm_states", "detail"],
                "description": "what the board shows (docs/board.md): the table's columns "
                "(`display`: name, label, type, width, unit), filters, alarm states in rank "
                "order, a device's detail fields and context values, and `trace_url`: where "
                "the page links an answer's trace ID (empty: none configured)",
            },
        },
    }
    names = [c.name for c in layout.detail_columns]
    schemas["DeviceDetail"] = {
        "type": "object",
        "required": ["device_id", "fields", "context", "history"],
        "properties": {
            "device_id": {"type": "string"},
            "fields": {
                "type": "object",
                "properties": {c.name: c.json for c in layout.detail_columns},
                "required": list(names),
                "description": "the heartbeat fields the board shows (columns, then "
                "`board.detail` of the fleet spec), null when not reported",
            },
            "context": {
                "oneOf": [{"$ref": "#/components/schemas/DeviceContext"}, {"type": "null"}]
            },  # fmt: skip
            "history": _ARRAY_OF_OBJECTS,
        },
    }
    return paths, schemas
