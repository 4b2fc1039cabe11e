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
