"""JSON error bodies: every 4xx names the problem (`error`), explains it (`detail`) and, where
one parameter or field is at fault, names it (`parameter`)."""

from __future__ import annotations

from collections.abc import Mapping

import orjson
from starlette.responses import Response


def error_body(code: str, detail: str, parameter: str | None = None) -> bytes:
    doc = {"error": code, "detail": detail}
    if parameter is not None:
        doc["parameter"] = parameter
    return orjson.dumps(doc)


def error(
    status: int,
    code: str,
    detail: str,
    parameter: str | None = None,
    headers: Mapping[str, str] | None = None,
) -> Response:
    return Response(
        error_body(code, detail, parameter), status, headers=headers, media_type="application/json"
    )


def auth_refusal(status: int, scope: str) -> tuple[bytes, dict[str, str]]:
    """(body, headers) of a 401 (no or unknown bearer token) or 403 (a token without `scope`),
    as RFC 6750 words them."""
    if status == 401:
        return error_body("unauthorized", "missing or unknown bearer token"), {
            "www-authenticate": 'Bearer realm="precast"'
        }
    return error_body("forbidden", f"this token lacks the scope {scope!r}"), {
        "www-authenticate": f'Bearer realm="precast", error="insufficient_scope", scope="{scope}"'
    }


def auth_error(status: int, scope: str) -> Response:
    body, headers = auth_refusal(status, scope)
    return Response(body, status, headers=headers, media_type="application/json")
