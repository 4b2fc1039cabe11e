"""Validation of what clients send: query parameters, device lists and JSON bodies. Every
rejection is a 4xx JSON error naming the parameter or field."""

from __future__ import annotations

import asyncio
from typing import TypeVar

import orjson
from pydantic import BaseModel, ConfigDict, Field, ValidationError
from starlette.requests import Request
from starlette.responses import Response

from consumer_api.edge.error_bodies import error
from schemas.events import DEVICE_ID_PATTERN, DeviceId, is_device_id

M = TypeVar("M", bound=BaseModel)


class Prefetch(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)  # JSON types as the schema says
    device_ids: list[DeviceId] = Field(min_length=1, max_length=10_000)


def unknown_params(request: Request, allowed: tuple[str, ...]) -> Response | None:
    for name in request.query_params:
        if name not in allowed:
            hint = (
                f"allowed: {', '.join(allowed)}"
                if allowed
                else "this endpoint takes no query parameters"
            )
            return error(400, "unknown_parameter", hint, name[:64])
    if any(len(request.query_params.getlist(n)) > 1 for n in allowed):
        return error(
            400,
            "repeated_parameter",
            "give each parameter once",
            next(n for n in allowed if len(request.query_params.getlist(n)) > 1),
        )
    return None


def device_list(raw: str | None, limit: int) -> list[str] | Response:
    """`ids=a,b,c` → unique IDs in request order, each checked against the pattern."""
    if not raw:
        return error(
            400, "missing_parameter", "ids=<comma-separated device IDs> is required", "ids"
        )
    given = raw.split(",")
    if len(given) > limit:  # counted as given (duplicates too), as the OpenAPI pattern says
        return error(
            400,
            "too_many_devices",
            f"at most {limit} devices per request (got {len(given)})",
            "ids",
        )
    ids = list(dict.fromkeys(given))
    for i, d in enumerate(ids):
        if not is_device_id(d):
            return error(
                400, "invalid_device_id", f"ids[{i}] must match {DEVICE_ID_PATTERN}", "ids"
            )
    return ids


async def read_json(
    request: Request, model: type[M], max_bytes: int, timeout_s: float = 10.0
) -> M | Response:
    ctype = request.headers.get("content-type", "").split(";", 1)[0].strip().lower()
    if ctype != "application/json":
        return error(415, "unsupported_media_type", "send application/json", "content-type")
    declared = request.headers.get("content-length")
    if declared is not None and (not declared.isdigit() or int(declared) > max_bytes):
        return error(413, "body_too_large", f"at most {max_bytes} bytes")
    body = bytearray()
    # A body trickled in slowly holds a connection: it gets the whole of `timeout_s`, not more.
    try:
        async with asyncio.timeout(timeout_s):
            async for chunk in request.stream():
                body += chunk
                if len(body) > max_bytes:
                    return error(413, "body_too_large", f"at most {max_bytes} bytes")
    except TimeoutError:
        return error(
            408,
            "body_timeout",
            f"the body did not arrive within {timeout_s:g} s",
            headers={"connection": "close"},
        )
    try:
        doc = orjson.loads(body)
    except orjson.JSONDecodeError as exc:
        return error(400, "invalid_json", str(exc)[:200])
    try:
        return model.model_validate(doc)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first["loc"]) or "body"
        return error(422, "invalid_body", first["msg"], where)
